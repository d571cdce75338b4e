// A lock file holding its holder's pid, host and start time as JSON. A sweep's or a paper experiment's run
// (its guard, src/sweep/guard.ts) and a run folder being trained (src/store/run-folder.ts) take one, so two processes never write
// the same run. A lock left by a process that died on this host is stale and taken over; another host's lock cannot be
// checked from here and counts as held.
//
// A lock appears whole: it is written to a file of its own and hard-linked to the lock's name, which fails when the
// name exists (a symbolic link included), so no reader sees it half written. A stale lock is replaced under a second
// lock, `<file>.takeover`, after checking it is still the one found stale, by renaming this process's lock over it:
// the name never stands empty, so no process can slip in between. A process that finds the takeover lock held by a
// live process waits for it to finish (a few file operations) and looks again, so of several processes taking over
// the same stale lock one holds it and every other is told that one's pid.
import { linkSync, readFileSync, renameSync, rmSync } from 'node:fs';
import os from 'node:os';
import { writeOwnFile } from './own-file.ts';

export interface LockHolder {
  pid: number;
  host: string;
  startedAt: string;
}

/** The holder a lock file names, or null when it is absent or unreadable (no information). */
function readLockFile<T extends LockHolder>(file: string): T | null {
  try {
    return JSON.parse(readFileSync(file, 'utf8')) as T;
  } catch {
    return null;
  }
}

function readText(file: string): string | null {
  try {
    return readFileSync(file, 'utf8');
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

/** Creates `file` holding `text`, whole, unless it exists; returns whether it did. */
function createWhole(file: string, text: string): boolean {
  const tmp = `${file}.new-${process.pid}`;
  writeOwnFile(tmp, text);
  try {
    linkSync(tmp, file);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    return false;
  } finally {
    rmSync(tmp, { force: true });
  }
}

/** Replaces `file` with one holding `text`, whole (a rename: readers see the old lock or the new one). */
function replaceWhole(file: string, text: string): void {
  const tmp = `${file}.new-${process.pid}`;
  writeOwnFile(tmp, text);
  try {
    renameSync(tmp, file);
  } finally {
    rmSync(tmp, { force: true });
  }
}

const pause = new Int32Array(new SharedArrayBuffer(4));
/** How long a live takeover may hold `<file>.takeover` before its holder is reported as the lock's holder. */
const TAKEOVER_WAIT_MS = 5000;

/** Waits until `guard` is gone or `ms` have passed; returns whether it went. */
function waitUntilGone(guard: string, ms: number): boolean {
  for (let waited = 0; waited < ms; waited += 2) {
    if (readText(guard) === null) return true;
    Atomics.wait(pause, 0, 0, 2); // a synchronous 2 ms pause: takeLockFile is synchronous for its callers
  }
  return readText(guard) === null;
}

export type LockResult<T> = { held: true; release(): void } | { held: false; holder: T };

/**
 * Takes the lock `file` for `mine`, or returns the holder when `stale(holder)` is false. A stale holder's lock (and an
 * unreadable one) is taken over (see the top of this file). `release` removes the file if it is still this process's.
 */
export function takeLockFile<T extends LockHolder>(file: string, mine: T, stale: (holder: T) => boolean = (h) => !holderIsLive(h)): LockResult<T> {
  const text = JSON.stringify(mine) + '\n';
  const guard = `${file}.takeover`;
  const held: LockResult<T> = {
    held: true,
    release: () => {
      if (readText(file) === text) rmSync(file, { force: true });
    },
  };
  for (let tries = 0; tries < 5; tries++) {
    if (createWhole(file, text)) return held;
    const found = readText(file);
    const holder = readLockFile<T>(file);
    if (holder && !stale(holder)) return { held: false, holder };
    if (createWhole(guard, text)) {
      let took = false;
      try {
        if (found !== null && readText(file) === found) {
          replaceWhole(file, text);
          took = true;
        }
      } finally {
        rmSync(guard, { force: true });
      }
      if (took) return held;
    } else {
      // Another process is taking it over: once it is done the lock names its holder. A guard whose process died is removed.
      const taker = readLockFile<T>(guard);
      if (taker && stale(taker)) rmSync(guard, { force: true });
      else if (taker && !waitUntilGone(guard, TAKEOVER_WAIT_MS)) return { held: false, holder: taker };
    }
  }
  throw new Error(`${file}: cannot take the lock (it keeps changing hands)`);
}

/** This process as a lock's holder. */
export function thisProcess(): LockHolder {
  return { pid: process.pid, host: os.hostname(), startedAt: new Date().toISOString() };
}
