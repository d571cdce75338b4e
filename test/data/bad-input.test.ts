// Every kind of bad input fails with a message naming the file (and line or record batch) and
// what was expected; nothing is dropped silently.
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterAll, describe, expect, it } from 'vitest';
import { Field, Int32, makeData, RecordBatch, Schema, Struct, Utf8 } from 'apache-arrow';
import { readTextBatches, scanShard } from '../../src/data/arrow.ts';
import { describeSplit, listShards } from '../../src/data/dataset.ts';
import { ArrowShardWriter } from '../../src/data/prepare/arrow-writer.ts';
import { parseShardSize } from '../../src/data/prepare/split-writer.ts';
import { prepareDataset } from '../../src/data/prepare/prepare.ts';
import { columnBatches, makeTempDir, readAllBatches, texts, writeBatches } from '../fixtures/data.ts';

const dir = makeTempDir('bad-input');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

async function drain(file: string, column = 'text', fromBatch = 0): Promise<number> {
  let rows = 0;
  for await (const batch of readTextBatches(file, column, fromBatch)) rows += batch.texts.length;
  return rows;
}

function write(name: string, content: string | Buffer): string {
  const file = path.join(dir, name);
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, content);
  return file;
}

let outCounter = 0;
const prepare = (inputs: string[], extra: Partial<Parameters<typeof prepareDataset>[0]> = {}) =>
  prepareDataset({ inputs, out: path.join(dir, `out-${outCounter++}`), ...extra });

const regex = (s: string) => new RegExp(s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));

describe('bad Arrow shards', () => {
  const good = path.join(dir, 'good.arrow');
  let bytes: Buffer;

  it('setup: a valid 3-batch shard', async () => {
    const writer = new ArrowShardWriter(good, ['text', 'url'], 'text');
    for (const t of texts(2500)) await writer.append([t, 'u']);
    await writer.close();
    bytes = fs.readFileSync(good);
    expect(await drain(good)).toBe(2500);
  });

  it('missing text column: lists the columns present', async () => {
    await expect(drain(good, 'content')).rejects.toThrow(regex(`${good}: no column "content"; columns present: "text", "url"`));
    await expect(scanShard(good, 'content')).rejects.toThrow(regex(`${good}: no column "content"`));
  });

  it('wrong column type: says what was found and what is expected', async () => {
    const ints = path.join(dir, 'ints.arrow');
    await writeBatches(ints, columnBatches('text', [[1, 2, 3]], new Int32()), 'stream');
    await expect(drain(ints)).rejects.toThrow(regex(`${ints}: column "text" has type Int`));
    await expect(drain(ints)).rejects.toThrow(/expected a string column \(Utf8 "string" or LargeUtf8 "large_string"\)/);
  });

  it('truncated stream shard: names the record batch where it was cut, never yields a short shard', async () => {
    // Cut inside batch 1's body, exactly at the end of batch 2 (only the end-of-stream marker missing), and mid-marker.
    const { batches } = await readAllBatches(good);
    expect(batches.length).toBe(3);
    for (const [cut, batch] of [
      [Math.floor(bytes.length * 0.5), 1],
      [bytes.length - 8, 3],
      [bytes.length - 3, 3],
    ] as const) {
      const file = write(`cut-${cut}.arrow`, bytes.subarray(0, cut));
      await expect(drain(file), `cut at ${cut}`).rejects.toThrow(regex(`${file} (record batch ${batch}): truncated`));
      await expect(describeSplit(file, 'train', 'text')).rejects.toThrow(regex(`${file} (record batch ${batch}): truncated`));
    }
    const headerOnly = write('cut-header.arrow', bytes.subarray(0, 100));
    await expect(drain(headerOnly)).rejects.toThrow(regex(`${headerOnly}: truncated or corrupt`));
  });

  it('truncated file-format shard and corrupt bytes: name the file', async () => {
    const { batches } = await readAllBatches(good);
    const fileFormat = path.join(dir, 'file-format.arrow');
    await writeBatches(fileFormat, batches, 'file');
    const whole = fs.readFileSync(fileFormat);
    const cutFile = write('file-format-cut.arrow', whole.subarray(0, Math.floor(whole.length * 0.7)));
    await expect(drain(cutFile)).rejects.toThrow(
      regex(`${cutFile}: truncated or corrupt: not a readable Arrow IPC file (stream or file format): IPC file format without its footer`),
    );
    const garbage = write('garbage.arrow', Buffer.from('this is not an arrow file at all, just text'));
    await expect(drain(garbage)).rejects.toThrow(regex(`${garbage}: not an Arrow IPC file: it starts with 74 68 69 73 20 69 73 20 ("this is ")`));
    // A flipped byte in batch 1's message header (its metadata length) is corrupt, and said so with the batch.
    const corrupt = Buffer.from(bytes);
    const schemaLength = 8 + corrupt.readInt32LE(4);
    const firstBatchLength = 8 + corrupt.readInt32LE(schemaLength + 4);
    const { bodyLength } = await firstBatchBody(good, schemaLength, firstBatchLength);
    const secondBatchAt = schemaLength + firstBatchLength + bodyLength;
    corrupt.writeInt32LE(-5, secondBatchAt + 4);
    const corruptFile = write('corrupt-header.arrow', corrupt);
    await expect(drain(corruptFile)).rejects.toThrow(regex(`${corruptFile} (record batch 1)`));
  });

  it('a file named *.arrow that is not Arrow is reported as that, by the reader and the header scan', async () => {
    const jsonl = write('notarrow/c4-train-00000-of-00001.arrow', '{"text": "a JSON line"}\n'.repeat(50));
    const empty = write('notarrow/empty-train-00000-of-00001.arrow', '');
    for (const file of [jsonl, empty]) {
      const what = file === empty ? 'not an Arrow IPC file: the file is empty' : 'not an Arrow IPC file: it starts with 7b 22 74 65 78 74 22 3a ("{"text":")';
      await expect(drain(file), file).rejects.toThrow(regex(`${file}: ${what}`));
      await expect(describeSplit(file, 'train', 'text'), file).rejects.toThrow(regex(`${file}: ${what}`));
      await expect(scanShard(file, 'text')).rejects.not.toThrow(/truncated/);
    }
  });

  it('invalid UTF-8 in the text column is counted and reported once per file, naming it; genuine U+FFFD is not counted', async () => {
    const file = path.join(dir, 'latin1-train-00000-of-00001.arrow');
    const rows = [
      Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x20, 0x6f, 0x6b]), // "caf\xe9 ok": one invalid byte
      Buffer.from([0xff, 0xfe]), // two invalid bytes
      Buffer.from('genuine \uFFFD replacement', 'utf8'), // a real U+FFFD: not an error
      Buffer.from([0x61, 0xe2, 0x82]), // a truncated 3-byte sequence: one replacement
      Buffer.from('plain', 'utf8'),
    ];
    await writeBatches(file, [rawUtf8Batch(rows.slice(0, 2)), rawUtf8Batch(rows.slice(2))], 'stream');
    const { readTextBatches: read } = await import('../../src/data/arrow.ts');
    const counts: number[] = [];
    for await (const batch of read(file, 'text')) counts.push(batch.invalidUtf8);
    expect(counts).toEqual([3, 1]);
    const { openBatchStream } = await import('../../src/data/stream.ts');
    const { TextTokenizer } = await import('../../src/data/tokenizer.ts');
    const { trainByteLevelBpeFromTexts } = await import('../../src/data/train-tokenizer.ts');
    await trainByteLevelBpeFromTexts(texts(50), 270, path.join(dir, 'utf8-tok.json'));
    const tokenizer = await TextTokenizer.load(path.join(dir, 'utf8-tok.json'));
    const warnings: string[] = [];
    const stream = await openBatchStream({
      dataset: file,
      split: 'train',
      textColumn: 'text',
      tokenizer,
      kind: 'gpt',
      seqLen: 4,
      batchSize: 1,
      seed: 0,
      shuffleBuffer: 0,
      readAhead: 1,
      onWarning: (m) => warnings.push(m),
    });
    while (await stream.next());
    await stream.close();
    expect(warnings).toEqual([`${file}: 4 invalid UTF-8 sequences were replaced by U+FFFD (the first in record batch 0); the text around them was kept`]);
  });

  it('nonsense fromBatch is refused', async () => {
    await expect(drain(good, 'text', -1)).rejects.toThrow(regex(`${good}: fromBatch must be a non-negative integer`));
  });
});

/** A one-column Utf8 record batch whose rows are the given raw bytes (valid UTF-8 or not). */
function rawUtf8Batch(rows: Buffer[]): RecordBatch {
  const valueOffsets = new Int32Array(rows.length + 1);
  rows.forEach((r, i) => (valueOffsets[i + 1] = valueOffsets[i] + r.length));
  const text = makeData({ type: new Utf8(), length: rows.length, nullCount: 0, valueOffsets, data: new Uint8Array(Buffer.concat(rows)) });
  const schema = new Schema([new Field('text', new Utf8(), true)]);
  return new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length: rows.length, nullCount: 0, children: [text] }));
}

/** Body length of the first record batch, read from its message header with apache-arrow. */
async function firstBatchBody(file: string, at: number, length: number): Promise<{ bodyLength: number }> {
  const { Message } = await import('apache-arrow');
  const bytes = fs.readFileSync(file);
  const message = Message.decode(bytes.subarray(at + 8, at + length));
  return { bodyLength: Number(message.bodyLength) };
}

describe('bad dataset paths', () => {
  it('missing paths, folders without shards, missing splits and shards', async () => {
    const missing = path.join(dir, 'nope');
    await expect(listShards(missing, 'train')).rejects.toThrow(regex(`${missing}: does not exist`));
    const empty = path.join(dir, 'empty-folder');
    fs.mkdirSync(empty);
    await expect(listShards(empty, 'train')).rejects.toThrow(regex(`${empty}: has no dataset_dict.json, no state.json and no .arrow files`));
    await expect(listShards(path.join(dir, 'nothing-*.arrow'), 'train')).rejects.toThrow(/the glob matches no \.arrow files/);
    const dict = path.join(dir, 'dict-train-only');
    fs.mkdirSync(dict);
    fs.writeFileSync(path.join(dict, 'dataset_dict.json'), '{"splits": ["train"]}');
    await expect(listShards(dict, 'validation')).rejects.toThrow(regex(`${dict}: has no "validation" split (dataset_dict.json lists: train)`));
    await expect(listShards(dict, 'validation')).rejects.toThrow(`datasets.load_from_disk(${JSON.stringify(dict)})["train"].train_test_split(`);
    // DatasetDict.train_test_split's names: its "test" split is not taken for validation unsaid; the message says how.
    fs.writeFileSync(path.join(dict, 'dataset_dict.json'), '{"splits": ["train", "test"]}');
    await expect(listShards(dict, 'validation')).rejects.toThrow(
      regex(`${dict}: has no "validation" split (dataset_dict.json lists: train, test); to validate on its "test" split, save it as "validation": `),
    );
    const split = path.join(dir, 'split-missing-shard');
    fs.mkdirSync(split);
    fs.writeFileSync(path.join(split, 'state.json'), JSON.stringify({ _data_files: [{ filename: 'data-00000-of-00001.arrow' }], _split: null }));
    await expect(listShards(split, 'train')).rejects.toThrow(regex(`${split}: shard data-00000-of-00001.arrow listed in state.json is missing`));
    fs.writeFileSync(path.join(split, 'state.json'), '{"_data_files": [');
    await expect(listShards(split, 'train')).rejects.toThrow(regex(`${path.join(split, 'state.json')}: not valid JSON`));
  });
});

describe('bad prepare inputs', () => {
  it('malformed JSON line: names file and line', async () => {
    const file = write('bad/malformed.jsonl', '{"text": "ok"}\n{"text": "ok 2"}\n{"text": "broken\n');
    await expect(prepare([file])).rejects.toThrow(regex(`${file}:3: malformed JSON line`));
    const array = write('bad/array.json', '[{"text": "a"},\n{"text": "b"}]');
    await expect(prepare([array])).rejects.toThrow(regex(`${array}:1: malformed JSON line (a JSON array file? expected JSON Lines`));
  });

  it('missing text field and wrong type: names file, line and the fields present', async () => {
    const missing = write('bad/missing.jsonl', '{"text": "ok"}\n{"body": "x", "url": "u"}\n');
    await expect(prepare([missing])).rejects.toThrow(regex(`${missing}:2: no "text" field; fields present: "body", "url"`));
    await expect(prepare([missing], { textColumn: 'body' })).rejects.toThrow(regex(`${missing}:1: no "body" field`));
    const wrongType = write('bad/wrong-type.jsonl', '{"text": "ok"}\n\n{"text": 42}\n');
    await expect(prepare([wrongType])).rejects.toThrow(regex(`${wrongType}:3: field "text" is a number; expected a string`));
    const notObject = write('bad/not-object.jsonl', '"just a string"\n');
    await expect(prepare([notObject])).rejects.toThrow(regex(`${notObject}:1: expected a JSON object with a "text" field, got a string`));
  });

  it('empty input: no files, no documents, only empty documents', async () => {
    await expect(prepare([])).rejects.toThrow(/no inputs given/);
    const emptyFolder = path.join(dir, 'bad/empty-folder');
    fs.mkdirSync(emptyFolder, { recursive: true });
    await expect(prepare([emptyFolder])).rejects.toThrow(regex(`${emptyFolder}: the folder is empty`));
    const emptyFile = write('bad/empty.jsonl', '');
    await expect(prepare([emptyFile])).rejects.toThrow(/no non-empty documents in the inputs/);
    const blanks = write('bad/blanks.jsonl', '{"text": ""}\n{"text": null}\n{"text": "  "}\n');
    await expect(prepare([blanks])).rejects.toThrow('no non-empty documents in the inputs (3 empty documents skipped)');
    await expect(prepare([path.join(dir, 'bad/absent.jsonl')])).rejects.toThrow(regex(`${path.join(dir, 'bad/absent.jsonl')}: no such file or folder`));
  });

  it('unreadable files: corrupt gzip, unsupported file kinds', async () => {
    const gz = zlib.gzipSync(Buffer.from('{"text": "a"}\n'.repeat(2000)));
    const truncatedGz = write('bad/c4-train.00000-of-01024.json.gz', gz.subarray(0, Math.floor(gz.length / 2)));
    await expect(prepare([truncatedGz])).rejects.toThrow(regex(`${truncatedGz}:`));
    await expect(prepare([truncatedGz])).rejects.toThrow(/corrupt or truncated gzip/);
    const notGz = write('bad/not-gzip.jsonl.gz', '{"text": "plain text with a .gz name"}\n');
    await expect(prepare([notGz])).rejects.toThrow(regex(`${notGz}:1: cannot read (corrupt or truncated gzip?)`));
    const csv = write('bad/mixed/data.csv', 'text\nhello\n');
    write('bad/mixed/ok.txt', 'hello');
    await expect(prepare([path.join(dir, 'bad/mixed')])).rejects.toThrow(regex(`unsupported input file(s): ${csv}; expected .jsonl`));
    const notParquet = write('bad/fake.parquet', 'not parquet');
    await expect(prepare([notParquet])).rejects.toThrow(regex(`${notParquet}: not a readable parquet file`));
  });

  it('invalid UTF-8 is refused alike in .txt and .jsonl (plain or gzipped), naming the file and the byte offset', async () => {
    const latin1 = write('bad/texts/latin1.txt', Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a]));
    await expect(prepare([path.join(dir, 'bad/texts')])).rejects.toThrow(`${latin1}: not valid UTF-8 (a malformed sequence at byte 3)`);
    // 75,000 bytes of good lines first: the bad byte lies past the first chunk read (64 KiB).
    const good = Buffer.from('{"text": "ok"}\n'.repeat(5000));
    const lines = Buffer.concat([good, Buffer.from('{"text": "caf'), Buffer.from([0xe9]), Buffer.from('"}\n')]);
    const at = good.length + '{"text": "caf'.length;
    const plain = write('bad/latin1.jsonl', lines);
    await expect(prepare([plain])).rejects.toThrow(`${plain}: not valid UTF-8 (a malformed sequence at byte ${at})`);
    const gzipped = write('bad/latin1.jsonl.gz', zlib.gzipSync(lines));
    await expect(prepare([gzipped])).rejects.toThrow(`${gzipped}: not valid UTF-8 (a malformed sequence at byte ${at})`);
  });

  it('parquet: missing column, wrong type, unsupported codec name the file (and row group)', async () => {
    const fixtures = path.join(import.meta.dirname, '..', 'fixtures', 'parquet');
    const c4 = path.join(fixtures, 'c4-like.parquet');
    await expect(prepare([c4], { textColumn: 'body' })).rejects.toThrow(regex(`${c4}: no "body" column; columns present: "text", "timestamp", "url"`));
    const ints = path.join(fixtures, 'int-text.parquet');
    await expect(prepare([ints])).rejects.toThrow(regex(`${ints} (row group 0, row 0): column "text" is a bigint; expected a string (UTF-8) column`));
    const zstd = path.join(fixtures, 'zstd.parquet');
    const hasZstd = 'zstdDecompressSync' in zlib;
    if (hasZstd)
      expect((await prepare([zstd])).documents).toBe(19); // Node >= 22.15 decodes ZSTD through node:zlib
    else await expect(prepare([zstd])).rejects.toThrow(regex(`${zstd} (row group 0): cannot decode: parquet unsupported compression codec: ZSTD`));
  });

  it('bad options and an existing output folder', async () => {
    const ok = write('bad/ok.jsonl', '{"text": "a"}\n{"text": "b"}\n');
    await expect(prepare([ok], { validationFraction: 1 })).rejects.toThrow('--validation-fraction must be a number in [0, 1), got 1');
    await expect(prepare([ok], { shardSize: '12 parsecs' })).rejects.toThrow(/--shard-size: expected a row count/);
    expect(() => parseShardSize('0')).toThrow(/positive integer/);
    const out = path.join(dir, 'existing');
    fs.mkdirSync(out);
    await expect(prepareDataset({ inputs: [ok], out })).rejects.toThrow(regex(`${out}: the output folder already exists`));
    // A failed run leaves no output or staging folder behind.
    const failedOut = path.join(dir, 'failed-out');
    await expect(prepareDataset({ inputs: [ok, path.join(dir, 'bad/malformed.jsonl')], out: failedOut })).rejects.toThrow(/malformed/);
    expect(fs.readdirSync(dir).filter((n) => n.startsWith('failed-out'))).toEqual([]);
  });
});

describe('wrong column types written by others', () => {
  it('a string column next to the wrong one still reads; the wrong one is named', async () => {
    const file = path.join(dir, 'two-types.arrow');
    const { Table, vectorFromArray } = await import('apache-arrow');
    const batch = new Table({ id: vectorFromArray([1, 2], new Int32()), text: vectorFromArray(['a', 'b'], new Utf8()) }).batches[0];
    await writeBatches(file, [batch], 'stream');
    expect(await drain(file)).toBe(2);
    await expect(drain(file, 'id')).rejects.toThrow(regex(`${file}: column "id" has type Int`));
  });
});
