// Metric records: one JSON object per line of a run folder's metrics.jsonl, the source of truth for curves. The
// run logger writes them, W&B receives them, compare and the tests read them back; all share this one shape and check.
import fs from 'node:fs';
import path from 'node:path';
import { METRICS_FILE } from '../store/layout.ts';

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
  /** Train, tensorflow backend: values and bytes the last step read back into JavaScript (backend/readback.ts). */
  readback_values?: number;
  readback_bytes?: number;
}

const REQUIRED_NUMBERS = ['step', 'tokens', 'loss', 'ppl', 'lr', 'tokens_per_s', 'elapsed_s'] as const;

/** Reads and checks every record of a run folder's metrics.jsonl (errors name the file and line). */
export function readMetrics(runDir: string): MetricRecord[] {
  const file = path.join(runDir, METRICS_FILE);
  const text = fs.readFileSync(file, 'utf8');
  const records: MetricRecord[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch {
      throw new Error(`${file}:${i + 1}: not a JSON object: ${line.slice(0, 80)}`);
    }
    checkRecord(record, `${file}:${i + 1}`);
    records.push(record as MetricRecord);
  });
  return records;
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
  for (const key of ['bpb', 'acc', 'epoch_fraction']) {
    if (r[key] !== undefined && typeof r[key] !== 'number' && r[key] !== null) fail(`field ${key} must be a number`);
  }
}
