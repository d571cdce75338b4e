// Runs of several Slurm tasks on a real single-host cluster (scripts/slurm-local.sh, as test/sweep/slurm.test.ts):
// `--nodes 1 --tasks-per-node 2` makes each array task start the trainer under srun, one rank per Slurm task
// (src/sweep/slurm.ts). A unit of the tiny sweep runs to its end with one set of logs and the weights of one process
// taking each batch's shards as micro-batches; a unit stopped by the time-limit warning (USR1 to the batch shell)
// checkpoints on rank 0, requeues itself and resumes to the uninterrupted run's weights. The ranks are processes under
// srun, never test workers. Skipped, with the reason in the suite's name, where Slurm or the tensorflow backend is missing.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { readSafetensors } from '../../src/hf/safetensors.ts';
import { killChildren, makeCorpus, oneLongerRun, sweepCli, waitForFiles, writeTinySweep } from './fixtures.ts';
import type { Corpus } from './fixtures.ts';
import { startLocalSlurm } from '../helpers/slurm.ts';

const native = isTensorflowSetUp();
const slurm = startLocalSlurm('sweep-slurm-units', native ? '' : 'the tensorflow backend is not set up');
const { dir: clusterDir, available, reason, env } = slurm;

let corpus: Corpus;
beforeAll(async () => {
  if (available) corpus = await makeCorpus(clusterDir);
});
afterAll(() => {
  killChildren();
  slurm.stop();
});

const runFolders = (runDir: string) => (existsSync(runDir) ? readdirSync(runDir).filter((e) => e !== '_sweep') : []);
const checkpointSteps = (dir: string) =>
  existsSync(join(dir, 'checkpoints'))
    ? readdirSync(join(dir, 'checkpoints'))
        .filter((c) => existsSync(join(dir, 'checkpoints', c, 'COMPLETE')))
        .map((c) => Number(c.slice(5)))
    : [];

/** The sweep's one run on the tensorflow backend (the collective runtime's), B rows per step. */
const onTensorflow =
  (edit: (sweep: Record<string, any>) => void = () => {}) =>
  (sweep: Record<string, any>) => {
    edit(sweep);
    sweep.set.backend = 'tensorflow';
    sweep.grid = { 'model.attention': ['softmax'], 'train.seed': [1] };
  };

/** The same run in one process, each step's two halves as micro-batches: what two ranks must equal bit for bit. */
const asTwoMicroBatches = (edit: (sweep: Record<string, any>) => void) => (sweep: Record<string, any>) => {
  onTensorflow(edit)(sweep);
  sweep.set.train = { ...sweep.set.train, batchSize: sweep.set.train.batchSize / 2, gradAccum: 2 };
};

async function submitUnits(file: string): Promise<string> {
  const cli = sweepCli(['run', file, '--executor', 'slurm', '--time', '15:00', '--nodes', '1', '--tasks-per-node', '2', '--cpus-per-task', '1'], env);
  expect(await cli.exited, cli.output()).toEqual({ code: 0, signal: null });
  return /submitted job array (\d+)/.exec(cli.output())![1];
}

async function finalWeights(runDir: string): Promise<Map<string, Float32Array>> {
  const { tensors } = await readSafetensors(join(runDir, runFolders(runDir)[0], 'final', 'model.safetensors'));
  return new Map([...tensors].map(([name, t]) => [name, t.data]));
}

function maxDifference(a: Map<string, Float32Array>, b: Map<string, Float32Array>): number {
  expect([...a.keys()].sort()).toEqual([...b.keys()].sort());
  let max = 0;
  for (const [name, x] of a) x.forEach((v, i) => (max = Math.max(max, Math.abs(v - b.get(name)![i]))));
  return max;
}

describe.skipIf(!available)(available ? 'slurm units of several tasks' : `slurm units of several tasks (skipped: ${reason})`, () => {
  it("a 2-task unit is the two ranks of one run: one set of logs, one process's weights over the same shards", async () => {
    const runDir = join(clusterDir, 'runs-units');
    const file = writeTinySweep(join(clusterDir, 'units.yaml'), corpus, runDir, onTensorflow());
    const job = await submitUnits(file);
    const slurmDir = join(runDir, '_sweep', 'slurm');
    const script = readFileSync(join(slurmDir, readdirSync(slurmDir).find((f) => f.endsWith('.sbatch'))!), 'utf8');
    expect(script).toMatch(/^#SBATCH --nodes=1$/m);
    expect(script).toMatch(/^#SBATCH --ntasks-per-node=2$/m);

    const log = () => readFileSync(join(runDir, '_sweep', 'logs', 'units.log'), 'utf8');
    await waitForFiles(
      'the run to finish',
      runDir,
      300_000,
      () => runFolders(runDir).some((f) => existsSync(join(runDir, f, 'summary.json'))),
      () => log(),
    );
    await waitForFiles(
      'the attempt record',
      runDir,
      60_000,
      () => existsSync(join(runDir, '_sweep', 'attempts', 'units.json')),
      () => log(),
    );
    expect(runFolders(runDir)).toHaveLength(1);
    // Both ranks wrote to the one log through srun; rank 0 alone logs the run.
    expect(log()).toMatch(/train\.executor collective: rank 0 of 2/);
    expect(log().match(/^done: /gm)).toHaveLength(1);
    expect(log().match(/^=== .* units: starting \(Slurm task \d+_0\)$/gm)).toHaveLength(1);
    const attempt = JSON.parse(readFileSync(join(runDir, '_sweep', 'attempts', 'units.json'), 'utf8'));
    expect(attempt).toMatchObject({ outcome: 'done', exitCode: 0, task: { executor: 'slurm', name: `Slurm task ${job}_0` } });

    const referenceDir = join(clusterDir, 'runs-units-reference');
    const reference = sweepCli([
      'guard',
      writeTinySweep(
        join(clusterDir, 'units-reference.yaml'),
        corpus,
        referenceDir,
        asTwoMicroBatches(() => {}),
      ),
      '0',
    ]);
    expect(await reference.exited, reference.output()).toEqual({ code: 0, signal: null });
    expect(maxDifference(await finalWeights(runDir), await finalWeights(referenceDir))).toBe(0);
  }, 900_000);

  it('a 2-task unit stopped by the time-limit warning checkpoints, requeues and resumes; requeued by Slurm, it resumes again; the weights are the uninterrupted ones', async () => {
    const referenceDir = join(clusterDir, 'runs-units-requeue-reference');
    const reference = sweepCli([
      'guard',
      writeTinySweep(join(clusterDir, 'requeue-reference.yaml'), corpus, referenceDir, asTwoMicroBatches(oneLongerRun)),
      '0',
    ]);
    const runDir = join(clusterDir, 'runs-units-requeued');
    const file = writeTinySweep(join(clusterDir, 'units-requeued.yaml'), corpus, runDir, onTensorflow(oneLongerRun));
    const task = `${await submitUnits(file)}_0`;
    const folder = () => runFolders(runDir)[0];
    const newestCheckpoint = () => (folder() ? Math.max(0, ...checkpointSteps(join(runDir, folder()))) : 0);
    const log = () => readFileSync(join(runDir, '_sweep', 'logs', 'units-requeued.log'), 'utf8');
    const diagnose = () =>
      `log:\n${log()}\nslurmctld.log:\n${readFileSync(join(clusterDir, 'cluster', 'slurmctld.log'), 'utf8')
        .split('\n')
        .slice(-15)
        .join('\n')}`;

    await waitForFiles('a first checkpoint', runDir, 180_000, () => newestCheckpoint() > 0, diagnose);
    // What --signal=B:USR1@120 does before the time limit: USR1 to the batch shell (the guard) only.
    execFileSync('scancel', ['--batch', '--signal=USR1', task], { env });
    await waitForFiles('the resume', runDir, 180_000, () => /resuming from step \d+/.test(log()) && log().includes('resumed from'), diagnose);
    // Rank 0 saved the checkpoint it resumes from, after the step it was in when the warning came.
    expect(log()).toMatch(/train: SIGTERM received: finishing the current step and saving a checkpoint/);
    expect(log()).toMatch(/units-requeued: stopped \(exit 143\)/); // rank 0's exit: the others were ended by srun

    // A requeue (as preemption does it): Slurm signals every process of the job, srun too, which ends both ranks at once.
    const resumedAt = Number(/resuming from step (\d+)/.exec(log())![1]);
    await waitForFiles('a checkpoint after the resume', runDir, 180_000, () => newestCheckpoint() > resumedAt, diagnose);
    execFileSync('scontrol', ['requeue', task], { env });
    await waitForFiles('the run to finish', runDir, 300_000, () => existsSync(join(runDir, folder(), 'summary.json')), diagnose);
    await waitForFiles(
      'the attempt record',
      runDir,
      60_000,
      () => JSON.parse(readFileSync(join(runDir, '_sweep', 'attempts', 'units-requeued.json'), 'utf8')).outcome === 'done',
    );
    expect(runFolders(runDir)).toHaveLength(1);
    expect(log().match(/resuming from step \d+ in \S+ \(Slurm task \d+_0\)/g)).toHaveLength(2);
    expect(log().match(/^done: /gm)).toHaveLength(1);
    expect(await reference.exited, reference.output()).toEqual({ code: 0, signal: null });
    expect(maxDifference(await finalWeights(runDir), await finalWeights(referenceDir))).toBe(0);
  }, 900_000);
});
