// A run set's own files under `<runDir>/_sweep/` and the command of a run's guard, as the executors, the guard
// (guard.ts) and status read and write them:
//   recipes/<name>.yaml    a training run's resolved recipe, what the trainer reads
//   logs/<name>.log        the worker's output, every attempt
//   locks/<name>.lock      the live attempt: pid, host, the executor task it runs in
//   attempts/<name>.json   how the last attempt ended
//   <executor>/            an executor's own files (e.g. its batch scripts and submissions)
// Plain files and node: modules only, so that the executors (and the commands' --help, which lists their settings)
// load without TensorFlow.js.
import path from 'node:path';
import { readJsonObject } from '../core/json.ts';
import { holderIsLive, type LockHolder } from '../core/lock-file.ts';
import { TSX_IMPORT } from '../tsx-import.ts';
import type { SweepExecutorTask } from './sweep-executor.ts';
import type { RunSet, SetRun } from './run-set.ts';

export function sweepPaths(sweep: Pick<RunSet, 'runDir'>) {
  const root = path.join(sweep.runDir, '_sweep');
  return { root, recipes: path.join(root, 'recipes'), logs: path.join(root, 'logs'), locks: path.join(root, 'locks'), attempts: path.join(root, 'attempts') };
}

/** The folder of an executor's own files for the set. */
export function executorFolder(sweep: Pick<RunSet, 'runDir'>, executor: string): string {
  return path.join(sweepPaths(sweep).root, executor);
}

const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/**
 * The guard command of run `index` (a number, or a shell word such as "$SLURM_ARRAY_TASK_ID" when `shell`): the local
 * executor spawns it, a batch script execs it. tsx is loaded with --import, not through its CLI, which would relay
 * signals on its own.
 */
export function guardCommand(set: Pick<RunSet, 'guard'>, index: string, { shell = false, node = process.execPath } = {}): string {
  const args = [node, '--import', TSX_IMPORT, ...set.guard].map(quote);
  return [...args, shell ? index : quote(index)].join(' ');
}

export function guardArgs(set: Pick<RunSet, 'guard'>, index: number): string[] {
  return ['--import', TSX_IMPORT, ...set.guard, String(index)];
}

/** A run's lock (src/core/lock-file.ts): its holder, and the executor task the attempt runs in (e.g. a Slurm array task), null for a process started here. */
export interface Lock extends LockHolder {
  task: SweepExecutorTask | null;
}

export interface Attempt {
  outcome: 'done' | 'stopped' | 'failed';
  exitCode: number | null;
  signal: string | null;
  lastLine: string;
  task: SweepExecutorTask | null;
  endedAt: string;
}

export const lockFile = (sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>) => path.join(sweepPaths(sweep).locks, `${run.name}.lock`);
export const attemptFile = (sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>) => path.join(sweepPaths(sweep).attempts, `${run.name}.json`);
export const logFile = (sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>) => path.join(sweepPaths(sweep).logs, `${run.name}.log`);

export function readLock(sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>): Lock | null {
  // Absent, or cut short by a crash: no information.
  return (readJsonObject(lockFile(sweep, run)) as Lock | undefined) ?? null;
}

export function readAttempt(sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>): Attempt | null {
  return (readJsonObject(attemptFile(sweep, run)) as Attempt | undefined) ?? null;
}

/** A lock is live when its process runs on this host. (Another host's lock is trusted: only its executor's queue can tell, see status.ts.) */
export function lockIsLive(lock: Lock): boolean {
  return holderIsLive(lock);
}

/** Who holds a lock, for messages: its executor task, or its process. */
export function lockHolder(lock: Lock): string {
  return lock.task ? lock.task.name : `pid ${lock.pid} on ${lock.host}`;
}

/**
 * The line that best says how a worker ended: the last of `chunk`'s non-empty lines that is not what Node prints
 * after an uncaught error (its version, stack frames, the caret under the source line), else `previous`. A crash
 * then reads "Error: Cannot find module …" rather than "Node.js v20.20.2".
 */
export function tellingLine(previous: string, chunk: string): string {
  const noise = /^(Node\.js v\d|at |\^+$|\.\.\. \d+ lines matching)/;
  const lines = chunk
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !noise.test(l));
  return lines.at(-1) ?? previous;
}
