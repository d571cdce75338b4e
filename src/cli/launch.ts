// `npm run train -- recipe.yaml --processes N`: one run across N processes on this machine, like
// `torchrun --standalone` (docs/distributed.md). This parent loads no TensorFlow: it finds N free
// 127.0.0.1 ports, starts the same command N times as ranks (RANK_ENV, CLUSTER_ENV), caps each
// rank's TensorFlow thread pools so that the ranks share the cores, and shows rank 0's output as
// the run's one set of logs. When a rank ends badly the others are stopped and the run says which
// rank failed and why; Ctrl-C reaches rank 0 alone, which checkpoints once, and then every rank stops. Each rank
// holds a channel from this parent (src/core/launcher-channel.ts): killed, even with SIGKILL, it leaves no rank behind.
import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism } from 'node:os';
import { CLUSTER_ENV, RANK_ENV, XLA_COORDINATOR_ENV } from '../backend/cluster-env.ts';
import { signalExitCode } from '../train/stop.ts';
import { ignoreOutputErrors, LAUNCHER_FD, LAUNCHER_FD_ENV } from '../core/launcher-channel.ts';

/** Lines of a failed rank's output the parent repeats (ranks other than 0 print nowhere else). */
const KEPT_LINES = 20;
/**
 * When another rank failed: how long rank 0 has to end by itself, saying which rank does not answer (its collective
 * fails within the heartbeat timeout, 4 s in backend/collective.ts), before it is sent SIGTERM; and before it is killed.
 */
const SELF_END_MS = 8_000;
const GRACE_MS = 20_000;

/** N distinct free ports on 127.0.0.1, as the system hands them out (all held open until every one is known). */
export async function freePorts(n: number): Promise<number[]> {
  const servers = await Promise.all(
    Array.from(
      { length: n },
      () =>
        new Promise<import('node:net').Server>((resolve, reject) => {
          const server = createServer();
          server.once('error', reject);
          server.listen(0, '127.0.0.1', () => resolve(server));
        }),
    ),
  );
  const ports = servers.map((s) => (s.address() as import('node:net').AddressInfo).port);
  await Promise.all(servers.map((s) => new Promise((resolve) => s.close(resolve))));
  return ports;
}

/**
 * Whether process `pid` has already ended though its exit has not reached this process yet (Linux: a zombie, state Z in
 * /proc/<pid>/stat). A rank killed from outside while rank 0's failure arrives first is such a one: stopping it would
 * take its own end for this launcher's. false where /proc cannot tell.
 */
function endedUnreaped(pid: number | undefined): boolean {
  if (pid === undefined) return false;
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z';
  } catch {
    return false;
  }
}

interface Rank {
  rank: number;
  child: ChildProcess;
  tail: string[];
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
  /** Ended by this launcher (stopOthers), not by whatever ended the run. */
  stopped?: boolean;
}

/**
 * Starts `n` ranks of this command (`args`: its arguments, passed on unchanged) and waits for them.
 * Returns the exit status of the run: 0 when every rank ended well, else the failing rank's.
 */
export async function launchRanks(n: number, args: readonly string[], log: (line: string) => void = (l) => console.error(l)): Promise<number> {
  let ranks: Rank[] = [];
  let failure: Rank | null = null;
  /** The ranks still running when the failure came: a rank the failed one names as silent may be hung. */
  let runningAtFailure = new Set<number>();
  let stopping = false;
  let termTimer: NodeJS.Timeout | null = null;
  let killTimer: NodeJS.Timeout | null = null;
  /** Ends a rank this launcher stops (so that the report below does not take it for the cause). */
  const end = (r: Rank, signal: NodeJS.Signals) => {
    if (r.exit || endedUnreaped(r.child.pid)) return;
    r.stopped = true;
    r.child.kill(signal);
  };
  const stopOthers = (except: Rank) => {
    stopping = true;
    for (const r of ranks) {
      // Rank 0 first ends by itself: its next collective fails and it says which rank does not answer (a signal at
      // once could end it before it has said so). The others hold no state.
      if (r !== except && r.rank !== 0) end(r, 'SIGKILL');
    }
    termTimer ??= setTimeout(() => end(ranks[0], 'SIGTERM'), SELF_END_MS);
    killTimer ??= setTimeout(() => ranks.forEach((r) => end(r, 'SIGKILL')), GRACE_MS);
  };
  const signals: NodeJS.Signals[] = [];
  const onSignal = (signal: NodeJS.Signals) => {
    signals.push(signal);
    // A closed terminal (SIGHUP) takes this output with it; the ranks' ends must still be waited for.
    if (signal === 'SIGHUP') ignoreOutputErrors();
    // The first signal asks rank 0 for its checkpoint (it takes SIGHUP as SIGTERM); a second quits every rank at once.
    if (signals.length === 1) ranks[0]?.child.kill(signal);
    else ranks.forEach((r) => r.exit || r.child.kill('SIGKILL'));
  };
  // Before any rank starts: a signal that came between the first line and its handler would end this parent alone.
  const handled = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;
  for (const signal of handled) process.on(signal, onSignal);
  try {
    // One port more: jax's coordination service, should the ranks train with train.executor xla (docs/xla.md).
    const [xlaPort, ...ports] = await freePorts(n + 1);
    if (signals.length > 0) {
      log(`train: ${signals[0]} before any rank started: nothing was run`);
      return signalExitCode(signals[0]);
    }
    const cluster = ports.map((p) => `127.0.0.1:${p}`).join(',');
    const threads = String(Math.max(1, Math.floor(availableParallelism() / n)));
    ranks = ports.map((_, rank) => {
      const env = {
        [RANK_ENV]: String(rank),
        [CLUSTER_ENV]: cluster,
        [XLA_COORDINATOR_ENV]: `127.0.0.1:${xlaPort}`,
        TF_NUM_INTRAOP_THREADS: threads,
        TF_NUM_INTEROP_THREADS: threads,
      };
      const child = spawn(process.execPath, [...process.execArgv, process.argv[1], ...args], {
        env: { ...process.env, ...env, [LAUNCHER_FD_ENV]: String(LAUNCHER_FD) },
        // Own process groups: a terminal's Ctrl-C reaches this parent alone, which passes it to rank 0 once.
        detached: true,
        // The last one is the channel: never written, it closes when this process ends, however it ends.
        stdio: rank === 0 ? ['inherit', 'inherit', 'inherit', 'pipe'] : ['ignore', 'pipe', 'pipe', 'pipe'],
      });
      const channel = child.stdio[LAUNCHER_FD];
      channel?.on('error', () => {}); // the rank is gone: its exit says why
      child.once('exit', () => channel?.destroy());
      const entry: Rank = { rank, child, tail: [], exit: null };
      for (const stream of [child.stdout, child.stderr]) {
        stream?.setEncoding('utf8');
        stream?.on('data', (text: string) => {
          entry.tail.push(...text.split('\n').filter((l) => l.trim()));
          entry.tail.splice(0, Math.max(0, entry.tail.length - KEPT_LINES));
        });
      }
      return entry;
    });
    log(
      `[train] ${n} processes (pids ${ranks.map((r) => r.child.pid).join(', ')}) on ${cluster}, ${threads} TensorFlow threads each; rank 0 prints the run's logs`,
    );
    await Promise.all(
      ranks.map(
        (r) =>
          new Promise<void>((resolve) => {
            r.child.on('error', (err) => {
              r.tail.push(err.message);
              r.exit ??= { code: 1, signal: null };
              resolve();
            });
            r.child.on('exit', (code, signal) => {
              r.exit = { code, signal };
              // The first rank to end badly is the run's failure (rank 0 stopped by a signal, its checkpoint saved, included).
              if (code !== 0 && !failure && !stopping) {
                failure = r;
                runningAtFailure = new Set(ranks.filter((other) => !other.exit).map((other) => other.rank));
                stopOthers(r);
              }
              resolve();
            });
          }),
      ),
    );
  } finally {
    for (const signal of handled) process.off(signal, onSignal);
    if (termTimer) clearTimeout(termTimer);
    if (killTimer) clearTimeout(killTimer);
  }
  return report(n, ranks, failure, runningAtFailure, signals, log);
}

/** What the run's end says, and its exit status, once every rank has ended. */
function report(
  n: number,
  ranks: readonly Rank[],
  failure: Rank | null,
  runningAtFailure: ReadonlySet<number>,
  signals: readonly NodeJS.Signals[],
  log: (line: string) => void,
): number {
  // A rank killed from outside ends the run even when rank 0's failed collective reached the parent first: both
  // exits arrive at once, in either order, and the killed rank is the cause.
  const killed = failure ? ranks.find((r) => r.exit?.signal === 'SIGKILL' && !r.stopped) : undefined;
  const failed = (killed ?? failure) as Rank | null;
  if (!failed) return 0;
  const { code, signal } = failed.exit!;
  const how = signal ? `was killed by ${signal}` : `exited with status ${code}`;
  const tail = () => {
    if (failed.tail.length) log(failed.tail.map((l) => `[rank ${failed.rank}] ${l}`).join('\n'));
  };
  const hung = killed ? undefined : silentRank(failed, ranks, runningAtFailure);
  if (hung) {
    log(
      `train: rank ${hung.rank} of ${n} (pid ${hung.child.pid}) does not answer: rank ${failed.rank} (pid ${failed.child.pid}) found it silent and ${how}, ` +
        `and rank ${hung.rank} was killed, as it did not end when stopped; the other ranks were stopped`,
    );
    tail();
    return code ?? 1;
  }
  if (failed.rank === 0 && signals.length > 0) {
    // Rank 0 ended by the signal passed on (not by its handler, which saves a checkpoint and says so): it had not
    // started training yet; or a second signal killed every rank.
    if (!signal) return code ?? 1;
    if (signals.length === 1)
      log(`train: ${signals[0]} ended rank 0 (pid ${failed.child.pid}) before training began: nothing was saved; the other ranks were stopped`);
    else log(`train: second ${signals[1]}: every rank was killed without a checkpoint`);
    return signalExitCode(signals[0]);
  }
  log(`train: rank ${failed.rank} of ${n} (pid ${failed.child.pid}) ${how}; the other ranks were stopped`);
  if (failed.rank !== 0) tail();
  return code ?? 1;
}

/**
 * The rank that `failed` says does not answer ("rank 0 (127.0.0.1:P) does not answer", collectiveFailure in
 * backend/collective.ts), when that rank was still running then and was killed by this launcher: it hung, and
 * the failure is its, not the one of the rank that noticed.
 */
function silentRank(failed: Rank, ranks: readonly Rank[], runningAtFailure: ReadonlySet<number>): Rank | undefined {
  const named = failed.tail.flatMap((line) => [...line.matchAll(/\brank (\d+) \([^)]*\) does not answer/g)].map((m) => Number(m[1])));
  return ranks.find((r) => r !== failed && named.includes(r.rank) && runningAtFailure.has(r.rank) && r.stopped && r.exit?.signal === 'SIGKILL');
}
