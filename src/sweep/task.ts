// One run of a sweep, as both executors start it: `sweep task <file> <index>`.
//
//   done already (a run folder of its name holds summary.json)     → nothing to do
//   running elsewhere (its lock is held by a live process)         → nothing to do
//   a run folder with a complete checkpoint                        → npm run train -- <recipe> --resume <that folder>
//   otherwise                                                      → npm run train -- <recipe> (a new run folder)
//
// The sweep's own files live in `<runDir>/_sweep/`: recipes/<name>.yaml (the run's resolved recipe, what train reads),
// logs/<name>.log (the trainer's output, every attempt), locks/<name>.lock (the live attempt: pid, host, Slurm job) and
// attempts/<name>.json (how the last attempt ended). The trainer is a child process in the task's process group, so a
// Ctrl-C in a terminal or Slurm's scancel/requeue/preemption signal it directly; the task passes on only SIGUSR1, as
// SIGTERM: the local executor's stop request and Slurm's time-limit warning (see slurm.ts).
// Other run sets (run-set.ts) run their own worker the same way: runGuarded takes the lock, skips a done run, starts
// the worker, records the attempt.
import { spawn, execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, openSync, closeSync, readFileSync, renameSync, rmSync, writeFileSync, writeSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { SUMMARY_FILE } from '../store/layout.ts';
import { listCheckpoints, listRunFolders } from '../store/run-folder.ts';
import { signalExitCode } from '../train/stop.ts';
import type { RunSet, SetRun } from './run-set.ts';
import type { Sweep, SweepRun } from './spec.ts';
import { TSX_IMPORT } from '../tsx-import.ts';

const TRAIN_CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'train.ts');

export function sweepPaths(sweep: Pick<RunSet, 'runDir'>) {
  const root = path.join(sweep.runDir, '_sweep');
  return { root, recipes: path.join(root, 'recipes'), logs: path.join(root, 'logs'), locks: path.join(root, 'locks'), attempts: path.join(root, 'attempts'), slurm: path.join(root, 'slurm') };
}

const quote = (s: string) => (/^[\w@%+=:,./-]+$/.test(s) ? s : `'${s.replace(/'/g, `'\\''`)}'`);

/**
 * The task command of run `index` (a number, or a shell word such as "$SLURM_ARRAY_TASK_ID" when `shell`): the local
 * executor spawns it, the Slurm script execs it. tsx is loaded with --import, not through its CLI, which would relay
 * signals on its own.
 */
export function taskCommand(set: Pick<RunSet, 'task'>, index: string, { shell = false, node = process.execPath } = {}): string {
  const args = [node, '--import', TSX_IMPORT, ...set.task].map(quote);
  return [...args, shell ? index : quote(index)].join(' ');
}

export function taskArgs(set: Pick<RunSet, 'task'>, index: number): string[] {
  return ['--import', TSX_IMPORT, ...set.task, String(index)];
}

export interface RunFolder {
  dir: string;
  done: boolean;
  /** Step of the newest complete checkpoint, if any. */
  checkpointStep: number | null;
}

/** The run folders of a run, oldest first (`<runDir>/<name>-<YYYYMMDD-HHMMSS>[-n]`, as the trainer names them). */
export function runFolders(sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>): RunFolder[] {
  return listRunFolders(sweep.runDir, run.name).map((dir) => ({
    dir, done: existsSync(path.join(dir, SUMMARY_FILE)), checkpointStep: listCheckpoints(dir).at(-1)?.step ?? null,
  }));
}

export interface Lock {
  pid: number;
  host: string;
  slurmJob: string | null;
  startedAt: string;
}

export interface Attempt {
  outcome: 'done' | 'stopped' | 'failed';
  exitCode: number | null;
  signal: string | null;
  lastLine: string;
  slurmJob: string | null;
  endedAt: string;
}

/** `<array job>_<index>` inside a Slurm array task, else null. */
function currentSlurmJob(): string | null {
  const { SLURM_ARRAY_JOB_ID: job, SLURM_ARRAY_TASK_ID: task } = process.env;
  return job && task ? `${job}_${task}` : null;
}

export function readLock(sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>): Lock | null {
  return readJson<Lock>(path.join(sweepPaths(sweep).locks, `${run.name}.lock`));
}

export function readAttempt(sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>): Attempt | null {
  return readJson<Attempt>(path.join(sweepPaths(sweep).attempts, `${run.name}.json`));
}

function readJson<T>(file: string): T | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } catch {
    return null; // absent, or cut short by a crash: no information
  }
}

/** A lock is live when its process runs on this host. (Another host's lock is trusted: only Slurm can tell, see status.ts.) */
export function lockIsLive(lock: Lock): boolean {
  if (lock.host !== os.hostname()) return true;
  try {
    process.kill(lock.pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Takes the run's lock (created exclusively), or returns the live holder. A stale lock (dead process on this host,
 * or an earlier attempt of this very Slurm array task, which a requeue restarts) is replaced.
 */
function takeLock(file: string): { held: true; release(): void } | { held: false; holder: Lock } {
  const mine: Lock = { pid: process.pid, host: os.hostname(), slurmJob: currentSlurmJob(), startedAt: new Date().toISOString() };
  for (let tries = 0; tries < 3; tries++) {
    try {
      const fd = openSync(file, 'wx');
      writeSync(fd, JSON.stringify(mine) + '\n');
      closeSync(fd);
      return {
        held: true,
        release: () => {
          if (readJson<Lock>(file)?.pid === mine.pid) rmSync(file, { force: true });
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const holder = readJson<Lock>(file);
    const sameTask = holder !== null && holder.slurmJob !== null && holder.slurmJob === mine.slurmJob;
    if (holder && !sameTask && lockIsLive(holder)) return { held: false, holder };
    rmSync(file, { force: true });
  }
  throw new Error(`${file}: cannot take the run's lock`);
}

/** Writes the run's resolved recipe where the trainer reads it (atomically: tasks of other runs write beside it). */
function writeRunRecipe(sweep: Sweep, run: SweepRun): string {
  const dir = sweepPaths(sweep).recipes;
  mkdirSync(dir, { recursive: true });
  const file = path.join(dir, `${run.name}.yaml`);
  const text = `# Run ${run.index} of the sweep ${sweep.file}, written by npm run sweep (rewritten at every start).\n${YAML.stringify(run.recipe)}`;
  const tmp = `${file}.tmp-${process.pid}`;
  writeFileSync(tmp, text);
  renameSync(tmp, file);
  return file;
}

export interface TaskResult {
  /** What the task did. */
  action: 'skipped-done' | 'skipped-running' | 'trained';
  exitCode: number;
  message: string;
}

/**
 * Runs (or resumes, or skips) one run of the sweep; the trainer's output goes to `out`/`err` and to the run's log.
 * Resolves with the trainer's exit status (0 when skipped).
 */
export function runTask(sweep: Sweep, run: SweepRun, out: NodeJS.WritableStream = process.stdout, err: NodeJS.WritableStream = process.stderr): Promise<TaskResult> {
  return runGuarded(sweep, run, (current) => {
    const recipeFile = writeRunRecipe(sweep, run);
    const resumeFrom = current.findLast((f) => f.checkpointStep !== null);
    return {
      args: [TRAIN_CLI, recipeFile, ...(resumeFrom ? ['--resume', resumeFrom.dir] : [])],
      banner: resumeFrom ? `resuming from step ${resumeFrom.checkpointStep} in ${resumeFrom.dir}` : 'starting',
    };
  }, out, err);
}

/** What a task starts for a run that is not done: a worker script and its arguments (after `node --import tsx`). */
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
  sweep: RunSet, run: SetRun, prepare: (folders: RunFolder[]) => Worker,
  out: NodeJS.WritableStream = process.stdout, err: NodeJS.WritableStream = process.stderr,
): Promise<TaskResult> {
  const paths = sweepPaths(sweep);
  for (const dir of [paths.locks, paths.logs, paths.attempts]) mkdirSync(dir, { recursive: true });
  const lock = takeLock(path.join(paths.locks, `${run.name}.lock`));
  if (!lock.held) {
    const where = lock.holder.slurmJob ? `Slurm task ${lock.holder.slurmJob}` : `pid ${lock.holder.pid} on ${lock.holder.host}`;
    return { action: 'skipped-running', exitCode: 0, message: `${run.name}: running already (${where}, since ${lock.holder.startedAt})` };
  }
  let requeue = false;
  try {
    // Looked at under the lock: a task that just released it may have finished the run.
    const current = runFolders(sweep, run);
    const finished = current.findLast((f) => f.done);
    if (finished) return { action: 'skipped-done', exitCode: 0, message: `${run.name}: done already (${finished.dir})` };
    const { args, banner } = prepare(current);
    const log = path.join(paths.logs, `${run.name}.log`);
    appendFileSync(log, `=== ${new Date().toISOString()} ${run.name}: ${banner}${currentSlurmJob() ? ` (Slurm task ${currentSlurmJob()})` : ''}\n`);
    const result = await runWorker(args, log, out, err);
    const outcome: Attempt['outcome'] = result.exitCode === 0 ? 'done' : result.stopRequested || result.exitCode === 130 || result.exitCode === 143 ? 'stopped' : 'failed';
    const attempt: Attempt = { outcome, exitCode: result.exitCode, signal: result.signal, lastLine: result.lastLine, slurmJob: currentSlurmJob(), endedAt: new Date().toISOString() };
    writeFileSync(path.join(paths.attempts, `${run.name}.json`), JSON.stringify(attempt, null, 2) + '\n');
    appendFileSync(log, `=== ${attempt.endedAt} ${run.name}: ${outcome} (exit ${result.exitCode ?? result.signal})\n`);
    requeue = result.stopRequested && outcome === 'stopped';
    return { action: 'trained', exitCode: result.exitCode ?? 1, message: `${run.name}: ${outcome}${outcome === 'done' ? '' : `: ${result.lastLine}`}` };
  } finally {
    lock.release();
    if (requeue) requeueSelf(err); // after the release: Slurm's requeue ends this process
  }
}

interface WorkerResult {
  exitCode: number | null;
  signal: string | null;
  lastLine: string;
  /** A SIGUSR1 asked the worker to stop (local executor, or Slurm's time-limit warning). */
  stopRequested: boolean;
}

function runWorker(args: string[], log: string, out: NodeJS.WritableStream, err: NodeJS.WritableStream): Promise<WorkerResult> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, ['--import', TSX_IMPORT, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let lastLine = '';
    let stopRequested = false;
    const tee = (target: NodeJS.WritableStream) => (chunk: Buffer) => {
      target.write(chunk);
      appendFileSync(log, chunk);
      const lines = chunk.toString('utf8').split('\n').map((l) => l.trim()).filter((l) => l !== '');
      if (lines.length > 0) lastLine = lines.at(-1)!;
    };
    child.stdout.on('data', tee(out));
    child.stderr.on('data', tee(err));
    // The worker gets SIGINT/SIGTERM itself (same process group, or Slurm signals every process of the job).
    const ignore = () => {};
    const stop = () => {
      stopRequested = true;
      child.kill('SIGTERM');
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

/** In a Slurm array task stopped by the time-limit warning: put the task back in the queue, to resume. */
function requeueSelf(err: NodeJS.WritableStream): void {
  const job = currentSlurmJob();
  if (!job || process.env.SLAYFORMER_SWEEP_NO_REQUEUE) return;
  try {
    execFileSync('scontrol', ['requeue', job], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000 });
    err.write(`sweep: requeued Slurm task ${job}; it resumes from its checkpoint\n`);
  } catch (e) {
    err.write(`sweep: scontrol requeue ${job} failed (${(e as Error).message.split('\n')[0]}); submit the sweep again to resume\n`);
  }
}
