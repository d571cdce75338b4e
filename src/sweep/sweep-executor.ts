// The sweep executor contract: where the runs of a run set (run-set.ts) go; not to be confused with a step executor
// (src/train/step-executor.ts: how one training step runs). A sweep executor starts each pending run's guard
// (set-files.ts guardCommand; the guard takes the run's lock, skips it when done, runs the worker: guard.ts) here
// or through a scheduler's queue, and may tell status what its queue knows. Executors are listed by name in the
// registry (executor-registry.ts); the sweep and paper commands, status, the sweep file's sections and the guard go
// through it and name no executor, so a new one is one file plus one registry line (docs/layout.md).
import type { RunSet, SetRun } from './run-set.ts';

/** One setting of an executor: a key of a set file's `<executor>:` section, and a command-line flag. */
export interface SweepExecutorSetting {
  /** The flag, e.g. `--partition`; unique across executors (the registry checks). */
  flag: string;
  /** Its --help line (after the executor's name), and the placeholder of its value there (default VALUE). */
  help: string;
  value?: string;
  /** What the flag's text becomes: by default a number when it is all digits, else the text; 'boolean': true or false; 'list': the flag repeats and its values add to the file's. */
  type?: 'boolean' | 'list';
  /** null when the value is valid, else what it must be ("an integer ≥ 1"): messages read `<where> must be <that> (got …)`. */
  check(value: unknown): string | null;
}

/** What the caller gives an executor besides the runs and settings. */
export interface SweepExecutorContext {
  /** Where progress goes (default stdout). */
  out?: NodeJS.WriteStream | NodeJS.WritableStream;
  /** Seconds between progress lines when `out` is not a terminal. */
  logIntervalS?: number;
}

export type SweepExecutorOutcome =
  /**
   * The runs ran here and have ended: finished now, stopped (Ctrl-C), failed; `skipped`: done before; `elsewhere`:
   * left to another process that holds their lock (another sweep or paper command on the same set).
   */
  | { kind: 'ran'; done: string[]; skipped: string[]; stopped: string[]; failed: { name: string; lastLine: string }[]; elsewhere: string[] }
  /** `runs` of them handed to a scheduler as `what` (for messages: "job array 41"); `file`: what was submitted. */
  | { kind: 'submitted'; what: string; runs: number; file: string };

/** An executor's word on one run's task. */
export interface QueuedTask {
  /** The task as it names itself in locks and attempts (SweepExecutor.currentTask). */
  task: string;
  /** running: it holds its allocation; waiting: queued; failed: the executor ended it (out of memory, time limit…); ended: gone otherwise. */
  phase: 'running' | 'waiting' | 'failed' | 'ended';
  /** One line for status, e.g. "Slurm 7_0 PENDING (Resources)". */
  detail: string;
}

/** What an executor's queue knows of a set's tasks. */
export interface SweepExecutorQueue {
  /** For status's header, e.g. the jobs it submitted. */
  header: string;
  /** Whether the queue answered: a lock taken in one of its tasks is believed only while it lists the task, or when it cannot be asked. */
  reachable: boolean;
  /** Its newest word on each run, by run index. */
  tasks: Map<number, QueuedTask>;
}

/** The executor task a run's lock or attempt was taken in. */
export interface SweepExecutorTask {
  executor: string;
  /** As SweepExecutor.currentTask names it. */
  name: string;
}

/** How a guard starts its worker when the executor's task is several processes (a Slurm unit of several tasks). */
export interface WorkerLauncher {
  /** The command and arguments that start the worker's `node …` command line once per process, e.g. `srun …`. */
  prefix: string[];
  /** Variables added to the worker's environment (e.g. thread pools capped to a task's CPUs). */
  env: Record<string, string>;
  /** Asks every process of the worker to stop, as SIGTERM asks a worker that is the guard's own child. */
  stop(log: NodeJS.WritableStream): void;
}

export interface SweepExecutor {
  /** What `--executor` takes; it also names the executor's section of a set file and its folder under `_sweep/`. */
  name: string;
  /** What it does with a run set, a paragraph for --help. */
  description: string;
  settings: Readonly<Record<string, SweepExecutorSetting>>;
  /**
   * true: run() hands the runs to a scheduler and returns, and they run later, maybe on machines that see other paths
   * (the sweep command then only warns about a missing dataset); false: they run here and run() returns once they ended.
   */
  submits: boolean;
  /** Starts (or submits) `pending`, the set's runs that are not done, with settings its table checked. */
  run(set: RunSet, pending: SetRun[], settings: Record<string, unknown>, context?: SweepExecutorContext): Promise<SweepExecutorOutcome>;
  /** For --dry-run: what run() would submit (e.g. the batch script), submitting nothing. Absent where nothing is submitted. */
  preview?(set: RunSet, pending: SetRun[], settings: Record<string, unknown>, cwd: string): string;
  /** What its queue says of the set's tasks, for status; null when it holds none of them. Absent: the run's files tell all. */
  queue?(set: RunSet): SweepExecutorQueue | null;
  /** In a guard: the name of the executor task this process runs as, or null when it is none of this executor's. */
  currentTask?(): string | null;
  /** In a guard of `set`: how to start the worker when this executor's task is several processes; null (or absent): as the guard's child. */
  workerLauncher?(set: RunSet): WorkerLauncher | null;
  /** In a guard, after it asked the run to stop (SIGUSR1, e.g. before a time limit) and the run did: run the task again later. */
  requeue?(log: NodeJS.WritableStream): void;
}
