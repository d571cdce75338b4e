// Exact resume: a run stopped at step 5 (the SIGINT/SIGTERM path: finish the step, checkpoint, stop) and resumed,
// or resumed from its periodic checkpoint at step 3, writes the same metrics.jsonl and final weights as the
// uninterrupted run, on the cpu backend. Model: Performer with redraws every 2 steps and dropout 0.1.
import { cpSync, existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { listCheckpoints } from '../../src/store/run-folder.ts';
import { TrainingStopped } from '../../src/train/stop.ts';
import type { StopRequest } from '../../src/train/stop.ts';
import { readMetrics, SPEED_FIELDS } from '../../src/store/run-record.ts';
import type { MetricRecord } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import type { Recipe } from '../../src/recipe/schema.ts';
import { readSafetensors } from '../../src/hf/safetensors.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { makeTinySetup, stopAfter, tinyRecipeText } from './checkpoint-fixtures.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';

let dir: string;
let setup: TinySetup;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-resume-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

// What the process measured rather than what the model computed: timings, and the host reads of the
// logged step (a resumed process records its step functions again, which reads their constants).
const TIMING = new Set<string>([...SPEED_FIELDS, 'readback_values', 'readback_bytes']);

/** Largest relative difference over the non-timing fields; fails on a structural difference. */
function maxRelativeDifference(a: MetricRecord[], b: MetricRecord[]): number {
  expect(b.map((r) => `${r.split}@${r.step}`)).toEqual(a.map((r) => `${r.split}@${r.step}`));
  let worst = 0;
  for (let i = 0; i < a.length; i++) {
    for (const [key, value] of Object.entries(a[i])) {
      if (TIMING.has(key)) continue;
      const other = (b[i] as unknown as Record<string, unknown>)[key];
      if (typeof value !== 'number' || typeof other !== 'number') {
        expect(other, `${key} at ${a[i].split}@${a[i].step}`).toEqual(value);
        continue;
      }
      worst = Math.max(worst, Math.abs(value - other) / Math.max(Math.abs(value), 1e-12));
    }
  }
  return worst;
}

async function finalWeightsDifference(runA: string, runB: string): Promise<number> {
  const a = (await readSafetensors(join(runA, 'final', 'model.safetensors'))).tensors;
  const b = (await readSafetensors(join(runB, 'final', 'model.safetensors'))).tensors;
  expect([...b.keys()].sort()).toEqual([...a.keys()].sort());
  let worst = 0;
  for (const [name, t] of a) {
    const u = b.get(name)!.data;
    for (let i = 0; i < t.data.length; i++) worst = Math.max(worst, Math.abs(t.data[i] - u[i]));
  }
  return worst;
}

async function train(recipe: Recipe, opts: { resume?: string; stop?: StopRequest; resumeDir?: string; resumeStep?: number } = {}) {
  const logger = await RunLogger.create(recipe, { echo: false, resumeDir: opts.resumeDir, resumeStep: opts.resumeStep });
  try {
    await runTraining(recipe, { logger, resume: opts.resume, stop: opts.stop });
    return { dir: logger.dir, error: null };
  } catch (err) {
    return { dir: logger.dir, error: err as Error };
  }
}

describe('exact resume on the cpu backend', () => {
  it('stop after step 5 + resume, and resume from the step-3 checkpoint, reproduce the uninterrupted run', async () => {
    const runs = join(dir, 'runs');
    const recipe = parseRecipe(tinyRecipeText(setup, runs), join(dir, 'tiny.yaml'));

    const full = await train(recipe);
    expect(full.error).toBeNull();
    const reference = readMetrics(full.dir);
    expect(reference.filter((r) => r.split === 'train').map((r) => r.step)).toEqual([2, 4, 6, 8, 10, 12]);
    // Checkpoints at 3, 6, 9 and the end (12); keep 2 newest + the best by validation loss (taken at 12 here).
    expect(listCheckpoints(full.dir).map((c) => c.step)).toEqual([9, 12]);

    const stopped = await train(recipe, { stop: stopAfter(5) });
    expect(stopped.error).toBeInstanceOf(TrainingStopped);
    const stop = stopped.error as TrainingStopped;
    expect(stop.step).toBe(5);
    expect(stop.checkpointDir).toBe(join(stopped.dir, 'checkpoints', 'step-000005'));
    expect(listCheckpoints(stopped.dir).map((c) => c.step)).toEqual([3, 5]);
    expect(existsSync(join(stopped.dir, 'final'))).toBe(false);
    // Step 5 is inside a logging window (records every 2 steps): the window's partial sums travel in state.json.
    expect(readMetrics(stopped.dir).at(-1)!.step).toBe(4);

    const copy = join(dir, 'runs-copy', 'tiny-from-3');
    cpSync(stopped.dir, copy, { recursive: true });

    const resumed = await train(recipe, { resume: stop.checkpointDir, resumeDir: stopped.dir, resumeStep: 5 });
    expect(resumed.error).toBeNull();
    expect(resumed.dir).toBe(stopped.dir);
    const fromFive = maxRelativeDifference(reference, readMetrics(stopped.dir));

    const fromThreeCheckpoint = join(copy, 'checkpoints', 'step-000003');
    const resumedFromThree = await train(recipe, { resume: fromThreeCheckpoint, resumeDir: copy, resumeStep: 3 });
    expect(resumedFromThree.error).toBeNull();
    const fromThree = maxRelativeDifference(reference, readMetrics(copy));

    const weightsFive = await finalWeightsDifference(full.dir, stopped.dir);
    const weightsThree = await finalWeightsDifference(full.dir, copy);
    console.log(`resume: max relative metric difference ${fromFive} (from 5), ${fromThree} (from 3); max |Δweight| ${weightsFive}, ${weightsThree}`);
    expect(fromFive).toBeLessThanOrEqual(1e-6);
    expect(fromThree).toBeLessThanOrEqual(1e-6);
    expect(weightsFive).toBeLessThanOrEqual(1e-6);
    expect(weightsThree).toBeLessThanOrEqual(1e-6);
    // No temporary folders are left behind.
    expect(readdirSync(join(stopped.dir, 'checkpoints')).filter((e) => e.startsWith('.'))).toEqual([]);
  });

  // On tensorflow steps run as TensorFlow functions (train.graph), dropout masks drawn in the graph
  // from the fed step seed. Every step of a process, its first included, comes from the function
  // (backend/tf-graph.ts records before it runs), so the resumed run is the uninterrupted one bit for
  // bit. Defined in the tensorflow project only (vitest.config.ts says when that project is not set up).
  if (testBackend() === 'tensorflow')
    it('tensorflow graph steps with dropout: stop after step 5 + resume reproduces the uninterrupted run bit for bit', async () => {
      const runs = join(dir, 'runs-graph');
      const recipe = parseRecipe(tinyRecipeText(setup, runs), join(dir, 'tiny.yaml'));
      expect(recipe.model.dropout).toBe(0.1);
      const full = await train(recipe);
      expect(full.error).toBeNull();
      expect(readFileSync(join(full.dir, 'log.txt'), 'utf8')).toMatch(
        /train\.graph: steps run as TensorFlow functions on \/job:localhost\/replica:0\/task:0\/device:CPU:0\n/,
      );
      const stopped = await train(recipe, { stop: stopAfter(5) });
      const stop = stopped.error as TrainingStopped;
      expect(stop.step).toBe(5);
      const resumed = await train(recipe, { resume: stop.checkpointDir, resumeDir: stopped.dir, resumeStep: 5 });
      expect(resumed.error).toBeNull();
      expect(maxRelativeDifference(readMetrics(full.dir), readMetrics(stopped.dir))).toBe(0);
      expect(await finalWeightsDifference(full.dir, stopped.dir)).toBe(0);
    });

  it('refuses a recipe that changes the model shape, the attention or the tokenizer, naming what differs', async () => {
    const runs = join(dir, 'runs-refuse');
    const recipe = parseRecipe(tinyRecipeText(setup, runs), join(dir, 'tiny.yaml'));
    const stopped = await train(recipe, { stop: stopAfter(1) });
    const checkpoint = (stopped.error as TrainingStopped).checkpointDir;
    const otherData = join(dir, 'data-copy');
    cpSync(setup.data, otherData, { recursive: true });
    const cases: [string[], RegExp][] = [
      [['--model.dModel=32'], /model\.dModel: checkpoint 16, recipe 32/],
      [['--model.attention.options.features=16'], /model\.attention\.options: checkpoint \{.*"features":8.*\}, recipe \{.*"features":16/],
      [['--model.attention.name=linear-elu', '--model.attention.options={}'], /model\.attention\.name: checkpoint "performer", recipe "linear-elu"/],
      [
        [`--data.tokenizer=${setup.otherTokenizer}`],
        /tokenizer: checkpoint used .*tokenizer\.json \(sha256 [0-9a-f]{12}…\), recipe's .*tokenizer-other\.json has sha256/,
      ],
      // The cursor is a position in the checkpoint's data: other data (even a copy) is a new run, not a resume.
      [[`--data.dataset=${otherData}`], new RegExp(`data\\.dataset: checkpoint "${setup.data}", recipe "${otherData}"`)],
    ];
    for (const [overrides, message] of cases) {
      const changed = parseRecipe(tinyRecipeText(setup, runs), join(dir, 'tiny.yaml'), overrides);
      const lines: string[] = [];
      await expect(
        runTraining(changed, { resume: checkpoint, logger: { dir: join(dir, 'unused'), log: () => {}, line: (t) => lines.push(t), finish: async () => {} } }),
      ).rejects.toThrow(message);
    }
  });

  it('train.nanPolicy stop: a diverged step ends the run naming the step and the last good checkpoint; skip drops the updates', async () => {
    const runs = join(dir, 'runs-nan');
    // lr 1e30: the first update moves every weight by ~1e30, so step 2's logits overflow to NaN/Inf.
    const text = tinyRecipeText(setup, runs, { lr: 1e30, minLr: 0, warmupSteps: 0, checkpointInterval: 1 });
    const stopRecipe = parseRecipe(text, join(dir, 'tiny.yaml'));
    const stopped = await train(stopRecipe);
    expect(stopped.error?.message).toMatch(
      /training diverged at step 2: loss (NaN|Infinity), gradient norm \S+; the update was not applied and the last good checkpoint is .*step-000001/,
    );
    expect(listCheckpoints(stopped.dir).map((c) => c.step)).toEqual([1]);

    const skipRecipe = parseRecipe(text, join(dir, 'tiny.yaml'), ['--train.nanPolicy=skip', '--train.nanSkipLimit=20']);
    const lines: string[] = [];
    const records: MetricRecord[] = [];
    const result = await runTraining(skipRecipe, {
      logger: { dir: join(dir, 'skip-run'), log: (r) => records.push(r), line: (t) => lines.push(t), finish: async () => {} },
    });
    expect(result.steps).toBe(12);
    expect(lines.filter((l) => /^warning: step \d+: loss .*update dropped \(train\.nanPolicy: skip/.test(l)).length).toBe(11);
    // Only step 1 was applied: the step-2 record averages that one finite loss, later windows are empty and not logged.
    expect(records.filter((r) => r.split === 'train').map((r) => r.step)).toEqual([2]);
  });
});
