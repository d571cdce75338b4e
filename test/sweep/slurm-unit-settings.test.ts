// The Slurm executor's settings for runs of several tasks (nodes, tasksPerNode, gpusPerTask), without a cluster: bad
// values are refused naming the setting, from the sweep file and from the flags; the script asks sbatch for the unit;
// and in an array task of several Slurm tasks the guard starts its worker under srun (src/sweep/slurm.ts); a paper
// experiment's units span tasks only when they train on the tensorflow backend (src/paper/run.ts).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it, vi } from 'vitest';
import { executorSettings } from '../../src/cli/executor-options.ts';
import { renderSbatchScript, slurmExecutor } from '../../src/sweep/slurm.ts';
import type { SlurmOptions } from '../../src/sweep/slurm.ts';
import type { RunSet } from '../../src/sweep/run-set.ts';
import { loadSweep } from '../../src/sweep/spec.ts';
import type { BackendName } from '../../src/backend/device.ts';
import type { Experiment } from '../../src/paper/protocol.ts';
import { experimentRunSet } from '../../src/paper/run.ts';
import { slayAblation } from '../../src/paper/slay-ablation.ts';
import { slayTasks } from '../../src/paper/slay-tasks.ts';

const work = mkdtempSync(join(tmpdir(), 'slurm-units-'));
afterAll(() => rmSync(work, { recursive: true, force: true }));
const recipe = join(work, 'base.yaml');
writeFileSync(recipe, 'model: { dModel: 16, numHeads: 2 }\ndata: { dataset: data/x, tokenizer: data/t.json, seqLen: 16 }\ntrain: { batchSize: 4 }\n');
let count = 0;

/** A sweep file with this slurm: section, loaded. */
function sweepWith(slurm?: Record<string, unknown>) {
  const file = join(work, `s${count++}.yaml`);
  const lines = [`recipe: ${JSON.stringify(recipe)}`, `runDir: ${JSON.stringify(join(work, 'runs'))}`, 'grid: { train.seed: [1, 2] }'];
  if (slurm) lines.push(`slurm: ${JSON.stringify(slurm)}`);
  writeFileSync(file, lines.join('\n') + '\n');
  return loadSweep(file);
}

const loadProblem = (slurm: Record<string, unknown>): string => {
  try {
    sweepWith(slurm);
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error(`the sweep file's slurm: ${JSON.stringify(slurm)} was accepted`);
};

const flagProblem = (values: Record<string, unknown>): string => {
  try {
    executorSettings(slurmExecutor, undefined, values);
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error(`the flags ${JSON.stringify(values)} were accepted`);
};

const renderProblem = (set: RunSet, options: SlurmOptions): string => {
  try {
    renderSbatchScript(set, [0, 1], options, '/w');
  } catch (err) {
    return (err as Error).message;
  }
  throw new Error(`the options ${JSON.stringify(options)} were accepted`);
};

describe('units of several Slurm tasks: the settings', () => {
  it('nodes and tasksPerNode take an integer from 1 to 4096, named in the file and as flags', () => {
    for (const [key, flag] of [
      ['nodes', 'nodes'],
      ['tasksPerNode', 'tasks-per-node'],
    ]) {
      for (const bad of [0, -2, 1.5, 'two', 5000, true, [2]]) {
        expect(loadProblem({ [key]: bad })).toContain(`slurm.${key} must be an integer from 1 to 4096 (got ${JSON.stringify(bad)})`);
      }
      for (const bad of ['0', '-2', '1.5', 'two', '5000'])
        expect(flagProblem({ [flag]: bad })).toContain(`--${flag} must be an integer from 1 to 4096 (got '${bad}')`);
      expect(executorSettings(slurmExecutor, undefined, { [flag]: '8' })).toEqual({ [key]: 8 });
    }
  });

  it('gpusPerTask takes a count or type:count; gpus and gpusPerTask are not given together', () => {
    for (const bad of [0, 'a100 1', 'x;touch pwned', 'x\ny'])
      expect(loadProblem({ gpusPerTask: bad })).toContain('slurm.gpusPerTask must be a GPU count from 1 to 64, or type:count');
    expect(flagProblem({ 'gpus-per-task': 'h100 1' })).toContain('--gpus-per-task must be a GPU count from 1 to 64, or type:count');
    expect(executorSettings(slurmExecutor, undefined, { 'gpus-per-task': 'h100:2' })).toEqual({ gpusPerTask: 'h100:2' });
    expect(executorSettings(slurmExecutor, undefined, { gpus: 'a100:2,v100:1' })).toEqual({ gpus: 'a100:2,v100:1' });
    expect(renderProblem(sweepWith(), { gpus: 2, gpusPerTask: 1 })).toMatch(/slurm\.gpus and slurm\.gpusPerTask both given/);
  });

  // A count past 2⁵³ reached the script rounded to a double, 99999999999999999999 as 100000000000000000000 (docs/bounds.md).
  it('every count written into the script is an integer up to its bound, from the file, the flags and given directly', () => {
    const limits = { gpus: 4096, gpusPerTask: 64, cpusPerTask: 4096, maxParallel: 10_000, signalSeconds: 65_535 };
    const flags = { gpus: 'gpus', gpusPerTask: 'gpus-per-task', cpusPerTask: 'cpus-per-task', maxParallel: 'max-parallel', signalSeconds: 'signal-seconds' };
    const sweep = sweepWith();
    for (const [key, max] of Object.entries(limits) as [keyof typeof limits, number][]) {
      const must = key.startsWith('gpus') ? `must be a GPU count from 1 to ${max}, or type:count (e.g. a100:1)` : `must be an integer from 1 to ${max}`;
      for (const text of ['99999999999999999999', String(max + 1)]) {
        expect(flagProblem({ [flags[key]]: text })).toBe(`--${flags[key]} ${must} (got '${text}')`);
        expect(loadProblem({ [key]: Number(text) })).toContain(`slurm.${key} ${must} (got ${text === String(max + 1) ? text : '100000000000000000000'})`);
        expect(renderProblem(sweep, { [key]: Number(text) })).toContain(`slurm.${key} ${must}`);
      }
      expect(executorSettings(slurmExecutor, undefined, { [flags[key]]: String(max) })).toEqual({ [key]: max });
    }
    expect(flagProblem({ gpus: 'a100:99999999999999999999' })).toContain('--gpus must be a GPU count from 1 to 4096, or type:count');
    expect(loadProblem({ gpusPerTask: 'h100:65' })).toContain('slurm.gpusPerTask must be a GPU count from 1 to 64, or type:count');
  });

  it('more than 4096 ranks in all are refused naming both settings and the product', () => {
    expect(renderProblem(sweepWith(), { nodes: 128, tasksPerNode: 64 })).toContain(
      'slurm.nodes × slurm.tasksPerNode must be at most 4096 ranks (got 128 × 64 = 8192)',
    );
  });

  it('a set whose runs run in one process refuses several tasks per run, saying why', () => {
    const set = { ...sweepWith(), multiTask: undefined, file: 'paper slay-tasks' };
    expect(renderProblem(set, { nodes: 2 })).toContain(
      'slurm.nodes × slurm.tasksPerNode = 2 tasks per run, but each run of paper slay-tasks runs in one process: only training runs',
    );
    expect(() => renderSbatchScript(set, [0], { nodes: 1, tasksPerNode: 1, gpusPerTask: 1 }, '/w')).not.toThrow();
  });

  it("a paper experiment's units span several tasks when they train on the tensorflow backend, and say why not otherwise", () => {
    const runsRoot = join(work, 'paper');
    const paperSet = (experiment: Experiment, backend: BackendName) => experimentRunSet(experiment, { quick: true, backend, runsRoot });
    const unit = { nodes: 1, tasksPerNode: 2 };
    expect(() => renderSbatchScript(paperSet(slayTasks, 'tensorflow'), [0], unit, '/w')).not.toThrow();
    expect(renderProblem(paperSet(slayTasks, 'wasm'), unit)).toContain(
      'runs in one process: a unit spans several tasks on the tensorflow backend only (its collectives), not on wasm: add --backend tensorflow',
    );
    expect(renderProblem(paperSet(slayAblation, 'tensorflow'), unit)).toContain(
      'runs in one process: the units of slay-ablation measure without training, one process each',
    );
  });

  it('the script asks sbatch for nodes, tasks per node and GPUs per task, and a single-task script for none of them', () => {
    const unit = renderSbatchScript(
      sweepWith({ nodes: 2, tasksPerNode: 8, gpusPerTask: 1, cpusPerTask: 4 }),
      [0, 1],
      { nodes: 2, tasksPerNode: 8, gpusPerTask: 1, cpusPerTask: 4 },
      '/w',
    );
    expect(unit).toMatch(/^#SBATCH --nodes=2$/m);
    expect(unit).toMatch(/^#SBATCH --ntasks-per-node=8$/m);
    expect(unit).toMatch(/^#SBATCH --gpus-per-task=1$/m);
    expect(unit).toMatch(/^#SBATCH --cpus-per-task=4$/m);
    expect(unit).toMatch(/^# 16 Slurm tasks per run: the guard starts the trainer under srun/m);
    // nodes alone still fixes the tasks per node, so that SLURM_NTASKS tells the guard how many ranks to start.
    expect(renderSbatchScript(sweepWith(), [0], { nodes: 3 }, '/w')).toMatch(/^#SBATCH --nodes=3\n#SBATCH --ntasks-per-node=1$/m);
    const single = renderSbatchScript(sweepWith(), [0, 1], {}, '/w');
    expect(single).not.toMatch(/--nodes|--ntasks|--gpus-per-task|srun/);
  });
});

describe('units of several Slurm tasks: the guard', () => {
  afterEach(() => vi.unstubAllEnvs());
  const inArrayTask = (vars: Record<string, string | undefined>) => {
    for (const [k, v] of Object.entries({ SLURM_ARRAY_JOB_ID: '41', SLURM_ARRAY_TASK_ID: '3', SLURM_JOB_ID: '44', ...vars })) vi.stubEnv(k, v);
  };

  it('in an array task of several Slurm tasks, the worker runs under srun with the CPUs per task as its thread pools', () => {
    inArrayTask({ SLURM_NTASKS: '2', SLURM_CPUS_PER_TASK: '4' });
    expect(slurmExecutor.workerLauncher!(sweepWith())).toMatchObject({
      prefix: ['srun', '--kill-on-bad-exit=1', '--distribution=block', '--cpus-per-task=4'],
      env: { TF_NUM_INTRAOP_THREADS: '4', TF_NUM_INTEROP_THREADS: '4' },
    });
  });

  it("one Slurm task, no array task, or a set whose runs run in one process: the worker is the guard's child", () => {
    const sweep = sweepWith();
    inArrayTask({ SLURM_NTASKS: '1' });
    expect(slurmExecutor.workerLauncher!(sweep)).toBeNull();
    vi.unstubAllEnvs();
    inArrayTask({ SLURM_NTASKS: undefined });
    expect(slurmExecutor.workerLauncher!(sweep)).toBeNull();
    vi.unstubAllEnvs();
    inArrayTask({ SLURM_NTASKS: '2', SLURM_ARRAY_TASK_ID: undefined });
    expect(slurmExecutor.workerLauncher!(sweep)).toBeNull();
    vi.unstubAllEnvs();
    inArrayTask({ SLURM_NTASKS: '2' });
    expect(slurmExecutor.workerLauncher!({ ...sweep, multiTask: undefined })).toBeNull();
    const runsRoot = join(work, 'paper');
    expect(slurmExecutor.workerLauncher!(experimentRunSet(slayAblation, { quick: true, backend: 'tensorflow', runsRoot }))).toBeNull();
    expect(slurmExecutor.workerLauncher!(experimentRunSet(slayTasks, { quick: true, backend: 'tensorflow', runsRoot }))?.prefix[0]).toBe('srun');
  });
});
