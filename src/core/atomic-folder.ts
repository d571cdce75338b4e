// Folders written whole or not at all (checkpoints, final/), with the sha256 of every file in their
// COMPLETE marker, and removal that never touches a file this project did not write.
//
// A folder is written as `.<name>.tmp-<pid>/`: every file is written and fsynced, then COMPLETE
// (`<sha256>  <file>` lines, the format `sha256sum -c COMPLETE` checks), the folder is fsynced and
// renamed to `<name>`, and the parent is fsynced. A folder called `<name>` is therefore always
// complete. An existing `<name>` is first renamed aside (`.<name>.old-<pid>`) and removed after the
// new one is in place, so a crash leaves a complete copy under one of the two names.
//
// Removal never follows a symbolic link: a folder that is a link (a checkpoint or final/ moved to another disk and
// linked back) may be read, but is never emptied or removed, nor is what it points to. A linked `<name>` that a new
// folder replaces is kept beside it as `<name>.link-<pid>`, and the caller is told.
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync } from 'node:fs';
import { mkdir, open, readFile, readlink, rename, rm, rmdir } from 'node:fs/promises';
import path from 'node:path';
import { errorNaming } from './own-file.ts';

export const COMPLETE_MARKER = 'COMPLETE';
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
  await mkdir(parent, { recursive: true });
  const target = path.join(parent, name);
  const tmp = path.join(parent, `.${name}.tmp-${process.pid}`);
  const linked = isSymbolicLink(target);
  const aside = linked ? `${target}.link-${process.pid}` : path.join(parent, `.${name}.old-${process.pid}`);
  if (!linked && existsSync(target)) assertOnlyOwnFiles(target, ownFiles);
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp);
  const sums: string[] = [];
  for (const [file, data] of files) {
    await writeFileSynced(path.join(tmp, file), data);
    sums.push(`${sha256(data)}  ${file}`);
  }
  await writeFileSynced(path.join(tmp, COMPLETE_MARKER), sums.join('\n') + '\n');
  await syncDir(tmp);
  const replacing = linked || existsSync(target);
  if (replacing) await rename(target, aside);
  await rename(tmp, target);
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
    .filter((e) => !(ownFiles.has(e.name) || e.name === COMPLETE_MARKER || e.name === `${COMPLETE_MARKER}.tmp`) || !e.isFile())
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
