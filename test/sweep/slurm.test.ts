// The Slurm executor on a real single-host cluster (Debian's slurm-wlm and munge, started by scripts/slurm-local.sh in a
// temporary folder): a job array of the tiny sweep runs to the end and the report is built; a task interrupted twice,
// by the time-limit warning (USR1 to the batch shell: checkpoint, then the task requeues itself) and by a requeue
// (what preemption does), resumes each time and ends at an uninterrupted run's final loss. Skipped, with the reason
// in the suite's name, where Slurm is not installed or cannot start.
import { execFileSync, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { killChildren, makeCorpus, oneLongerRun, sweepCli, waitFor, writeTinySweep } from './fixtures.ts';
import type { Corpus } from './fixtures.ts';

const SETUP = 'bash scripts/slurm-local.sh install';
const clusterDir = mkdtempSync(join(tmpdir(), 'sweep-slurm-'));
const started = spawnSync('bash', ['scripts/slurm-local.sh', 'start', join(clusterDir, 'cluster')], { encoding: 'utf8', timeout: 90_000 });
const available = started.status === 0;
const reason = available ? '' : (started.stderr || started.stdout || String(started.error)).trim().split('\n').at(-1);
const env = { ...process.env, SLURM_CONF: join(clusterDir, 'cluster', 'slurm.conf') };

let corpus: Corpus;
beforeAll(async () => {
  if (available) corpus = await makeCorpus(clusterDir);
});
afterAll(() => {
  killChildren();
  if (available) {
    spawnSync('scancel', ['--user', 'root'], { env });
    spawnSync('bash', ['scripts/slurm-local.sh', 'stop', join(clusterDir, 'cluster')]);
  }
  rmSync(clusterDir, { recursive: true, force: true });
});

const slurm = (cmd: string, args: string[]) => execFileSync(cmd, args, { env, encoding: 'utf8' });
const runFolders = (runDir: string) => (existsSync(runDir) ? readdirSync(runDir).filter((e) => e !== '_sweep').sort() : []);
const summary = (dir: string) => JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8')) as { val_loss: number; steps: number };
const checkpointSteps = (dir: string) =>
  existsSync(join(dir, 'checkpoints')) ? readdirSync(join(dir, 'checkpoints')).filter((c) => existsSync(join(dir, 'checkpoints', c, 'COMPLETE'))).map((c) => Number(c.slice(5))) : [];

async function submit(file: string, extra: string[] = []): Promise<string> {
  const cli = sweepCli(['run', file, '--executor', 'slurm', '--time', '15:00', ...extra], env);
  expect(await cli.exited, cli.output()).toEqual({ code: 0, signal: null });
  return /submitted job array (\d+)/.exec(cli.output())![1];
}

describe.skipIf(!available)(available ? 'slurm executor' : `slurm executor (skipped: ${reason}; set up with: ${SETUP})`, () => {
  it('runs a job array of the tiny sweep to the end, shows it in status, and builds the report', async () => {
    const runDir = join(clusterDir, 'runs-array');
    const file = writeTinySweep(join(clusterDir, 'array.yaml'), corpus, runDir);
    const job = await submit(file, ['--only', '0,1,2']);
    const script = readFileSync(join(runDir, '_sweep', 'slurm', readdirSync(join(runDir, '_sweep', 'slurm')).find((f) => f.endsWith('.sbatch'))!), 'utf8');
    expect(script).toMatch(/^#SBATCH --array=0-2$/m);
    expect(script).toMatch(/^#SBATCH --requeue$/m);
    expect(script).toMatch(/^#SBATCH --signal=B:USR1@120$/m);
    expect(script).toMatch(/^#SBATCH --time=15:00$/m);
    expect(script).toMatch(/^exec node --import tsx \S+src\/cli\/sweep\.ts task \S+array\.yaml "\$SLURM_ARRAY_TASK_ID"$/m);

    await waitFor('three finished runs', 300_000, () => runFolders(runDir).filter((f) => existsSync(join(runDir, f, 'summary.json'))).length === 3);
    expect(runFolders(runDir).map((f) => f.replace(/-\d{8}-\d{6}(-\d+)?$/, ''))).toEqual(['slay-seed1', 'softmax-seed1', 'softmax-seed2']);
    for (const f of runFolders(runDir)) expect(summary(join(runDir, f)).steps).toBe(24);
    for (const index of [0, 1, 2]) expect(existsSync(join(runDir, '_sweep', 'slurm', `${job}_${index}.out`))).toBe(true);

    const status = sweepCli(['status', file], env);
    await waitFor('the tasks to leave the queue', 60_000, () => !slurm('squeue', ['-h', '-r', '-j', job, '-o', '%T']).includes('RUNNING'));
    await status.exited;
    expect(status.output()).toMatch(new RegExp(`Slurm jobs ${job}`));
    expect(status.output()).toMatch(/0\s+softmax-seed1\s+done/);
    expect(status.output()).toMatch(/3\s+slay-seed2\s+pending\s+not started/);

    const outDir = join(clusterDir, 'report');
    const report = sweepCli(['report', file, '--out', outDir], env);
    expect(await report.exited, report.output()).toEqual({ code: 0, signal: null });
    expect(readFileSync(join(outDir, 'report.md'), 'utf8')).toMatch(/\| softmax \| softmax \| 2 \| 1, 2 \|/);
    expect(existsSync(join(outDir, 'compare', 'val-loss.svg'))).toBe(true);
  }, 900_000);

  it("resumes after the time-limit warning and after a requeue, to an uninterrupted run's final loss", async () => {
    const referenceDir = join(clusterDir, 'runs-reference');
    const reference = sweepCli(['task', writeTinySweep(join(clusterDir, 'reference.yaml'), corpus, referenceDir, oneLongerRun), '0']);
    const runDir = join(clusterDir, 'runs-requeued');
    const file = writeTinySweep(join(clusterDir, 'requeued.yaml'), corpus, runDir, oneLongerRun);
    const task = `${await submit(file)}_0`;
    const folder = () => runFolders(runDir)[0];
    const newestCheckpoint = () => (folder() ? Math.max(0, ...checkpointSteps(join(runDir, folder()))) : 0);

    const log = () => readFileSync(join(runDir, '_sweep', 'logs', 'requeued.log'), 'utf8');
    const diagnose = () => `log:\n${log()}\nslurmctld.log:\n${readFileSync(join(clusterDir, 'cluster', 'slurmctld.log'), 'utf8').split('\n').slice(-15).join('\n')}`;

    // 1. What --signal=B:USR1@120 does before the time limit: USR1 to the batch shell (the task) only.
    await waitFor('a first checkpoint', 180_000, () => newestCheckpoint() > 0);
    slurm('scancel', ['--batch', '--signal=USR1', task]);
    // The requeued task starts again after the local cluster's credential lifetime (20 s; Slurm's default is 120 s).
    await waitFor('the first resume', 180_000, () => /resuming from step \d+/.test(log()) && log().includes('resumed from'), diagnose);
    expect(log()).toMatch(/requeued: stopped \(exit 143\)/);

    // 2. A requeue (as preemption does it): Slurm signals every process of the job, the trainer saves and stops.
    const resumedAt = Number(/resuming from step (\d+)/.exec(log())![1]);
    await waitFor('a checkpoint after the resume', 180_000, () => newestCheckpoint() > resumedAt, diagnose);
    slurm('scontrol', ['requeue', task]);
    await waitFor('the run to finish', 300_000, () => existsSync(join(runDir, folder(), 'summary.json')), diagnose);

    expect(runFolders(runDir)).toHaveLength(1);
    expect(log().match(/resuming from step \d+ in \S+ \(Slurm task \d+_0\)/g)).toHaveLength(2);
    expect(await reference.exited).toEqual({ code: 0, signal: null });
    const got = summary(join(runDir, folder()));
    const want = summary(join(referenceDir, runFolders(referenceDir)[0]));
    expect(got.steps).toBe(want.steps);
    expect(Math.abs(got.val_loss - want.val_loss)).toBeLessThanOrEqual(1e-6 * want.val_loss);
  }, 900_000);
});
