// The state of every run of a set, from its run folders, the guards' locks and records (set-files.ts) and what the
// executors' queues say (SweepExecutor.queue):
//
//   done      a run folder holds summary.json
//   running   a live guard holds the run's lock, or an executor says its task runs
//   pending   not started yet, or waiting in an executor's queue (with the queue's reason)
//   stopped   interrupted (Ctrl-C, preemption, time limit, a killed process): the next start resumes from the
//             checkpoint when there is one
//   failed    the last attempt ended with an error (its last log line), or an executor ended the task (e.g. out of
//             memory)
import { existsSync, readFileSync } from 'node:fs';
import type { SweepExecutorQueue } from './sweep-executor.ts';
import { SWEEP_EXECUTORS } from './executor-registry.ts';
import type { RunSet, SetRun } from './run-set.ts';
import { runFolders } from './run-folders.ts';
import { lockIsLive, logFile, readAttempt, readLock } from './set-files.ts';
import { SUMMARY_FILE } from '../store/layout.ts';
import { RunFolder } from '../store/run-folder.ts';

/** An executor's queue, named. */
export type NamedQueue = SweepExecutorQueue & { executor: string };

export type RunStateName = 'done' | 'running' | 'pending' | 'stopped' | 'failed';

export interface RunState {
  run: SetRun;
  state: RunStateName;
  /** One line: where it stands or why it failed. */
  detail: string;
  /** The newest run folder, if any. */
  dir: string | null;
}

/**
 * `queues`: what the executors' queues say of the set (a lock taken in an executor's task, maybe on another node, is
 * believed only while its queue lists the task, or when the queue cannot be asked).
 */
export function runState(sweep: RunSet, run: SetRun, queues: NamedQueue[] = []): RunState {
  const folders = runFolders(sweep, run);
  const newest = folders.at(-1) ?? null;
  const done = folders.findLast((f) => f.done);
  if (done) return { run, state: 'done', detail: summaryLine(done.dir), dir: done.dir };
  const dir = newest?.dir ?? null;
  const resumable = folders.findLast((f) => f.checkpointStep !== null);
  const resumeNote = resumable ? `resumes from step ${resumable.checkpointStep}` : 'restarts from step 0 (no checkpoint)';
  const lastLog = lastLogLine(sweep, run);

  const lock = readLock(sweep, run);
  const queued = queues.map((q) => q.tasks.get(run.index)).find((t) => t !== undefined);
  if (queued?.phase === 'running') return { run, state: 'running', detail: `${queued.detail}${lastLog ? `: ${lastLog}` : ''}`, dir };
  const lockQueue = lock?.task ? queues.find((q) => q.executor === lock.task!.executor) : undefined;
  if (lock && (lock.task === null || !lockQueue?.reachable) && lockIsLive(lock)) {
    return { run, state: 'running', detail: `${lock.task?.name ?? `pid ${lock.pid}`}${lastLog ? `: ${lastLog}` : ''}`, dir };
  }
  if (queued?.phase === 'waiting') return { run, state: 'pending', detail: queued.detail, dir };

  const attempt = readAttempt(sweep, run);
  // A task the executor ended in failure, unless the guard recorded that failure itself (its last log line says more).
  if (queued?.phase === 'failed' && !(attempt?.outcome === 'failed' && attempt.task?.name === queued.task)) {
    return { run, state: 'failed', detail: `${queued.detail}; ${resumeNote}${lastLog ? `; last log line: ${lastLog}` : ''}`, dir };
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
  let unreadable = false;
  const summary = RunFolder.at(dir).summary({ unreadable: () => (unreadable = true) });
  if (unreadable) return `${SUMMARY_FILE} unreadable`;
  if (summary?.headline !== undefined) return summary.headline;
  return `val loss ${summary?.val_loss?.toFixed(4)} after ${summary?.steps} steps, ${Math.round(summary?.train_tokens_per_s ?? 0).toLocaleString('en-US')} tok/s`;
}

/** The last non-empty line of the run's log (the trainer's output over all attempts), without the guard's markers. */
function lastLogLine(sweep: RunSet, run: SetRun): string {
  const file = logFile(sweep, run);
  if (!existsSync(file)) return '';
  const lines = readFileSync(file, 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('=== '));
  return lines.at(-1) ?? '';
}

/** The status table: one line per run. */
function formatStatus(states: RunState[]): string {
  const width = Math.max(...states.map((s) => s.run.name.length));
  const counts = new Map<RunStateName, number>();
  for (const s of states) counts.set(s.state, (counts.get(s.state) ?? 0) + 1);
  const lines = states.map((s) => `${String(s.run.index).padStart(3)}  ${s.run.name.padEnd(width)}  ${s.state.padEnd(7)}  ${s.detail}`);
  const total = (['done', 'running', 'pending', 'stopped', 'failed'] as const)
    .filter((k) => counts.has(k))
    .map((k) => `${counts.get(k)} ${k}`)
    .join(', ');
  return [...lines, `${states.length} runs: ${total}`].join('\n');
}

/**
 * Every run's state as `sweep status` prints it: a header (`<what> <name> (<file>) → <runDir>` and what the executors'
 * queues hold), then the table; `failed` when some run failed.
 */
export function setStatus(set: RunSet, what: string): { text: string; states: RunState[]; failed: boolean } {
  const queues: NamedQueue[] = SWEEP_EXECUTORS.flatMap((executor) => {
    const queue = executor.queue?.(set) ?? null;
    return queue ? [{ ...queue, executor: executor.name }] : [];
  });
  const states = set.runs.map((r) => runState(set, r, queues));
  const held = queues.map((q) => `; ${q.header}`).join('');
  return {
    text: `${what} ${set.name} (${set.file}) → ${set.runDir}${held}\n${formatStatus(states)}`,
    states,
    failed: states.some((s) => s.state === 'failed'),
  };
}
