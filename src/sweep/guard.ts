// A run's guard: the process every executor starts for one run of a run set (`sweep guard <file> <index>` for a sweep)
// that takes the run's lock, skips the run when it is done, else runs its worker and records the attempt.
//
//   done already (a run folder of its name holds summary.json)     → nothing to do
//   running elsewhere (its lock is held by a live process)         → nothing to do
//   a run folder with a complete checkpoint                        → npm run train -- <recipe> --resume <that folder>
//   otherwise                                                      → npm run train -- <recipe> (a new run folder)
// (with the sweep command's --backend, when it was given).
//
// The files it keeps under `<runDir>/_sweep/` (recipe, log, lock, attempt) are described in set-files.ts. The trainer
// is a child process in the guard's process group, so a Ctrl-C in a terminal or a scheduler's cancel/requeue/preemption
// signal it directly; the guard passes on only SIGUSR1, as SIGTERM: an executor's stop request (the local executor's
// Ctrl-C, a scheduler's time-limit warning). After such a stop the executor task the guard runs in may be requeued
// (SweepExecutor.requeue). When the executor's task is several processes (a Slurm unit of several tasks), the executor
// says how the worker starts on all of them and how it is asked to stop (SweepExecutor.workerLauncher): the guard
// itself stays one process, so the lock, the log and the attempt are written once, whatever the number of ranks.
// Other run sets (run-set.ts) run their own worker the same way: runGuarded takes the lock, skips a done run, starts
// the worker, records the attempt.
import { spawn } from 'node:child_process';
import { renameSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { appendOwnFile, assertNotLink, writeOwnFile } from '../core/own-file.ts';
import { takeLockFile, thisProcess, type LockResult } from '../core/lock-file.ts';
import { signalExitCode } from '../train/stop.ts';
import { currentTask } from './executor-registry.ts';
import type { SweepExecutorTask, WorkerLauncher } from './sweep-executor.ts';
import type { RunSet, SetRun } from './run-set.ts';
import { runFolders } from './run-folders.ts';
import type { SetRunFolder } from './run-folders.ts';
import { attemptFile, lockFile, lockHolder, lockIsLive, logFile, sweepPaths, tellingLine } from './set-files.ts';
import type { Attempt, Lock } from './set-files.ts';
import type { Sweep, SweepRun } from './spec.ts';
import { TSX_IMPORT } from '../tsx-import.ts';
import { makeFolders } from '../core/folders.ts';

const TRAIN_CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'train.ts');

/**
 * Takes the run's lock (src/core/lock-file.ts), or returns the live holder. A stale lock (dead process on this host,
 * or an earlier attempt of this very executor task, which a requeue restarts) is replaced.
 */
function takeLock(file: string, task: SweepExecutorTask | null): LockResult<Lock> {
  const sameTask = (holder: Lock) => task !== null && holder.task?.executor === task.executor && holder.task.name === task.name;
  return takeLockFile<Lock>(file, { ...thisProcess(), task }, (holder) => sameTask(holder) || !lockIsLive(holder));
}

/** Writes the run's resolved recipe where the trainer reads it (atomically: the guards of other runs write beside it). */
function writeRunRecipe(sweep: Sweep, run: SweepRun): string {
  const dir = sweepPaths(sweep).recipes;
  makeFolders(dir);
  const file = path.join(dir, `${run.name}.yaml`);
  const text = `# Run ${run.index} of the sweep ${sweep.file}, written by npm run sweep (rewritten at every start).\n${YAML.stringify(run.recipe)}`;
  const tmp = `${file}.tmp-${process.pid}`;
  writeOwnFile(tmp, text);
  renameSync(tmp, file);
  return file;
}

export interface GuardResult {
  /** What the guard did. */
  action: 'skipped-done' | 'skipped-running' | 'trained';
  exitCode: number;
  message: string;
}

/**
 * The guard of one run of a sweep: runs (or resumes, or skips) it; the trainer's output goes to `out`/`err` and to the run's log.
 * Resolves with the trainer's exit status (0 when skipped).
 */
export function runSweepGuard(
  sweep: Sweep,
  run: SweepRun,
  out: NodeJS.WritableStream = process.stdout,
  err: NodeJS.WritableStream = process.stderr,
): Promise<GuardResult> {
  return runGuarded(
    sweep,
    run,
    (current) => {
      const recipeFile = writeRunRecipe(sweep, run);
      const resumeFrom = current.findLast((f) => f.checkpointStep !== null);
      return {
        args: [TRAIN_CLI, recipeFile, ...(sweep.backend ? ['--backend', sweep.backend] : []), ...(resumeFrom ? ['--resume', resumeFrom.dir] : [])],
        banner: resumeFrom ? `resuming from step ${resumeFrom.checkpointStep} in ${resumeFrom.dir}` : 'starting',
      };
    },
    out,
    err,
  );
}

/** What a guard starts for a run that is not done: a worker script and its arguments (after `node --import tsx`). */
export interface Worker {
  args: string[];
  /** The log's line for this attempt, e.g. where it resumes from. */
  banner: string;
}

/**
 * One run of any run set: takes the run's lock (or returns when a live process holds it), returns when a run folder of
 * it is done, else starts the worker `prepare` gives (told the run's folders so far) as a child process; its output goes
 * to `out`/`err` and to the run's log, its outcome to the run's attempt record. Resolves with the worker's exit status.
 */
export async function runGuarded(
  sweep: RunSet,
  run: SetRun,
  prepare: (folders: SetRunFolder[]) => Worker,
  out: NodeJS.WritableStream = process.stdout,
  err: NodeJS.WritableStream = process.stderr,
): Promise<GuardResult> {
  const paths = sweepPaths(sweep);
  for (const dir of [paths.locks, paths.logs, paths.attempts]) makeFolders(dir);
  const here = currentTask();
  const lock = takeLock(lockFile(sweep, run), here?.task ?? null);
  if (!lock.held)
    return { action: 'skipped-running', exitCode: 0, message: `${run.name}: running already (${lockHolder(lock.holder)}, since ${lock.holder.startedAt})` };
  let requeue = false;
  try {
    // Looked at under the lock: a guard that just released it may have finished the run.
    const current = runFolders(sweep, run);
    const finished = current.findLast((f) => f.done);
    if (finished) return { action: 'skipped-done', exitCode: 0, message: `${run.name}: done already (${finished.dir})` };
    const log = logFile(sweep, run);
    // Refused before the worker starts rather than when its attempt is recorded.
    for (const file of [log, attemptFile(sweep, run)]) assertNotLink(file);
    const { args, banner } = prepare(current);
    appendOwnFile(log, `=== ${new Date().toISOString()} ${run.name}: ${banner}${here ? ` (${here.task.name})` : ''}\n`);
    const result = await runWorker(args, here?.executor.workerLauncher?.(sweep) ?? null, log, out, err);
    const outcome: Attempt['outcome'] =
      result.exitCode === 0 ? 'done' : result.stopRequested || result.exitCode === 130 || result.exitCode === 143 ? 'stopped' : 'failed';
    const attempt: Attempt = {
      outcome,
      exitCode: result.exitCode,
      signal: result.signal,
      lastLine: result.lastLine,
      task: here?.task ?? null,
      endedAt: new Date().toISOString(),
    };
    writeOwnFile(attemptFile(sweep, run), JSON.stringify(attempt, null, 2) + '\n');
    appendOwnFile(log, `=== ${attempt.endedAt} ${run.name}: ${outcome} (exit ${result.exitCode ?? result.signal})\n`);
    requeue = result.stopRequested && outcome === 'stopped';
    return { action: 'trained', exitCode: result.exitCode ?? 1, message: `${run.name}: ${outcome}${outcome === 'done' ? '' : `: ${result.lastLine}`}` };
  } finally {
    lock.release();
    if (requeue) here?.executor.requeue?.(err); // after the release: a scheduler's requeue may end this process
  }
}

interface WorkerResult {
  exitCode: number | null;
  signal: string | null;
  lastLine: string;
  /** A SIGUSR1 asked the worker to stop (the local executor's Ctrl-C, a scheduler's time-limit warning). */
  stopRequested: boolean;
}

/** The worker as the guard's child, or through `launcher` (e.g. srun: one worker process per scheduler task). */
function runWorker(
  args: string[],
  launcher: WorkerLauncher | null,
  log: string,
  out: NodeJS.WritableStream,
  err: NodeJS.WritableStream,
): Promise<WorkerResult> {
  return new Promise((resolve, reject) => {
    const command = [...(launcher?.prefix ?? []), process.execPath, '--import', TSX_IMPORT, ...args];
    const env = launcher ? { ...launcher.env, ...process.env } : process.env; // what the user set wins
    const child = spawn(command[0], command.slice(1), { stdio: ['ignore', 'pipe', 'pipe'], env });
    let lastLine = '';
    let stopRequested = false;
    const tee = (target: NodeJS.WritableStream) => (chunk: Buffer) => {
      target.write(chunk);
      appendOwnFile(log, chunk);
      lastLine = tellingLine(lastLine, chunk.toString('utf8'));
    };
    child.stdout.on('data', tee(out));
    child.stderr.on('data', tee(err));
    // The worker gets SIGINT/SIGTERM itself (same process group, or a scheduler signals every process of the job).
    const ignore = () => {};
    const stop = () => {
      stopRequested = true;
      if (launcher) launcher.stop(err);
      else child.kill('SIGTERM');
    };
    process.on('SIGINT', ignore);
    process.on('SIGTERM', ignore);
    process.on('SIGUSR1', stop);
    child.on('error', reject);
    child.on('close', (code, signal) => {
      process.off('SIGINT', ignore);
      process.off('SIGTERM', ignore);
      process.off('SIGUSR1', stop);
      resolve({ exitCode: code ?? (signal ? signalExitCode(signal) : null), signal, lastLine, stopRequested });
    });
  });
}
