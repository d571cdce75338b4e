// What makes a folder a run folder: the marker file `.slayformer-run` that RunLogger writes (exclusively, never over
// an existing file) into every run folder it creates, holding a random run id. Nothing else does: a folder that
// merely holds a run's file names (config.json, env.json, checkpoints/, final/) is not a run, and a resume never
// prunes, overwrites or appends to it. Each checkpoint records the run id (state.json `runId`), so a checkpoint copied
// into another run's checkpoints/ does not continue there either.
//
// Run folders of versions before the marker have none: a resume from them continues in a new run folder (the log
// says so). `touch <run>/.slayformer-run` makes one a run again: an empty marker carries no id, so it adopts the
// checkpoints under it.
//
// A run folder being trained holds the lock `.slayformer-lock` (src/core/lock-file.ts, the kind a sweep's run takes):
// the trainer takes it before a resume changes anything, so two `train --resume` of one run cannot interleave its
// metrics; a lock whose process died on this host is taken over.
//
// Run folders are named `<name>-<UTC timestamp>[-n]` (RunLogger, src/telemetry/run-logger.ts); listRunFolders finds a recipe's.
import { randomUUID } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readFileSync, readSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';
import type { Recipe } from '../recipe/schema.ts';
import { COMPLETE_MARKER } from '../core/atomic-folder.ts';
import { holderIsLive, takeLockFile, thisProcess } from '../core/lock-file.ts';
import { CHECKPOINT_NAME, CHECKPOINTS_DIR, ENV_FILE, FINAL_DIR, RUN_LOCK, RUN_MARKER } from './layout.ts';

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
  if (!stat.isFile() || stat.size > MARKER_MAX_BYTES)
    return { marked: false, why: `${file} is not a run marker (a file of at most ${MARKER_MAX_BYTES} bytes)` };
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

/** Locks run folder `dir` for this process (see the top of this file), or throws naming the live holder. Returns the release. */
export function lockRunFolder(dir: string): () => void {
  const file = path.join(dir, RUN_LOCK);
  const lock = takeLockFile(file, thisProcess(), (holder) => !holderIsLive(holder));
  if (!lock.held) {
    const { pid, host, startedAt } = lock.holder;
    throw new Error(
      `cannot train in ${dir}: another process trains it (pid ${pid} on ${host}, since ${startedAt}; its lock is ${file}); wait for it to end (the lock of a process that died on this host is taken over)`,
    );
  }
  return lock.release;
}

/** How to make an older version's run folder a run again. */
function markAdvice(dir: string): string {
  return `a run folder written by slayformer before it marked its run folders becomes one again with: touch ${path.join(dir, RUN_MARKER)}`;
}

export interface CheckpointInfo {
  dir: string;
  step: number;
}

/** Complete checkpoints of a run folder, oldest first (temporary and unmarked folders are ignored). */
export function listCheckpoints(runDir: string): CheckpointInfo[] {
  const parent = path.join(runDir, CHECKPOINTS_DIR);
  if (!existsSync(parent)) return [];
  const out: CheckpointInfo[] = [];
  for (const entry of readdirSync(parent)) {
    const match = CHECKPOINT_NAME.exec(entry);
    const dir = path.join(parent, entry);
    if (match && existsSync(path.join(dir, COMPLETE_MARKER))) out.push({ dir, step: Number(match[1]) });
  }
  return out.sort((a, b) => a.step - b.step);
}

/**
 * The run folder a model folder belongs to — `<run>/final` or `<run>/checkpoints/step-NNNNNN` where `<run>` carries
 * the marker (src/store/checkpoint.ts) — or null and why not. `runId`: a checkpoint's own (its state.json), compared
 * with the marker's; null when it has none.
 */
export function runFolderOf(modelDir: string, runId: string | null = null): { runDir: string; outsideRun: null } | { runDir: null; outsideRun: string } {
  const abs = path.resolve(modelDir);
  const parent = path.dirname(abs);
  let runDir: string;
  if (path.basename(abs) === FINAL_DIR) runDir = parent;
  else if (CHECKPOINT_NAME.test(path.basename(abs)) && path.basename(parent) === CHECKPOINTS_DIR) runDir = path.dirname(parent);
  else return { runDir: null, outsideRun: `is not inside a run folder (<run>/${CHECKPOINTS_DIR}/step-NNNNNN)` };
  const marker = readRunMarker(runDir);
  if (!marker.marked) return { runDir: null, outsideRun: `is not inside a run folder (${marker.why}; ${markAdvice(runDir)})` };
  if (marker.id !== '' && runId !== null && marker.id !== runId) {
    return {
      runDir: null,
      outsideRun: `is not inside a run folder (${runDir} belongs to another run: its ${RUN_MARKER} id differs from the checkpoint's runId)`,
    };
  }
  return { runDir, outsideRun: null };
}

/**
 * The part of a run folder's name before its timestamp: the run's name with any character unsafe in a file name or a
 * shell word replaced by `_` (`+` and `=` stay: src/recipe/run-name.ts writes overrides as `+key=value`).
 */
export function runFolderPrefix(name: string): string {
  return name.replace(/[^A-Za-z0-9._+=-]/g, '_');
}

/** `<name>-YYYYMMDD-HHMMSS[-n]`, as RunLogger names run folders: [timestamp, n], or null for another name. */
function runFolderOrder(name: string, entry: string): [string, number] | null {
  const escaped = runFolderPrefix(name).replace(/[.+]/g, '\\$&');
  const match = new RegExp(`^${escaped}-(\\d{8}-\\d{6})(?:-(\\d+))?$`).exec(entry);
  return match ? [match[1], Number(match[2] ?? 1)] : null;
}

/**
 * The run folders of recipe `name` under `parent` (marked or not), oldest first: `<parent>/<name>-<timestamp>[-n]`.
 * A name that is no folder (a file, a dangling link) is passed over.
 */
export function listRunFolders(parent: string, name: string): string[] {
  if (!existsSync(parent)) return [];
  return readdirSync(parent)
    .map((entry) => ({ entry, order: runFolderOrder(name, entry) }))
    .filter(
      (r): r is { entry: string; order: [string, number] } =>
        r.order !== null && statSync(path.join(parent, r.entry), { throwIfNoEntry: false })?.isDirectory() === true,
    )
    .sort((a, b) => (a.order[0] === b.order[0] ? a.order[1] - b.order[1] : a.order[0] < b.order[0] ? -1 : 1))
    .map(({ entry }) => path.join(parent, entry));
}

/**
 * `recipe` with data.dataset and data.tokenizer pointing where they are now for a run folder that may have moved:
 * a recorded absolute path that no longer exists is replaced by its run-relative form from env.json (its `paths`,
 * written by RunLogger) when that one exists. Returns the recipe unchanged when nothing moved (or the run has no
 * env.json).
 */
export function relocateRecipePaths(recipe: Recipe, runDir: string): Recipe {
  let paths: Record<string, { absolute?: unknown; fromRun?: unknown } | null> | undefined;
  try {
    paths = JSON.parse(readFileSync(path.join(runDir, ENV_FILE), 'utf8')).paths;
  } catch {
    return recipe;
  }
  const moved = (key: 'dataset' | 'tokenizer', current: string): string => {
    const recorded = paths?.[key];
    if (existsSync(current) || typeof recorded?.fromRun !== 'string') return current;
    const candidate = path.resolve(runDir, recorded.fromRun);
    return existsSync(candidate) ? candidate : current;
  };
  return { ...recipe, data: { ...recipe.data, dataset: moved('dataset', recipe.data.dataset), tokenizer: moved('tokenizer', recipe.data.tokenizer) } };
}
