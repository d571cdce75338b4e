// `npm run train -- recipe.yaml --processes N`: one run across N processes on this machine, like
// `torchrun --standalone` (docs/distributed.md). This parent loads no TensorFlow: it finds N free
// 127.0.0.1 ports, starts the same command N times as ranks (RANK_ENV, CLUSTER_ENV), caps each
// rank's TensorFlow thread pools so that the ranks share the cores, and shows rank 0's output as
// the run's one set of logs. When a rank ends badly the others are stopped and the run says which
// rank failed and why; Ctrl-C reaches rank 0 alone, which checkpoints once, and then every rank stops.
import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { availableParallelism } from 'node:os';
import { CLUSTER_ENV, RANK_ENV } from '../backend/cluster-env.ts';

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
  const ports = await freePorts(n);
  const cluster = ports.map((p) => `127.0.0.1:${p}`).join(',');
  const threads = String(Math.max(1, Math.floor(availableParallelism() / n)));
  const ranks: Rank[] = ports.map((_, rank) => {
    const child = spawn(process.execPath, [...process.execArgv, process.argv[1], ...args], {
      env: { ...process.env, [RANK_ENV]: String(rank), [CLUSTER_ENV]: cluster, TF_NUM_INTRAOP_THREADS: threads, TF_NUM_INTEROP_THREADS: threads },
      // Own process groups: a terminal's Ctrl-C reaches this parent alone, which passes it to rank 0 once.
      detached: true,
      stdio: rank === 0 ? 'inherit' : ['ignore', 'pipe', 'pipe'],
    });
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

  let failure: Rank | null = null;
  let stopping = false;
  let termTimer: NodeJS.Timeout | null = null;
  let killTimer: NodeJS.Timeout | null = null;
  /** Ends a rank this launcher stops (so that the report below does not take it for the cause). */
  const end = (r: Rank, signal: NodeJS.Signals) => {
    if (r.exit) return;
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
  let signals = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    signals++;
    // The first signal asks rank 0 for its checkpoint; a second quits every rank at once.
    if (signals === 1) ranks[0].child.kill(signal);
    else ranks.forEach((r) => r.exit || r.child.kill('SIGKILL'));
  };
  process.on('SIGINT', onSignal);
  process.on('SIGTERM', onSignal);
  try {
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
                stopOthers(r);
              }
              resolve();
            });
          }),
      ),
    );
  } finally {
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    if (termTimer) clearTimeout(termTimer);
    if (killTimer) clearTimeout(killTimer);
  }
  // A rank killed from outside ends the run even when rank 0's failed collective reached the parent first: both
  // exits arrive at once, in either order, and the killed rank is the cause.
  const killed = failure ? ranks.find((r) => r.exit?.signal === 'SIGKILL' && !r.stopped) : undefined;
  const failed = (killed ?? failure) as Rank | null;
  if (!failed) return 0;
  const { code, signal } = failed.exit!;
  const how = signal ? `was killed by ${signal}` : `exited with status ${code}`;
  if (failed.rank !== 0 || signals === 0) {
    log(`train: rank ${failed.rank} of ${n} (pid ${failed.child.pid}) ${how}; the other ranks were stopped`);
    if (failed.rank !== 0 && failed.tail.length) log(failed.tail.map((l) => `[rank ${failed.rank}] ${l}`).join('\n'));
  }
  return code ?? 1;
}
