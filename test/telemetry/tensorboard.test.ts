// TensorBoard event files: the CRC32C against its published test vectors, the TFRecord framing, and the run
// logger's event file read back by TensorBoard's own reader (record CRCs checked, Event protobufs parsed,
// the scalars its EventAccumulator shows), live and after a resume. The reader needs a Python with
// `tensorboard` (`npm run setup:transformers` installs it in .venv-hf); without one that part is skipped with
// one line saying so.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { readMetrics, type MetricRecord } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { crc32c, maskedCrc32c, recordScalars, tfRecord } from '../../src/telemetry/tensorboard.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { findPythonWith, TRANSFORMERS_SETUP } from '../helpers/python.ts';
import { makeTinySetup, tinyRecipeText } from '../train/checkpoint-fixtures.ts';
import { TRAINING_SUMMARY } from '../helpers/run-record.ts';

const python = findPythonWith(['tensorboard']);
if (!python) console.warn(`skipped: reading event files back with TensorBoard's reader needs a Python with tensorboard (set up with: ${TRANSFORMERS_SETUP})`);

let tmp: string;
beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'tensorboard-test-'));
});
afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

function recipe(more = ''): ReturnType<typeof parseRecipe> {
  return parseRecipe(`name: tb\ndata: {dataset: d, tokenizer: t.json}\ntrain: {runDir: ${JSON.stringify(tmp)}}\nwandb: {enabled: false}\n${more}`, 'tb.yaml');
}

const train = (step: number, loss: number): MetricRecord => ({
  step,
  tokens: step * 256,
  split: 'train',
  loss,
  ppl: Math.exp(loss),
  lr: 1e-3 * Math.min(1, step / 10),
  grad_norm: 1 / step,
  tokens_per_s: 1000 + step,
  elapsed_s: step * 0.5,
  epoch_fraction: step / 100,
});
const val = (step: number, loss: number): MetricRecord => ({
  step,
  tokens: step * 256,
  split: 'val',
  loss,
  ppl: Math.exp(loss),
  lr: 1e-3,
  grad_norm: null,
  tokens_per_s: 5000,
  elapsed_s: step * 0.5 + 0.1,
  bpb: loss / Math.LN2 / 4,
  acc: 0.25,
});

interface Read {
  files: string[];
  events: Record<string, { wall_time: number; step: number; file_version?: string; values?: Record<string, number> }[]>;
  scalars: Record<string, [number, number, number][]>;
}

function readWithTensorBoard(dir: string): Read {
  const run = spawnSync(python!, ['test/telemetry/tensorboard_check.py', dir], { encoding: 'utf8', timeout: 120_000 });
  if (run.status !== 0) throw new Error(`tensorboard_check.py exited with ${run.status}:\n${run.stderr}`);
  return JSON.parse(run.stdout) as Read;
}

const f32 = (x: number) => Math.fround(x);

describe('CRC32C and TFRecord framing', () => {
  it('gives the CRC32C test vectors (the check value and RFC 3720 B.4)', () => {
    const bytes = (n: number, at: (i: number) => number) => Uint8Array.from({ length: n }, (_, i) => at(i));
    expect(crc32c(Buffer.from('123456789'))).toBe(0xe3069283);
    expect(crc32c(bytes(32, () => 0))).toBe(0x8a9136aa);
    expect(crc32c(bytes(32, () => 0xff))).toBe(0x62a8ab43);
    expect(crc32c(bytes(32, (i) => i))).toBe(0x46dd794e);
    expect(crc32c(bytes(32, (i) => 31 - i))).toBe(0x113fdb5c);
    expect(crc32c(new Uint8Array(0))).toBe(0);
  });

  it('masks as TFRecord does and frames length, CRC, data, CRC', () => {
    // mask(c) = rotr15(c) + 0xa282ead8 (mod 2^32), computed here in BigInt.
    const crc = BigInt(crc32c(Buffer.from('123456789')));
    const rotated = ((crc >> 15n) | (crc << 17n)) & 0xffffffffn;
    expect(maskedCrc32c(Buffer.from('123456789'))).toBe(Number((rotated + 0xa282ead8n) & 0xffffffffn));
    const data = Buffer.from('hello');
    const frame = tfRecord(data);
    expect(frame.length).toBe(8 + 4 + 5 + 4);
    expect(frame.readBigUInt64LE(0)).toBe(5n);
    expect(frame.readUInt32LE(8)).toBe(maskedCrc32c(frame.subarray(0, 8)));
    expect(frame.subarray(12, 17).toString()).toBe('hello');
    expect(frame.readUInt32LE(17)).toBe(maskedCrc32c(data));
  });

  it("names a record's scalars as W&B does, the step and time left to the event", () => {
    expect(recordScalars(val(20, 4))).toEqual({
      tokens: 5120,
      'val/loss': 4,
      'val/ppl': Math.exp(4),
      'val/lr': 1e-3,
      'val/tokens_per_s': 5000,
      'val/bpb': 4 / Math.LN2 / 4,
      'val/acc': 0.25,
    });
  });
});

describe.skipIf(!python)("the run logger's event file, read by TensorBoard", () => {
  it('holds every record as it lands: train loss, lr, grad norm, tokens/s, val loss/ppl/bpb/acc at their steps', async () => {
    const logger = await RunLogger.create(recipe(), { echo: false });
    const records = [train(10, 5.5), train(20, 5.1), val(20, 5.2)];
    for (const r of records) logger.log(r);
    // Read while the run is still open (before finish): TensorBoard follows a live run.
    const live = readWithTensorBoard(logger.dir);
    expect(live.files).toHaveLength(1);
    expect(live.files[0]).toMatch(/^events\.out\.tfevents\.\d+\.slayformer$/);
    const start = Number(/tfevents\.(\d+)\./.exec(live.files[0])![1]);
    expect(Math.abs(start - Date.now() / 1000)).toBeLessThan(600);
    const events = live.events[live.files[0]];
    expect(events[0]).toEqual({ wall_time: start, step: 0, file_version: 'brain.Event:2' });
    expect(events.slice(1).map((e) => e.step)).toEqual([10, 20, 20]);
    events.slice(1).forEach((event, i) => {
      expect(event.wall_time).toBeCloseTo(start + records[i].elapsed_s, 9);
      const expected = Object.fromEntries(Object.entries(recordScalars(records[i])).map(([tag, v]) => [tag, f32(v)]));
      expect(event.values).toEqual(expected);
    });
    expect(live.scalars['train/loss'].map(([step, , v]) => [step, v])).toEqual([
      [10, f32(5.5)],
      [20, f32(5.1)],
    ]);
    for (const tag of ['train/lr', 'train/grad_norm', 'train/tokens_per_s', 'train/ppl', 'val/loss', 'val/ppl', 'val/bpb', 'val/acc'])
      expect(live.scalars[tag], tag).toBeDefined();
    expect(live.scalars['val/grad_norm']).toBeUndefined(); // null in the record: no point
    logger.log(train(30, 4.9));
    expect(readWithTensorBoard(logger.dir).scalars['train/loss'].map(([step]) => step)).toEqual([10, 20, 30]);
    await logger.finish(TRAINING_SUMMARY);
  });

  it('a training run on the wasm backend: TensorBoard shows every record of metrics.jsonl', async () => {
    await initBackend('wasm', { quiet: true });
    const setup = await makeTinySetup(tmp);
    const text = tinyRecipeText(setup, path.join(tmp, 'runs')).replace('backend: cpu', 'backend: wasm');
    const { runDir } = await runTraining(parseRecipe(text, path.join(tmp, 'tiny.yaml')));
    const records = readMetrics(runDir);
    const read = readWithTensorBoard(runDir);
    for (const split of ['train', 'val'] as const) {
      const own = records.filter((r) => r.split === split).map((r) => [r.step, f32(r.loss)]);
      expect(own.length).toBeGreaterThan(1);
      expect(read.scalars[`${split}/loss`].map(([step, , v]) => [step, v])).toEqual(own);
    }
  });

  it('a resume rewrites it from the records kept, so TensorBoard shows one history', async () => {
    const first = await RunLogger.create(recipe(), { echo: false });
    for (const r of [train(10, 5), train(20, 4.8), val(20, 4.9), train(30, 4.7)]) first.log(r);
    const before = readWithTensorBoard(first.dir).files;
    const resumed = await RunLogger.create(recipe(), { echo: false, resumeDir: first.dir, resumeStep: 20 });
    resumed.log(train(30, 4.6));
    const read = readWithTensorBoard(first.dir);
    expect(read.files).toEqual(before);
    expect(read.scalars['train/loss'].map(([step, , v]) => [step, v])).toEqual([
      [10, f32(5)],
      [20, f32(4.8)],
      [30, f32(4.6)],
    ]);
    expect(read.scalars['val/loss'].map(([step]) => step)).toEqual([20]);
  });

  it("a corrupted byte fails TensorBoard's CRC check (the check is real)", async () => {
    const logger = await RunLogger.create(recipe(), { echo: false });
    logger.log(train(10, 5));
    const file = path.join(logger.dir, readWithTensorBoard(logger.dir).files[0]);
    const bytes = fs.readFileSync(file);
    bytes[bytes.length - 6] ^= 1; // inside the last record's data
    fs.writeFileSync(file, bytes);
    expect(() => readWithTensorBoard(logger.dir)).toThrow(/failed event crc32 check/);
  });
});

describe('tensorboard.enabled', () => {
  it('is on by default; false writes no event file', async () => {
    const eventFiles = (dir: string) => fs.readdirSync(dir).filter((name) => name.includes('tfevents'));
    const on = await RunLogger.create(recipe(), { echo: false });
    on.log(train(10, 5));
    expect(eventFiles(on.dir)).toHaveLength(1);
    const off = await RunLogger.create(recipe('tensorboard: {enabled: false}'), { echo: false });
    off.log(train(10, 5));
    expect(eventFiles(off.dir)).toEqual([]);
  });
});
