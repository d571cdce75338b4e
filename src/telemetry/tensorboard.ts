// TensorBoard event files: each metric record as one `tensorflow.Event` of scalar summaries, so that
// `tensorboard --logdir runs` shows every run folder as a run, live. The file is a TFRecord stream: per
// record the data's length (uint64 LE), the masked CRC32C of those 8 bytes, the data, the masked CRC32C
// of the data. The data is a protobuf `Event { double wall_time = 1; int64 step = 2; oneof { string
// file_version = 3; Summary summary = 5; } }`, `Summary { repeated Value value = 1; }`, `Value { string
// tag = 1; float simple_value = 2; }` (tensorflow/core/util/event.proto, summary.proto).
//
// Hand-written because nothing fits: tfjs-node's `tf.node.summaryFileWriter` runs TensorFlow ops, so it
// exists only on the native backend (and this project builds its own binding, src/backend/native-build.ts),
// while the records must reach TensorBoard on every backend, wasm and cpu included. No npm package writes
// event files (@roboflow/tfrecords frames tf.Example records, with google-protobuf, crypto-js and three more
// dependencies), and a protobuf library would be a dependency for five fields. The few lines below are
// checked against the CRC32C test vectors and read back by TensorBoard's own reader
// (test/telemetry/tensorboard.test.ts).
import fs from 'node:fs';
import path from 'node:path';
import { appendOwnFile, assertNotLink, writeOwnFile } from '../core/own-file.ts';
import { TENSORBOARD_FILE_PREFIX, TENSORBOARD_FILE_SUFFIX } from '../store/layout.ts';
import type { MetricRecord } from '../store/run-record.ts';
import { scalarRow } from './record-scalars.ts';
import type { TelemetrySink } from './sink.ts';

/** The CRC32C (Castagnoli) table, reflected polynomial 0x82F63B78. */
const CRC32C_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

export function crc32c(bytes: Uint8Array): number {
  let crc = 0xffffffff;
  for (const byte of bytes) crc = CRC32C_TABLE[(crc ^ byte) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** TFRecord's masked CRC: rotated right by 15 bits plus a constant, so that a CRC of CRCs is not trivial. */
export function maskedCrc32c(bytes: Uint8Array): number {
  const crc = crc32c(bytes);
  return (((crc >>> 15) | (crc << 17)) + 0xa282ead8) >>> 0;
}

/** One TFRecord frame around `data`. */
export function tfRecord(data: Uint8Array): Buffer {
  const length = Buffer.alloc(8);
  length.writeBigUInt64LE(BigInt(data.length));
  const lengthCrc = Buffer.alloc(4);
  lengthCrc.writeUInt32LE(maskedCrc32c(length));
  const dataCrc = Buffer.alloc(4);
  dataCrc.writeUInt32LE(maskedCrc32c(data));
  return Buffer.concat([length, lengthCrc, data, dataCrc]);
}

/** The protobuf wire format of the few fields an Event of scalars needs. */
class ProtoWriter {
  private readonly parts: Buffer[] = [];

  private varint(value: number): void {
    const bytes: number[] = [];
    let v = BigInt(value);
    do {
      const low = Number(v & 0x7fn);
      v >>= 7n;
      bytes.push(v > 0n ? low | 0x80 : low);
    } while (v > 0n);
    this.parts.push(Buffer.from(bytes));
  }

  private key(field: number, wireType: number): void {
    this.varint((field << 3) | wireType);
  }

  double(field: number, value: number): this {
    this.key(field, 1);
    const b = Buffer.alloc(8);
    b.writeDoubleLE(value);
    this.parts.push(b);
    return this;
  }

  float(field: number, value: number): this {
    this.key(field, 5);
    const b = Buffer.alloc(4);
    b.writeFloatLE(value);
    this.parts.push(b);
    return this;
  }

  /** A non-negative integer (int64 as a varint). */
  uint(field: number, value: number): this {
    this.key(field, 0);
    this.varint(value);
    return this;
  }

  bytes(field: number, value: Uint8Array): this {
    this.key(field, 2);
    this.varint(value.length);
    this.parts.push(Buffer.from(value));
    return this;
  }

  string(field: number, value: string): this {
    return this.bytes(field, Buffer.from(value, 'utf8'));
  }

  finish(): Buffer {
    return Buffer.concat(this.parts);
  }
}

/** The first event of every file: the version string TensorBoard checks. */
function fileVersionEvent(wallTime: number): Buffer {
  return new ProtoWriter().double(1, wallTime).string(3, 'brain.Event:2').finish();
}

/** An Event holding one scalar summary value per tag. */
function scalarsEvent(wallTime: number, step: number, scalars: Record<string, number>): Buffer {
  const summary = new ProtoWriter();
  for (const [tag, value] of Object.entries(scalars)) summary.bytes(1, new ProtoWriter().string(1, tag).float(2, value).finish());
  return new ProtoWriter().double(1, wallTime).uint(2, step).bytes(5, summary.finish()).finish();
}

/**
 * A record's scalars, named as W&B names them (`train/loss`, `val/acc`, `train/lr`, …, `tokens`,
 * `epoch_fraction`; scalarRow, record-scalars.ts): the step is the event's step and elapsed_s its time, so both are left out,
 * as are null values (a diverged loss, validation's grad_norm).
 */
export function recordScalars(record: MetricRecord): Record<string, number> {
  return Object.fromEntries(Object.entries(scalarRow(record)).filter(([name]) => name !== 'step' && name !== 'elapsed_s'));
}

/**
 * The event file of one run folder, `events.out.tfevents.<seconds>.slayformer` (TensorBoard reads any file
 * whose name holds `tfevents`; <seconds> is when the run started). An event's wall time is that start plus
 * the record's elapsed_s (training time, carried across resumes), so a resumed run rewrites the file from
 * the records it keeps — as metrics.jsonl is — and TensorBoard shows one history, not the dropped steps.
 * Written synchronously, one append per record, so TensorBoard follows a running run. A telemetry sink (sink.ts).
 */
export class TensorBoardWriter implements TelemetrySink {
  readonly file: string;
  private readonly startSeconds: number;

  /** The run folder's event file: the one it holds (a resumed run), else a new one named after now. */
  constructor(runDir: string) {
    const existing = eventFileOf(runDir);
    this.startSeconds = existing?.startSeconds ?? Math.floor(Date.now() / 1000);
    this.file = existing?.file ?? path.join(runDir, `${TENSORBOARD_FILE_PREFIX}${this.startSeconds}${TENSORBOARD_FILE_SUFFIX}`);
  }

  /** Starts (or, given the records a resumed run keeps, rewrites) the event file. */
  start(kept: readonly MetricRecord[]): void {
    const frames = [tfRecord(fileVersionEvent(this.startSeconds)), ...kept.map((r) => this.frame(r))];
    // Never written through a link planted under its name (src/core/own-file.ts), like the run's other files.
    writeOwnFile(this.file, Buffer.concat(frames));
  }

  record(record: MetricRecord): void {
    appendOwnFile(this.file, this.frame(record));
  }

  private frame(record: MetricRecord): Buffer {
    return tfRecord(scalarsEvent(this.startSeconds + (record.elapsed_s ?? 0), record.step, recordScalars(record)));
  }
}

/**
 * Throws, naming it, when a symbolic link is under the event file's name pattern in `runDir`: a resume checks this
 * before it changes any file, as it checks the run's other files.
 */
export function assertNoLinkedEventFile(runDir: string): void {
  eventFileOf(runDir);
}

/**
 * The event file this project wrote in a run folder, if any: found by its exact name pattern. A symbolic link under
 * that name is refused, naming it, as a resume refuses one at any file of the run (not passed over for a second event
 * file beside it, which TensorBoard would read with the link's target as part of the run).
 */
function eventFileOf(runDir: string): { file: string; startSeconds: number } | undefined {
  const pattern = new RegExp(`^${escape(TENSORBOARD_FILE_PREFIX)}(\\d+)${escape(TENSORBOARD_FILE_SUFFIX)}$`);
  for (const name of fs.readdirSync(runDir).sort()) {
    const match = pattern.exec(name);
    if (!match) continue;
    assertNotLink(path.join(runDir, name));
    if (fs.lstatSync(path.join(runDir, name)).isFile()) return { file: path.join(runDir, name), startSeconds: Number(match[1]) };
  }
  return undefined;
}

function escape(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
