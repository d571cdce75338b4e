// What a start and a resume may touch: only the run folder they own, recognised by the marker the trainer writes
// into it. A checkpoint copied out of its run, or under a folder that merely looks like a run, resumes into a new run
// folder and leaves every neighbouring file byte for byte as it was; a start or a resume that fails its checks
// changes no byte of any folder and frees its model; a run that died between its last checkpoint and final/ is
// finished by --resume; nanPolicy skip gives up after train.nanSkipLimit dropped updates in a row.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  cpSync,
  existsSync,
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { COMPLETE_MARKER } from '../../src/core/atomic-folder.ts';
import { listCheckpoints } from '../../src/store/run-folder.ts';
import { TrainingStopped } from '../../src/train/stop.ts';
import { readMetrics } from '../../src/store/run-record.ts';
import type { MetricRecord } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import type { Recipe } from '../../src/recipe/schema.ts';
import { readSafetensors } from '../../src/hf/safetensors.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { RUN_MARKER } from '../../src/store/layout.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';
import { makeTinySetup, stopAfter, tinyRecipeText, writeTinyRecipe } from './checkpoint-fixtures.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';

let dir: string;
let setup: TinySetup;
beforeAll(async () => {
  await initBackend('cpu', { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-run-folder-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const recipeIn = (runs: string, train: Record<string, number | string> = {}) => parseRecipe(tinyRecipeText(setup, runs, train), join(dir, 'tiny.yaml'));

/** runTraining with its own RunLogger, its progress lines kept off the test output. */
async function quietly<T>(run: () => Promise<T>): Promise<T> {
  const write = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
  try {
    return await run();
  } finally {
    write.mockRestore();
  }
}

/** Every file and folder under `root`: relative path → sha256 of the content ('dir' for folders). */
function digest(root: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const entry of readdirSync(d)) {
      const p = join(d, entry);
      if (statSync(p).isDirectory()) {
        out.set(relative(root, p), 'dir');
        walk(p);
      } else out.set(relative(root, p), createHash('sha256').update(readFileSync(p)).digest('hex'));
    }
  };
  walk(root);
  return out;
}

function write(file: string, content: string | Buffer): void {
  mkdirSync(join(file, '..'), { recursive: true });
  writeFileSync(file, content);
}

/** A run stopped after step 5 (checkpoints at 3 and 5); returns the step-5 checkpoint. */
async function stoppedRun(runs: string): Promise<string> {
  const recipe = recipeIn(runs);
  const logger = await RunLogger.create(recipe, { echo: false });
  const error = await runTraining(recipe, { logger, stop: stopAfter(5) }).catch((e) => e);
  expect(error).toBeInstanceOf(TrainingStopped);
  return (error as TrainingStopped).checkpointDir;
}

const cli = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/train.ts', ...args], { encoding: 'utf8', timeout: 120_000 });
const runFolders = (runs: string) => (existsSync(runs) ? readdirSync(runs).map((e) => join(runs, e)) : []);

describe('resume never touches files outside its run', () => {
  it('a checkpoint copied out of its run (~/saved/step-N, or a checkpoints/ folder with no run around it) resumes into a new run folder; the neighbours survive byte for byte', async () => {
    const checkpoint = await stoppedRun(join(dir, 'runs-source'));
    // The user's home: files named like a run's, a final/ folder, checkpoint-like folders holding the user's files.
    const home = join(dir, 'home');
    write(join(home, 'config.json'), '{"mine": true}\n');
    write(join(home, 'log.txt'), 'my notes\n');
    write(join(home, 'metrics.jsonl'), 'not metrics\n');
    write(join(home, 'final', 'model.safetensors'), Buffer.from([1, 2, 3, 4]));
    write(join(home, 'checkpoints', 'notes.txt'), 'keep me\n');
    write(join(home, 'saved', 'notes.txt'), 'keep me too\n');
    cpSync(checkpoint, join(home, 'saved', 'step-000005'), { recursive: true });
    // A folder called checkpoints/ with the copy, beside the user's own step-like folders (one without COMPLETE).
    write(join(home, 'project', 'config.json'), '{"also": "mine"}\n');
    write(join(home, 'project', 'checkpoints', 'step-000001', 'mine.txt'), 'user data\n');
    write(join(home, 'project', 'checkpoints', '.step-000002.tmp-1', 'mine.bin'), Buffer.from([9]));
    write(join(home, 'project', 'checkpoints', 'README'), 'mine\n');
    cpSync(checkpoint, join(home, 'project', 'checkpoints', 'step-000005'), { recursive: true });
    const before = digest(home);

    const runs = join(dir, 'runs-copied');
    const recipeFile = await writeTinyRecipe(join(dir, 'tiny-copied.yaml'), setup, runs);
    // As a user runs it (the CLI), and in-process for the second copy.
    const saved = join(home, 'saved', 'step-000005');
    const r = cli(recipeFile, '--resume', saved);
    expect(r.status, r.stderr + r.stdout).toBe(0);
    expect(r.stdout).toContain(`checkpoint ${saved} is not inside a run folder`);
    expect(r.stdout).toMatch(/continuing in the new run folder .*runs-copied/);
    const project = join(home, 'project', 'checkpoints', 'step-000005');
    await quietly(() => runTraining(recipeIn(runs), { resume: project }));
    expect(digest(home)).toEqual(before);
    const folders = runFolders(runs);
    expect(folders.length).toBe(2);
    for (const created of folders) {
      expect(existsSync(join(created, 'final', 'model.safetensors'))).toBe(true);
      expect(readMetrics(created)[0].step).toBeGreaterThan(5); // the new folder's history starts after the checkpoint
      expect(readFileSync(join(created, 'log.txt'), 'utf8')).toMatch(/is not inside a run folder .*: continuing in the new run folder/);
    }
  }, 120_000);
});

describe('a run folder is recognised only by the marker its trainer wrote', () => {
  it("a checkpoint copied into the user's folder that holds config.json, env.json, final/ and checkpoints/ resumes into a new run folder; that folder is left byte for byte", async () => {
    const checkpoint = await stoppedRun(join(dir, 'runs-marker-source'));
    const source = dirname(dirname(checkpoint));
    expect(existsSync(join(source, RUN_MARKER))).toBe(true);
    // The user's folder: the files a run folder holds, and a checkpoint-shaped folder of the user's (a copy).
    const user = join(dir, 'user-folder');
    write(join(user, 'config.json'), '{"mine": true}\n');
    write(join(user, 'env.json'), '{"also": "mine"}\n');
    write(join(user, 'summary.json'), '{"notes": 1}\n');
    write(join(user, 'log.txt'), 'my log\n');
    write(join(user, 'metrics.jsonl'), '');
    write(join(user, 'final', 'model.safetensors'), Buffer.from([1, 2, 3, 4]));
    write(join(user, 'final', 'recipe.json'), '{}\n');
    cpSync(join(source, 'checkpoints', 'step-000003'), join(user, 'checkpoints', 'step-000001'), { recursive: true });
    cpSync(checkpoint, join(user, 'checkpoints', 'step-000005'), { recursive: true });
    const before = digest(user);

    const runs = join(dir, 'runs-marker');
    const result = await quietly(() => runTraining(recipeIn(runs), { resume: join(user, 'checkpoints', 'step-000005') }));
    expect(digest(user)).toEqual(before);
    expect(dirname(result.runDir)).toBe(runs);
    expect(existsSync(join(result.runDir, RUN_MARKER))).toBe(true);
    expect(readFileSync(join(result.runDir, 'log.txt'), 'utf8')).toContain(`is not inside a run folder (${user} has no ${RUN_MARKER} marker`);
  }, 120_000);

  it('a checkpoint of another run copied into a run folder does not continue there; a run folder of an older version continues in place once marked', async () => {
    const a = dirname(dirname(await stoppedRun(join(dir, 'runs-marker-a'))));
    const b = dirname(dirname(await stoppedRun(join(dir, 'runs-marker-b'))));
    cpSync(join(a, 'checkpoints', 'step-000005'), join(b, 'checkpoints', 'step-000007'), { recursive: true });
    const before = digest(b);
    const runs = join(dir, 'runs-marker-other');
    const moved = await quietly(() => runTraining(recipeIn(runs), { resume: join(b, 'checkpoints', 'step-000007') }));
    expect(digest(b)).toEqual(before);
    expect(dirname(moved.runDir)).toBe(runs);
    expect(readFileSync(join(moved.runDir, 'log.txt'), 'utf8')).toMatch(
      /is not inside a run folder \(.* belongs to another run: its .slayformer-run id differs/,
    );

    // A run folder written before the marker existed: not a run until the user marks it (an empty marker will do).
    rmSync(join(a, RUN_MARKER));
    const beforeA = digest(a);
    const unmarked = await quietly(() => runTraining(recipeIn(join(dir, 'runs-marker-old')), { resume: join(a, 'checkpoints', 'step-000005') }));
    expect(digest(a)).toEqual(beforeA);
    expect(readFileSync(join(unmarked.runDir, 'log.txt'), 'utf8')).toContain(`touch ${join(a, RUN_MARKER)}`);
    writeFileSync(join(a, RUN_MARKER), '');
    const inPlace = await quietly(() => runTraining(recipeIn(join(dir, 'runs-marker-a')), { resume: join(a, 'checkpoints', 'step-000005') }));
    expect(inPlace.runDir).toBe(a);
    expect(inPlace.steps).toBe(12);
  }, 120_000);
});

describe('resumes that fail', () => {
  it('every check of a resume runs before the first byte of the run folder changes: a cursor offset past its document, done: true in the middle of the split, a damaged metrics.jsonl', async () => {
    const runs = join(dir, 'runs-failing-resume');
    const checkpoint = await stoppedRun(runs);
    const run = dirname(dirname(checkpoint));
    const cursorFile = join(checkpoint, 'cursor.json');
    const cursor = JSON.parse(readFileSync(cursorFile, 'utf8'));
    writeFileSync(join(checkpoint, COMPLETE_MARKER), '2026-01-01T00:00:00.000Z\n'); // a marker of an older version: no checksums
    const resumeFails = async (message: RegExp) => {
      const before = digest(run);
      const tensors = tf.memory().numTensors;
      await expect(quietly(() => runTraining(recipeIn(runs), { resume: checkpoint }))).rejects.toThrow(message);
      expect(digest(run)).toEqual(before);
      expect(tf.memory().numTensors).toBe(tensors);
      expect(runFolders(runs)).toEqual([run]);
    };
    writeFileSync(cursorFile, JSON.stringify({ ...cursor, offset: 1e12 }));
    await resumeFails(/cursor\.json: offset = 1000000000000 is past the end of the document it points into/);
    // The README promises that a cursor never ends an epoch early: done (and an exhausted shuffle) only at the end.
    writeFileSync(cursorFile, JSON.stringify({ ...cursor, done: true }));
    await resumeFails(/cursor\.json: done = true, but the position .* is not the end of the split/);
    writeFileSync(cursorFile, JSON.stringify({ ...cursor, shuffle: { ...cursor.shuffle, exhausted: true } }));
    await resumeFails(/cursor\.json: shuffle\.exhausted = true, but the position .* is not the end of the split/);
    writeFileSync(cursorFile, JSON.stringify(cursor));
    writeFileSync(join(run, 'metrics.jsonl'), readFileSync(join(run, 'metrics.jsonl'), 'utf8') + '{"step": "x"}\n');
    await resumeFails(/metrics\.jsonl:\d+: metric record field split must be "train" or "val"/);
  }, 120_000);
});

describe('starts that fail', () => {
  it('an empty train split, or one too short for a batch, is an error before a run folder exists (as an empty validation split is)', async () => {
    const validation = syntheticDocuments(40, 9);
    for (const [name, train] of [
      ['empty', []],
      ['blank', ['', '  \n ']],
      ['short', ['A few words.']],
    ] as const) {
      const data = join(dir, `data-train-${name}`);
      await writeDataset(data, { train: [[...train]], validation: [validation] }, 40);
      const runs = join(dir, `runs-train-${name}`);
      const recipe = parseRecipe(tinyRecipeText({ ...setup, data }, runs), join(dir, 'tiny.yaml'));
      await expect(
        quietly(() => runTraining(recipe)),
        name,
      ).rejects.toThrow(/the train split gave no batch of 4×16 tokens; a train split with enough text is needed/);
      expect(runFolders(runs)).toEqual([]);
    }
  });

  it('a start that fails its checks creates no run folder, frees its model, and a second start in the same process works', async () => {
    const runs = join(dir, 'runs-failing');
    const baseline = tf.memory().numTensors;
    // A freeze glob that matches nothing: refused after the model is built.
    const typo = parseRecipe(tinyRecipeText(setup, runs), join(dir, 'tiny.yaml'), ['--train.freeze=["blocks.9.*"]']);
    await expect(quietly(() => runTraining(typo))).rejects.toThrow(/train\.freeze: "blocks\.9\.\*" match no parameter/);
    // A checkpoint whose cursor belongs to another stream (seqLen) — with its checksums gone, so only the stream
    // notices it, after the model and optimizer were built and restored.
    const checkpoint = await stoppedRun(join(dir, 'runs-failing-source'));
    const cursorFile = join(checkpoint, 'cursor.json');
    writeFileSync(cursorFile, JSON.stringify({ ...JSON.parse(readFileSync(cursorFile, 'utf8')), seqLen: 8 }));
    writeFileSync(join(checkpoint, COMPLETE_MARKER), '2026-01-01T00:00:00.000Z\n'); // a marker of an older version: no checksums
    const tensorsBefore = tf.memory().numTensors;
    await expect(quietly(() => runTraining(recipeIn(runs), { resume: checkpoint }))).rejects.toThrow(
      /cursor\.json: the data cursor does not match this stream: seqLen = 8, the stream has 16/,
    );
    expect(tf.memory().numTensors).toBe(tensorsBefore);
    expect(tf.memory().numTensors).toBe(baseline);
    expect(runFolders(runs)).toEqual([]);
    // Nothing of the failed starts is left registered: the same model builds again.
    const result = await quietly(() => runTraining(recipeIn(runs, { maxTokens: 128 })));
    expect(result.steps).toBe(2);
    expect(runFolders(runs).length).toBe(1);
  });

  it('train.nanPolicy skip ends a diverged run after train.nanSkipLimit dropped updates in a row, naming the steps; no final/', async () => {
    const runs = join(dir, 'runs-nan');
    // lr 1e30: the first update moves every weight by ~1e30, so every later step is NaN/Inf.
    const recipe = recipeIn(runs, { lr: 1e30, minLr: 0, warmupSteps: 0, nanPolicy: 'skip', nanSkipLimit: 3 });
    const logger = await RunLogger.create(recipe, { echo: false });
    await expect(runTraining(recipe, { logger })).rejects.toThrow(
      /training diverged: 3 updates in a row were dropped \(steps 2–4, the last with loss \S+, gradient norm \S+; train\.nanSkipLimit 3\); the last good checkpoint is .*step-000003/,
    );
    expect(existsSync(join(logger.dir, 'final'))).toBe(false);
    expect(existsSync(join(logger.dir, 'summary.json'))).toBe(false);
  });
});

describe('a run that died between its last checkpoint and final/', () => {
  it('--resume finishes it (final validation, final/, summary.json) with the records of the uninterrupted run; a finished run has nothing to resume', async () => {
    const runs = join(dir, 'runs-finish');
    const recipe: Recipe = recipeIn(runs);
    const full = await quietly(() => runTraining(recipe));
    const reference = readMetrics(full.runDir);
    const finalWeights = (await readSafetensors(join(full.finalDir, 'model.safetensors'))).tensors;
    // What a process killed after its last checkpoint leaves.
    rmSync(join(full.runDir, 'final'), { recursive: true });
    rmSync(join(full.runDir, 'summary.json'));
    const last = listCheckpoints(full.runDir).at(-1)!;
    expect(last.step).toBe(12);

    const finished = await quietly(() => runTraining(recipe, { resume: last.dir }));
    expect(finished.runDir).toBe(full.runDir);
    expect(finished.steps).toBe(12);
    const untimed = (records: MetricRecord[]) => records.map(({ tokens_per_s: _r, elapsed_s: _e, ...rest }) => rest);
    expect(untimed(readMetrics(full.runDir))).toEqual(untimed(reference));
    const again = (await readSafetensors(join(finished.finalDir, 'model.safetensors'))).tensors;
    for (const [name, t] of finalWeights) expect(Array.from(again.get(name)!.data), name).toEqual(Array.from(t.data));
    expect(JSON.parse(readFileSync(join(full.runDir, 'summary.json'), 'utf8'))).toMatchObject({ steps: 12, final: 'final' });
    expect(readFileSync(join(full.runDir, 'log.txt'), 'utf8')).toMatch(/it is the last step of the plan: finishing the run/);

    await expect(quietly(() => runTraining(recipe, { resume: last.dir }))).rejects.toThrow(
      /at step 12, the end of this recipe's 12 steps, and its run finished .*summary\.json\): nothing to resume/,
    );
  });

  it('a resume from a checkpoint moved to another disk and linked back, with keepCheckpoints 1 and a linked final/, leaves both targets whole and says so', async () => {
    const runs = join(dir, 'runs-linked');
    const recipe: Recipe = recipeIn(runs, { keepCheckpoints: 1 });
    const stopped = await quietly(() => runTraining(recipe, { stop: stopAfter(4) })).catch((err: unknown) => err);
    expect(stopped).toBeInstanceOf(TrainingStopped);
    const [runDir] = readdirSync(runs).map((e) => join(runs, e));
    const checkpoint = listCheckpoints(runDir).at(-1)!;
    expect(checkpoint.step).toBe(4);
    const elsewhere = join(dir, 'other-disk');
    mkdirSync(join(elsewhere, 'final'), { recursive: true });
    renameSync(checkpoint.dir, join(elsewhere, 'ckpt'));
    symlinkSync(join(elsewhere, 'ckpt'), checkpoint.dir);
    writeFileSync(join(elsewhere, 'final', 'model.safetensors'), 'an earlier final model');
    symlinkSync(join(elsewhere, 'final'), join(runDir, 'final'));
    const files = (folder: string) =>
      Object.fromEntries(
        readdirSync(folder)
          .sort()
          .map((f) => [
            f,
            createHash('sha256')
              .update(readFileSync(join(folder, f)))
              .digest('hex'),
          ]),
      );
    const before = { ckpt: files(join(elsewhere, 'ckpt')), final: files(join(elsewhere, 'final')) };

    const finished = await quietly(() => runTraining(recipe, { resume: checkpoint.dir }));
    expect(finished.runDir).toBe(runDir);
    expect(finished.steps).toBe(12);
    expect({ ckpt: files(join(elsewhere, 'ckpt')), final: files(join(elsewhere, 'final')) }).toEqual(before);
    expect(lstatSync(checkpoint.dir).isSymbolicLink()).toBe(true);
    expect(lstatSync(join(runDir, 'final')).isDirectory()).toBe(true);
    expect(readlinkSync(join(runDir, `final.link-${process.pid}`))).toBe(join(elsewhere, 'final'));
    const log = readFileSync(join(runDir, 'log.txt'), 'utf8');
    expect(log.split('\n').filter((l) => l.includes(`${checkpoint.dir} is a symbolic link: train.keepCheckpoints does not prune it`))).toHaveLength(1);
    expect(log).toContain(`${join(runDir, 'final')} was a symbolic link (to ${join(elsewhere, 'final')})`);
  });
});
