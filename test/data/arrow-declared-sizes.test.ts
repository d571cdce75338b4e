// Arrow shards whose headers declare more than their bytes hold (rows, buffers, offsets): every reader refuses them
// with an error naming the file and the record batch, before allocating anything from the declared sizes
// (docs/bounds.md, Data files). The shard: 2³¹ − 1 rows declared over 3 offsets, which aborted the process.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Dictionary, Field, Int32, makeData, Message, RecordBatch, Schema, Struct, Utf8 } from 'apache-arrow';
import { readTextBatches, scanShard } from '../../src/data/arrow.ts';
import { describeSplit } from '../../src/data/dataset.ts';
import { openBatchStream } from '../../src/data/stream.ts';
import type { StreamOptions } from '../../src/data/stream-options.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts, trainTokenizer } from '../../src/data/train-tokenizer.ts';
import { collectEvalBatches } from '../../src/train/evaluate.ts';
import { columnBatches, firstRecordBatch, makeTempDir, replaceInt64, writeBatches } from '../fixtures/data.ts';
import type { RecordBatchAt } from '../fixtures/data.ts';
import { startCli } from '../helpers/cli.ts';
import { syntheticDocuments, writeShard } from './stream-fixtures.ts';

const dir = makeTempDir('arrow-sizes');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const regex = (s: string) => new RegExp(s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
/** 2 rows: 3 offsets (0, 2, 5) over 5 bytes of text; apache-arrow pads the buffers to 16 and 8 bytes. */
const ROWS = ['ab', 'cde'];
const MOST_ROWS = 2 ** 31 - 1;

function twoRowBatch(): RecordBatch {
  const valueOffsets = Int32Array.from([0, 2, 5]);
  const text = makeData({ type: new Utf8(), length: 2, nullCount: 0, valueOffsets, data: new Uint8Array(Buffer.from(ROWS.join(''))) });
  const schema = new Schema([new Field('text', new Utf8(), true)]);
  return new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length: 2, nullCount: 0, children: [text] }));
}

const originals: Record<'stream' | 'file', Buffer> = { stream: Buffer.alloc(0), file: Buffer.alloc(0) };
beforeAll(async () => {
  for (const format of ['stream', 'file'] as const) {
    const file = path.join(dir, `two-rows-${format}.arrow`);
    await writeBatches(file, [twoRowBatch()], format);
    originals[format] = fs.readFileSync(file);
  }
});

type Header = RecordBatchAt['header'];

/**
 * A copy of the two-row shard with one 64-bit field of the record batch's header changed from `from` to `to`: the
 * occurrence for which `changed` holds of the decoded header (so the test knows which field it patched).
 */
function patchHeader(bytes: Buffer, from: bigint, to: bigint, changed: (header: Header) => boolean): void {
  const at = firstRecordBatch(bytes);
  for (let position = at.metadataStart; position + 8 <= at.metadataEnd; position++) {
    if (bytes.readBigInt64LE(position) !== from) continue;
    bytes.writeBigInt64LE(to, position);
    if (changed(Message.decode(bytes.subarray(at.metadataStart, at.metadataEnd)).header() as unknown as Header)) return;
    bytes.writeBigInt64LE(from, position);
  }
  throw new Error(`no header field ${from} whose change to ${to} the check accepts`);
}

/** Writes `name` from the two-row shard in `format`, changed by `patch`. */
function crafted(name: string, format: 'stream' | 'file', patch: (bytes: Buffer, at: RecordBatchAt) => void): string {
  const bytes = Buffer.from(originals[format]);
  patch(bytes, firstRecordBatch(bytes));
  const file = path.join(dir, format, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, bytes);
  return file;
}

/** Declares `rows` rows for the batch and its text column (the shard), over the 3 offsets present. */
const declareRows = (rows: number) => (bytes: Buffer, at: RecordBatchAt) => {
  expect(replaceInt64(bytes, at.metadataStart, at.metadataEnd, 2n, BigInt(rows))).toBe(2);
  const header = Message.decode(bytes.subarray(at.metadataStart, at.metadataEnd)).header() as unknown as Header;
  expect([header.length, header.nodes[0].length]).toEqual([rows, rows]);
};
/** Sets offset `index` of the text column (in the body) to `value`. */
const setOffset = (index: number, value: number) => (bytes: Buffer, at: RecordBatchAt) => {
  bytes.writeInt32LE(value, at.bodyStart + at.header.buffers[1].offset + 4 * index);
};

async function drain(file: string): Promise<(string | null)[]> {
  const texts: (string | null)[] = [];
  for await (const batch of readTextBatches(file, 'text')) for (const text of batch.texts) texts.push(text);
  return texts;
}

describe('declared sizes beyond the bytes present are refused by both readers, naming the file and the record batch', () => {
  it('the unchanged fixture reads back (stream and file format)', async () => {
    for (const format of ['stream', 'file'] as const) {
      const file = crafted('good.arrow', format, () => undefined);
      expect(await drain(file)).toEqual(ROWS);
      expect(await scanShard(file, 'text')).toEqual({ rows: 2, batches: 1, batchRows: [2], textBytes: 5 });
    }
  });

  for (const format of ['stream', 'file'] as const) {
    it(`${format} format: 2³¹ − 1 rows declared over 3 offsets (the issue's shard)`, async () => {
      const file = crafted('most-rows.arrow', format, declareRows(MOST_ROWS));
      expect(fs.statSync(file).size).toBeLessThan(600);
      const refusal = regex(
        `${file} (record batch 0): corrupt: the record batch declares 2,147,483,647 rows, but the offsets of column "text" hold 16 bytes (3 rows)`,
      );
      await expect(drain(file)).rejects.toThrow(refusal);
      await expect(scanShard(file, 'text')).rejects.toThrow(refusal);
    });

    it(`${format} format: 2²² rows declared (read silently as 4M empty texts before the check)`, async () => {
      const file = crafted('many-rows.arrow', format, declareRows(2 ** 22));
      await expect(drain(file)).rejects.toThrow(regex(`${file} (record batch 0): corrupt: the record batch declares 4,194,304 rows`));
    });

    it(`${format} format: the batch declares more rows than its column holds`, async () => {
      const file = crafted('batch-rows.arrow', format, (bytes) => patchHeader(bytes, 2n, 1000n, (h) => h.length === 1000 && h.nodes[0].length === 2));
      const refusal = regex(`${file} (record batch 0): corrupt: the record batch declares 1,000 rows, but column "text" holds 2`);
      await expect(drain(file)).rejects.toThrow(refusal);
      await expect(scanShard(file, 'text')).rejects.toThrow(refusal);
    });

    it(`${format} format: a buffer that reaches past the record batch's body`, async () => {
      const file = crafted('long-buffer.arrow', format, (bytes) => patchHeader(bytes, 8n, 1n << 40n, (h) => h.buffers[2].length === 2 ** 40));
      const refusal = regex(`${file} (record batch 0): corrupt: buffer 2 (bytes 16 to 1,099,511,627,792) lies outside the record batch's body of 24 bytes`);
      await expect(drain(file)).rejects.toThrow(refusal);
      await expect(scanShard(file, 'text')).rejects.toThrow(refusal);
    });

    it(`${format} format: offsets past the data, negative or decreasing (read as other text or none before)`, async () => {
      const cases = [
        ['past.arrow', setOffset(2, 900), 'row 1 ends at byte 900, past the 8 bytes of text'],
        ['negative.arrow', setOffset(1, -5), 'row 0 ends at byte -5, before it starts (byte 0)'],
        ['first-negative.arrow', setOffset(0, -2), 'row 0 starts at byte -2'],
        ['decreasing.arrow', setOffset(2, 1), 'row 1 ends at byte 1, before it starts (byte 2)'],
      ] as const;
      for (const [name, patch, problem] of cases) {
        const file = crafted(name, format, patch);
        await expect(drain(file), name).rejects.toThrow(regex(`${file} (record batch 0): corrupt: column "text": ${problem}`));
      }
      // The header scan reads the first and the last offset only: it sees those two out of the data.
      for (const [name, end] of [
        ['past.arrow', 900],
        ['first-negative.arrow', -2],
      ] as const) {
        const file = path.join(dir, format, name);
        await expect(scanShard(file, 'text'), name).rejects.toThrow(regex(`${file} (record batch 0): corrupt: column "text": its offsets run from byte`));
        await expect(scanShard(file, 'text'), name).rejects.toThrow(String(end));
      }
    });
  }
});

describe('counts inside the message metadata (flatbuffer vectors) beyond its bytes', () => {
  /** Position of the u32 length of the record batch's field-node vector: just before the one node (length 2, nulls 0). */
  function nodeVectorLength(bytes: Buffer, at: RecordBatchAt): number {
    for (let position = at.metadataStart + 4; position + 16 <= at.metadataEnd; position++) {
      if (bytes.readUInt32LE(position - 4) === 1 && bytes.readBigInt64LE(position) === 2n && bytes.readBigInt64LE(position + 8) === 0n) return position - 4;
    }
    throw new Error('no field-node vector found');
  }

  for (const format of ['stream', 'file'] as const) {
    it(`${format} format: 2²¹ field nodes declared in a 152-byte header (2³⁰ aborted the process)`, async () => {
      const file = crafted('node-vector.arrow', format, (bytes, at) => bytes.writeUInt32LE(2 ** 21, nodeVectorLength(bytes, at)));
      const refusal = regex(`${file} (record batch 0): corrupt: the message header: a vector declares 2,097,152 entries, more than its 152 bytes hold`);
      await expect(drain(file)).rejects.toThrow(refusal);
      await expect(scanShard(file, 'text')).rejects.toThrow(refusal);
    });
  }

  it('a schema message declaring 2³⁰ fields is refused before apache-arrow opens the shard', async () => {
    // The schema's field vector: the only u32 1 in the schema message's metadata whose change alters the field count.
    const file = crafted('schema-fields.arrow', 'stream', (bytes) => {
      const metadataEnd = 8 + bytes.readInt32LE(4);
      const positions: number[] = [];
      for (let position = 8; position + 4 <= metadataEnd; position += 4) {
        if (bytes.readUInt32LE(position) !== 1) continue;
        const copy = Buffer.from(bytes);
        copy.writeUInt32LE(0, position);
        if ((Message.decode(copy.subarray(8, metadataEnd)).header() as Schema).fields.length === 0) positions.push(position);
      }
      expect(positions.length).toBe(1);
      bytes.writeUInt32LE(2 ** 30, positions[0]);
    });
    await expect(drain(file)).rejects.toThrow(regex(`${file}: corrupt: the message header: a vector declares 1,073,741,824 entries`));
  });
});

describe('dictionary-encoded text', () => {
  it('an index outside the dictionary, or more rows than indices, is refused naming the file and the batch', async () => {
    const values = ['spam', 'eggs', 'spam', null, 'ham'];
    const good = path.join(dir, 'dictionary.arrow');
    await writeBatches(good, columnBatches('text', [values], new Dictionary(new Utf8(), new Int32())), 'stream');
    expect(await drain(good)).toEqual(values);
    const bytes = fs.readFileSync(good);
    const at = firstRecordBatch(bytes);
    // Indices 0 1 0 _ 2 (row 3 is null): row 4 now points at entry 99 of 3.
    const outside = Buffer.from(bytes);
    outside.writeInt32LE(99, at.bodyStart + at.header.buffers[1].offset + 4 * 4);
    const outsideFile = path.join(dir, 'dictionary-outside.arrow');
    fs.writeFileSync(outsideFile, outside);
    await expect(drain(outsideFile)).rejects.toThrow(
      regex(`${outsideFile} (record batch 0): corrupt: column "text": row 4 points at dictionary entry 99 of 3`),
    );
    const many = Buffer.from(bytes);
    expect(replaceInt64(many, at.metadataStart, at.metadataEnd, 5n, 7n)).toBe(2);
    const manyFile = path.join(dir, 'dictionary-rows.arrow');
    fs.writeFileSync(manyFile, many);
    const refusal = regex(
      `${manyFile} (record batch 0): corrupt: the record batch declares 7 rows, but the dictionary indices of column "text" hold 24 bytes (6 rows)`,
    );
    await expect(drain(manyFile)).rejects.toThrow(refusal);
    await expect(scanShard(manyFile, 'text')).rejects.toThrow(refusal);
  });
});

describe('every entrance refuses such a shard in the validation split', () => {
  let data: string;
  let tokenizer: TextTokenizer;
  let options: Omit<StreamOptions, 'split' | 'cursor' | 'shuffleBuffer'>;

  beforeAll(async () => {
    data = path.join(dir, 'dataset');
    fs.mkdirSync(data);
    const docs = syntheticDocuments(200, 3);
    await writeShard(path.join(data, 'corpus-train-00000-of-00001.arrow'), docs, 50);
    const tokenizerFile = path.join(dir, 'tokenizer.json');
    await trainByteLevelBpeFromTexts(docs, 300, tokenizerFile);
    tokenizer = await TextTokenizer.load(tokenizerFile);
    options = { dataset: data, textColumn: 'text', tokenizer, kind: 'gpt', seqLen: 8, batchSize: 1, seed: 0, readAhead: 1 };
  });

  const validationShard = (patch: (bytes: Buffer, at: RecordBatchAt) => void) => {
    const file = path.join(data, 'corpus-validation-00000-of-00001.arrow');
    const bytes = Buffer.from(originals.stream);
    patch(bytes, firstRecordBatch(bytes));
    fs.writeFileSync(file, bytes);
    return file;
  };

  it('2³¹ − 1 rows: the listing, the stream, validation batches (eval, train) and tokenizer training', async () => {
    const file = validationShard(declareRows(MOST_ROWS));
    const refusal = regex(`${file} (record batch 0): corrupt: the record batch declares 2,147,483,647 rows`);
    await expect(describeSplit(data, 'validation', 'text')).rejects.toThrow(refusal);
    const stream = await openBatchStream({ ...options, split: 'validation', shuffleBuffer: 0 });
    await expect(stream.next()).rejects.toThrow(refusal);
    await stream.close();
    await expect(collectEvalBatches(options, 100)).rejects.toThrow(refusal);
    await expect(trainTokenizer({ dataset: data, split: 'validation', vocabSize: 300, out: path.join(dir, 'never.json') })).rejects.toThrow(refusal);
    expect(fs.existsSync(path.join(dir, 'never.json'))).toBe(false);
  });

  it('corrupt offsets: a corruption error, not "the validation split gave no batch"', async () => {
    const file = validationShard(setOffset(1, -5));
    await expect(collectEvalBatches(options, 100)).rejects.toThrow(regex(`${file} (record batch 0): corrupt: column "text": row 0 ends at byte -5`));
  });

  it('npm run tokenizer -- train exits with the error instead of running out of memory', async () => {
    const file = validationShard(declareRows(MOST_ROWS));
    // A small heap: before the check the process aborted (V8 heap out of memory, exit 134) within it.
    const cli = startCli(
      path.join(import.meta.dirname, '..', '..', 'src', 'cli', 'tokenizer.ts'),
      ['train', '--data', data, '--split', 'validation', '--vocab', '300', '--out', path.join(dir, 'cli.json')],
      { ...process.env, NODE_OPTIONS: '--max-old-space-size=192' },
    );
    const { code, signal } = await cli.exited;
    expect({ code, signal }).toEqual({ code: 1, signal: null });
    expect(cli.output()).toMatch(regex(`${file} (record batch 0): corrupt: the record batch declares 2,147,483,647 rows`));
  });
});
