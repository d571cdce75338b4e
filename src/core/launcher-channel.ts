// The channel from the `--processes N` launcher (src/cli/launch.ts) to each rank it starts: one end of a pipe that
// the launcher holds open as long as it lives and never writes. However the launcher ends — kill -9, a crash — its
// end closes and the rank reads end-of-file, which it takes as SIGTERM: rank 0 saves a checkpoint after its step
// and every rank stops (docs/distributed.md). Ranks started by srun have no launcher and no channel. A paper unit's
// `npm run lm-eval` child (src/paper/lm-evaluation.ts) holds one too: the unit's worker killed, it ends its harness.
import { Socket } from 'node:net';

/** Names the rank's file descriptor of the channel; set by the launcher alone. */
export const LAUNCHER_FD_ENV = 'SLAYFORMER_LAUNCHER_FD';
/** The channel's descriptor in a rank: the first after stdin, stdout and stderr. */
export const LAUNCHER_FD = 3;

/**
 * Calls `onGone` once when the launcher that started this process is gone; does nothing when no launcher started it.
 * Returns the launcher's pid, or null. The variable is removed, so that a process this one starts does not take the
 * descriptor for a channel of its own.
 */
export function watchLauncher(onGone: () => void, env: NodeJS.ProcessEnv = process.env): number | null {
  const value = env[LAUNCHER_FD_ENV];
  if (value === undefined) return null;
  delete env[LAUNCHER_FD_ENV];
  if (value !== String(LAUNCHER_FD)) throw new Error(`${LAUNCHER_FD_ENV}=${value}: expected ${LAUNCHER_FD} (set by the --processes launcher only)`);
  let channel: Socket;
  try {
    channel = new Socket({ fd: LAUNCHER_FD, readable: true, writable: false });
  } catch (err) {
    throw new Error(
      `${LAUNCHER_FD_ENV}=${value}, but descriptor ${value} is no pipe from a launcher (${(err as Error).message}): only the --processes launcher sets it`,
    );
  }
  // The channel alone must not keep the process alive, and what it carries (nothing) is not kept.
  channel.unref();
  channel.resume();
  let gone = false;
  const end = () => {
    if (gone) return;
    gone = true;
    channel.destroy();
    onGone();
  };
  channel.on('end', end);
  channel.on('close', end);
  channel.on('error', end);
  return process.ppid;
}

/**
 * Drops what this process writes once its output may have nowhere to go (the launcher that read it is gone, or the
 * terminal closed: SIGHUP): a write there fails (EPIPE, EIO), and an unhandled write error would end the process
 * before it saved its checkpoint.
 */
export function ignoreOutputErrors(): void {
  for (const stream of [process.stdout, process.stderr]) if (stream.listenerCount('error') === 0) stream.on('error', () => {});
}
