// The state of every run of a sweep, from its run folders, the tasks' locks and records (task.ts) and Slurm's queue:
//
//   done      a run folder holds summary.json
//   running   a live task holds the run's lock, or Slurm says the array task runs
//   pending   not started yet, or queued in Slurm (with squeue's reason)
//   stopped   interrupted (Ctrl-C, preemption, time limit, a killed process): the next start resumes from the
//             checkpoint when there is one
//   failed    the last attempt ended with an error (its last log line), or Slurm ended the task (e.g. OUT_OF_MEMORY)
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { ACTIVE_STATES, queueState, readSubmissions } from './slurm.ts';
import type { QueueEntry } from './slurm.ts';
import type { RunSet, SetRun } from './run-set.ts';
import { lockIsLive, readAttempt, readLock, runFolders, sweepPaths } from './task.ts';
import { SUMMARY_FILE } from '../store/layout.ts';

export type RunStateName = 'done' | 'running' | 'pending' | 'stopped' | 'failed';

export interface RunState {
  run: SetRun;
  state: RunStateName;
  /** One line: where it stands or why it failed. */
  detail: string;
  /** The newest run folder, if any. */
  dir: string | null;
}

/** Slurm states after which a task holds nothing and was not a success. */
const FAILED_SLURM_STATES = new Set(['FAILED', 'OUT_OF_MEMORY', 'NODE_FAIL', 'BOOT_FAIL', 'DEADLINE', 'TIMEOUT', 'CANCELLED', 'PREEMPTED']);

/**
 * `queue`: Slurm's newest entry for this run, if any; `slurmReachable`: whether squeue answered at all (a lock taken in
 * a Slurm task on another node is believed only while squeue lists the task, or when Slurm cannot be asked).
 */
export function runState(sweep: RunSet, run: SetRun, queue: QueueEntry | undefined, slurmReachable = false): RunState {
  const folders = runFolders(sweep, run);
  const newest = folders.at(-1) ?? null;
  const done = folders.findLast((f) => f.done);
  if (done) return { run, state: 'done', detail: summaryLine(done.dir), dir: done.dir };
  const dir = newest?.dir ?? null;
  const resumable = folders.findLast((f) => f.checkpointStep !== null);
  const resumeNote = resumable ? `resumes from step ${resumable.checkpointStep}` : 'restarts from step 0 (no checkpoint)';
  const lastLog = lastLogLine(sweep, run);

  const lock = readLock(sweep, run);
  const inQueue = queue && queue.source === 'squeue' && ACTIVE_STATES.has(queue.state);
  if (inQueue && queue.state !== 'PENDING' && queue.state !== 'REQUEUED') {
    return { run, state: 'running', detail: `Slurm ${queue.taskId} ${queue.state}${lastLog ? `: ${lastLog}` : ''}`, dir };
  }
  if (lock && (lock.slurmJob === null || !slurmReachable) && lockIsLive(lock)) {
    const where = lock.slurmJob ? `Slurm ${lock.slurmJob}` : `pid ${lock.pid}`;
    return { run, state: 'running', detail: `${where}${lastLog ? `: ${lastLog}` : ''}`, dir };
  }
  if (inQueue) return { run, state: 'pending', detail: `Slurm ${queue.taskId} ${queue.state}${queue.detail && queue.detail !== 'None' ? ` (${queue.detail})` : ''}`, dir };

  const attempt = readAttempt(sweep, run);
  if (queue && FAILED_SLURM_STATES.has(queue.state) && !(attempt && attempt.slurmJob === queue.taskId && attempt.outcome === 'failed')) {
    return { run, state: 'failed', detail: `Slurm ${queue.taskId} ${queue.state} (${queue.detail}); ${resumeNote}${lastLog ? `; last log line: ${lastLog}` : ''}`, dir };
  }
  if (attempt?.outcome === 'failed') return { run, state: 'failed', detail: `exit ${attempt.exitCode ?? attempt.signal}: ${attempt.lastLine}`, dir };
  if (attempt?.outcome === 'stopped' || newest) {
    const why = attempt?.outcome === 'stopped' ? `stopped (exit ${attempt.exitCode ?? attempt.signal})` : 'interrupted';
    return { run, state: 'stopped', detail: `${why}; ${resumeNote}`, dir };
  }
  return { run, state: 'pending', detail: 'not started', dir };
}

/** A done run's line: summary.json's `headline` where its worker wrote one (run sets other than training), else the trainer's numbers. */
function summaryLine(dir: string): string {
  try {
    const s = JSON.parse(readFileSync(path.join(dir, SUMMARY_FILE), 'utf8')) as Record<string, number> & { headline?: unknown };
    if (typeof s.headline === 'string') return s.headline;
    return `val loss ${s.val_loss?.toFixed(4)} after ${s.steps} steps, ${Math.round(s.train_tokens_per_s ?? 0).toLocaleString('en-US')} tok/s`;
  } catch {
    return 'summary.json unreadable';
  }
}

/** The last non-empty line of the run's log (the trainer's output over all attempts), without the task's markers. */
function lastLogLine(sweep: RunSet, run: SetRun): string {
  const file = path.join(sweepPaths(sweep).logs, `${run.name}.log`);
  if (!existsSync(file)) return '';
  const lines = readFileSync(file, 'utf8').split('\n').map((l) => l.trim()).filter((l) => l !== '' && !l.startsWith('=== '));
  return lines.at(-1) ?? '';
}

/** The status table: one line per run. */
export function formatStatus(states: RunState[]): string {
  const width = Math.max(...states.map((s) => s.run.name.length));
  const counts = new Map<RunStateName, number>();
  for (const s of states) counts.set(s.state, (counts.get(s.state) ?? 0) + 1);
  const lines = states.map((s) => `${String(s.run.index).padStart(3)}  ${s.run.name.padEnd(width)}  ${s.state.padEnd(7)}  ${s.detail}`);
  const total = (['done', 'running', 'pending', 'stopped', 'failed'] as const).filter((k) => counts.has(k)).map((k) => `${counts.get(k)} ${k}`).join(', ');
  return [...lines, `${states.length} runs: ${total}`].join('\n');
}

/**
 * Every run's state as `sweep status` prints it: a header (`<what> <name> (<file>) → <runDir>` and the Slurm jobs),
 * then the table; `failed` when some run failed.
 */
export function setStatus(set: RunSet, what: string): { text: string; states: RunState[]; failed: boolean } {
  const submissions = readSubmissions(set);
  const reachable = submissions.length > 0 && commandAnswers('squeue', ['-h', '-o', '%i', '-j', submissions.at(-1)!.jobId]);
  const queue = reachable ? queueState(submissions) : new Map<number, QueueEntry>();
  const states = set.runs.map((r) => runState(set, r, queue.get(r.index), reachable));
  const jobs = submissions.length ? `; Slurm jobs ${submissions.map((s) => s.jobId).join(', ')}${reachable ? '' : ' (squeue not reachable)'}` : '';
  return { text: `${what} ${set.name} (${set.file}) → ${set.runDir}${jobs}\n${formatStatus(states)}`, states, failed: states.some((s) => s.state === 'failed') };
}

function commandAnswers(cmd: string, args: string[]): boolean {
  try {
    execFileSync(cmd, args, { stdio: 'ignore', timeout: 30_000 });
    return true;
  } catch (err) {
    // squeue exits 1 for a job id the controller has forgotten: it still answered.
    return (err as { status?: number }).status === 1;
  }
}
