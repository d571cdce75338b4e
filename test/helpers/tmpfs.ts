// A small tmpfs mounted for a test: a disk that fills up (size=…, ENOSPC) or one made read-only (EROFS)
// without touching a real disk. Mounting needs root (or CAP_SYS_ADMIN); elsewhere the suites that use it are left
// out with one line saying why.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface Tmpfs {
  /** The mount point (a new folder), or null when nothing could be mounted. */
  dir: string | null;
  /** Why nothing was mounted (for the skipped suite's name). */
  reason: string;
  /** Makes it read-only (what was written stays readable). */
  remountReadOnly(): void;
  unmount(): void;
}

/** Mounts a tmpfs with `options` (e.g. "size=64k") on a new folder under the system's temporary folder. */
export function mountTmpfs(options: string): Tmpfs {
  const none = (reason: string): Tmpfs => ({ dir: null, reason, remountReadOnly: () => {}, unmount: () => {} });
  if (process.platform !== 'linux') return none('tmpfs mounts are a Linux test');
  if (process.getuid?.() !== 0) return none('mounting a tmpfs needs root');
  const dir = mkdtempSync(join(tmpdir(), 'slay-tmpfs-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', options, 'tmpfs', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  } catch (err) {
    rmdirSync(dir);
    return none(
      `mount -t tmpfs is not permitted here (${
        String((err as { stderr?: Buffer }).stderr ?? err)
          .trim()
          .split('\n')[0]
      })`,
    );
  }
  return {
    dir,
    reason: '',
    remountReadOnly: () => execFileSync('mount', ['-o', 'remount,ro', dir]),
    unmount: () => {
      execFileSync('umount', [dir]);
      rmdirSync(dir);
    },
  };
}
