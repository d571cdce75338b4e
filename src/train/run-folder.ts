// What makes a folder a run folder: the marker file `.slayformer-run` that RunLogger writes (exclusively, never over
// an existing file) into every run folder it creates, holding a random run id. Nothing else does: a folder that
// merely holds a run's file names (config.json, env.json, checkpoints/, final/) is not a run, and a resume never
// prunes, overwrites or appends to it. Each checkpoint records the run id (state.json `runId`), so a checkpoint copied
// into another run's checkpoints/ does not continue there either.
//
// Run folders of versions before the marker have none: a resume from them continues in a new run folder (the log
// says so). `touch <run>/.slayformer-run` makes one a run again: an empty marker carries no id, so it adopts the
// checkpoints under it.
import { randomUUID } from 'node:crypto';
import { closeSync, openSync, readSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';

export const RUN_MARKER = '.slayformer-run';
/** A run id as markRunFolder writes it (a UUID), and the most a marker may hold. */
export const RUN_ID_PATTERN = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const MARKER_MAX_BYTES = 256;

/** Writes the marker with a new run id into `dir` (just created by the caller); fails if a marker exists. Returns the id. */
export function markRunFolder(dir: string): string {
  const id = randomUUID();
  const fd = openSync(path.join(dir, RUN_MARKER), 'wx');
  try {
    writeSync(fd, `${id}\n`);
  } finally {
    closeSync(fd);
  }
  return id;
}

/** What `dir`'s marker says: absent (not a run), a run id, or '' (an empty marker, written by hand). */
export type RunMarker = { marked: false; why: string } | { marked: true; id: string };

/** Reads `dir`'s marker: a regular file of at most 256 bytes holding a run id or nothing. */
export function readRunMarker(dir: string): RunMarker {
  const file = path.join(dir, RUN_MARKER);
  const stat = statSync(file, { throwIfNoEntry: false });
  if (!stat) return { marked: false, why: `${dir} has no ${RUN_MARKER} marker` };
  if (!stat.isFile() || stat.size > MARKER_MAX_BYTES) return { marked: false, why: `${file} is not a run marker (a file of at most ${MARKER_MAX_BYTES} bytes)` };
  const buffer = Buffer.alloc(stat.size);
  const fd = openSync(file, 'r');
  try {
    readSync(fd, buffer, 0, stat.size, 0);
  } finally {
    closeSync(fd);
  }
  const id = buffer.toString('utf8').trim();
  if (id !== '' && !RUN_ID_PATTERN.test(id)) return { marked: false, why: `${file} is not a run marker (it holds neither a run id nor nothing)` };
  return { marked: true, id };
}

/** Throws unless `dir` carries the marker; `action` says what was about to happen ("resume in"). */
export function assertRunFolder(dir: string, action: string): string {
  const marker = readRunMarker(dir);
  if (!marker.marked) throw new Error(`cannot ${action} ${dir}: it is not a run folder (${marker.why}; ${markAdvice(dir)})`);
  return marker.id;
}

/** How to make an older version's run folder a run again. */
export function markAdvice(dir: string): string {
  return `a run folder written by slayformer before it marked its run folders becomes one again with: touch ${path.join(dir, RUN_MARKER)}`;
}
