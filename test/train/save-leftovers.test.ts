// What a save that fails or is killed leaves behind (src/core/atomic-folder.ts): a failed save (a full disk) removes
// its own temporary folder, giving the space back; a resume removes the temporary folders of saves whose process
// died, and only those (a live writer's, another host's and one holding a file the project did not write stay).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statfsSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { writeFolderAtomically } from '../../src/core/atomic-folder.ts';
import type { DataCursor } from '../../src/data/stream.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { loadCheckpoint, removeDeadSaves, saveCheckpoint } from '../../src/store/checkpoint.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { listCheckpoints, markRunFolder } from '../../src/store/run-folder.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { TrainingStopped } from '../../src/train/stop.ts';
import { testBackend } from '../helpers/backend.ts';
import { mountTmpfs } from '../helpers/tmpfs.ts';
import { makeTinySetup, stopAfter, tinyRecipeText } from './checkpoint-fixtures.ts';

let dir: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-leftovers-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** The pid of a process that has ended. */
const deadPid = () => spawnSync(process.execPath, ['-e', '']).pid!;
const hidden = (folder: string) => readdirSync(folder).filter((e) => e.startsWith('.'));

describe('a save that fails', () => {
  it('removes its temporary folder before the error goes on, and leaves the earlier folders as they were', async () => {
    const parent = join(dir, 'fails', 'checkpoints');
    const own = new Set(['model.safetensors', 'missing/state.json']);
    await writeFolderAtomically(parent, 'step-000001', new Map([['model.safetensors', 'weights']]), own);
    // The second file cannot be created (its folder does not exist): the save fails after writing the first.
    const files = new Map([
      ['model.safetensors', 'more weights'],
      ['missing/state.json', '{}'],
    ]);
    await expect(writeFolderAtomically(parent, 'step-000002', files, own)).rejects.toMatchObject({ code: 'ENOENT' });
    expect(readdirSync(parent)).toEqual(['step-000001']);
    expect(readFileSync(join(parent, 'step-000001', 'model.safetensors'), 'utf8')).toBe('weights');
  });
});

const disk = mountTmpfs('size=1m');
afterAll(() => disk.unmount());

describe.skipIf(!disk.dir)(disk.dir ? 'a full disk' : `a full disk (skipped: ${disk.reason})`, () => {
  it('a checkpoint that does not fit fails with ENOSPC naming the file, and gives back the space it took', async () => {
    const runDir = join(disk.dir!, 'run');
    const model = createLanguageModel({
      kind: 'gpt',
      vocabSize: 40,
      maxSeqLen: 8,
      dModel: 16,
      numLayers: 1,
      numHeads: 2,
      mlpRatio: 2,
      dropout: 0,
      bias: true,
      attention: { name: 'softmax', options: {} },
      seed: 1,
    });
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
    const recipe = parseRecipe(`data: { dataset: ${dir}/data, tokenizer: ${dir}/tok.json }\ntrain: { runDir: ${runDir} }\n`, join(dir, 'tiny.yaml'));
    const cursor: DataCursor = {
      version: 1,
      kind: 'gpt',
      split: 'train',
      seqLen: 8,
      batchSize: 2,
      seed: 3,
      shuffleBuffer: 0,
      tokenizerSha256: 'ab'.repeat(32),
      shardOrder: [0],
      shard: 0,
      recordBatch: 0,
      row: 0,
      offset: 0,
      carry: [],
      shuffle: null,
      maskRng: null,
      done: false,
      batches: 0,
      stats: { documents: 0, tokens: 0, skippedEmpty: 0, bytes: 0 },
    };
    const counters = { tokens: 0, batchesSeen: 0, trainSeconds: 0, elapsedS: 0, window: { loss: 0, steps: 0, tokens: 0, seconds: 0 }, skippedSteps: 0 };
    const save = (step: number) =>
      saveCheckpoint(runDir, {
        model,
        optimizer,
        cursor,
        recipe,
        state: { ...counters, step, consecutiveSkips: 0, valLoss: null, bestValLoss: null, tokenizer: { path: 'tok.json', sha256: 'ab'.repeat(32) } },
      });
    try {
      const free = () => statfsSync(disk.dir!).bfree;
      const empty = free();
      await save(1);
      const oneCheckpoint = empty - free();
      // The disk is filled (by a file of the test's own) until half a checkpoint fits.
      writeFileSync(join(disk.dir!, 'ballast'), Buffer.alloc((free() - Math.ceil(oneCheckpoint / 2)) * statfsSync(disk.dir!).bsize));
      const before = free();
      const tmp = join(runDir, 'checkpoints', `.step-000002.tmp-${process.pid}`);
      await expect(save(2)).rejects.toMatchObject({ code: 'ENOSPC', message: expect.stringMatching(new RegExp(`^${tmp}/\\S+: ENOSPC`)) });
      expect(readdirSync(join(runDir, 'checkpoints'))).toEqual(['step-000001']);
      expect(free()).toBe(before);
      expect((await loadCheckpoint(join(runDir, 'checkpoints', 'step-000001'))).state.step).toBe(1);
    } finally {
      model.dispose();
      optimizer.dispose();
    }
  });
});

describe('leftovers of saves whose process died', () => {
  /** A temporary folder as a save leaves it: the checkpoint's files, and WRITER unless `writer` is null. */
  const leftover = (parent: string, name: string, writer: { pid: number; host: string } | null, extra: string[] = []) => {
    const folder = join(parent, name);
    mkdirSync(folder, { recursive: true });
    for (const file of ['model.safetensors', ...extra]) writeFileSync(join(folder, file), 'partial');
    if (writer) writeFileSync(join(folder, 'WRITER'), JSON.stringify({ ...writer, startedAt: new Date().toISOString() }));
    return folder;
  };

  it("are removed from a run folder when the writer is dead on this host; a live writer's, another host's and foreign files stay", async () => {
    const runDir = join(dir, 'dead-saves');
    const checkpoints = join(runDir, 'checkpoints');
    const dead = deadPid();
    const here = hostname();
    const removed = [
      leftover(checkpoints, `.step-000003.tmp-${dead}`, { pid: dead, host: here }),
      leftover(checkpoints, `.step-000004.tmp-${dead}`, null), // killed before WRITER was written, or an older version's
      leftover(runDir, `.final.tmp-${dead}`, { pid: dead, host: here }),
    ];
    const kept = [
      leftover(checkpoints, `.step-000005.tmp-${process.pid}`, { pid: process.pid, host: here }),
      leftover(checkpoints, `.step-000006.tmp-${dead}`, { pid: dead, host: `not-${here}` }),
      leftover(checkpoints, `.step-000007.tmp-${dead}`, { pid: dead, host: here }, ['my-notes.txt']),
      leftover(checkpoints, `.notes.tmp-${dead}`, { pid: dead, host: here }),
    ];
    expect(await removeDeadSaves(runDir)).toEqual([]); // no run marker: not a run folder, nothing in it is removed
    markRunFolder(runDir);
    expect((await removeDeadSaves(runDir)).sort()).toEqual(removed.sort());
    for (const folder of removed) expect(existsSync(folder)).toBe(false);
    for (const folder of kept) expect(existsSync(folder)).toBe(true);
  });

  it('a resume removes them before it trains, and says so in the log', async () => {
    const setup = await makeTinySetup(join(dir, 'resume'));
    const recipe = parseRecipe(tinyRecipeText(setup, join(dir, 'resume', 'runs')), join(dir, 'resume', 'tiny.yaml'));
    const stopped = await runTraining(recipe, { stop: stopAfter(3) }).then(
      () => null,
      (err) => err as TrainingStopped,
    );
    expect(stopped).toBeInstanceOf(TrainingStopped);
    const runDir = join(stopped!.checkpointDir, '..', '..');
    const dead = deadPid();
    const left = leftover(join(runDir, 'checkpoints'), `.step-000006.tmp-${dead}`, { pid: dead, host: hostname() });
    await runTraining(recipe, { resume: stopped!.checkpointDir });
    expect(existsSync(left)).toBe(false);
    expect(readFileSync(join(runDir, 'log.txt'), 'utf8')).toContain(`removed ${left}: left by a save whose process died`);
    expect(listCheckpoints(runDir).at(-1)!.step).toBe(12);
    expect(hidden(join(runDir, 'checkpoints'))).toEqual([]);
  });
});
