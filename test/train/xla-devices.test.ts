// train.devices with the xla executor (docs/xla.md, "Several devices"): data parallel over jax's host devices
// (devices.py asks jax's CPU for them with --xla_force_host_platform_device_count), each device running its block
// of the step's micro-batches, the sums added by jax's collectives. The losses equal one device's: bit for bit with
// one micro-batch per device (one addition either way), within float rounding with two per device (the devices'
// sums are added in another order than one device accumulating all four). Dropout and Performer's redraws on.
// Needs the native backend and `npm run setup:xla`.
import { mkdtemp, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { isXlaSetUp, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { LOG_FILE } from '../../src/store/layout.ts';
import { readMetrics } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { deviceMicroBatches } from '../../src/train/step-executors/xla.ts';
import { resolveExecutionPlan } from '../../src/train/execution-plan.ts';
import type { Cluster } from '../../src/backend/collective.ts';
import type { StepModel } from '../../src/model/lm.ts';
import { currentDevice } from '../../src/backend/current.ts';
import { makeTinySetup, tinyRecipeText, type TinySetup } from './checkpoint-fixtures.ts';

const available = isTensorflowSetUp() && isXlaSetUp();
if (!available) console.log(`[xla-devices] skipped: needs the tensorflow backend and ${XLA_SETUP_COMMAND}`);

let dir: string;
let setup: TinySetup;

async function train(name: string, keys: Record<string, number | string>) {
  const text = tinyRecipeText(setup, join(dir, name), { executor: 'xla', ...keys }).replace('backend: cpu', 'backend: tensorflow');
  const recipe = parseRecipe(text, join(dir, `${name}.yaml`));
  const logger = await RunLogger.create(recipe, { echo: false });
  try {
    await runTraining(recipe, { logger });
    return { dir: logger.dir, error: null };
  } catch (err) {
    return { dir: logger.dir, error: err as Error };
  }
}

const losses = (run: string) => readMetrics(run).map((r) => ({ at: `${r.split}@${r.step}`, loss: r.loss }));

describe('deviceMicroBatches', () => {
  it('gives each device a contiguous block, in order, covering every micro-batch once', () => {
    const blocks = [0, 1, 2, 3].map((d) => deviceMicroBatches(8, d, 4));
    expect(blocks).toEqual([
      { from: 0, to: 2 },
      { from: 2, to: 4 },
      { from: 4, to: 6 },
      { from: 6, to: 8 },
    ]);
    // A short last step (fewer micro-batches than devices): some devices get none, none is run twice.
    const short = [0, 1, 2, 3].map((d) => deviceMicroBatches(2, d, 4));
    expect(short.flatMap(({ from, to }) => Array.from({ length: to - from }, (_, k) => from + k))).toEqual([0, 1]);
  });
});

describe.skipIf(!available)('train.devices with the xla executor (jax host devices)', () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
    dir = await mkdtemp(join(tmpdir(), 'slay-xla-devices-'));
    setup = await makeTinySetup(dir);
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('2 devices × 1 micro-batch equal 1 device accumulating 2; 2 devices × 2 equal 1 device accumulating 4', async () => {
    const one2 = await train('one-2', { gradAccum: 2 });
    const two2 = await train('two-2', { gradAccum: 2, devices: 2 });
    const one4 = await train('one-4', { gradAccum: 4, batchSize: 2 });
    const two4 = await train('two-4', { gradAccum: 4, batchSize: 2, devices: 2 });
    for (const run of [one2, two2, one4, two4]) expect(run.error).toBeNull();
    // The run's log names the devices it trained on.
    expect(readFileSync(join(two2.dir, LOG_FILE), 'utf8')).toContain('data-parallel over 2 devices (2 per process)');
    expect(readFileSync(join(one2.dir, LOG_FILE), 'utf8')).not.toContain('data-parallel over');
    expect(losses(two2.dir)).toEqual(losses(one2.dir));
    const [a, b] = [losses(one4.dir), losses(two4.dir)];
    expect(b.map((r) => r.at)).toEqual(a.map((r) => r.at));
    expect(a.length).toBeGreaterThanOrEqual(4);
    for (let i = 0; i < a.length; i++) expect(Math.abs(b[i].loss - a[i].loss) / a[i].loss, a[i].at).toBeLessThan(1e-5);
  });

  it("a plan's short last step (1 micro-batch on 2 devices: the other adds zeros) equals one device's", async () => {
    // 9 micro-batches of 2 rows: steps of 4, 4 and 1.
    const keys = { gradAccum: 4, batchSize: 2, maxTokens: 288, logInterval: 1, evalInterval: 0 };
    const [one, two] = [await train('short-1', keys), await train('short-2', { ...keys, devices: 2 })];
    expect(one.error).toBeNull();
    expect(two.error).toBeNull();
    const [a, b] = [losses(one.dir), losses(two.dir)];
    expect(a.map((r) => r.at)).toContain('train@3');
    expect(b.map((r) => r.at)).toEqual(a.map((r) => r.at));
    for (let i = 0; i < a.length; i++) expect(Math.abs(b[i].loss - a[i].loss) / a[i].loss, a[i].at).toBeLessThan(1e-5);
  });

  it('refuses train.shardOptimizer (every device keeps the whole moments)', () => {
    // Rank 0 of two: the plan gives it a shard of the moments when train.shardOptimizer asks.
    const cluster = { rank: 0, worldSize: 2 } as Cluster;
    const plan = (shardOptimizer: boolean) => resolveExecutionPlan({ executor: 'xla', shardOptimizer }, currentDevice(), cluster, {} as StepModel);
    expect(() => plan(true)).toThrow(/train\.shardOptimizer does not apply/);
    expect(plan(false).executor).toBe('xla');
  });

  it('refuses a train.gradAccum that is not a multiple of the devices, naming both', async () => {
    const run = await train('uneven', { gradAccum: 3, devices: 2 });
    expect(run.error?.message).toMatch(/train\.gradAccum 3 is not a multiple of the 2 devices/);
  });
});
