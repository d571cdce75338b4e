// The local executor (sweep-executor.ts): the runs of a sweep (or of any run set, run-set.ts) as separate guard processes
// (guard.ts), as many at a time as the cores allow given what each run keeps busy, with one progress line per running
// run. A failing run does not stop the others; runs that are done are skipped, interrupted ones resume from their
// checkpoint.
//
// Guards get their own process group, so a Ctrl-C in the terminal reaches only this process, which passes it on once
// per guard as SIGUSR1 (the guard stops its trainer with SIGTERM: a checkpoint, then exit); a second Ctrl-C passes it
// on again and the trainers quit at once.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { availableParallelism } from 'node:os';
import type { SweepExecutor, SweepExecutorOutcome } from './sweep-executor.ts';
import type { RunSet, SetRun } from './run-set.ts';
import { runFolders } from './run-folders.ts';
import { lockHolder, lockIsLive, readLock, guardArgs, tellingLine } from './set-files.ts';

export const localExecutor: SweepExecutor = {
  name: 'local',
  description: `the runs as separate processes, as many at a time as the cores allow given each
run's data-parallel replicas (--cores N to change the count), one progress line per run. A
failing run does not stop the others; run it again to skip finished runs and resume interrupted
ones. Ctrl-C: the running runs save a checkpoint and stop.`,
  settings: {
    cores: {
      flag: '--cores',
      value: 'N',
      help: "cores to fill (default: this machine's)",
      check: (v) => (Number.isInteger(v) && (v as number) >= 1 ? null : 'an integer ≥ 1'),
    },
    threads: {
      flag: '--threads',
      value: 'N',
      help: 'runs on the native backend (which take every core) get N cores each, TensorFlow limited to N threads, so that cores/N of them run side by side (default: one at a time)',
      check: (v) => (Number.isInteger(v) && (v as number) >= 1 ? null : 'an integer ≥ 1'),
    },
  },
  submits: false,
  run: (set, pending, settings, context = {}) =>
    runLocal(set, pending, {
      cores: settings.cores as number | undefined,
      threads: settings.threads as number | undefined,
      out: context.out,
      logIntervalS: context.logIntervalS,
    }),
};

interface LocalOptions {
  /** Cores to fill (default: this machine's). */
  cores?: number;
  /** Cores and TensorFlow threads of a run that would take every core (see placement). */
  threads?: number;
  /** Where progress goes (default stdout); redrawn in place when it is a terminal. */
  out?: NodeJS.WriteStream | NodeJS.WritableStream;
  /** Seconds between progress lines when `out` is not a terminal (default 30). */
  logIntervalS?: number;
}

type LocalResult = Extract<SweepExecutorOutcome, { kind: 'ran' }>;

/**
 * The cores one run keeps busy out of the `cores` the executor fills, and what its process's environment adds. A run
 * that takes every core (the native backend spreads each kernel over them) takes `threads` instead when given, with
 * TensorFlow's thread pools that size: at the demo's shape one thread gives 0.6–0.7× the tokens/s of two
 * (docs/experiments.md, "Running experiments side by side"), so two one-thread runs finish sooner than two in turn.
 */
export function placement(run: SetRun, cores: number, threads?: number): { cores: number; env: Record<string, string> } {
  if (run.cores !== 'all') return { cores: Math.min(cores, run.cores), env: {} };
  if (threads === undefined) return { cores, env: {} };
  const n = Math.min(cores, threads);
  return { cores: n, env: { TF_NUM_INTRAOP_THREADS: String(n), TF_NUM_INTEROP_THREADS: String(n) } };
}

interface Running {
  run: SetRun;
  child: ChildProcess;
  cores: number;
  lastLine: string;
  shownLine: string;
  shownAt: number;
}

/** Runs `pending` (the set's runs that are not done) here; the set's other runs count as done before. */
async function runLocal(sweep: RunSet, pending: SetRun[], opts: LocalOptions = {}): Promise<LocalResult> {
  const out = opts.out ?? process.stdout;
  const tty = 'isTTY' in out && out.isTTY === true;
  const cores = opts.cores ?? availableParallelism();
  const result: LocalResult = { kind: 'ran', done: [], failed: [], stopped: [], skipped: [], elsewhere: [] };
  const queue: SetRun[] = [];
  const elsewhere: string[] = [];
  const todo = new Set(pending.map((r) => r.index));
  for (const run of sweep.runs) {
    const lock = readLock(sweep, run);
    if (!todo.has(run.index)) result.skipped.push(run.name);
    else if (lock && lockIsLive(lock)) {
      elsewhere.push(`${run.name} (${lockHolder(lock)})`);
      result.elsewhere.push(run.name);
    } else queue.push(run);
  }
  const running = new Map<number, Running>();
  const display = new ProgressDisplay(out, tty, (opts.logIntervalS ?? 30) * 1000);
  display.event(
    `sweep ${sweep.name}: ${sweep.runs.length} runs, ${result.skipped.length} done already, ${queue.length} to run on ${cores} cores → ${sweep.runDir}`,
  );
  if (elsewhere.length > 0) display.event(`left alone, being trained by another process: ${elsewhere.join(', ')}`);

  let stopping = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    stopping++;
    queue.length = 0;
    display.event(
      stopping === 1
        ? `sweep: ${signal}: the running runs save a checkpoint and stop (again to quit at once); run the sweep again to resume`
        : `sweep: ${signal} again: the running runs quit at once`,
    );
    for (const r of running.values()) r.child.kill('SIGUSR1'); // a guard that has just exited is skipped by kill()
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);

  const used = () => [...running.values()].reduce((n, r) => n + r.cores, 0);
  try {
    await new Promise<void>((resolve) => {
      const launch = () => {
        // First fit in sweep order; a run that wants more cores than there are starts when nothing else runs.
        for (let i = 0; i < queue.length; ) {
          const run = queue[i];
          const { cores: need, env } = placement(run, cores, opts.threads);
          if (running.size > 0 && used() + need > cores) {
            i++;
            continue;
          }
          queue.splice(i, 1);
          start(run, need, env);
        }
        display.render(running.values(), summaryLine());
        if (running.size === 0 && queue.length === 0) resolve();
      };
      const start = (run: SetRun, need: number, env: Record<string, string>) => {
        const child = spawn(process.execPath, guardArgs(sweep, run.index), {
          detached: true,
          stdio: ['ignore', 'pipe', 'pipe'],
          env: { ...process.env, ...env },
        });
        const entry: Running = { run, child, cores: need, lastLine: 'starting', shownLine: '', shownAt: 0 };
        running.set(run.index, entry);
        display.event(`start  ${run.name} (run ${run.index}, ${need} core${need === 1 ? '' : 's'})`);
        const onData = (chunk: Buffer) => {
          const line = tellingLine(entry.lastLine, chunk.toString('utf8'));
          if (line === entry.lastLine) return;
          entry.lastLine = line;
          display.render(running.values(), summaryLine());
        };
        child.stdout!.on('data', onData);
        child.stderr!.on('data', onData);
        child.on('close', (code, signal) => {
          running.delete(run.index);
          // A guard exits 0 without running when another process took the run's lock after the check above.
          if (code === 0 && !runFolders(sweep, run).some((f) => f.done)) {
            result.elsewhere.push(run.name);
            display.event(`elsewhere ${run.name}: ${entry.lastLine}`);
          } else if (code === 0) {
            result.done.push(run.name);
            display.event(`done   ${run.name}: ${entry.lastLine}`);
          } else if (stopping > 0 || code === 130 || code === 143) {
            result.stopped.push(run.name);
            display.event(`stop   ${run.name}: ${entry.lastLine}`);
          } else {
            result.failed.push({ name: run.name, lastLine: entry.lastLine });
            display.event(`FAILED ${run.name} (exit ${code ?? signal}): ${entry.lastLine}`);
          }
          launch();
        });
      };
      const summaryLine = () =>
        `${result.done.length + result.skipped.length}/${sweep.runs.length} done, ${running.size} running, ${queue.length} waiting, ${result.failed.length} failed`;
      launch();
    });
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    display.close();
  }
  return result;
}

/**
 * One line per running run. On a terminal the block is redrawn in place under the permanent event lines; otherwise
 * each run's latest line is printed at most once per interval.
 */
class ProgressDisplay {
  private drawn = 0;

  constructor(
    private readonly out: NodeJS.WritableStream,
    private readonly tty: boolean,
    private readonly intervalMs: number,
  ) {}

  event(text: string): void {
    this.clear();
    this.out.write(`${text}\n`);
  }

  render(running: Iterable<Running>, summary: string): void {
    const entries = [...running];
    if (!this.tty) {
      const now = Date.now();
      for (const r of entries) {
        if (r.lastLine === r.shownLine || now - r.shownAt < this.intervalMs) continue;
        this.out.write(`       ${r.run.name}: ${r.lastLine}\n`);
        r.shownLine = r.lastLine;
        r.shownAt = now;
      }
      return;
    }
    const width = Math.max(40, ('columns' in this.out ? (this.out.columns as number) : 120) - 1);
    const nameWidth = Math.max(0, ...entries.map((r) => r.run.name.length));
    const lines = [...entries.map((r) => `  ${r.run.name.padEnd(nameWidth)}  ${r.lastLine}`), `  ${summary}`].map((l) => l.slice(0, width));
    this.clear();
    this.out.write(lines.map((l) => `${l}\n`).join(''));
    this.drawn = lines.length;
  }

  close(): void {
    this.clear();
  }

  private clear(): void {
    if (!this.tty || this.drawn === 0) return;
    this.out.write(`\x1b[${this.drawn}A\x1b[0J`);
    this.drawn = 0;
  }
}
