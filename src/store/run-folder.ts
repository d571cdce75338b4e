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
//
// RunFolder is the one reader of a run folder's files (docs/layout.md, "Recipe and store"): the marker, config.json,
// env.json, summary.json, metrics.jsonl (the last two parsed by run-record.ts) and the checkpoints. Compare, eval and
// export (the model card, a model's data paths), `--resume` and `initFrom auto:`, the run logger resuming, sweeps, the
// paper runner and W&B's replay read a run through it, so each file is found, size-checked and named in errors once.
import { randomUUID } from 'node:crypto';
import { closeSync, existsSync, openSync, readdirSync, readSync, statSync, writeSync } from 'node:fs';
import path from 'node:path';
import type { DataSection } from '../recipe/schema.ts';
import { COMPLETE_MARKER } from '../core/atomic-folder.ts';
import { holderIsLive, takeLockFile, thisProcess } from '../core/lock-file.ts';
import { CHECKPOINT_NAME, CHECKPOINTS_DIR, ENV_FILE, FINAL_DIR, METRICS_FILE, RUN_CONFIG_FILE, RUN_LOCK, RUN_MARKER, SUMMARY_FILE } from './layout.ts';
import { readMetrics, readRunJsonObject, readSummary, type MetricRecord, type ReadMetricsOptions, type SummaryFields } from './run-record.ts';

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

/** For readers to whom a broken file says nothing: given, a file that exists but cannot be read is said here and read as absent. */
export interface UnreadableOption {
  unreadable?: (message: string) => void;
}

/**
 * A run folder as its readers see it (see the top of this file). A class rather than loose functions: the folder is
 * named once, each of its files has one method (the one way it is read, checked and named in errors), and a caller
 * passes the run on as one value. Nothing is cached: a run being trained changes under its readers, and each call
 * reads the file as it is now.
 */
export class RunFolder {
  private constructor(readonly dir: string) {}

  /** The run folder `dir` (as given: errors name its files under the same path). */
  static at(dir: string): RunFolder {
    return new RunFolder(dir);
  }

  file(name: string): string {
    return path.join(this.dir, name);
  }

  has(name: string): boolean {
    return existsSync(this.file(name));
  }

  /** What its marker says (readRunMarker). */
  marker(): RunMarker {
    return readRunMarker(this.dir);
  }

  /** Whether it holds a run, finished or not: its marker (what RunLogger writes first), or the files of a run of an older version. */
  holdsRun(): boolean {
    return [RUN_MARKER, RUN_CONFIG_FILE, METRICS_FILE].some((name) => this.has(name));
  }

  /** Whether the run finished: summary.json is written last, whole. */
  finished(): boolean {
    return this.has(SUMMARY_FILE);
  }

  /**
   * config.json: the recipe as the run recorded it (any version's, so its fields are the caller's to check). Missing or
   * broken is an error naming the file (a marked folder without it: an incomplete run folder); given `unreadable`,
   * said there and undefined.
   */
  config(): Record<string, unknown>;
  config(opts: UnreadableOption): Record<string, unknown> | undefined;
  config({ unreadable }: UnreadableOption = {}): Record<string, unknown> | undefined {
    const file = this.file(RUN_CONFIG_FILE);
    try {
      if (!existsSync(file) && this.has(RUN_MARKER))
        throw new Error(`${file}: missing: ${this.dir} is an incomplete run folder (interrupted before it started?)`);
      return readRunJsonObject(file);
    } catch (err) {
      if (!unreadable) throw err;
      unreadable((err as Error).message);
      return undefined;
    }
  }

  /** env.json (src/telemetry/environment.ts): undefined when absent (an older run); broken is an error naming it, or, given `unreadable`, said there. */
  env({ unreadable }: UnreadableOption = {}): Record<string, unknown> | undefined {
    if (!this.has(ENV_FILE)) return undefined;
    try {
      return readRunJsonObject(this.file(ENV_FILE));
    } catch (err) {
      if (!unreadable) throw err;
      unreadable((err as Error).message);
      return undefined;
    }
  }

  /** summary.json: undefined when the run has not finished (readSummary). */
  summary(opts: UnreadableOption = {}): SummaryFields | undefined {
    return readSummary(this.dir, opts);
  }

  /** metrics.jsonl's records, each checked (readMetrics). */
  metrics(opts: ReadMetricsOptions = {}): MetricRecord[] {
    return readMetrics(this.dir, opts);
  }

  /** Its complete checkpoints, oldest first. */
  checkpoints(): CheckpointInfo[] {
    return listCheckpoints(this.dir);
  }

  /**
   * A recipe's data section with data.dataset and data.tokenizer pointing where they are now for a run folder that
   * may have moved: a recorded absolute path that no longer exists is replaced by its run-relative form from env.json
   * (its `paths`, written by RunLogger) when that one exists. Returns the section unchanged when nothing moved (or the
   * run has no readable env.json).
   */
  relocateDataPaths(data: DataSection): DataSection {
    const recorded = this.env({ unreadable: () => {} })?.paths;
    if (recorded === undefined) return data;
    const paths = recorded as Record<string, { absolute?: unknown; fromRun?: unknown } | null> | null;
    const moved = (key: 'dataset' | 'tokenizer', current: string): string => {
      const entry = paths?.[key];
      if (existsSync(current) || typeof entry?.fromRun !== 'string') return current;
      const candidate = path.resolve(this.dir, entry.fromRun);
      return existsSync(candidate) ? candidate : current;
    };
    return { ...data, dataset: moved('dataset', data.dataset), tokenizer: moved('tokenizer', data.tokenizer) };
  }
}
