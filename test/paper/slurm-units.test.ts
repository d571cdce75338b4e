// A paper unit of several Slurm tasks on a real single-host cluster (scripts/slurm-local.sh, as
// test/sweep/slurm-units.test.ts): the Slurm executor's array task starts the unit's worker under srun, one rank per
// Slurm task; the ranks train with the collective step executor and rank 0 alone writes the unit's folder
// (src/paper/run.ts). Its result equals the unit run in one process; stopped by the time-limit warning, it requeues and
// runs again from the start, as a unit of one process does. The unit is slay-tasks' first (the task model), submitted
// alone through the executor. The ranks are processes under srun, never test workers.
// Skipped, with the reason in the suite's name, where Slurm or the tensorflow backend is missing.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it, vi } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { slayTasks } from '../../src/paper/slay-tasks.ts';
import { experimentRunSet, readUnitResult } from '../../src/paper/run.ts';
import type { UnitResultFile } from '../../src/paper/run.ts';
import { slurmExecutor } from '../../src/sweep/slurm.ts';
import { killStartedClis, startCli } from '../helpers/cli.ts';
import { waitForFiles } from '../sweep/fixtures.ts';
import { startLocalSlurm } from '../helpers/slurm.ts';

const native = isTensorflowSetUp();
const slurm = startLocalSlurm('paper-slurm-units', native ? '' : 'the tensorflow backend is not set up');
const { dir: clusterDir, available, reason, env } = slurm;
const slurmConf = env.SLURM_CONF!;

afterAll(() => {
  killStartedClis();
  slurm.stop();
});

const settings = (runsRoot: string) => ({ quick: true, backend: 'tensorflow' as const, runsRoot });
const unitFolders = (runDir: string) => (existsSync(runDir) ? readdirSync(runDir).filter((e) => e !== '_sweep') : []);

/** Largest |a − b| / max(|b|, 1e-3) over the unit's losses: the final one and the curve's. */
function lossDifference(a: UnitResultFile, b: UnitResultFile): number {
  const losses = (r: UnitResultFile) => [r.outcome.extra.loss as number, ...(r.outcome.details!.lossCurve as number[])];
  const [x, y] = [losses(a), losses(b)];
  expect(x).toHaveLength(y.length);
  return Math.max(...x.map((v, i) => Math.abs(v - y[i]) / Math.max(Math.abs(y[i]), 1e-3)));
}

describe.skipIf(!available)(available ? 'paper units of several Slurm tasks' : `paper units of several Slurm tasks (skipped: ${reason})`, () => {
  it("a 2-task unit is the two ranks of one run: one folder written by rank 0, the one-process unit's result", async () => {
    const set = experimentRunSet(slayTasks, settings(join(clusterDir, 'runs')));
    expect(set.multiTask).toBe(true);
    const unit = set.runs[0];
    vi.stubEnv('SLURM_CONF', slurmConf); // sbatch, called by the executor in this process
    const submitted = await slurmExecutor.run(set, [unit], { nodes: 1, tasksPerNode: 2, cpusPerTask: 1, time: '15:00' });
    vi.unstubAllEnvs();
    expect(submitted).toMatchObject({ kind: 'submitted', runs: 1 });
    const job = /job array (\d+)/.exec((submitted as { what: string }).what)![1];

    const log = () => readFileSync(join(set.runDir, '_sweep', 'logs', `${unit.name}.log`), 'utf8');
    const attempt = () => JSON.parse(readFileSync(join(set.runDir, '_sweep', 'attempts', `${unit.name}.json`), 'utf8'));
    const diagnose = () => `log:\n${existsSync(join(set.runDir, '_sweep', 'logs')) ? log() : '(none yet)'}`;
    await waitForFiles('the unit to end', set.runDir, 300_000, () => attempt().outcome, diagnose);
    expect(attempt(), log()).toMatchObject({ outcome: 'done', exitCode: 0, task: { executor: 'slurm', name: `Slurm task ${job}_0` } });

    // One folder, written once: rank 1 wrote nothing and printed no "done" line of its own.
    const folders = unitFolders(set.runDir);
    expect(folders).toHaveLength(1);
    const dir = join(set.runDir, folders[0]);
    expect(readdirSync(dir).sort()).toEqual(['.slayformer-run', 'env.json', 'result.json', 'summary.json', 'unit.json']);
    expect(log().match(/^=== .* starting \(Slurm task \d+_0\)$/gm)).toHaveLength(1);
    expect(log().match(new RegExp(`^${unit.name}: done → `, 'gm'))).toHaveLength(1);
    expect(JSON.parse(readFileSync(join(dir, 'env.json'), 'utf8')).cluster).toMatchObject({ worldSize: 2, communication: 'ring' });
    const ranks = readUnitResult(join(dir, 'result.json'));
    expect(ranks.outcome.details!.execution).toBe('graph');

    // The same unit in one process: its batch of 16 as one micro-batch where each rank took 8 rows, so the sums are
    // added in another order and agree to float rounding, not bit for bit (docs/distributed.md).
    const alone = startCli('src/cli/paper.ts', ['slay-tasks', '--quick', '--backend', 'tensorflow', '--runs', join(clusterDir, 'alone'), '--unit', '0']);
    expect(await alone.exited, alone.output()).toEqual({ code: 0, signal: null });
    const aloneSet = experimentRunSet(slayTasks, settings(join(clusterDir, 'alone')));
    const one = readUnitResult(join(aloneSet.runDir, unitFolders(aloneSet.runDir)[0], 'result.json'));
    expect(ranks.outcome.extra.params).toBe(one.outcome.extra.params);
    expect(lossDifference(ranks, one)).toBeLessThan(1e-5);
    // Accuracy over the 64 samples' 4,096 scored positions: within 4 positions.
    expect(Math.abs(ranks.outcome.values[0] - one.outcome.values[0])).toBeLessThanOrEqual(4 / 4096);
  }, 900_000);

  it('a 2-task unit stopped by the time-limit warning requeues and runs again from the start, as a unit of one task', async () => {
    // The protocol's 200 steps (not --quick's 50): the unit is still training when the warning comes.
    const set = experimentRunSet(slayTasks, { ...settings(join(clusterDir, 'runs-requeued')), quick: false });
    const unit = set.runs[0];
    vi.stubEnv('SLURM_CONF', slurmConf);
    const submitted = await slurmExecutor.run(set, [unit], { nodes: 1, tasksPerNode: 2, cpusPerTask: 1, time: '15:00' });
    vi.unstubAllEnvs();
    const task = `${/job array (\d+)/.exec((submitted as { what: string }).what)![1]}_0`;
    const log = () => readFileSync(join(set.runDir, '_sweep', 'logs', `${unit.name}.log`), 'utf8');
    const diagnose = () => `log:\n${existsSync(join(set.runDir, '_sweep', 'logs')) ? log() : '(none yet)'}`;

    // Rank 0 made the unit's folder: both ranks joined and are in the unit.
    await waitForFiles('the unit to start', set.runDir, 300_000, () => unitFolders(set.runDir).length === 1, diagnose);
    // What --signal=B:USR1@120 does before the time limit: USR1 to the batch shell (the guard) only.
    spawnSync('scancel', ['--batch', '--signal=USR1', task], { env });
    await waitForFiles(
      'the unit to end after its requeue',
      set.runDir,
      300_000,
      () => JSON.parse(readFileSync(join(set.runDir, '_sweep', 'attempts', `${unit.name}.json`), 'utf8')).outcome === 'done',
      diagnose,
    );
    expect(log()).toMatch(new RegExp(`${unit.name}: stopped \\(exit `));
    // Requeued: the same array task started the unit again.
    expect(log().match(/^=== .* starting \(Slurm task \d+_0\)$/gm)).toHaveLength(2);
    expect(log().match(new RegExp(`^${unit.name}: done → `, 'gm'))).toHaveLength(1);
    // The stopped attempt's folder stays unfinished (no summary.json); the second attempt's is the unit's.
    const done = unitFolders(set.runDir).map((f) => existsSync(join(set.runDir, f, 'summary.json')));
    expect(done.sort()).toEqual([false, true]);
  }, 900_000);
});
