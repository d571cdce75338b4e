// Arrow IPC shards, the first shard format (src/data/shard-format.ts): streaming reads of one text column, a header-only scan for cheap row and byte
// counts, and a writer that produces exactly what HuggingFace `datasets` writes (IPC *stream*
// format, 1,000-row record batches, `huggingface` schema metadata holding the features JSON).
import fs from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { once } from 'node:events';
import {
  Field,
  Message,
  MessageHeader,
  RecordBatch,
  RecordBatchReader,
  RecordBatchStreamWriter,
  Schema,
  Type,
  Utf8,
  makeData,
  Struct,
  vectorFromArray,
} from 'apache-arrow';
import type { DataType, Vector } from 'apache-arrow';
import type { ShardFormat, ShardScan, TextBatch } from './shard-format.ts';

/** Rows per record batch, as in `datasets` (config.DEFAULT_MAX_BATCH_SIZE). */
export const ROWS_PER_BATCH = 1000;

/** Error about one Arrow file; the message always names the file (and the record batch when known). */
export class ArrowShardError extends Error {
  constructor(
    readonly file: string,
    message: string,
    readonly batchIndex?: number,
  ) {
    super(`${file}${batchIndex === undefined ? '' : ` (record batch ${batchIndex})`}: ${message}`);
    this.name = 'ArrowShardError';
  }
}

const STRING_TYPES = new Set<Type>([Type.Utf8, Type.LargeUtf8]);

function typeName(type: DataType): string {
  return `${Type[type.typeId] ?? type.typeId} (${String(type)})`;
}

/** Throws, naming the file, unless `column` exists and holds strings (Utf8, LargeUtf8 or a dictionary of them). */
function checkTextColumn(file: string, schema: Schema, column: string): void {
  const field = schema.fields.find((f) => f.name === column);
  if (!field) {
    const present = schema.fields.map((f) => `"${f.name}"`).join(', ') || '(none)';
    throw new ArrowShardError(file, `no column "${column}"; columns present: ${present}`);
  }
  const type = field.type as DataType;
  const valueType = type.typeId === Type.Dictionary ? (type as unknown as { dictionary: DataType }).dictionary : type;
  if (!STRING_TYPES.has(valueType.typeId)) {
    throw new ArrowShardError(
      file,
      `column "${column}" has type ${typeName(type)}; expected a string column (Utf8 "string" or LargeUtf8 "large_string")`,
    );
  }
}

async function openHandle(file: string): Promise<FileHandle> {
  try {
    return await fs.promises.open(file, 'r');
  } catch (err) {
    throw new ArrowShardError(file, `cannot open: ${(err as Error).message}`);
  }
}

/**
 * Throws, saying what the file starts with, unless it starts like an Arrow IPC file: the file format's magic
 * `ARROW1`, the stream format's continuation marker ff ff ff ff, or (pre-0.15 streams) a length followed by a schema
 * message. Without this check a text file named *.arrow reads as "truncated record batch 0".
 */
async function assertArrowIpc(handle: FileHandle, file: string): Promise<void> {
  const { size } = await handle.stat();
  if (size === 0) throw new ArrowShardError(file, 'not an Arrow IPC file: the file is empty');
  const head = Buffer.alloc(Math.min(size, 8));
  await handle.read(head, 0, head.length, 0);
  if (head.subarray(0, 6).toString('latin1') === 'ARROW1' || (head.length >= 4 && head.readUInt32LE(0) === 0xffffffff)) return;
  const legacyLength = head.length >= 4 ? head.readInt32LE(0) : 0;
  if (legacyLength > 0 && 4 + legacyLength <= size && legacyLength <= 1 << 24) {
    const metadata = Buffer.alloc(legacyLength);
    await handle.read(metadata, 0, legacyLength, 4);
    try {
      if (Message.decode(new Uint8Array(metadata)).headerType === MessageHeader.Schema) return;
    } catch {
      // not a message: reported below
    }
  }
  const printable = head.toString('latin1').replace(/[^\x20-\x7e]/g, '.');
  throw new ArrowShardError(
    file,
    `not an Arrow IPC file: it starts with ${head.toString('hex').replace(/(..)/g, '$1 ').trim()} ("${printable}"), ` +
      'while Arrow files start with the stream marker ff ff ff ff or the magic "ARROW1" (is it JSON, Parquet or text? `npm run prepare` converts those)',
  );
}

async function openReader(file: string): Promise<{ handle: FileHandle; reader: RecordBatchReader }> {
  const handle = await openHandle(file);
  try {
    await assertArrowIpc(handle, file);
  } catch (err) {
    await handle.close();
    throw err;
  }
  try {
    // apache-arrow misreads a file-format shard that lost its footer as a stream; say what happened.
    const { size } = await handle.stat();
    const ends = Buffer.alloc(6);
    if (size >= 12) {
      await handle.read(ends, 0, 6, 0);
      const head = ends.toString('latin1');
      await handle.read(ends, 0, 6, size - 6);
      if (head === 'ARROW1' && ends.toString('latin1') !== 'ARROW1') {
        throw new Error('IPC file format without its footer (the file was cut short)');
      }
    }
    // A FileHandle (not createReadStream): file-format shards are then read lazily batch by batch
    // instead of being buffered whole (docs/data.md, Shards).
    const reader = await RecordBatchReader.from(handle);
    await reader.open();
    if (!reader.schema) throw new Error('no schema message');
    return { handle, reader };
  } catch (err) {
    await handle.close();
    throw new ArrowShardError(file, `truncated or corrupt: not a readable Arrow IPC file (stream or file format): ${(err as Error).message}`);
  }
}

/**
 * The IPC stream format ends with an end-of-stream marker (pyarrow and apache-arrow always write
 * ffffffff 00000000). apache-arrow's reader treats a file cut exactly between two messages as a
 * clean end, so a truncated shard would silently lose rows; checking the marker catches that.
 */
async function hasEndOfStream(handle: FileHandle): Promise<boolean> {
  const { size } = await handle.stat();
  if (size < 8) return false;
  const tail = Buffer.alloc(8);
  await handle.read(tail, 0, 8, size - 8);
  return tail.readUInt32LE(0) === 0xffffffff && tail.readUInt32LE(4) === 0;
}

const utf8 = new TextDecoder();

/** Occurrences of U+FFFD (the replacement character) in a string. */
function replacementChars(text: string): number {
  let n = 0;
  for (let at = text.indexOf('\uFFFD'); at >= 0; at = text.indexOf('\uFFFD', at + 1)) n++;
  return n;
}

/** Occurrences of U+FFFD's own UTF-8 encoding (ef bf bd) in raw bytes: replacement characters that were in the text. */
function encodedReplacementChars(bytes: Uint8Array): number {
  const raw = Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let n = 0;
  for (let at = raw.indexOf(REPLACEMENT_UTF8); at >= 0; at = raw.indexOf(REPLACEMENT_UTF8, at + 3)) n++;
  return n;
}
const REPLACEMENT_UTF8 = Buffer.from([0xef, 0xbf, 0xbd]);

/**
 * The strings of a Utf8/LargeUtf8 (or dictionary-of-string) column chunk, nulls kept, and how many invalid UTF-8
 * sequences the decoder replaced by U+FFFD (counted for plain string columns: U+FFFD characters in the decoded text
 * minus those encoded in the bytes; dictionary columns count 0).
 */
function columnTexts(vector: Vector): { texts: (string | null)[]; invalidUtf8: number } {
  const out: (string | null)[] = new Array(vector.length);
  const data = vector.data.length === 1 ? vector.data[0] : null;
  if (data && (data.typeId === Type.Utf8 || data.typeId === Type.LargeUtf8)) {
    // Fast path: one TextDecoder call per batch. When the batch is pure ASCII (as most of C4 is)
    // characters and bytes coincide, so rows are cut from the decoded string by their byte offsets.
    // (Every valid multi-byte UTF-8 sequence decodes to fewer UTF-16 units than bytes and an invalid
    // byte to one U+FFFD, so equal lengths mean one unit per byte.)
    const offsets = data.valueOffsets as Int32Array | BigInt64Array;
    const at = (i: number) => Number(offsets[data.offset + i]);
    const first = at(0);
    const last = at(data.length);
    const bytes = data.values.subarray(first, last);
    const whole = utf8.decode(bytes);
    const ascii = whole.length === last - first;
    for (let i = 0; i < data.length; i++) {
      if (data.nullCount > 0 && !data.getValid(i)) {
        out[i] = null;
      } else if (ascii) {
        out[i] = whole.slice(at(i) - first, at(i + 1) - first);
      } else {
        out[i] = utf8.decode(data.values.subarray(at(i), at(i + 1)));
      }
    }
    // One unit per byte holds only if every byte is ASCII or an invalid byte (each becomes one U+FFFD), so there any
    // U+FFFD is a replacement. Otherwise rows were decoded apart: count on them, less the U+FFFD the text itself held.
    const invalidUtf8 = ascii
      ? replacementChars(whole)
      : out.reduce((n, t) => n + (t === null ? 0 : replacementChars(t)), 0) - encodedReplacementChars(bytes);
    return { texts: out, invalidUtf8: Math.max(0, invalidUtf8) };
  }
  for (let i = 0; i < vector.length; i++) out[i] = (vector.get(i) as string | null) ?? null;
  return { texts: out, invalidUtf8: 0 };
}

/**
 * Streams one shard record batch by record batch (IPC stream or file format), starting at record
 * batch `fromBatch`. Batches before it are skipped without decoding their text (file format: not
 * even read, thanks to the footer). Never loads the whole shard.
 */
export async function* readTextBatches(
  file: string,
  column: string,
  fromBatch = 0,
): AsyncGenerator<TextBatch> {
  if (!Number.isInteger(fromBatch) || fromBatch < 0) {
    throw new ArrowShardError(file, `fromBatch must be a non-negative integer, got ${fromBatch}`);
  }
  const { handle, reader } = await openReader(file);
  try {
    checkTextColumn(file, reader.schema, column);
    if (reader.isFile()) {
      const total = reader.numRecordBatches;
      for (let batchIndex = fromBatch; batchIndex < total; batchIndex++) {
        let batch: RecordBatch | null;
        try {
          batch = await reader.readRecordBatch(batchIndex);
        } catch (err) {
          throw new ArrowShardError(file, `corrupt or truncated record batch: ${(err as Error).message}`, batchIndex);
        }
        if (!batch) throw new ArrowShardError(file, 'record batch listed in the footer is missing', batchIndex);
        yield { batchIndex, ...columnTexts(batch.getChild(column)!) };
      }
      return;
    }
    // Without the usual end marker, walk the message headers: that throws, naming the record
    // batch, if the file was cut short, and passes pre-0.15 "legacy" streams (4-byte marker).
    if (!(await hasEndOfStream(handle))) await scanShard(file, column);
    let batchIndex = 0;
    const iterator = reader[Symbol.asyncIterator]();
    while (true) {
      let step: IteratorResult<RecordBatch>;
      try {
        step = await iterator.next();
      } catch (err) {
        throw new ArrowShardError(file, `corrupt or truncated record batch: ${(err as Error).message}`, batchIndex);
      }
      if (step.done) break;
      if (batchIndex >= fromBatch) {
        const vector = step.value.getChild(column);
        if (!vector) throw new ArrowShardError(file, `column "${column}" missing from the record batch`, batchIndex);
        yield { batchIndex, ...columnTexts(vector) };
      }
      batchIndex++;
    }
  } finally {
    await Promise.resolve(reader.cancel()).catch(() => undefined);
    await handle.close().catch(() => undefined);
  }
}

/** Number of IPC buffers a field occupies in a record batch body (depth-first), or null when unsupported. */
function bufferCount(type: DataType): number | null {
  switch (type.typeId) {
    case Type.Null:
      return 0;
    case Type.Utf8:
    case Type.LargeUtf8:
    case Type.Binary:
    case Type.LargeBinary:
      return 3;
    case Type.Bool:
    case Type.Int:
    case Type.Float:
    case Type.Decimal:
    case Type.Date:
    case Type.Time:
    case Type.Timestamp:
    case Type.Interval:
    case Type.Duration:
    case Type.FixedSizeBinary:
    case Type.Dictionary:
      return 2;
    case Type.List:
    case Type.LargeList:
    case Type.Map: {
      const child = bufferCount(type.children[0].type);
      return child === null ? null : 2 + child;
    }
    case Type.FixedSizeList:
    case Type.Struct: {
      let total = 1;
      for (const c of type.children) {
        const n = bufferCount(c.type);
        if (n === null) return null;
        total += n;
      }
      return total;
    }
    default:
      return null; // unions, view types: not needed for text shards
  }
}

/**
 * Reads only the IPC message headers (plus two offsets per batch) to count rows and text bytes:
 * a few small reads per 1,000-row batch instead of reading the data.
 */
export async function scanShard(file: string, column: string): Promise<ShardScan> {
  const handle = await openHandle(file);
  try {
    await assertArrowIpc(handle, file);
    const { size } = await handle.stat();
    const readAt = async (position: number, length: number): Promise<Buffer> => {
      const buf = Buffer.alloc(length);
      const { bytesRead } = await handle.read(buf, 0, length, position);
      if (bytesRead < length) throw new Error(`unexpected end of file at byte ${position + bytesRead}`);
      return buf;
    };
    const cut = 'truncated: the file ends inside this record batch (or before the end-of-stream marker)';
    /** The IPC message at `position` (continuation marker optional); null at the end-of-stream marker. */
    const messageAt = async (position: number, batch: number) => {
      if (position + 4 > size) throw new ArrowShardError(file, cut, batch);
      let length = (await readAt(position, 4)).readInt32LE(0);
      position += 4;
      if (length === -1) {
        if (position + 4 > size) throw new ArrowShardError(file, cut, batch);
        length = (await readAt(position, 4)).readInt32LE(0);
        position += 4;
      }
      if (length === 0) return null;
      if (length < 0) throw new ArrowShardError(file, `corrupt: invalid message length ${length} at byte ${position - 4}`, batch);
      if (position + length > size) throw new ArrowShardError(file, cut, batch);
      let message: Message;
      try {
        message = Message.decode(new Uint8Array(await readAt(position, length)));
      } catch (err) {
        throw new ArrowShardError(file, `corrupt message header: ${(err as Error).message}`, batch);
      }
      const bodyStart = position + length;
      const end = bodyStart + Number(message.bodyLength);
      if (end > size) throw new ArrowShardError(file, cut, batch);
      return { message, bodyStart, end };
    };

    let rows = 0;
    let batches = 0;
    const batchRows: number[] = [];
    let textBytes: number | null = 0;
    let bufferIndex: number | null = null;
    let large = false;
    const useSchema = (schema: Schema) => {
      checkTextColumn(file, schema, column);
      let index = 0;
      for (const field of schema.fields) {
        if (field.name === column) {
          bufferIndex = index;
          large = field.type.typeId === Type.LargeUtf8;
          if (field.type.typeId === Type.Dictionary) textBytes = null;
          return;
        }
        const n = bufferCount(field.type);
        if (n === null) {
          textBytes = null;
          return;
        }
        index += n;
      }
    };
    const countBatch = async (message: Message, bodyStart: number) => {
      const header = message.header() as unknown as {
        length: number | bigint;
        buffers: { offset: number | bigint; length: number | bigint }[];
        compression: unknown;
      };
      const count = Number(header.length);
      rows += count;
      batchRows.push(count);
      if (header.compression) textBytes = null;
      if (textBytes !== null && bufferIndex !== null && count > 0) {
        // Text bytes = last offset - first offset of the column's offsets buffer.
        const width = large ? 8 : 4;
        const base = bodyStart + Number(header.buffers[bufferIndex + 1].offset);
        const value = async (i: number) => {
          const buf = await readAt(base + i * width, width);
          return large ? Number(buf.readBigInt64LE(0)) : buf.readInt32LE(0);
        };
        textBytes += (await value(count)) - (await value(0));
      }
      batches++;
    };

    const magic = size >= 6 ? (await readAt(0, 6)).toString('latin1') : '';
    if (magic === 'ARROW1') {
      // File format: the footer lists every record batch block (not all writers repeat the schema message).
      const { handle: readerHandle, reader } = await openReader(file);
      try {
        if (!reader.isFile()) throw new ArrowShardError(file, 'corrupt: ARROW1 magic but no readable footer');
        useSchema(reader.schema);
        const footer = reader.footer!;
        for (let i = 0; i < footer.numRecordBatches; i++) {
          const block = footer.getRecordBatch(i)!;
          const at = await messageAt(Number(block.offset), i);
          if (!at || at.message.headerType !== MessageHeader.RecordBatch) {
            throw new ArrowShardError(file, 'corrupt: the footer points at no record batch', i);
          }
          await countBatch(at.message, at.bodyStart);
        }
      } finally {
        await readerHandle.close();
      }
      return { rows, batches, batchRows, textBytes };
    }
    let position = 0;
    let sawSchema = false;
    while (true) {
      const at = await messageAt(position, batches);
      if (!at) break;
      position = at.end;
      if (at.message.headerType === MessageHeader.Schema) {
        useSchema(at.message.header() as Schema);
        sawSchema = true;
      } else if (at.message.headerType === MessageHeader.RecordBatch) {
        if (!sawSchema) throw new ArrowShardError(file, 'corrupt: record batch before the schema message', batches);
        await countBatch(at.message, at.bodyStart);
      }
    }
    if (!sawSchema) throw new ArrowShardError(file, 'corrupt: no schema message');
    return { rows, batches, batchRows, textBytes };
  } catch (err) {
    if (err instanceof ArrowShardError) throw err;
    throw new ArrowShardError(file, `not a valid Arrow IPC file: ${(err as Error).message}`);
  } finally {
    await handle.close();
  }
}

/** The first shard format (src/data/shard-registry.ts): record batches are the batches the cursor addresses. */
export const arrowShards: ShardFormat = { name: 'Arrow IPC', extensions: ['.arrow'], scan: scanShard, readTextBatches };

/** `datasets` features JSON for string columns: {"text": {"dtype": "string", "_type": "Value"}, …}. */
export function stringFeatures(columns: readonly string[]): Record<string, { dtype: string; _type: string }> {
  const features: Record<string, { dtype: string; _type: string }> = {};
  for (const name of columns) features[name] = { dtype: 'string', _type: 'Value' };
  return features;
}

/** Python's json.dumps default separators (", " and ": "), for byte-identical metadata. */
export function pythonJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  const entries = Object.entries(value as Record<string, unknown>).map(([k, v]) => `${JSON.stringify(k)}: ${pythonJson(v)}`);
  return `{${entries.join(', ')}}`;
}

/** Writes one shard of nullable string columns as an Arrow IPC stream, the way `datasets` does. */
export class ArrowShardWriter {
  readonly schema: Schema;
  private readonly writer: RecordBatchStreamWriter;
  private readonly sink: fs.WriteStream;
  private pending: (string | null)[][];
  rows = 0;
  /** UTF-8 bytes of the text column written so far. */
  textBytes = 0;
  /** Arrow buffer bytes (data + offsets + validity) of all columns, what `datasets` reports as num_bytes. */
  arrowBytes = 0;

  constructor(
    readonly file: string,
    readonly columns: readonly string[],
    readonly textColumn: string,
  ) {
    const metadata = new Map([['huggingface', pythonJson({ info: { features: stringFeatures(columns) } })]]);
    this.schema = new Schema(
      columns.map((name) => new Field(name, new Utf8(), true)),
      metadata,
    );
    this.pending = columns.map(() => []);
    this.sink = fs.createWriteStream(file);
    this.writer = new RecordBatchStreamWriter();
    this.writer.toNodeStream().pipe(this.sink);
    this.writer.reset(undefined, this.schema); // writes the schema message even for an empty shard
  }

  /** Adds one row (values in `columns` order); flushes a record batch every 1,000 rows. */
  async append(values: readonly (string | null)[]): Promise<void> {
    for (let c = 0; c < this.columns.length; c++) this.pending[c].push(values[c] ?? null);
    this.rows++;
    if (this.pending[0].length >= ROWS_PER_BATCH) await this.flush();
  }

  private async flush(): Promise<void> {
    const count = this.pending[0].length;
    if (count === 0) return;
    const children = this.pending.map((values) => vectorFromArray(values, new Utf8()).data[0]);
    children.forEach((data, c) => {
      const offsets = data.valueOffsets as Int32Array;
      const bytes = offsets[count] - offsets[0];
      if (this.columns[c] === this.textColumn) this.textBytes += bytes;
      this.arrowBytes += bytes + 4 * (count + 1) + (data.nullCount > 0 ? Math.ceil(count / 8) : 0);
    });
    const structData = makeData({ type: new Struct(this.schema.fields), length: count, nullCount: 0, children });
    this.writer.write(new RecordBatch(this.schema, structData));
    this.pending = this.columns.map(() => []);
    // Backpressure: do not let encoded batches pile up in memory faster than the disk takes them.
    if (this.sink.writableLength > 16 * 1024 * 1024) await once(this.sink, 'drain');
  }

  /** Flushes the last partial batch, writes the end-of-stream marker and closes the file. */
  async close(): Promise<void> {
    await this.flush();
    const finished = once(this.sink, 'finish');
    this.writer.finish();
    await finished;
  }
}
