// The run record: what a run folder says about its run, typed once and read through one reader per file.
//   metrics.jsonl   MetricRecord, one JSON object per line, the source of truth for curves: the run logger writes
//                   them, W&B and TensorBoard receive them, compare, the model card, sweep plan and the tests read them
//   summary.json    SummaryRecord, written last and whole (it marks the run done): a training run's TrainingSummaryRecord
//                   (the trainer's numbers, TrainingRun.finish, and the run logger's own) or a paper unit's
//                   UnitSummaryRecord (src/paper/run.ts), whose headline is what `sweep status` shows
// It lives in src/store, beside the file names (layout.ts), because the store reads it too (`initFrom: auto:` the
// tokens and loss of each finished run, the model card its evaluation); telemetry, report, sweep and paper import it.
import fs from 'node:fs';
import path from 'node:path';
import { StringDecoder } from 'node:string_decoder';
import { isRecord, readJsonFile } from '../core/json.ts';
import { replaceOwnFile } from '../core/own-file.ts';
import { METRICS_FILE, SUMMARY_FILE } from './layout.ts';

export interface MetricRecord {
  step: number;
  tokens: number;
  split: 'train' | 'val';
  loss: number;
  ppl: number;
  lr: number;
  grad_norm: number | null;
  tokens_per_s: number;
  elapsed_s: number;
  /** Validation: bits per byte. */
  bpb?: number;
  /** Validation: top-1 accuracy over the loss's tokens (next-token for GPT, masked-token for BERT). */
  acc?: number;
  epoch_fraction?: number;
  /** Train: the model FLOP/s the window's tokens/s stands for (src/model/flops.ts), and its fraction of the device's peak. */
  model_flops_per_s?: number;
  mfu?: number;
  /** Train, tensorflow backend: values and bytes the last step read back into JavaScript (backend/readback.ts). */
  readback_values?: number;
  readback_bytes?: number;
  /** Validation with train.estimatorHealth: each layer's estimator health (src/train/estimator-health.ts). */
  estimator_health?: EstimatorHealthRecord;
  /** Validation: the loss of the same tokens by their position in the sequence (src/train/evaluate.ts, positionBucketEdges). */
  by_position?: PositionLossRecord[];
}

/** The labelled tokens at positions [from, to) of their sequences and their mean loss (null when there are none). */
export interface PositionLossRecord {
  from: number;
  to: number;
  loss: number | null;
  tokens: number;
}

/** More buckets than any sequence length gives (they double from 1 to at most 2^31): a record claiming more is not ours. */
export const MAX_POSITION_BUCKETS = 64;

/** What is wrong with a list of position buckets (metrics.jsonl's or eval.json's by_position), or null. */
export function positionBucketsProblem(rows: unknown): string | null {
  if (!Array.isArray(rows) || rows.length === 0 || rows.length > MAX_POSITION_BUCKETS) return `must be a list of 1 to ${MAX_POSITION_BUCKETS} buckets`;
  const bad = rows.findIndex(
    (row) =>
      !isRecord(row) ||
      !Number.isInteger(row.from) ||
      !Number.isInteger(row.to) ||
      (row.from as number) < 0 ||
      (row.to as number) <= (row.from as number) ||
      !Number.isInteger(row.tokens) ||
      (row.tokens as number) < 0 ||
      !(row.loss === null || (typeof row.loss === 'number' && Number.isFinite(row.loss))),
  );
  return bad < 0 ? null : `[${bad}] must be {from, to, loss, tokens} with 0 ≤ from < to (got ${JSON.stringify(rows[bad])})`;
}

/** Estimator health per layer: arrays indexed by layer (docs/training.md#estimator-health). */
export interface EstimatorHealthRecord {
  kernel_error: number[];
  output_error: number[];
  denominator_min: number[];
  denominator_p01: number[];
  denominator_p50: number[];
}

export const ESTIMATOR_HEALTH_FIELDS = ['kernel_error', 'output_error', 'denominator_min', 'denominator_p01', 'denominator_p50'] as const;

/** The fields that measure the run's speed: a run repeated exactly (a resume, a replay) differs in these alone. */
export const SPEED_FIELDS = ['tokens_per_s', 'elapsed_s', 'model_flops_per_s', 'mfu'] as const;

const REQUIRED_NUMBERS = ['step', 'tokens', 'loss', 'ppl', 'lr', 'tokens_per_s', 'elapsed_s'] as const;

export interface ReadMetricsOptions {
  /**
   * Given, a last line cut short (no newline after it, and it does not parse: a write interrupted by a crash) is
   * dropped and said here; without it, that line is an error like any other. Readers of a finished or abandoned run
   * (compare, the model card, sweep plan) pass it; the run logger resuming a run does not, because it writes back
   * what it read and must not lose a line silently, nor do W&B's replay and the tests, which read what must be whole.
   */
  cutLastLine?: (message: string) => void;
}

/**
 * The longest metrics.jsonl line read, in characters: a record with estimator health for BOUNDS.layers layers is
 * under 200 KiB, so a longer line is no record, and is refused before it is held whole.
 */
export const METRIC_LINE_MAX_CHARS = 2 ** 20;
/** The most bytes a run's JSON file (config.json, env.json, summary.json) may hold: they are a few KiB (env.json grows by an entry per resume). */
export const RUN_JSON_MAX_BYTES = 16 * 2 ** 20;

/**
 * Reads and checks every record of a run folder's metrics.jsonl: each line a MetricRecord (checkRecord; a diverged
 * loss is logged as null and accepted). Read a chunk at a time, so that the file's size allocates nothing beyond
 * its records. Errors name the file and the line.
 */
export function readMetrics(runDir: string, { cutLastLine }: ReadMetricsOptions = {}): MetricRecord[] {
  const file = path.join(runDir, METRICS_FILE);
  const cannotRead = (err: unknown) => {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return new Error(`${file}: missing: ${runDir} is an incomplete run folder (interrupted before its first metric record?)`);
    return new Error(`${file}: cannot be read (${code ?? (err as Error).message})`);
  };
  const records: MetricRecord[] = [];
  const take = (line: string, index: number, last: boolean) => {
    const where = `${file}:${index + 1}`;
    if (line.length > METRIC_LINE_MAX_CHARS) throw new Error(`${where}: a line of over ${METRIC_LINE_MAX_CHARS} characters, longer than any metric record`);
    if (line.trim() === '') return;
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch (err) {
      if (cutLastLine && last) {
        cutLastLine(`${where}: incomplete last line ignored`);
        return;
      }
      throw new Error(`${where}: not valid JSON (${(err as Error).message}): ${line.slice(0, 80)}`);
    }
    checkRecord(record, where);
    records.push(record);
  };
  let fd: number;
  try {
    fd = fs.openSync(file, 'r');
  } catch (err) {
    throw cannotRead(err);
  }
  try {
    const chunk = Buffer.alloc(2 ** 16);
    const decoder = new StringDecoder('utf8');
    let pending = '';
    let index = 0;
    for (;;) {
      let bytes: number;
      try {
        bytes = fs.readSync(fd, chunk, 0, chunk.length, null);
      } catch (err) {
        throw cannotRead(err);
      }
      if (bytes === 0) break;
      const lines = (pending + decoder.write(chunk.subarray(0, bytes))).split('\n');
      pending = lines.pop()!;
      for (const line of lines) take(line, index++, false);
      // The line still being read, checked before the next chunk is added to it.
      if (pending.length > METRIC_LINE_MAX_CHARS) take(pending, index, false);
    }
    take(pending + decoder.end(), index, true);
  } finally {
    fs.closeSync(fd);
  }
  return records;
}

/**
 * A run's JSON file that must hold an object (config.json, env.json, summary.json), its size checked before it is
 * read (RUN_JSON_MAX_BYTES). Errors name the file.
 */
export function readRunJsonObject(file: string): Record<string, unknown> {
  const stat = fs.statSync(file, { throwIfNoEntry: false });
  if (stat && !stat.isFile()) throw new Error(`${file}: not a file`);
  if (stat && stat.size > RUN_JSON_MAX_BYTES)
    throw new Error(
      `${file}: ${stat.size.toLocaleString('en-US')} bytes, more than a run's JSON file holds (at most ${RUN_JSON_MAX_BYTES.toLocaleString('en-US')}); not read`,
    );
  const value = readJsonFile(file);
  if (!isRecord(value)) throw new Error(`${file}: expected a JSON object`);
  return value;
}

/** Throws unless `record` has every required field with the right type (NaN/Infinity read back as null). */
export function checkRecord(record: unknown, where: string): asserts record is MetricRecord {
  const r = record as Record<string, unknown>;
  const fail = (problem: string) => {
    throw new Error(`${where}: metric record ${problem} (got ${JSON.stringify(record)})`);
  };
  if (typeof record !== 'object' || record === null) fail('must be an object');
  if (r.split !== 'train' && r.split !== 'val') fail(`field split must be "train" or "val"`);
  for (const key of REQUIRED_NUMBERS) {
    // A diverged loss is NaN, which JSON writes as null: accepted, so the record is kept rather than lost.
    if (typeof r[key] !== 'number' && !(r[key] === null && key !== 'step' && key !== 'tokens')) fail(`field ${key} must be a number`);
  }
  if (!Number.isInteger(r.step) || (r.step as number) < 0) fail('field step must be an integer ≥ 0');
  if (typeof r.grad_norm !== 'number' && r.grad_norm !== null) fail('field grad_norm must be a number or null');
  for (const key of ['bpb', 'acc', 'epoch_fraction', 'model_flops_per_s', 'mfu']) {
    if (r[key] !== undefined && typeof r[key] !== 'number' && r[key] !== null) fail(`field ${key} must be a number`);
  }
  if (r.estimator_health !== undefined) {
    const health = r.estimator_health as Record<string, unknown>;
    if (!isRecord(health)) fail('field estimator_health must be an object');
    for (const key of ESTIMATOR_HEALTH_FIELDS) {
      const values = health[key];
      // A NaN (no query with a positive exact kernel) is written as null.
      if (!Array.isArray(values) || !values.every((v) => typeof v === 'number' || v === null))
        fail(`field estimator_health.${key} must be a list of numbers, one per layer`);
    }
  }
  if (r.by_position !== undefined) {
    const problem = positionBucketsProblem(r.by_position);
    if (problem) fail(`field by_position${problem.startsWith('[') ? '' : ' '}${problem}`);
  }
}

/** A training run's summary as the trainer builds it at its end (TrainingRun.finish). */
export interface TrainingSummary {
  steps: number;
  /** Tokens trained (input tokens, as train.maxTokens counts them). */
  tokens: number;
  elapsed_s: number;
  train_tokens_per_s: number;
  val_loss: number;
  val_ppl: number;
  val_bpb: number;
  val_acc: number;
  parameters: number;
  /** The final model's folder, relative to the run folder. */
  final: string;
  /** Training FLOPs per token (src/model/flops.ts); the peak FLOP/s of the devices and the run's MFU against it, where known. */
  model_flops_per_token?: number;
  peak_flops_per_s?: number;
  mfu?: number;
}

/** summary.json of a training run: the trainer's summary and what the run logger adds when it writes it. */
export interface TrainingSummaryRecord extends TrainingSummary {
  /** Lines in metrics.jsonl. */
  records: number;
  /** Peak resident memory of the whole process (replica threads included, not a GPU's memory). */
  peak_rss_bytes: number;
  finished_at: string;
}

/** summary.json of a paper experiment's unit (src/paper/run.ts). */
export interface UnitSummaryRecord {
  /** One line on the unit's outcome: `sweep status` shows it. */
  headline: string;
  elapsed_s: number;
  finished_at: string;
}

export type SummaryRecord = TrainingSummaryRecord | UnitSummaryRecord;

/**
 * summary.json as read back: every field that has its type, the others left out (a run of an older version lacks
 * some; NaN, written as null, reads as missing).
 */
export type SummaryFields = Partial<TrainingSummaryRecord> & Partial<UnitSummaryRecord>;

/** The summary's fields that are strings; every other field is a number. */
const STRING_FIELDS: Record<string, true> = { final: true, finished_at: true, headline: true } satisfies {
  [K in keyof SummaryFields as SummaryFields[K] extends string | undefined ? K : never]-?: true;
};

/**
 * A run folder's summary.json: undefined when the run has none (not finished). A file that cannot be read, does not
 * parse or holds no object is an error naming it, or, given `unreadable`, said there and read as no summary: for
 * readers to whom a broken summary says nothing (which run `initFrom auto:` takes, a model card, `sweep status`).
 */
export function readSummary(runDir: string, { unreadable }: { unreadable?: (message: string) => void } = {}): SummaryFields | undefined {
  const file = path.join(runDir, SUMMARY_FILE);
  if (!fs.existsSync(file)) return undefined;
  let value: Record<string, unknown>;
  try {
    value = readRunJsonObject(file);
  } catch (err) {
    if (!unreadable) throw err;
    unreadable((err as Error).message);
    return undefined;
  }
  const fields: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    if (Object.hasOwn(STRING_FIELDS, key) ? typeof v === 'string' : typeof v === 'number' && Number.isFinite(v)) fields[key] = v;
  }
  return fields as SummaryFields;
}

/**
 * Writes a run folder's summary.json aside and renames it into place: it marks the run done (sweeps, `initFrom
 * auto:`, compare), so whoever sees it exists must find it whole.
 */
export function writeSummary(runDir: string, summary: SummaryRecord): void {
  replaceOwnFile(path.join(runDir, SUMMARY_FILE), JSON.stringify(summary, null, 2) + '\n');
}
