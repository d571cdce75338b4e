// A paper experiment as a run set of the sweep machinery (src/sweep/run-set.ts): one run per unit, run by any
// executor (src/sweep/executor-registry.ts), each as its guard `paper <experiment> … --guard <index>` (lock, skip
// when done, start the worker) and the worker `paper <experiment> … --unit <index>`, which runs the unit in its own
// process and leaves
//   <runs>/<experiment>-v<version>-<backend>[-quick]/<unit>-<YYYYMMDD-HHMMSS>/
//     unit.json     the experiment, its version and the unit's settings
//     env.json      where it ran: commit, backend, machine, command line
//     result.json   the unit's outcome (its values, other numbers, details), its seconds and CPU seconds
//     summary.json  written last (atomically): the run is done
// The folder's name carries the version and the backend: results of another protocol version or backend are never
// mixed into one table. A unit that stops half-way leaves a folder without summary.json and runs again from the
// start (units are minutes at most).
// A unit of an experiment that trains (Experiment.spansRanks) may run as the ranks of one data-parallel run, one per
// Slurm task (docs/distributed.md): every rank runs the worker and trains with the collective step executor; rank 0
// alone makes and writes the unit's folder, and tells the others its path (a recipe's train.runDir must be the same
// on every rank).
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { isRecord, readJsonFile } from '../core/json.ts';
import { writeOwnFile } from '../core/own-file.ts';
import type { Cluster } from '../backend/collective.ts';
import { describeDevice, type BackendName } from '../backend/device.ts';
import type { RunSet, SetRun } from '../sweep/run-set.ts';
import { runFolders } from '../sweep/run-folders.ts';
import { readAttempt } from '../sweep/set-files.ts';
import { runGuarded } from '../sweep/guard.ts';
import type { GuardResult } from '../sweep/guard.ts';
import { clusterRecord, processEnvironment } from '../telemetry/environment.ts';
import { makeRunDir } from '../telemetry/run-logger.ts';
import type { Experiment, UnitOutcome, UnitSpec } from './protocol.ts';
import { ENV_FILE } from '../store/layout.ts';
import { RunFolder } from '../store/run-folder.ts';
import { writeSummary } from '../store/run-record.ts';

const PAPER_CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'paper.ts');
export { DEFAULT_RUNS_ROOT } from './index.ts';

export interface ExperimentSettings {
  quick: boolean;
  /** Resolved (never auto): it names the run folder, and the units are packed by its device. */
  backend: BackendName;
  /** Parent of the experiment's run folder (default runs/paper). */
  runsRoot: string;
}

export interface ExperimentRunSet extends RunSet {
  experiment: Experiment;
  settings: ExperimentSettings;
  units: UnitSpec[];
}

/** The command that runs (or resumes) the experiment and writes its results, as the results file names it. */
function experimentCommand(experiment: Experiment, settings: ExperimentSettings): string {
  const flags = [...(settings.quick ? ['--quick'] : []), ...(settings.backend !== experiment.backend ? ['--backend', settings.backend] : [])];
  return ['npm run paper --', experiment.name, ...flags].join(' ');
}

/** The experiment's units as a run set; each run's guard is `paper <name> <flags> --guard <index>`. */
export function experimentRunSet(experiment: Experiment, settings: ExperimentSettings): ExperimentRunSet {
  const units = experiment.units(settings.quick);
  const seen = new Set<string>();
  for (const unit of units) {
    if (!/^[A-Za-z0-9._-]+$/.test(unit.name) || seen.has(unit.name))
      throw new Error(`${experiment.name}: unit name '${unit.name}' is not a unique word of letters, digits, '.', '_' and '-'`);
    seen.add(unit.name);
  }
  const tag = `${experiment.name}-v${experiment.version}-${settings.backend}${settings.quick ? '-quick' : ''}`;
  const runsRoot = path.resolve(settings.runsRoot);
  // A unit is one model on one thread or, on the native backend, its thread pool: every core.
  const cores: SetRun['cores'] = describeDevice(settings.backend).coresPerReplica;
  return {
    file: experimentCommand(experiment, settings),
    name: `paper-${tag}`,
    runDir: path.join(runsRoot, tag),
    runs: units.map((unit, index) => ({ index, name: unit.name, cores, requestedCpus: 1 })),
    executorSettings: {},
    guard: [PAPER_CLI, experiment.name, ...workerFlags(settings, runsRoot), '--guard'],
    ...spanning(experiment, settings.backend),
    experiment,
    settings,
    units,
  };
}

/** Whether a unit can run as the ranks of one run (RunSet.multiTask), or why it runs in one process. */
function spanning(experiment: Experiment, backend: BackendName): Pick<RunSet, 'multiTask' | 'oneProcessReason'> {
  if (!experiment.spansRanks) return { oneProcessReason: `the units of ${experiment.name} measure without training, one process each` };
  if (backend !== 'tensorflow')
    return { oneProcessReason: `a unit spans several tasks on the tensorflow backend only (its collectives), not on ${backend}: add --backend tensorflow` };
  return { multiTask: true };
}

function workerFlags(settings: ExperimentSettings, runsRoot: string): string[] {
  return [...(settings.quick ? ['--quick'] : []), '--backend', settings.backend, '--runs', runsRoot];
}

/** The guard of run `index`: its lock, a skip when done, else the worker (`--unit <index>`) as a child process. */
export function runExperimentGuard(set: ExperimentRunSet, index: number): Promise<GuardResult> {
  const run = set.runs[index];
  if (!run) throw new Error(`${set.file}: no unit ${index} (units 0–${set.runs.length - 1})`);
  const flags = workerFlags(set.settings, path.dirname(set.runDir));
  return runGuarded(set, run, () => ({ args: [PAPER_CLI, set.experiment.name, ...flags, '--unit', String(index)], banner: 'starting' }));
}

export interface UnitResultFile {
  experiment: string;
  version: number;
  unit: string;
  outcome: UnitOutcome;
  seconds: number;
  cpuSeconds: number;
  startedAt: string;
  finishedAt: string;
}

/**
 * The worker: runs unit `index` in this process (the backend started) and writes its run folder. Returns its folder.
 * In a rank of a unit across processes (`cluster`, joined), rank 0 does the same; the other ranks train with it, write
 * nothing and return null.
 */
export async function runUnitHere(set: ExperimentRunSet, index: number, cluster: Cluster | null = null): Promise<string | null> {
  const unit = set.units[index];
  if (!unit) throw new Error(`${set.file}: no unit ${index} (units 0–${set.units.length - 1})`);
  const { experiment } = set;
  const leader = cluster === null || cluster.rank === 0;
  // Loaded only by a rank: the processes that schedule or report units load no TensorFlow.js.
  const collective = cluster ? await import('../backend/collective.ts') : null;
  if (cluster) {
    const what = { experiment: experiment.name, version: experiment.version, quick: set.settings.quick, unit };
    collective!.checkSameOnEveryRank(cluster, 'paper unit', JSON.stringify(what));
  }
  const made = leader ? makeRunDir(set.runDir, unit.name) : null;
  const dir = cluster ? collective!.valueFromRankZero(cluster, 'paper unit folder', made) : made!;
  if (leader) {
    writeJson(path.join(dir, 'unit.json'), { experiment: experiment.name, version: experiment.version, quick: set.settings.quick, unit });
    writeJson(path.join(dir, ENV_FILE), { ...(await processEnvironment()), ...clusterRecord(cluster) });
  }
  const startedAt = new Date().toISOString();
  const started = performance.now();
  const cpu = process.cpuUsage();
  const outcome = await experiment.runUnit(unit.settings, { dir, leader, doneUnit: (name) => doneUnit(set, name) });
  if (!leader) {
    collective!.barrier(cluster!); // ends with rank 0, once it wrote the unit's results
    return null;
  }
  if (outcome === null) throw new Error(`${set.file}: unit ${unit.name} reported no outcome on rank 0`);
  const used = process.cpuUsage(cpu);
  const result: UnitResultFile = {
    experiment: experiment.name,
    version: experiment.version,
    unit: unit.name,
    outcome,
    seconds: (performance.now() - started) / 1000,
    cpuSeconds: (used.user + used.system) / 1e6,
    startedAt,
    finishedAt: new Date().toISOString(),
  };
  writeJson(path.join(dir, 'result.json'), result);
  // summary.json marks the run done for the sweep machinery; its headline is the unit's line in `sweep status`.
  writeSummary(dir, { headline: outcome.headline, elapsed_s: result.seconds, finished_at: result.finishedAt });
  // The others wait here, so that no rank's end looks like a failure to the others while rank 0 writes.
  if (cluster) collective!.barrier(cluster);
  return dir;
}

/** A unit's newest done folder and its outcome, or null. */
function doneUnit(set: ExperimentRunSet, name: string): { dir: string; outcome: UnitOutcome } | null {
  const index = set.units.findIndex((u) => u.name === name);
  if (index < 0) throw new Error(`${set.file}: no unit named ${name}`);
  const dir = newestDoneFolder(set, index);
  return dir ? { dir, outcome: readUnitResult(path.join(dir, 'result.json')).outcome } : null;
}

/** The unit's newest run folder that finished (summary.json written), or null. */
function newestDoneFolder(set: ExperimentRunSet, index: number): string | null {
  return runFolders(set, set.runs[index]).findLast((f) => f.done)?.dir ?? null;
}

/** What one unit left: its newest done folder's result and environment, or why it has none. */
export interface UnitRecord {
  unit: UnitSpec;
  dir: string | null;
  result: UnitResultFile | null;
  env: Record<string, unknown> | null;
  /** The last attempt's failure, for a unit that is not done. */
  failure: string | null;
}

export function collectUnits(set: ExperimentRunSet): UnitRecord[] {
  return set.units.map((unit, index) => {
    const dir = newestDoneFolder(set, index);
    if (!dir) {
      const attempt = readAttempt(set, set.runs[index]);
      return { unit, dir: null, result: null, env: null, failure: attempt && attempt.outcome !== 'done' ? `${attempt.outcome}: ${attempt.lastLine}` : null };
    }
    return { unit, dir, result: readUnitResult(path.join(dir, 'result.json')), env: readEnv(dir), failure: null };
  });
}

function writeJson(file: string, value: unknown): void {
  writeOwnFile(file, JSON.stringify(value, null, 2) + '\n');
}

/**
 * A unit's result.json, checked before the results use it: a unit folder is a file on disk like any other, and a
 * hand-edited or truncated one must give an error naming the file and the field, not a TypeError or a wrong table.
 */
export function readUnitResult(file: string): UnitResultFile {
  const value = readJsonFile(file);
  const problem = unitResultProblem(value);
  if (problem) throw new Error(`${file}: not a unit result: ${problem}`);
  return value as UnitResultFile;
}

const isFiniteNumber = (v: unknown): v is number => typeof v === 'number' && Number.isFinite(v);

function unitResultProblem(value: unknown): string | null {
  if (!isRecord(value)) return 'expected a JSON object';
  for (const key of ['experiment', 'unit', 'startedAt', 'finishedAt'] as const) {
    if (typeof value[key] !== 'string') return `${key} must be a string (got ${JSON.stringify(value[key]) ?? 'nothing'})`;
  }
  for (const key of ['startedAt', 'finishedAt'] as const)
    if (Number.isNaN(Date.parse(value[key] as string))) return `${key} must be a date (got ${JSON.stringify(value[key])})`;
  for (const key of ['version', 'seconds', 'cpuSeconds'] as const) {
    if (!isFiniteNumber(value[key])) return `${key} must be a number (got ${JSON.stringify(value[key]) ?? 'nothing'})`;
  }
  const outcome = value.outcome;
  if (!isRecord(outcome)) return `outcome must be an object (got ${JSON.stringify(outcome) ?? 'nothing'})`;
  if (!Array.isArray(outcome.values) || !outcome.values.every(isFiniteNumber))
    return `outcome.values must be a list of numbers (got ${JSON.stringify(outcome.values) ?? 'nothing'})`;
  if (!isRecord(outcome.extra) || !Object.values(outcome.extra).every((v) => v === null || isFiniteNumber(v))) {
    return `outcome.extra must map names to numbers or null (got ${JSON.stringify(outcome.extra) ?? 'nothing'})`;
  }
  if (outcome.error !== undefined && typeof outcome.error !== 'string') return `outcome.error must be a string (got ${JSON.stringify(outcome.error)})`;
  if (outcome.details !== undefined && !isRecord(outcome.details)) return `outcome.details must be an object (got ${JSON.stringify(outcome.details)})`;
  if (typeof outcome.headline !== 'string') return `outcome.headline must be a string (got ${JSON.stringify(outcome.headline) ?? 'nothing'})`;
  return null;
}

/** A unit's env.json, required: an object (its strings are escaped where the results show them). */
function readEnv(dir: string): Record<string, unknown> {
  const run = RunFolder.at(dir);
  const env = run.env();
  if (!env) throw new Error(`${run.file(ENV_FILE)}: missing (where the unit ran)`);
  return env;
}
