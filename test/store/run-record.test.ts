// The run record (src/store/run-record.ts): metrics.jsonl's one reader and its one tolerance, summary.json's typed
// shapes written and read back.
import fs from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readMetrics, readSummary, writeSummary, type MetricRecord, type TrainingSummaryRecord } from '../../src/store/run-record.ts';

const root = fs.mkdtempSync(path.join(tmpdir(), 'slayformer-run-record-'));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let folders = 0;
const runDir = () => fs.mkdtempSync(path.join(root, `run${folders++}-`));

const record = (step: number, split: 'train' | 'val' = 'train'): MetricRecord => ({
  step,
  tokens: step * 64,
  split,
  loss: 5 - step / 10,
  ppl: Math.exp(5 - step / 10),
  lr: 1e-3,
  grad_norm: 1,
  tokens_per_s: 100,
  elapsed_s: step,
});
const lines = (records: MetricRecord[]) => records.map((r) => JSON.stringify(r) + '\n').join('');

describe('readMetrics', () => {
  it('drops a last line cut short only when the caller takes that tolerance, and says so', () => {
    const dir = runDir();
    const file = path.join(dir, 'metrics.jsonl');
    fs.writeFileSync(file, lines([record(1), record(2, 'val')]) + '{"step": 3, "tok');
    expect(() => readMetrics(dir)).toThrow(`${file}:3: not valid JSON`);
    const said: string[] = [];
    expect(readMetrics(dir, { cutLastLine: (m) => said.push(m) })).toEqual([record(1), record(2, 'val')]);
    expect(said).toEqual([`${file}:3: incomplete last line ignored`]);
  });

  it('refuses a broken line that is not the last, and a record of the wrong shape, with either tolerance', () => {
    const dir = runDir();
    const file = path.join(dir, 'metrics.jsonl');
    fs.writeFileSync(file, `{"step": 1, "sp\n${lines([record(2)])}`);
    expect(() => readMetrics(dir, { cutLastLine: () => {} })).toThrow(`${file}:1: not valid JSON`);
    // A cut line followed by its newline is not a write in progress: the file is damaged.
    fs.writeFileSync(file, `${lines([record(1)])}{"step": 2, "sp\n`);
    expect(() => readMetrics(dir, { cutLastLine: () => {} })).toThrow(`${file}:2: not valid JSON`);
    fs.writeFileSync(file, lines([{ ...record(1), split: 'test' as 'train' }]));
    expect(() => readMetrics(dir, { cutLastLine: () => {} })).toThrow(`${file}:1: metric record field split must be "train" or "val"`);
  });

  it('names a missing metrics.jsonl as an incomplete run folder', () => {
    const dir = runDir();
    expect(() => readMetrics(dir)).toThrow(`${path.join(dir, 'metrics.jsonl')}: missing: ${dir} is an incomplete run folder`);
  });
});

describe('summary.json', () => {
  const training: TrainingSummaryRecord = {
    steps: 20,
    tokens: 2560,
    elapsed_s: 3.5,
    train_tokens_per_s: 731,
    val_loss: 4.25,
    val_ppl: Math.exp(4.25),
    val_bpb: 1.7,
    val_acc: 0.12,
    parameters: 12345,
    final: 'final',
    records: 7,
    peak_rss_bytes: 2 ** 28,
    finished_at: '2026-11-28T06:00:00.000Z',
  };

  it('is written whole (no .tmp left) and reads back as written, for a training run and for a paper unit', () => {
    const trained = runDir();
    writeSummary(trained, training);
    expect(readSummary(trained)).toEqual(training);
    const unit = runDir();
    writeSummary(unit, { headline: '11/12 tasks agree', elapsed_s: 2, finished_at: training.finished_at });
    expect(readSummary(unit)).toEqual({ headline: '11/12 tasks agree', elapsed_s: 2, finished_at: training.finished_at });
    expect(fs.readdirSync(trained).concat(fs.readdirSync(unit))).toEqual(['summary.json', 'summary.json']);
  });

  it('reads a field only with its type: a diverged loss (null) or a hand-edited string is missing, not a wrong number', () => {
    const dir = runDir();
    fs.writeFileSync(path.join(dir, 'summary.json'), JSON.stringify({ ...training, val_loss: null, tokens: '2560', headline: 5 }));
    const summary = readSummary(dir)!;
    expect(summary.val_loss).toBeUndefined();
    expect(summary.tokens).toBeUndefined();
    expect(summary.headline).toBeUndefined();
    expect(summary.steps).toBe(20);
  });

  it('is undefined for an unfinished run; a broken one is an error naming it, or said and passed over when the caller asks', () => {
    const dir = runDir();
    expect(readSummary(dir)).toBeUndefined();
    const file = path.join(dir, 'summary.json');
    fs.writeFileSync(file, '{"steps": ');
    expect(() => readSummary(dir)).toThrow(`${file}: not valid JSON`);
    fs.writeFileSync(file, '[1, 2]');
    expect(() => readSummary(dir)).toThrow(`${file}: expected a JSON object`);
    const said: string[] = [];
    expect(readSummary(dir, { unreadable: (m) => said.push(m) })).toBeUndefined();
    expect(said).toEqual([`${file}: expected a JSON object`]);
  });
});
