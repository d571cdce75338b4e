// Files the project keeps in folders others may write to as well (a run folder, a set's `_sweep/`): written without
// following a symbolic link at their name, so that a link planted there (on a shared cluster file system, by another
// user) cannot turn a write into an overwrite or append of someone else's file. Node's writeFile/appendFile follow
// links; O_NOFOLLOW makes open(2) fail on one instead (ELOOP), which the error below names.
import fs from 'node:fs';

// Absent on Windows, where an lstat check before the open stands in (it leaves a window a link could slip into).
const NO_FOLLOW = fs.constants.O_NOFOLLOW ?? 0;

/** The error for a link where a project-owned file should be. */
function linkError(file: string): Error {
  return new Error(`${file} is a symbolic link where slayformer keeps a file of its own: nothing is written through it (remove the link)`);
}

/** Throws, naming `file`, when it is a symbolic link: checked before a project reads back a file it will rewrite. */
export function assertNotLink(file: string): void {
  if (fs.lstatSync(file, { throwIfNoEntry: false })?.isSymbolicLink()) throw linkError(file);
}

function openOwnFile(file: string, flags: number, mode: number): number {
  if (NO_FOLLOW === 0) assertNotLink(file);
  try {
    return fs.openSync(file, flags | NO_FOLLOW, mode);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ELOOP') throw linkError(file);
    throw err;
  }
}

/**
 * `err` with `file` in front of its message, code kept: a write's error (ENOSPC on a full disk, EIO) names no file by
 * itself, unlike open's. Errors that already name the file, and errors of no file system call, are returned as they are.
 */
export function errorNaming(err: unknown, file: string): unknown {
  const e = err as NodeJS.ErrnoException;
  if (!(err instanceof Error) || e.code === undefined || err.message.includes(file)) return err;
  return Object.assign(new Error(`${file}: ${err.message}`, { cause: err }), { code: e.code, errno: e.errno, syscall: e.syscall, path: file });
}

function writeAll(file: string, flags: number, data: string | Uint8Array, mode = 0o666): void {
  const fd = openOwnFile(file, flags, mode);
  try {
    fs.writeFileSync(fd, data);
  } catch (err) {
    throw errorNaming(err, file);
  } finally {
    fs.closeSync(fd);
  }
}

/** Creates (with `mode`, before the umask) or truncates `file` and writes `data`, refusing a symbolic link at its name. */
export function writeOwnFile(file: string, data: string | Uint8Array, mode?: number): void {
  writeAll(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC, data, mode);
}

/**
 * Replaces `file` whole: written aside as `<file>.tmp` (as writeOwnFile writes) and renamed over it, so that a reader
 * of a running run (compare, eval) finds the old bytes or the new ones, never a file emptied by a truncate. A
 * symbolic link at `file` is refused as writeOwnFile refuses one.
 */
export function replaceOwnFile(file: string, data: string | Uint8Array): void {
  assertNotLink(file);
  writeOwnFile(`${file}.tmp`, data);
  fs.renameSync(`${file}.tmp`, file);
}

/** Opens `file` for writing as writeOwnFile does (created or truncated, a symbolic link at its name refused): for a stream's fd. */
export function openOwnFileForWriting(file: string): number {
  return openOwnFile(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_TRUNC, 0o666);
}

/** Appends `data` to `file` (created if absent), refusing a symbolic link at its name. */
export function appendOwnFile(file: string, data: string | Uint8Array): void {
  writeAll(file, fs.constants.O_WRONLY | fs.constants.O_CREAT | fs.constants.O_APPEND, data);
}
