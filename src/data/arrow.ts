// Arrow IPC shards, the first shard format (src/data/shard-format.ts): streaming reads of one text column and a
// header-only scan for cheap row and byte counts. The writer, for `npm run prepare`, is src/data/prepare/arrow-writer.ts.
import fs from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import { Message, MessageHeader, RecordBatch, RecordBatchReader, Schema, Type } from 'apache-arrow';
import type { DataType, Vector } from 'apache-arrow';
import { dictionaryLayout, offsetSpanProblem, offsetsProblem, recordBatchProblem, textColumnLayout } from './arrow-layout.ts';
import { footerDictionaryOffsets, metadataProblem } from './arrow-metadata.ts';
import type { BatchHeader, TextColumnLayout } from './arrow-layout.ts';
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
    throw new ArrowShardError(file, `column "${column}" has type ${typeName(type)}; expected a string column (Utf8 "string" or LargeUtf8 "large_string")`);
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
    const metadata = new Uint8Array(legacyLength);
    await handle.read(metadata, 0, legacyLength, 4);
    try {
      if (metadataProblem(metadata, 'message') === null && Message.decode(metadata).headerType === MessageHeader.Schema) return;
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
    await checkOpeningMetadata(await ShardMessages.open(handle, file));
    // A FileHandle (not createReadStream): file-format shards are then read lazily batch by batch
    // instead of being buffered whole (docs/data.md, Shards).
    const reader = await RecordBatchReader.from(handle);
    await reader.open();
    if (!reader.schema) throw new Error('no schema message');
    return { handle, reader };
  } catch (err) {
    await handle.close();
    if (err instanceof ArrowShardError) throw err;
    throw new ArrowShardError(file, `truncated or corrupt: not a readable Arrow IPC file (stream or file format): ${(err as Error).message}`);
  }
}

/**
 * Checks the metadata apache-arrow decodes when it opens a shard (arrow-metadata.ts): a stream's first message (the
 * schema), or a file's footer and the dictionary batches it lists. Later messages are checked before they are read.
 */
async function checkOpeningMetadata(messages: ShardMessages): Promise<void> {
  const { file, size } = messages;
  if (size < 6 || (await messages.readAt(0, 6)).toString('latin1') !== 'ARROW1') {
    await messages.messageAt(0, undefined);
    return;
  }
  // File format: …, footer, its int32 length, "ARROW1".
  const length = size >= 10 ? (await messages.readAt(size - 10, 4)).readInt32LE(0) : -1;
  if (!(length > 0 && length <= size - 18)) throw new ArrowShardError(file, `corrupt: a footer of ${length} bytes in a file of ${size}`);
  const footer = new Uint8Array(await messages.readAt(size - 10 - length, length));
  const problem = metadataProblem(footer, 'footer');
  if (problem) throw new ArrowShardError(file, `corrupt: ${problem}`);
  for (const offset of footerDictionaryOffsets(footer)) await messages.messageAt(offset, undefined);
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

/** Throws, naming the file and the batch, when the offsets of a Utf8/LargeUtf8 chunk (`what`) step outside its text. */
function checkOffsets(file: string, batchIndex: number, what: string, data: Vector['data'][number]): void {
  const offsets = data.valueOffsets as Int32Array | BigInt64Array;
  const problem = offsetsProblem(offsets, data.offset, data.length, data.values.length);
  if (problem) throw new ArrowShardError(file, `corrupt: ${what}: ${problem}`, batchIndex);
}

/**
 * The strings of a Utf8/LargeUtf8 (or dictionary-of-string) column chunk, nulls kept, and how many invalid UTF-8
 * sequences the decoder replaced by U+FFFD (counted for plain string columns: U+FFFD characters in the decoded text
 * minus those encoded in the bytes; dictionary columns count 0). Offsets that step outside the text, and dictionary
 * indices outside the dictionary, are an error naming the file and the batch.
 */
function columnTexts(file: string, batchIndex: number, column: string, vector: Vector): { texts: (string | null)[]; invalidUtf8: number } {
  const out: (string | null)[] = new Array(vector.length);
  const data = vector.data.length === 1 ? vector.data[0] : null;
  if (data && (data.typeId === Type.Utf8 || data.typeId === Type.LargeUtf8)) {
    checkOffsets(file, batchIndex, `column "${column}"`, data);
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
    const invalidUtf8 = ascii ? replacementChars(whole) : out.reduce((n, t) => n + (t === null ? 0 : replacementChars(t)), 0) - encodedReplacementChars(bytes);
    return { texts: out, invalidUtf8: Math.max(0, invalidUtf8) };
  }
  for (const chunk of vector.data) {
    const dictionary = chunk.dictionary;
    if (!dictionary) continue;
    for (const values of dictionary.data) checkOffsets(file, batchIndex, `the dictionary of column "${column}"`, values);
    const indices = chunk.values as ArrayLike<number | bigint>;
    for (let i = 0; i < chunk.length; i++) {
      const index = Number(indices[chunk.offset + i]);
      if ((chunk.nullCount === 0 || chunk.getValid(i)) && !(index >= 0 && index < dictionary.length)) {
        throw new ArrowShardError(file, `corrupt: column "${column}": row ${i} points at dictionary entry ${index} of ${dictionary.length}`, batchIndex);
      }
    }
  }
  for (let i = 0; i < vector.length; i++) out[i] = (vector.get(i) as string | null) ?? null;
  return { texts: out, invalidUtf8: 0 };
}

/** A record batch whose header was checked against its bytes (recordBatchProblem) before anything decodes it. */
interface CheckedBatch {
  /** Its index in the shard. */
  index: number;
  rows: number;
  bodyStart: number;
  header: BatchHeader;
  layout: TextColumnLayout;
}

/** What a file-format reader's footer says: the record batch blocks. */
interface FooterBlocks {
  numRecordBatches: number;
  getRecordBatch(index: number): { offset: number | bigint } | null;
}

/**
 * Positional reads of a shard's IPC messages, each declared length checked against the file's size before it is
 * read, and each record batch header against its body (arrow-layout.ts) before apache-arrow decodes it.
 */
class ShardMessages {
  private constructor(
    readonly handle: FileHandle,
    readonly file: string,
    readonly size: number,
  ) {}

  static async open(handle: FileHandle, file: string): Promise<ShardMessages> {
    return new ShardMessages(handle, file, (await handle.stat()).size);
  }

  async readAt(position: number, length: number): Promise<Buffer> {
    const buf = Buffer.alloc(length);
    const { bytesRead } = await this.handle.read(buf, 0, length, position);
    if (bytesRead < length) throw new Error(`unexpected end of file at byte ${position + bytesRead}`);
    return buf;
  }

  /** The IPC message at `position` (continuation marker optional); null at the end-of-stream marker. */
  async messageAt(position: number, batch: number | undefined): Promise<{ message: Message; bodyStart: number; end: number } | null> {
    const { file, size } = this;
    const cut =
      batch === undefined
        ? 'truncated or corrupt: the file ends inside a message its header points at'
        : 'truncated: the file ends inside this record batch (or before the end-of-stream marker)';
    if (position + 4 > size) throw new ArrowShardError(file, cut, batch);
    let length = (await this.readAt(position, 4)).readInt32LE(0);
    position += 4;
    if (length === -1) {
      if (position + 4 > size) throw new ArrowShardError(file, cut, batch);
      length = (await this.readAt(position, 4)).readInt32LE(0);
      position += 4;
    }
    if (length === 0) return null;
    if (length < 0) throw new ArrowShardError(file, `corrupt: invalid message length ${length} at byte ${position - 4}`, batch);
    if (position + length > size) throw new ArrowShardError(file, cut, batch);
    const metadata = new Uint8Array(await this.readAt(position, length));
    const problem = metadataProblem(metadata, 'message');
    if (problem) throw new ArrowShardError(file, `corrupt: ${problem}`, batch);
    let message: Message;
    try {
      message = Message.decode(metadata);
    } catch (err) {
      throw new ArrowShardError(file, `corrupt message header: ${(err as Error).message}`, batch);
    }
    const bodyStart = position + length;
    const end = bodyStart + Number(message.bodyLength);
    if (!(end <= size)) throw new ArrowShardError(file, cut, batch);
    return { message, bodyStart, end };
  }

  /** The record batch message at `position` with its header checked (`batch`: its index, for errors). */
  async recordBatchAt(position: number, batch: number, layout: TextColumnLayout): Promise<CheckedBatch> {
    const at = await this.messageAt(position, batch);
    if (!at || at.message.headerType !== MessageHeader.RecordBatch)
      throw new ArrowShardError(this.file, 'corrupt: the footer points at no record batch', batch);
    return this.check(at.message, at.bodyStart, batch, layout);
  }

  check(message: Message, bodyStart: number, batch: number, layout: TextColumnLayout): CheckedBatch {
    const header = message.header() as unknown as BatchHeader;
    const problem = recordBatchProblem(header, Number(message.bodyLength), layout);
    if (problem) throw new ArrowShardError(this.file, `corrupt: ${problem}`, batch);
    return { index: batch, rows: header.length, bodyStart, header, layout };
  }

  /** The layout of `column` in `schema` (checked to be a string column), or an error naming the file. */
  layoutOf(schema: Schema, column: string): TextColumnLayout {
    checkTextColumn(this.file, schema, column);
    const layout = textColumnLayout(schema, column);
    if (typeof layout === 'string') throw new ArrowShardError(this.file, layout);
    return layout;
  }

  /** File format: the record batches the footer lists, from `fromBatch` on, each checked. */
  async *fileBatches(footer: FooterBlocks, layout: TextColumnLayout, fromBatch: number): AsyncGenerator<CheckedBatch> {
    for (let i = fromBatch; i < footer.numRecordBatches; i++) {
      const block = footer.getRecordBatch(i);
      if (!block) throw new ArrowShardError(this.file, 'record batch listed in the footer is missing', i);
      yield await this.recordBatchAt(Number(block.offset), i, layout);
    }
  }

  /**
   * Stream format: the record batches in order, each checked, from the schema message to the end-of-stream marker
   * (a file cut short is an error naming the batch, also when cut exactly between two messages, which apache-arrow
   * reads as a clean end). Dictionary batches are checked too; pre-0.15 streams (no continuation marker) pass.
   */
  async *streamBatches(column: string): AsyncGenerator<CheckedBatch> {
    let position = 0;
    let batches = 0;
    let schema: Schema | null = null;
    let layout: TextColumnLayout | null = null;
    for (;;) {
      const at = await this.messageAt(position, batches);
      if (!at) break;
      position = at.end;
      if (at.message.headerType === MessageHeader.Schema) {
        schema = at.message.header() as Schema;
        layout = this.layoutOf(schema, column);
      } else if (at.message.headerType === MessageHeader.DictionaryBatch) {
        const header = at.message.header() as unknown as { id: number; data: BatchHeader };
        const valueType = schema?.dictionaries.get(header.id);
        if (valueType && (valueType.typeId === Type.Utf8 || valueType.typeId === Type.LargeUtf8)) {
          const problem = recordBatchProblem(header.data, Number(at.message.bodyLength), dictionaryLayout(valueType));
          if (problem) throw new ArrowShardError(this.file, `corrupt: the dictionary batch before this record batch: ${problem}`, batches);
        }
      } else if (at.message.headerType === MessageHeader.RecordBatch) {
        if (!layout) throw new ArrowShardError(this.file, 'corrupt: record batch before the schema message', batches);
        yield this.check(at.message, at.bodyStart, batches, layout);
        batches++;
      }
    }
    if (!layout) throw new ArrowShardError(this.file, 'corrupt: no schema message');
  }
}

/** The text of a decoded record batch, after checking that apache-arrow read the rows its checked header declares. */
function batchTexts(file: string, batchIndex: number, column: string, batch: RecordBatch, checked: CheckedBatch): TextBatch {
  if (batch.numRows !== checked.rows) {
    throw new ArrowShardError(file, `corrupt: the record batch decodes to ${batch.numRows} rows, its header declares ${checked.rows}`, batchIndex);
  }
  const vector = batch.getChild(column);
  if (!vector) throw new ArrowShardError(file, `column "${column}" missing from the record batch`, batchIndex);
  return { batchIndex, ...columnTexts(file, batchIndex, column, vector) };
}

/**
 * Streams one shard record batch by record batch (IPC stream or file format), starting at record
 * batch `fromBatch`. Batches before it are skipped without decoding their text (file format: not
 * even read, thanks to the footer). Never loads the whole shard. Each record batch's header is checked
 * against its bytes before apache-arrow decodes it (ShardMessages).
 */
export async function* readTextBatches(file: string, column: string, fromBatch = 0): AsyncGenerator<TextBatch> {
  if (!Number.isInteger(fromBatch) || fromBatch < 0) {
    throw new ArrowShardError(file, `fromBatch must be a non-negative integer, got ${fromBatch}`);
  }
  const { handle, reader } = await openReader(file);
  try {
    const messages = await ShardMessages.open(handle, file);
    const layout = messages.layoutOf(reader.schema, column);
    if (reader.isFile()) {
      for await (const checked of messages.fileBatches(reader.footer!, layout, fromBatch)) {
        const batchIndex = checked.index;
        let batch: RecordBatch | null;
        try {
          batch = await reader.readRecordBatch(batchIndex);
        } catch (err) {
          throw new ArrowShardError(file, `corrupt or truncated record batch: ${(err as Error).message}`, batchIndex);
        }
        if (!batch) throw new ArrowShardError(file, 'record batch listed in the footer is missing', batchIndex);
        yield batchTexts(file, batchIndex, column, batch, checked);
      }
      return;
    }
    // In step: the next message header is read and checked here before apache-arrow decodes that message.
    const checkedBatches = messages.streamBatches(column);
    const iterator = reader[Symbol.asyncIterator]();
    for (let batchIndex = 0; ; batchIndex++) {
      const checked = await checkedBatches.next();
      let step: IteratorResult<RecordBatch>;
      try {
        step = await iterator.next();
      } catch (err) {
        throw new ArrowShardError(file, `corrupt or truncated record batch: ${(err as Error).message}`, batchIndex);
      }
      // apache-arrow yields one empty placeholder batch for a stream that holds none: that is the end too.
      if (checked.done && !step.done && step.value.numRows === 0) break;
      if (checked.done !== step.done) {
        throw new ArrowShardError(
          file,
          `corrupt: ${checked.done ? 'a record batch after the end of the messages' : 'the reader found no record batch here'}`,
          batchIndex,
        );
      }
      if (step.done) break;
      if (batchIndex >= fromBatch) yield batchTexts(file, batchIndex, column, step.value, checked.value!);
    }
  } finally {
    await Promise.resolve(reader.cancel()).catch(() => undefined);
    await handle.close().catch(() => undefined);
  }
}

/**
 * Reads only the IPC message headers (plus two offsets per batch) to count rows and text bytes:
 * a few small reads per 1,000-row batch instead of reading the data. Each header is checked against its
 * bytes (ShardMessages), and the two offsets against the batch's text.
 */
export async function scanShard(file: string, column: string): Promise<ShardScan> {
  const handle = await openHandle(file);
  try {
    await assertArrowIpc(handle, file);
    const messages = await ShardMessages.open(handle, file);
    let rows = 0;
    let batches = 0;
    const batchRows: number[] = [];
    let textBytes: number | null = 0;
    const count = async ({ rows: n, bodyStart, header, layout }: CheckedBatch) => {
      rows += n;
      batchRows.push(n);
      if (layout.dictionary) textBytes = null;
      if (textBytes !== null && n > 0) {
        // Text bytes = last offset - first offset of the column's offsets buffer.
        const offsets = header.buffers[layout.buffer + 1];
        const value = async (i: number) => {
          const buf = await messages.readAt(bodyStart + offsets.offset + i * layout.width, layout.width);
          return layout.width === 8 ? Number(buf.readBigInt64LE(0)) : buf.readInt32LE(0);
        };
        const [first, last] = [await value(0), await value(n)];
        const problem = offsetSpanProblem(first, last, header.buffers[layout.buffer + 2].length);
        if (problem) throw new ArrowShardError(file, `corrupt: column "${column}": ${problem}`, batches);
        textBytes += last - first;
      }
      batches++;
    };

    const magic = messages.size >= 6 ? (await messages.readAt(0, 6)).toString('latin1') : '';
    if (magic === 'ARROW1') {
      // File format: the footer lists every record batch block (not all writers repeat the schema message).
      const { handle: readerHandle, reader } = await openReader(file);
      try {
        if (!reader.isFile()) throw new ArrowShardError(file, 'corrupt: ARROW1 magic but no readable footer');
        const layout = messages.layoutOf(reader.schema, column);
        for await (const checked of messages.fileBatches(reader.footer!, layout, 0)) await count(checked);
      } finally {
        await readerHandle.close();
      }
      return { rows, batches, batchRows, textBytes };
    }
    for await (const checked of messages.streamBatches(column)) await count(checked);
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
