// A lock file: created exclusively (O_EXCL, which also refuses a symbolic link at its name) and holding its holder's
// pid, host and start time as JSON. A sweep's or a paper experiment's run (src/sweep/task.ts) and a run folder being
// trained (src/store/run-folder.ts) take one, so two processes never write the same run. A lock left by a process
// that died on this host is stale and taken over; another host's lock cannot be checked from here and counts as held.
import { closeSync, openSync, readFileSync, rmSync, writeSync } from 'node:fs';
import os from 'node:os';

export interface LockHolder {
  pid: number;
  host: string;
  startedAt: string;
}

/** The holder a lock file names, or null when it is absent or unreadable (cut short by a crash: no information). */
export function readLockFile<T extends LockHolder>(file: string): T | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } catch {
    return null;
  }
}

/** Whether the lock's process may still run: alive on this host, or on another host (which this one cannot tell). */
export function holderIsLive(holder: Pick<LockHolder, 'pid' | 'host'>): boolean {
  if (holder.host !== os.hostname()) return true;
  try {
    process.kill(holder.pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export type LockResult<T> = { held: true; release(): void } | { held: false; holder: T };

/**
 * Takes the lock `file` for `mine`, or returns the holder when `stale(holder)` is false. A stale holder's lock (and an
 * unreadable one) is removed and taken. `release` removes the file if it is still this process's.
 */
export function takeLockFile<T extends LockHolder>(file: string, mine: T, stale: (holder: T) => boolean = (h) => !holderIsLive(h)): LockResult<T> {
  for (let tries = 0; tries < 3; tries++) {
    try {
      const fd = openSync(file, 'wx');
      try {
        writeSync(fd, JSON.stringify(mine) + '\n');
      } finally {
        closeSync(fd);
      }
      return {
        held: true,
        release: () => {
          if (readLockFile<T>(file)?.pid === mine.pid) rmSync(file, { force: true });
        },
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
    const holder = readLockFile<T>(file);
    if (holder && !stale(holder)) return { held: false, holder };
    rmSync(file, { force: true });
  }
  throw new Error(`${file}: cannot take the lock (it keeps reappearing)`);
}

/** This process as a lock's holder. */
export function thisProcess(): LockHolder {
  return { pid: process.pid, host: os.hostname(), startedAt: new Date().toISOString() };
}
