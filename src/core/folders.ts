// Creating the folders a command writes to (run folders, checkpoints/, an export's parent, a report's folder) with an
// error that says why it failed. Node's recursive mkdir (`mkdir -p`) reports ENOENT, "no such file or directory", when
// the folder cannot be created on a read-only file system, instead of EROFS; the real cause is found again here by
// creating the first missing folder alone, which reports it (docs/training.md, "Checkpoints and resume").
import { existsSync, mkdirSync } from 'node:fs';
import path from 'node:path';

/** Creates `dir` and its missing parents; a failure names `dir` and the real cause (EROFS, EACCES, ENOTDIR …), its code kept. */
export function makeFolders(dir: string): void {
  try {
    mkdirSync(dir, { recursive: true });
  } catch (err) {
    const e = err as NodeJS.ErrnoException;
    if (e.code !== 'ENOENT') throw err;
    const cause = firstMissingFolderError(path.resolve(dir));
    if (cause === null) return; // created after all (a folder appeared or vanished in between)
    const c = cause as NodeJS.ErrnoException;
    throw Object.assign(new Error(`cannot create the folder ${dir}: ${c.message}`, { cause }), {
      code: c.code,
      errno: c.errno,
      syscall: c.syscall,
      path: c.path,
    });
  }
}

/** The error of creating the outermost missing folder of `dir` on its own, then the rest; null when that creates `dir`. */
function firstMissingFolderError(dir: string): unknown {
  let missing = dir;
  while (path.dirname(missing) !== missing && !existsSync(path.dirname(missing))) missing = path.dirname(missing);
  try {
    mkdirSync(missing);
    mkdirSync(dir, { recursive: true });
    return null;
  } catch (err) {
    return err;
  }
}
