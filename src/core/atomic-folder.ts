// Folders written whole or not at all (checkpoints, final/), with the sha256 of every file in their
// COMPLETE marker, and removal that never touches a file this project did not write.
//
// A folder is written as `.<name>.tmp-<pid>/`: every file is written and fsynced, then COMPLETE
// (`<sha256>  <file>` lines, the format `sha256sum -c COMPLETE` checks), the folder is fsynced and
// renamed to `<name>`, and the parent is fsynced. A folder called `<name>` is therefore always
// complete. An existing `<name>` is first renamed aside (`.<name>.old-<pid>`) and removed after the
// new one is in place, so a crash leaves a complete copy under one of the two names.
//
// A save that fails (a full disk: ENOSPC) removes its temporary folder before the error goes on, so that the space it
// took is free again, and puts a folder it had renamed aside back. A save that is killed cannot: its temporary folder
// holds a file WRITER (the writer's pid and host, removed just before the rename), and removeDeadTemporaries removes the
// temporary folders whose writer no longer runs on this host (one without WRITER, of a version before it or killed
// before writing it, by the pid in its name, on this host); another host's cannot be checked and is left alone.
//
// Removal never follows a symbolic link: a folder that is a link (a checkpoint or final/ moved to another disk and
// linked back) may be read, but is never emptied or removed, nor is what it points to. A linked `<name>` that a new
// folder replaces is kept beside it as `<name>.link-<pid>`, and the caller is told.
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, open, readFile, readlink, rename, rm, rmdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { makeFolders } from './folders.ts';
import { holderIsLive, thisProcess, type LockHolder } from './lock-file.ts';
import { errorNaming } from './own-file.ts';

export const COMPLETE_MARKER = 'COMPLETE';
/** In a temporary folder while it is written: its writer (see the top of this file). */
const WRITER_FILE = 'WRITER';
/** `.<name>.tmp-<pid>`: a folder being written (see the top of this file). */
const TEMPORARY_NAME = /^\.(.+)\.tmp-(\d+)$/;
const CHECKSUM_LINE = /^([0-9a-f]{64}) {2}(\S+)$/;

/** Writes and fsyncs `file`; a failed write (a full disk) names the file (own-file.ts). */
export async function writeFileSynced(file: string, data: string | Uint8Array): Promise<void> {
  const handle = await open(file, 'w');
  try {
    await handle.writeFile(data);
    await handle.sync();
  } catch (err) {
    throw errorNaming(err, file);
  } finally {
    await handle.close();
  }
}

/** fsync of a folder makes the names created or renamed in it durable (Linux, macOS). */
export async function syncDir(dir: string): Promise<void> {
  if (process.platform === 'win32') return; // folders cannot be opened for fsync there; NTFS renames are journaled
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

const sha256 = (data: string | Uint8Array) => createHash('sha256').update(data).digest('hex');

/** Whether `file` is a symbolic link (dangling or not). */
export function isSymbolicLink(file: string): boolean {
  return lstatSync(file, { throwIfNoEntry: false })?.isSymbolicLink() ?? false;
}

/**
 * Writes `files` (name → content) as `<parent>/<name>/` plus its COMPLETE marker (see the top of this file), replacing
 * an existing folder of that name only if it holds nothing but files named in `ownFiles` (else an error: the
 * folder holds someone else's files). A `<name>` that is a symbolic link is kept as `<name>.link-<pid>`, said
 * through `note`. Returns the folder.
 */
export async function writeFolderAtomically(
  parent: string,
  name: string,
  files: Map<string, string | Uint8Array>,
  ownFiles: ReadonlySet<string>,
  note: (text: string) => void = () => {},
): Promise<string> {
  makeFolders(parent);
  const target = path.join(parent, name);
  const tmp = path.join(parent, `.${name}.tmp-${process.pid}`);
  const linked = isSymbolicLink(target);
  const aside = linked ? `${target}.link-${process.pid}` : path.join(parent, `.${name}.old-${process.pid}`);
  if (!linked && existsSync(target)) assertOnlyOwnFiles(target, ownFiles);
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp);
  const replacing = linked || existsSync(target);
  let movedAside = false;
  try {
    await writeFileSynced(path.join(tmp, WRITER_FILE), JSON.stringify(thisProcess()) + '\n');
    const sums: string[] = [];
    for (const [file, data] of files) {
      await writeFileSynced(path.join(tmp, file), data);
      sums.push(`${sha256(data)}  ${file}`);
    }
    await writeFileSynced(path.join(tmp, COMPLETE_MARKER), sums.join('\n') + '\n');
    await rm(path.join(tmp, WRITER_FILE));
    await syncDir(tmp);
    if (replacing) {
      await rename(target, aside);
      movedAside = true;
    }
    await rename(tmp, target);
  } catch (err) {
    // A full disk, most often: the space the partial copy takes is given back, the previous folder put back in place.
    if (movedAside) await rename(aside, target).catch(() => {});
    await removeOwnFolder(tmp, ownFiles).catch(() => false);
    throw err;
  }
  await syncDir(parent);
  if (linked)
    note(
      `${target} was a symbolic link (to ${await readlink(aside)}): the new folder replaces it, the link is kept as ${aside} and what it points to is left as it was`,
    );
  else if (replacing) await removeOwnFolder(aside, ownFiles);
  return target;
}

/** Throws unless every entry of `dir` is one of `ownFiles` (or COMPLETE, or its temporary). */
function assertOnlyOwnFiles(dir: string, ownFiles: ReadonlySet<string>): void {
  const foreign = foreignEntries(dir, ownFiles);
  if (foreign.length > 0) {
    throw new Error(`${dir} holds files this project did not write (${foreign.slice(0, 5).join(', ')}); move them away or remove the folder yourself`);
  }
}

/** Entries of `dir` this project did not write: other names, and anything under an own name that is not a plain file (a link). */
function foreignEntries(dir: string, ownFiles: ReadonlySet<string>): string[] {
  return readdirSync(dir, { withFileTypes: true })
    .filter((e) => !(ownFiles.has(e.name) || e.name === COMPLETE_MARKER || e.name === `${COMPLETE_MARKER}.tmp` || e.name === WRITER_FILE) || !e.isFile())
    .map((e) => e.name);
}

/**
 * Removes `dir` if it holds nothing but `ownFiles` (and the marker), file by file; a folder with anything else in it
 * is left alone, and so is a symbolic link (never followed: what it points to is not this project's to remove).
 * Returns whether it was removed.
 */
export async function removeOwnFolder(dir: string, ownFiles: ReadonlySet<string>): Promise<boolean> {
  if (!lstatSync(dir, { throwIfNoEntry: false })?.isDirectory() || foreignEntries(dir, ownFiles).length > 0) return false;
  for (const entry of readdirSync(dir)) await rm(path.join(dir, entry), { force: true });
  await rmdir(dir);
  return true;
}

/** Whether `dir`, a temporary folder `.<name>.tmp-<pid>`, may still be written: its writer runs, or runs on another host (see the top of this file). */
export function temporaryWriterIsLive(dir: string): boolean {
  const pid = Number(TEMPORARY_NAME.exec(path.basename(dir))?.[2]);
  let writer: Pick<LockHolder, 'pid' | 'host'> = { pid, host: os.hostname() };
  const file = path.join(dir, WRITER_FILE);
  const stat = lstatSync(file, { throwIfNoEntry: false });
  if (stat?.isFile() && stat.size <= 4096) {
    try {
      const saved = JSON.parse(readFileSync(file, 'utf8')) as Partial<LockHolder>;
      if (Number.isSafeInteger(saved.pid) && typeof saved.host === 'string') writer = { pid: saved.pid!, host: saved.host };
    } catch {
      // cut short by the kill that left it: the pid in the folder's name says the same
    }
  }
  return holderIsLive(writer);
}

/**
 * Removes the temporary folders `.<name>.tmp-<pid>` in `parent`, for the names `isName` accepts, whose writer no
 * longer runs (temporaryWriterIsLive) and that hold nothing but `ownFiles` (removeOwnFolder): what saves killed
 * before their rename left behind. Returns the removed folders.
 */
export async function removeDeadTemporaries(parent: string, isName: (name: string) => boolean, ownFiles: ReadonlySet<string>): Promise<string[]> {
  const removed: string[] = [];
  for (const entry of existsSync(parent) ? readdirSync(parent) : []) {
    const match = TEMPORARY_NAME.exec(entry);
    const dir = path.join(parent, entry);
    if (!match || !isName(match[1]) || temporaryWriterIsLive(dir)) continue;
    if (await removeOwnFolder(dir, ownFiles)) removed.push(dir);
  }
  return removed;
}

/**
 * Reads the files of a folder written by writeFolderAtomically and checks each against the sha256 in its COMPLETE
 * marker, when the marker holds checksums (markers of older versions hold only a time: nothing to check).
 */
export async function readCheckedFiles(dir: string, names: readonly string[]): Promise<Map<string, Buffer>> {
  const marker = path.join(dir, COMPLETE_MARKER);
  const sums = new Map<string, string>();
  if (existsSync(marker)) {
    for (const line of (await readFile(marker, 'utf8')).split('\n')) {
      const match = CHECKSUM_LINE.exec(line.trim());
      if (match) sums.set(match[2], match[1]);
    }
  }
  const out = new Map<string, Buffer>();
  for (const name of names) {
    const file = path.join(dir, name);
    let data: Buffer;
    try {
      data = await readFile(file);
    } catch (err) {
      throw new Error(`${file} cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
    const expected = sums.get(name);
    if (expected !== undefined && sha256(data) !== expected) {
      throw new Error(`${file} does not match the sha256 its folder's ${COMPLETE_MARKER} marker recorded when it was saved: it was changed or damaged since`);
    }
    out.set(name, data);
  }
  return out;
}
