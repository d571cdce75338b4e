// The xla executor across processes (docs/xla.md, "Several devices"): `--processes 2` starts two ranks whose jax
// runners join jax's distributed runtime (jax.distributed, gloo on CPUs) and add their gradient sums in one compiled
// all-to-all + all-gather. Two ranks of one device each, one micro-batch each, train as one process accumulating the
// two: the same losses (one addition either way); 2 ranks × 2 host devices agree with one device accumulating 4
// within float rounding. A rank killed mid-run ends the run, naming it, and the run resumes
// from its last checkpoint to the uninterrupted run's losses. SIGTERM to rank 0 of ranks started as srun
// starts them stops both after the same step. Needs the native backend and `npm run setup:xla`.
import { mkdtemp, rm } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { isXlaSetUp, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { loadCheckpoint } from '../../src/store/checkpoint.ts';
import { readMetrics } from '../../src/store/run-record.ts';
import { CLUSTER_ENV, RANK_ENV, XLA_COORDINATOR_ENV } from '../../src/backend/cluster-env.ts';
import { freePorts } from '../../src/cli/launch.ts';
import { killStartedClis, startCli } from '../helpers/cli.ts';
import { makeTinySetup, writeTinyRecipe, type TinySetup } from './checkpoint-fixtures.ts';
import { TRAIN, trainCommand } from './collective-fixtures.ts';

const available = isTensorflowSetUp() && isXlaSetUp();
if (!available) console.log(`[xla-processes] skipped: needs the tensorflow backend and ${XLA_SETUP_COMMAND}`);

let dir: string;
let setup: TinySetup;

const losses = (run: string) => readMetrics(run).map((r) => `${r.split}@${r.step} ${r.loss}`);
const XLA = ['--backend', 'tensorflow', '--train.executor=xla', '--train.gradAccum=2'];

describe.skipIf(!available)('the xla executor across processes (jax.distributed)', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'slay-xla-processes-'));
    setup = await makeTinySetup(dir);
  });
  afterEach(() => killStartedClis());
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('2 ranks of one device equal one process accumulating their 2 micro-batches', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'equal.yaml'), setup, join(dir, 'runs-equal'));
    const one = await trainCommand([recipe, ...XLA]);
    const two = await trainCommand([recipe, ...XLA, '--processes', '2']);
    expect(two.output).toContain('data-parallel over 2 devices (1 per process)');
    expect(losses(two.runDir).length).toBeGreaterThanOrEqual(4);
    expect(losses(two.runDir)).toEqual(losses(one.runDir));
  });

  it('2 ranks × 2 host devices agree with one device accumulating the 4 micro-batches', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'four.yaml'), setup, join(dir, 'runs-four'), { batchSize: 2 });
    const four = ['--backend', 'tensorflow', '--train.executor=xla', '--train.gradAccum=4'];
    const one = await trainCommand([recipe, ...four]);
    const two = await trainCommand([recipe, ...four, '--train.devices=2', '--processes', '2']);
    expect(two.output).toContain('data-parallel over 4 devices (2 per process)');
    const [a, b] = [readMetrics(one.runDir), readMetrics(two.runDir)];
    expect(b.map((r) => `${r.split}@${r.step}`)).toEqual(a.map((r) => `${r.split}@${r.step}`));
    expect(a.length).toBeGreaterThanOrEqual(4);
    for (let i = 0; i < a.length; i++) expect(Math.abs(b[i].loss - a[i].loss) / a[i].loss).toBeLessThan(1e-5);
  });

  it('ranks started as srun starts them: SIGTERM to rank 0 stops both after the same step (the stop travels in the sum)', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'stop.yaml'), setup, join(dir, 'runs-stop'), {
      maxTokens: 64_000,
      logInterval: 1,
      checkpointInterval: 1000,
      evalInterval: 0,
    });
    // Each rank told its place as the launcher or Slurm would (src/backend/cluster-env.ts), without a launcher.
    const [jaxPort, ...ports] = await freePorts(3);
    const cluster = ports.map((p) => `127.0.0.1:${p}`).join(',');
    const ranks = [0, 1].map((rank) =>
      startCli(TRAIN, [recipe, ...XLA], {
        ...process.env,
        [RANK_ENV]: String(rank),
        [CLUSTER_ENV]: cluster,
        [XLA_COORDINATOR_ENV]: `127.0.0.1:${jaxPort}`,
        TF_NUM_INTRAOP_THREADS: '1',
        TF_NUM_INTEROP_THREADS: '1',
      }),
    );
    await ranks[0].waitForOutput(/^step 3\/\d+ \|/m);
    ranks[0].process.kill('SIGTERM');
    const [zero, one] = await Promise.all(ranks.map((r) => r.exited));
    expect(zero.code, ranks[0].output()).toBe(143);
    // Rank 1 learnt of the stop in the step's sum and ended well, not in a collective rank 0 had left.
    expect(one.code, ranks[1].output()).toBe(0);
    const stopped = /stopped by SIGTERM after step (\d+); checkpoint saved in (\S+)\n/.exec(ranks[0].output());
    expect(stopped, ranks[0].output()).not.toBeNull();
    expect((await loadCheckpoint(stopped![2])).state.step).toBe(Number(stopped![1]));
  });

  it('a rank killed mid-run ends the run naming it; the run resumes from its checkpoint with 2 ranks', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'killed.yaml'), setup, join(dir, 'runs-killed'), {
      maxTokens: 6400,
      logInterval: 1,
      checkpointInterval: 2,
      evalInterval: 0,
    });
    const run = startCli(TRAIN, [recipe, ...XLA, '--processes', '2']);
    const started = await run.waitForOutput(/^\[train\] 2 processes \(pids (\d+), (\d+)\)/m);
    // The checkpoint of step 4 is written before step 5 runs.
    await run.waitForOutput(/^step 5\/\d+ \|/m, started.end);
    process.kill(Number(started.match[2]), 'SIGKILL');
    const exit = await run.exited;
    expect(exit.code).not.toBe(0);
    expect(run.output()).toMatch(/train: rank 1 of 2 \(pid \d+\) was killed by SIGKILL; the other ranks were stopped/);
    // Rank 0 ended on its collective's failure (the killed rank's runner exited with it), not on jax's heartbeat
    // timeout (its runner aborted) or the launcher's SIGTERM.
    expect(run.output()).toMatch(/train: xla runner: step: \w+: .*Gloo [\w-]+ failed: .*(closed|reset) by peer/);
    expect(run.output()).not.toMatch(/^step 50\/50 \|/m);
    const resumed = await trainCommand([recipe, ...XLA, '--processes', '2', '--resume', 'auto']);
    const from = /resumed from \S+ at step (\d+)/.exec(resumed.output);
    expect(from, resumed.output).not.toBeNull();
    expect(Number(from![1])).toBeGreaterThanOrEqual(4);
    expect(existsSync(resumed.finalDir)).toBe(true);
    // After (not before: --resume auto would take its checkpoints) the same run uninterrupted: the same losses.
    const whole = await trainCommand([recipe, ...XLA, '--processes', '2']);
    const last = (run: string) => new Map(readMetrics(run).map((r) => [`${r.split}@${r.step}`, r.loss]));
    expect(last(resumed.runDir)).toEqual(last(whole.runDir));
  });
});
