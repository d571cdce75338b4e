import { spawnSync } from 'node:child_process';
import { existsSync, lstatSync, mkdirSync, readdirSync, readFileSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import type { DataCursor } from '../../src/data/stream.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import type { LanguageModel, LanguageModelConfig } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { checkpointName } from '../../src/store/layout.ts';
import { COMPLETE_MARKER } from '../../src/core/atomic-folder.ts';
import { listCheckpoints, markRunFolder } from '../../src/store/run-folder.ts';
import { loadCheckpoint, pruneCheckpoints, restoreCheckpoint, saveCheckpoint } from '../../src/store/checkpoint.ts';
import { resolveModelSource } from '../../src/store/resolve.ts';
import type { TrainingCounters } from '../../src/store/checkpoint.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { readSafetensors } from '../../src/hf/safetensors.ts';
import type { Recipe } from '../../src/recipe/schema.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { saveFinalModel } from '../../src/store/model-folder.ts';
import { trainStep } from '../../src/train/step.ts';

let dir: string;
const resolveResume = (recipe: Recipe, what: string) => resolveModelSource('resume', what, { runDir: recipe.train.runDir, recipeName: recipe.name }).dir;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-checkpoint-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const VOCAB = 23;
const tinyConfig = (seed: number): LanguageModelConfig => ({
  kind: 'gpt',
  vocabSize: VOCAB,
  maxSeqLen: 6,
  dModel: 8,
  numLayers: 1,
  numHeads: 2,
  mlpRatio: 2,
  dropout: 0,
  bias: true,
  attention: { name: 'performer', options: { features: 4 } },
  seed,
});
const tinyModel = (seed: number) => createLanguageModel(tinyConfig(seed));
const adamw = (model: LanguageModel) => new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });

function recipeFor(runDir: string): Recipe {
  return parseRecipe(`data: { dataset: ${dir}/data, tokenizer: ${dir}/tok.json }\ntrain: { runDir: ${runDir} }\n`, join(dir, 'tiny.yaml'));
}

// The checkpoint code stores the cursor as JSON and checks its structure; its exactness is tested in test/data.
const cursor: DataCursor = {
  version: 1,
  kind: 'gpt',
  split: 'train',
  seqLen: 6,
  batchSize: 2,
  seed: 3,
  shuffleBuffer: 0,
  tokenizerSha256: 'ab'.repeat(32),
  shardOrder: [2, 0, 1],
  shard: 2,
  recordBatch: 1,
  row: 7,
  offset: 3,
  carry: [1, 2, 3],
  shuffle: null,
  maskRng: null,
  done: false,
  batches: 9,
  stats: { documents: 30, tokens: 600, skippedEmpty: 1, bytes: 2400 },
};

function counters(step: number): TrainingCounters {
  return {
    step,
    tokens: step * 48,
    batchesSeen: step,
    trainSeconds: 0.5 * step,
    elapsedS: step,
    window: { loss: 1.5, steps: 1, tokens: 48, seconds: 0.5 },
    skippedSteps: 0,
    consecutiveSkips: 0,
  };
}

async function trainedPair(seed: number) {
  const model = tinyModel(seed);
  const optimizer = adamw(model);
  const rng = new Rng(seed);
  const ids = Int32Array.from({ length: 12 }, () => rng.int(VOCAB));
  await trainStep(model, optimizer, [{ batchSize: 2, seqLen: 6, inputIds: ids, labels: ids }], { lr: 1e-2, clip: 1, dropoutSeed: null });
  return { model, optimizer };
}

async function save(runDir: string, step: number, valLoss: number | null, pair: { model: LanguageModel; optimizer: AdamW }) {
  return saveCheckpoint(runDir, {
    ...pair,
    cursor,
    recipe: recipeFor(runDir),
    state: { ...counters(step), valLoss, bestValLoss: valLoss, tokenizer: { path: 'tok.json', sha256: 'ab'.repeat(32) } },
  });
}

describe('saveCheckpoint / loadCheckpoint / restoreCheckpoint', () => {
  it('round-trips weights, attention buffers, AdamW moments and step, cursor, counters and recipe exactly', async () => {
    const runDir = join(dir, 'roundtrip');
    const pair = await trainedPair(1);
    const saved = await save(runDir, 7, 2.5, pair);
    expect(saved).toBe(join(runDir, 'checkpoints', 'step-000007'));
    expect(readdirSync(saved).sort()).toEqual([COMPLETE_MARKER, 'cursor.json', 'model.safetensors', 'optimizer.safetensors', 'recipe.json', 'state.json']);
    expect(readdirSync(join(runDir, 'checkpoints'))).toEqual(['step-000007']); // no temporary folder left

    const loaded = await loadCheckpoint(saved);
    expect(loaded.runDir).toBeNull(); // no run marker beside checkpoints/: not a run folder, even with a run's file names
    writeFileSync(join(runDir, 'config.json'), '{}');
    writeFileSync(join(runDir, 'env.json'), '{}');
    expect((await loadCheckpoint(saved)).runDir).toBeNull();
    markRunFolder(runDir);
    expect((await loadCheckpoint(saved)).runDir).toBe(runDir);
    expect(loaded.cursor).toEqual(cursor);
    expect(loaded.state).toMatchObject({ ...counters(7), valLoss: 2.5, tokenizer: { sha256: 'ab'.repeat(32) } });
    expect(loaded.recipe.train.runDir).toBe(runDir);
    expect(loaded.optimizer.step).toBe(1);
    const bufferNames = [...pair.model.buffers().keys()];
    expect(bufferNames.length).toBe(1); // the Performer projection
    expect([...loaded.weights.keys()].sort()).toEqual([...pair.model.parameters().keys(), ...bufferNames].sort());

    const snapshot = (m: Map<string, tf.Tensor>) => new Map([...m].map(([n, v]) => [n, Array.from(v.dataSync())]));
    const expected = {
      parameters: snapshot(pair.model.parameters()),
      buffers: snapshot(pair.model.buffers()),
      m: snapshot(pair.optimizer.getState().m),
      v: snapshot(pair.optimizer.getState().v),
    };
    pair.model.dispose(); // tfjs variable names are global: one model at a time
    pair.optimizer.dispose();

    // A model with another seed (other weights and projection) and a fresh optimizer become identical copies.
    const model = tinyModel(99);
    const optimizer = adamw(model);
    expect(snapshot(model.buffers())).not.toEqual(expected.buffers);
    expect(snapshot(model.parameters())).not.toEqual(expected.parameters);
    restoreCheckpoint(loaded, model, optimizer);
    expect(snapshot(model.parameters())).toEqual(expected.parameters);
    expect(snapshot(model.buffers())).toEqual(expected.buffers);
    expect(snapshot(optimizer.getState().m)).toEqual(expected.m);
    expect(snapshot(optimizer.getState().v)).toEqual(expected.v);
    expect(optimizer.getState().step).toBe(1);
    model.dispose();
    optimizer.dispose();

    // A model of another shape is refused with the tensor's name.
    const wide = createLanguageModel({ ...model.config, dModel: 12, numHeads: 2 });
    const wideOpt = adamw(wide);
    expect(() => restoreCheckpoint(loaded, wide, wideOpt)).toThrow(/'embed\.tokens\.weight' has shape \[23,8\] but the model has \[23,12\]/);
    wide.dispose();
    wideOpt.dispose();
  });

  it('a resume refuses a checkpoint whose recipe.json asks for attention options beyond the bounds table, naming the file and the bound', async () => {
    const runDir = join(dir, 'options');
    const pair = await trainedPair(4);
    const saved = await save(runDir, 3, null, pair);
    pair.model.dispose();
    pair.optimizer.dispose();
    const recipe = JSON.parse(readFileSync(join(saved, 'recipe.json'), 'utf8'));
    recipe.model.attention = { name: 'performer', options: { features: 2 ** 21 } };
    writeFileSync(join(saved, 'recipe.json'), JSON.stringify(recipe));
    // Its checksum line dropped, as anyone editing the file can: the file itself is checked all the same.
    const sums = readFileSync(join(saved, COMPLETE_MARKER), 'utf8')
      .split('\n')
      .filter((line) => !line.endsWith('  recipe.json'));
    writeFileSync(join(saved, COMPLETE_MARKER), sums.join('\n'));
    await expect(loadCheckpoint(saved)).rejects.toThrow(
      `${join(saved, 'recipe.json')}: model.attention.options.features: attention 'performer': option 'features' must be an integer ≤ 65536 (got 2097152)`,
    );
  });

  it('a checkpoint saved before train.evalSample existed loads as evaluated on the split head, so a resume reports the change', async () => {
    const runDir = join(dir, 'eval-sample');
    const pair = await trainedPair(4);
    const saved = await save(runDir, 3, null, pair);
    pair.model.dispose();
    pair.optimizer.dispose();
    expect((await loadCheckpoint(saved)).recipe.train.evalSample).toBe('spread');
    const recipe = JSON.parse(readFileSync(join(saved, 'recipe.json'), 'utf8'));
    delete recipe.train.evalSample;
    writeFileSync(join(saved, 'recipe.json'), JSON.stringify(recipe));
    const sums = readFileSync(join(saved, COMPLETE_MARKER), 'utf8')
      .split('\n')
      .filter((line) => !line.endsWith('  recipe.json'));
    writeFileSync(join(saved, COMPLETE_MARKER), sums.join('\n'));
    expect((await loadCheckpoint(saved)).recipe.train.evalSample).toBe('head');
  });

  it('a SchoenbAt model, whose random-Maclaurin feature counts are drawn per layer, loads back with every buffer', async () => {
    const model = createLanguageModel({ ...tinyConfig(5), dModel: 16, numLayers: 3, attention: { name: 'schoenbat', options: {} } });
    const buffers = new Map([...model.buffers()].map(([n, v]) => [n, { shape: v.shape, values: Array.from(v.dataSync()) }]));
    const drawn = [...buffers].filter(([n]) => n.endsWith('maclaurinProjections')).map(([, b]) => b.shape[0]);
    expect(new Set(drawn).size, 'layers drew different feature counts').toBeGreaterThan(1);
    const runDir = join(dir, 'schoenbat');
    const folder = await saveFinalModel(runDir, model, recipeFor(runDir), { tokenizer_sha256: 'ab'.repeat(32), step: '1' });
    model.dispose();
    const loaded = await loadModel(folder);
    expect(new Map([...loaded.model.buffers()].map(([n, v]) => [n, { shape: v.shape, values: Array.from(v.dataSync()) }]))).toEqual(buffers);
    loaded.model.dispose();
  });

  it('readers ignore temporary and unmarked folders; loading an unmarked one is refused', async () => {
    const runDir = join(dir, 'partial');
    const pair = await trainedPair(2);
    await save(runDir, 1, null, pair);
    await save(runDir, 2, null, pair);
    // What a kill leaves behind: a temporary folder, and a renamed folder whose COMPLETE marker was not written yet.
    mkdirSync(join(runDir, 'checkpoints', '.step-000003.tmp-4242'));
    const unmarked = await save(runDir, 4, null, pair);
    await rm(join(unmarked, COMPLETE_MARKER));
    expect(listCheckpoints(runDir).map((c) => c.step)).toEqual([1, 2]);
    await expect(loadCheckpoint(unmarked)).rejects.toThrow(/is incomplete \(no COMPLETE marker/);
    expect(resolveResume(recipeFor(dir), runDir)).toBe(join(runDir, 'checkpoints', 'step-000002'));
    pair.model.dispose();
    pair.optimizer.dispose();
  });
});

describe('pruneCheckpoints', () => {
  it('keeps the newest k and the one with the lowest validation loss, and removes leftovers of interrupted saves', async () => {
    const runDir = join(dir, 'prune');
    const pair = await trainedPair(3);
    const losses = [null, 1.2, null, 3.0, null, 2.0];
    for (let step = 1; step <= 6; step++) await save(runDir, step, losses[step - 1], pair);
    // A save killed before its rename (its process has ended), and one in progress: pruning takes the first only.
    mkdirSync(join(runDir, 'checkpoints', `.step-000007.tmp-${spawnSync(process.execPath, ['-e', '']).pid}`));
    mkdirSync(join(runDir, 'checkpoints', `.step-000008.tmp-${process.pid}`));
    expect(await pruneCheckpoints(runDir, 2)).toEqual([]); // no run marker: not a run folder, nothing in it is pruned
    expect(listCheckpoints(runDir).length).toBe(6);
    markRunFolder(runDir);
    const deleted = await pruneCheckpoints(runDir, 2);
    expect(listCheckpoints(runDir).map((c) => c.step)).toEqual([2, 5, 6]);
    expect(deleted.length).toBe(4);
    expect(readdirSync(join(runDir, 'checkpoints')).sort()).toEqual([`.step-000008.tmp-${process.pid}`, 'step-000002', 'step-000005', 'step-000006']);
    pair.model.dispose();
    pair.optimizer.dispose();
  });
});

describe('only what this project wrote is deleted or replaced', () => {
  it('pruning leaves foreign entries of checkpoints/ alone, and step folders that hold a foreign file', async () => {
    const runDir = join(dir, 'prune-foreign');
    const pair = await trainedPair(5);
    for (let step = 1; step <= 4; step++) await save(runDir, step, null, pair);
    const parent = join(runDir, 'checkpoints');
    writeFileSync(join(parent, 'step-000001', 'my-notes.txt'), 'mine');
    mkdirSync(join(parent, 'my-folder'));
    writeFileSync(join(parent, 'README'), 'mine');
    mkdirSync(join(parent, '.step-000009.tmp-77'));
    writeFileSync(join(parent, '.step-000009.tmp-77', 'model.safetensors'), 'partial');
    mkdirSync(join(parent, '.step-000008.tmp-78'));
    writeFileSync(join(parent, '.step-000008.tmp-78', 'other.bin'), 'not ours');
    markRunFolder(runDir);
    const deleted = await pruneCheckpoints(runDir, 1);
    expect(deleted.map((d) => d.slice(parent.length + 1)).sort()).toEqual(['.step-000009.tmp-77', 'step-000002', 'step-000003']);
    expect(readdirSync(parent).sort()).toEqual(['.step-000008.tmp-78', 'README', 'my-folder', 'step-000001', 'step-000004']);
    expect(readFileSync(join(parent, 'step-000001', 'my-notes.txt'), 'utf8')).toBe('mine');
    pair.model.dispose();
    pair.optimizer.dispose();
  });

  it("final/ is replaced whole (the previous one removed only if it holds nothing but this project's files), with checksums that loading verifies", async () => {
    const runDir = join(dir, 'final-replace');
    const pair = await trainedPair(6);
    const recipe = recipeFor(runDir);
    const first = await saveFinalModel(runDir, pair.model, recipe, { step: '1' });
    expect(readdirSync(first).sort()).toEqual([COMPLETE_MARKER, 'model.safetensors', 'recipe.json']);
    // COMPLETE holds `sha256sum -c` lines for both files.
    const sums = readFileSync(join(first, COMPLETE_MARKER), 'utf8').trim().split('\n');
    expect(sums.map((l) => l.split('  ')[1]).sort()).toEqual(['model.safetensors', 'recipe.json']);
    expect(sums[0]).toMatch(/^[0-9a-f]{64} {2}\S+$/);
    await saveFinalModel(runDir, pair.model, recipe, { step: '2' });
    expect((await readSafetensors(join(runDir, 'final', 'model.safetensors'))).metadata.step).toBe('2');
    expect(readdirSync(runDir).filter((e) => e.startsWith('.'))).toEqual([]); // nothing left aside
    // A user's file in final/: the run refuses to replace it rather than delete the file.
    writeFileSync(join(first, 'exported.bin'), 'mine');
    await expect(saveFinalModel(runDir, pair.model, recipe, { step: '3' })).rejects.toThrow(/final holds files this project did not write \(exported\.bin\)/);
    expect(readFileSync(join(first, 'exported.bin'), 'utf8')).toBe('mine');
    pair.model.dispose();
    pair.optimizer.dispose();
    // A changed byte is caught by the checksum.
    const model = readFileSync(join(first, 'model.safetensors'));
    model[model.length - 1] ^= 1;
    writeFileSync(join(first, 'model.safetensors'), model);
    await expect(loadModel(runDir)).rejects.toThrow(/final\/model\.safetensors does not match the sha256 its folder's COMPLETE marker recorded/);
  });
});

describe('resolveResume', () => {
  it("'auto' takes the newest complete checkpoint of the newest run folder of the recipe's name that has one", async () => {
    const runs = join(dir, 'auto-runs');
    const recipe = { ...recipeFor(runs), name: 'tiny' };
    expect(() => resolveResume(recipe, 'auto')).toThrow(/--resume auto: no run folder of recipe 'tiny' in/);
    const pair = await trainedPair(4);
    const older = join(runs, 'tiny-20260101-120000');
    const newer = join(runs, 'tiny-20260101-120000-2'); // same second: RunLogger appends -2
    await save(older, 5, null, pair);
    await save(older, 9, null, pair);
    mkdirSync(join(runs, 'tiny-other-20270101-120000'), { recursive: true }); // another recipe's name
    writeFileSync(join(runs, 'tiny-20260101-000000'), 'not a folder');
    expect(resolveResume(recipe, 'auto')).toBe(join(older, 'checkpoints', checkpointName(9)));
    // A newer folder without a checkpoint (a start that failed) is passed over: auto looks back to the newest that has one.
    mkdirSync(newer, { recursive: true });
    expect(resolveResume(recipe, 'auto')).toBe(join(older, 'checkpoints', checkpointName(9)));
    const onlyEmpty = { ...recipe, name: 'tiny-other' };
    expect(() => resolveResume(onlyEmpty, 'auto')).toThrow(/none of the 1 run folders of 'tiny-other' in .* has a complete checkpoint/);
    await save(newer, 3, null, pair);
    expect(resolveResume(recipe, 'auto')).toBe(join(newer, 'checkpoints', checkpointName(3)));
    expect(resolveResume(recipe, join(older, 'checkpoints', 'step-000005'))).toBe(join(older, 'checkpoints', 'step-000005'));
    expect(() => resolveResume(recipe, join(dir, 'nowhere'))).toThrow(/--resume .*nowhere: no such folder/);
    expect(existsSync(join(older, 'checkpoints', 'step-000005', 'state.json'))).toBe(true);
    expect(JSON.parse(readFileSync(join(older, 'checkpoints', 'step-000005', 'state.json'), 'utf8')).step).toBe(5);
    pair.model.dispose();
    pair.optimizer.dispose();
  });
});

describe('symbolic links in a run folder are read, never emptied or removed through', () => {
  const filesOf = (folder: string) =>
    Object.fromEntries(
      readdirSync(folder)
        .sort()
        .map((f) => [f, readFileSync(join(folder, f)).length]),
    );

  it('pruning leaves a linked checkpoint (moved to another disk and linked back) and what it points to, and says so', async () => {
    const runDir = join(dir, 'prune-linked');
    const elsewhere = join(dir, 'elsewhere-ckpt');
    const pair = await trainedPair(7);
    for (let step = 1; step <= 3; step++) await save(runDir, step, null, pair);
    renameSync(join(runDir, 'checkpoints', 'step-000001'), elsewhere);
    symlinkSync(elsewhere, join(runDir, 'checkpoints', 'step-000001'));
    const before = filesOf(elsewhere);
    markRunFolder(runDir);
    const links: string[] = [];
    const deleted = await pruneCheckpoints(runDir, 1, undefined, (link) => links.push(link));
    expect(deleted).toEqual([join(runDir, 'checkpoints', 'step-000002')]);
    expect(links).toEqual([join(runDir, 'checkpoints', 'step-000001')]);
    expect(filesOf(elsewhere)).toEqual(before);
    expect(lstatSync(join(runDir, 'checkpoints', 'step-000001')).isSymbolicLink()).toBe(true);
    // A link under an own name inside a checkpoint makes that folder someone else's: it is left whole.
    symlinkSync(join(elsewhere, 'state.json'), join(runDir, 'checkpoints', 'step-000003', 'notes.json'));
    await save(runDir, 4, null, pair);
    expect(await pruneCheckpoints(runDir, 1)).toEqual([]);
    expect(readFileSync(join(elsewhere, 'state.json')).length).toBe(before['state.json']);
    pair.model.dispose();
    pair.optimizer.dispose();
  });

  it('a linked final/ is replaced by a new folder beside the kept link, and what it points to keeps its files', async () => {
    const runDir = join(dir, 'final-linked');
    const elsewhere = join(dir, 'elsewhere-final');
    const pair = await trainedPair(8);
    const recipe = recipeFor(runDir);
    await saveFinalModel(runDir, pair.model, recipe, { step: '1' });
    renameSync(join(runDir, 'final'), elsewhere);
    symlinkSync(elsewhere, join(runDir, 'final'));
    const before = filesOf(elsewhere);
    const notes: string[] = [];
    const final = await saveFinalModel(runDir, pair.model, recipe, { step: '2' }, undefined, (text) => notes.push(text));
    expect(lstatSync(final).isDirectory()).toBe(true);
    expect((await readSafetensors(join(final, 'model.safetensors'))).metadata.step).toBe('2');
    expect(filesOf(elsewhere)).toEqual(before);
    expect((await readSafetensors(join(elsewhere, 'model.safetensors'))).metadata.step).toBe('1');
    const kept = join(runDir, `final.link-${process.pid}`);
    expect(readlinkSync(kept)).toBe(elsewhere);
    expect(notes).toEqual([expect.stringContaining(`${join(runDir, 'final')} was a symbolic link (to ${elsewhere})`)]);
    // A dangling link named final/ is replaced the same way.
    rmSync(kept);
    rmSync(final, { recursive: true });
    symlinkSync(join(dir, 'gone'), join(runDir, 'final'));
    await saveFinalModel(runDir, pair.model, recipe, { step: '3' });
    expect((await readSafetensors(join(runDir, 'final', 'model.safetensors'))).metadata.step).toBe('3');
    pair.model.dispose();
    pair.optimizer.dispose();
  });

  it('--resume auto passes over a dangling link named like a run folder', async () => {
    const runs = join(dir, 'auto-dangling');
    const recipe = { ...recipeFor(runs), name: 'tiny' };
    const pair = await trainedPair(9);
    const run = join(runs, 'tiny-20260101-120000');
    await save(run, 2, null, pair);
    symlinkSync(join(dir, 'no-such-run'), join(runs, 'tiny-20270101-120000'));
    expect(resolveResume(recipe, 'auto')).toBe(join(run, 'checkpoints', checkpointName(2)));
    pair.model.dispose();
    pair.optimizer.dispose();
  });
});
