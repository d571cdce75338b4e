import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { Int32, LargeUtf8, Type, Utf8 } from 'apache-arrow';
import { ROWS_PER_BATCH, readTextBatches, scanShard } from '../../src/data/arrow.ts';
import { describeSplit, listShards } from '../../src/data/dataset.ts';
import { ArrowShardWriter } from '../../src/data/prepare/arrow-writer.ts';
import { SplitWriter, parseShardSize, writeDatasetDictJson } from '../../src/data/prepare/split-writer.ts';
import { columnBatches, makeTempDir, readAllBatches, texts, writeBatches } from '../fixtures/data.ts';

const dir = makeTempDir('arrow');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

async function writeShard(file: string, rows: (string | null)[][], columns = ['text', 'url']): Promise<ArrowShardWriter> {
  const writer = new ArrowShardWriter(file, columns, 'text');
  for (const row of rows) await writer.append(row);
  await writer.close();
  return writer;
}

async function collect(file: string, column = 'text', fromBatch = 0) {
  const out: { batchIndex: number; texts: (string | null)[] }[] = [];
  for await (const batch of readTextBatches(file, column, fromBatch)) out.push(batch);
  return out;
}

const utf8 = (xs: (string | null)[]) => xs.reduce((s, t) => s + (t === null ? 0 : Buffer.byteLength(t)), 0);
const docs = texts(2500);
const rows = docs.map((t, i) => [t, i % 3 === 0 ? null : `https://example.com/${i}`]);

describe('shards written by the project', () => {
  const file = path.join(dir, 'shard.arrow');

  it('are IPC stream files of 1,000-row batches with the huggingface features metadata', async () => {
    await writeShard(file, rows);
    const bytes = fs.readFileSync(file);
    expect(bytes.subarray(0, 4).toString('hex')).toBe('ffffffff'); // stream continuation marker, not "ARROW1"
    expect(bytes.subarray(-8).toString('hex')).toBe('ffffffff00000000'); // end-of-stream marker
    const { batches, metadata } = await readAllBatches(file);
    expect(batches.map((b) => b.numRows)).toEqual([1000, 1000, 500]);
    expect(batches[0].schema.fields.map((f) => [f.name, f.type.typeId, f.nullable])).toEqual([
      ['text', Type.Utf8, true],
      ['url', Type.Utf8, true],
    ]);
    const hf = JSON.parse(metadata.get('huggingface')!);
    expect(hf).toEqual({
      info: { features: { text: { dtype: 'string', _type: 'Value' }, url: { dtype: 'string', _type: 'Value' } } },
    });
    // Python's json.dumps spacing, byte for byte what datasets writes.
    expect(metadata.get('huggingface')).toBe(
      '{"info": {"features": {"text": {"dtype": "string", "_type": "Value"}, "url": {"dtype": "string", "_type": "Value"}}}}',
    );
    const readBack = batches.flatMap((b) => [...b.getChild('url')!].map((v) => v ?? null));
    expect(readBack).toEqual(rows.map((r) => r[1]));
  });

  it('read back with readTextBatches, batch by batch, nulls kept', async () => {
    const got = await collect(file);
    expect(got.map((b) => b.batchIndex)).toEqual([0, 1, 2]);
    expect(got.flatMap((b) => b.texts)).toEqual(docs);
    const urls = await collect(file, 'url');
    expect(urls.flatMap((b) => b.texts)).toEqual(rows.map((r) => r[1]));
  });

  it('readTextBatches(file, col, fromBatch) skips exactly the first batches', async () => {
    for (const from of [0, 1, 2, 3, 7]) {
      const got = await collect(file, 'text', from);
      expect(got.map((b) => b.batchIndex)).toEqual([0, 1, 2].filter((i) => i >= from));
      expect(got.flatMap((b) => b.texts)).toEqual(docs.slice(Math.min(from, 3) * ROWS_PER_BATCH));
    }
  });

  it('read back from an IPC file-format copy (FileHandle, footer-based skipping)', async () => {
    const { batches } = await readAllBatches(file);
    const copy = path.join(dir, 'shard-file-format.arrow');
    await writeBatches(copy, batches, 'file');
    expect(fs.readFileSync(copy).subarray(0, 6).toString('latin1')).toBe('ARROW1');
    const all = await collect(copy);
    expect(all.map((b) => b.texts.length)).toEqual([1000, 1000, 500]);
    expect(all.flatMap((b) => b.texts)).toEqual(docs);
    const fromTwo = await collect(copy, 'text', 2);
    expect(fromTwo.map((b) => b.batchIndex)).toEqual([2]);
    expect(fromTwo[0].texts).toEqual(docs.slice(2000));
    expect(await scanShard(copy, 'text')).toEqual({
      rows: 2500,
      batches: 3,
      batchRows: [1000, 1000, 500],
      textBytes: docs.reduce((s, t) => s + Buffer.byteLength(t), 0),
    });
  });

  it('keeps non-ASCII text exact (multi-byte UTF-8 in a batch)', async () => {
    const unicode = ['naïve café', 'plain ascii', '日本語のテキスト', 'emoji 😀 ok', '', 'Ünïcödé'];
    const f = path.join(dir, 'unicode.arrow');
    const writer = await writeShard(
      f,
      unicode.map((t) => [t]),
      ['text'],
    );
    expect((await collect(f)).flatMap((b) => b.texts)).toEqual(unicode);
    expect(writer.textBytes).toBe(unicode.reduce((s, t) => s + Buffer.byteLength(t), 0));
  });
});

describe('shards written by others', () => {
  it('accepts LargeUtf8 (large_string) text columns, stream and file format', async () => {
    const chunks = [texts(1000, 'a'), texts(1000, 'b'), texts(10, 'c')];
    for (const format of ['stream', 'file'] as const) {
      const f = path.join(dir, `large-${format}.arrow`);
      await writeBatches(f, columnBatches('text', chunks, new LargeUtf8()), format);
      const { batches } = await readAllBatches(f);
      expect(batches[0].schema.fields[0].type.typeId).toBe(Type.LargeUtf8);
      expect((await collect(f, 'text', 1)).flatMap((b) => b.texts)).toEqual([...chunks[1], ...chunks[2]]);
      const scan = await scanShard(f, 'text');
      expect(scan.rows).toBe(2010);
      expect(scan.textBytes).toBe(chunks.flat().reduce((s, t) => s + Buffer.byteLength(t), 0));
    }
  });

  it('accepts legacy (pre-0.15) IPC streams, whose end marker is 4 zero bytes', async () => {
    const f = path.join(dir, 'legacy.arrow');
    const { RecordBatchStreamWriter } = await import('apache-arrow');
    const writer = new RecordBatchStreamWriter({ writeLegacyIpcFormat: true });
    for (const batch of columnBatches('text', [texts(1000), texts(3)], new Utf8())) writer.write(batch);
    writer.finish();
    const bytes = Buffer.from(await writer.toUint8Array());
    fs.writeFileSync(f, bytes);
    expect(bytes.subarray(-8).toString('hex')).not.toBe('ffffffff00000000');
    expect((await collect(f)).map((b) => b.texts.length)).toEqual([1000, 3]);
    expect((await scanShard(f, 'text')).rows).toBe(1003);
  });

  it('reads dictionary-encoded string columns (text bytes then unknown to the header scan)', async () => {
    const f = path.join(dir, 'dictionary.arrow');
    const { Dictionary, Int32: Int32Type } = await import('apache-arrow');
    const values = ['spam', 'eggs', 'spam', null, 'ham'];
    await writeBatches(f, columnBatches('text', [values, values], new Dictionary(new Utf8(), new Int32Type())), 'stream');
    expect((await collect(f, 'text', 1)).flatMap((b) => b.texts)).toEqual(values);
    expect(await scanShard(f, 'text')).toEqual({ rows: 10, batches: 2, batchRows: [5, 5], textBytes: null });
  });

  it('scans rows and text bytes with an earlier non-string column in the way', async () => {
    const f = path.join(dir, 'mixed.arrow');
    const { Table, vectorFromArray } = await import('apache-arrow');
    const batch = new Table({
      id: vectorFromArray([1, 2, 3], new Int32()),
      text: vectorFromArray(['x', null, 'yz'], new Utf8()),
    }).batches[0];
    await writeBatches(f, [batch, batch], 'stream');
    expect(await scanShard(f, 'text')).toEqual({ rows: 6, batches: 2, batchRows: [3, 3], textBytes: 6 });
    expect((await collect(f)).flatMap((b) => b.texts)).toEqual(['x', null, 'yz', 'x', null, 'yz']);
  });
});

describe('genuine HuggingFace datasets 5.0.1 output (test/fixtures/hf-datasets-5.0.1, see make.py)', () => {
  const root = path.join(import.meta.dirname, '..', 'fixtures', 'hf-datasets-5.0.1');
  // make.py: text = "{split} {i} ü", null when i % 97 == 0; timestamp is timestamp[s]; train in 2 shards of 1,050 rows.
  const expected = (n: number, tag: string) => Array.from({ length: n }, (_, i) => (i % 97 ? `${tag} ${i} ü` : null));

  it('lists, describes and streams a save_to_disk DatasetDict written by Python', async () => {
    const shards = await listShards(path.join(root, 'dict'), 'train');
    expect(shards.map((f) => path.relative(root, f))).toEqual(['dict/train/data-00000-of-00002.arrow', 'dict/train/data-00001-of-00002.arrow']);
    const train: (string | null)[] = [];
    for (const shard of shards) {
      const batches = await collect(shard);
      expect(batches.map((b) => b.texts.length)).toEqual([1000, 50]);
      train.push(...batches.flatMap((b) => b.texts));
    }
    expect(train).toEqual(expected(2100, 'train'));
    expect((await collect(shards[1], 'text', 1)).flatMap((b) => b.texts)).toEqual(expected(2100, 'train').slice(2050));
    const described = await describeSplit(path.join(root, 'dict'), 'train', 'text');
    expect(described.rows).toBe(2100);
    expect(described.bytes).toBe(utf8(expected(2100, 'train')));
    const validation = await listShards(path.join(root, 'dict'), 'validation');
    expect((await collect(validation[0])).flatMap((b) => b.texts)).toEqual(expected(30, 'validation'));
    await expect(collect(shards[0], 'timestamp')).rejects.toThrow(/column "timestamp" has type Timestamp/);
  });

  it('reads no validation split out of a single Dataset folder (state.json "_split": null) or one split folder of a DatasetDict', async () => {
    // Dataset.from_dict(...).save_to_disk() writes "_split": null: the folder is training data, and its documents
    // must not come back as the validation split (they did: validation ran on training documents).
    const single = path.join(root, 'large_string');
    expect(JSON.parse(fs.readFileSync(path.join(single, 'state.json'), 'utf8'))._split).toBeNull();
    expect(await listShards(single, 'train')).toEqual([path.join(single, 'data-00000-of-00001.arrow')]);
    const refusal = listShards(single, 'validation');
    await expect(refusal).rejects.toThrow(`${single}: is one dataset without splits (state.json "_split": null, as Dataset.save_to_disk writes it)`);
    await expect(refusal).rejects.toThrow(
      `d = datasets.load_from_disk(${JSON.stringify(single)}).train_test_split(test_size=0.05, seed=0); datasets.DatasetDict(train=d["train"], validation=d["test"])`,
    );
    await expect(refusal).rejects.toThrow('npm run prepare -- <files> --out <new folder>');
    // The splits of a Python DatasetDict say "_split": null too: there the folder names the split. Named alone,
    // such a folder is refused with the DatasetDict to name instead.
    expect(JSON.parse(fs.readFileSync(path.join(root, 'dict', 'validation', 'state.json'), 'utf8'))._split).toBeNull();
    expect(await listShards(path.join(root, 'dict'), 'validation')).toEqual([path.join(root, 'dict', 'validation', 'data-00000-of-00001.arrow')]);
    const splitAlone = listShards(path.join(root, 'dict', 'train'), 'validation');
    await expect(splitAlone).rejects.toThrow(`${path.join(root, 'dict', 'train')}: is one split folder of the DatasetDict ${path.join(root, 'dict')}`);
    await expect(splitAlone).rejects.toThrow(`name the DatasetDict folder ${path.join(root, 'dict')} as the dataset`);
  });

  it('reads a large_string dataset written by Python', async () => {
    const [shard] = await listShards(path.join(root, 'large_string'), 'train');
    const want = Array.from({ length: 1500 }, (_, i) => `large ${i}`);
    expect((await collect(shard, 'text', 1)).flatMap((b) => b.texts)).toEqual(want.slice(1000));
    expect(await describeSplit(path.join(root, 'large_string'), 'train', 'text')).toMatchObject({ rows: 1500, bytes: utf8(want) });
  });
});

describe('listShards and describeSplit', () => {
  it('resolve a save_to_disk DatasetDict folder and its split folders', async () => {
    const root = path.join(dir, 'dict');
    const counts = { train: 2300, validation: 700 };
    for (const split of ['train', 'validation'] as const) {
      const writer = new SplitWriter(path.join(root, split), split, ['text'], 'text', parseShardSize('1000'), 'test');
      for (const t of texts(counts[split], split)) await writer.append([t]);
      await writer.finish();
    }
    writeDatasetDictJson(root, ['train', 'validation']);
    expect(JSON.parse(fs.readFileSync(path.join(root, 'dataset_dict.json'), 'utf8'))).toEqual({ splits: ['train', 'validation'] });
    const train = await listShards(root, 'train');
    expect(train.map((f) => path.relative(root, f))).toEqual([
      'train/data-00000-of-00003.arrow',
      'train/data-00001-of-00003.arrow',
      'train/data-00002-of-00003.arrow',
    ]);
    const state = JSON.parse(fs.readFileSync(path.join(root, 'train', 'state.json'), 'utf8'));
    expect(Object.keys(state)).toEqual(['_data_files', '_fingerprint', '_format_columns', '_format_kwargs', '_format_type', '_output_all_columns', '_split']);
    expect(state).toMatchObject({ _format_columns: null, _format_kwargs: {}, _format_type: null, _output_all_columns: false, _split: 'train' });
    expect(state._fingerprint).toMatch(/^[0-9a-f]{16}$/);
    const info = JSON.parse(fs.readFileSync(path.join(root, 'train', 'dataset_info.json'), 'utf8'));
    expect(info.features).toEqual({ text: { dtype: 'string', _type: 'Value' } });
    expect(info.splits.train).toMatchObject({ name: 'train', num_examples: 2300 });
    expect(await listShards(path.join(root, 'validation'), 'validation')).toEqual([path.join(root, 'validation', 'data-00000-of-00001.arrow')]);
    await expect(listShards(path.join(root, 'train'), 'validation')).rejects.toThrow(
      `${path.join(root, 'train')}: is the "train" split (state.json _split), but the "validation" split was asked for; name the DatasetDict folder ${root} as the dataset`,
    );
    const described = await describeSplit(root, 'train', 'text');
    expect(described.rows).toBe(2300);
    expect(described.bytes).toBe(texts(2300, 'train').reduce((s, t) => s + Buffer.byteLength(t), 0));
    expect(described.shards).toEqual(train);
  });

  it('resolve plain folders and globs of c4-style names, split by name, in sorted order', async () => {
    const cache = path.join(dir, 'c4cache');
    fs.mkdirSync(cache);
    const names = [
      'c4-validation-00001-of-00002.arrow',
      'c4-train-00002-of-00003.arrow',
      'c4-train-00000-of-00003.arrow',
      'c4-validation-00000-of-00002.arrow',
      'c4-train-00001-of-00003.arrow',
    ];
    for (const name of names) await writeShard(path.join(cache, name), [[name]], ['text']);
    const train = ['c4-train-00000-of-00003.arrow', 'c4-train-00001-of-00003.arrow', 'c4-train-00002-of-00003.arrow'].map((n) => path.join(cache, n));
    expect(await listShards(cache, 'train')).toEqual(train);
    expect(await listShards(cache, 'validation')).toEqual(
      ['c4-validation-00000-of-00002.arrow', 'c4-validation-00001-of-00002.arrow'].map((n) => path.join(cache, n)),
    );
    expect(await listShards(path.join(cache, 'c4-train-*.arrow'), 'train')).toEqual(train);
    expect(await listShards(path.join(cache, 'c4-train-0000[12]-of-*.arrow'), 'train')).toEqual(train.slice(1));
    await expect(listShards(path.join(cache, 'c4-train-*.arrow'), 'validation')).rejects.toThrow(/no "-validation-" \.arrow files.*train/);
    const described = await describeSplit(path.join(cache, 'c4-validation-*.arrow'), 'validation', 'text');
    expect(described.rows).toBe(2);

    const plain = path.join(dir, 'plain');
    fs.mkdirSync(plain);
    for (const name of ['b.arrow', 'a.arrow', 'c.arrow']) await writeShard(path.join(plain, name), [[name]], ['text']);
    expect((await listShards(plain, 'train')).map((f) => path.basename(f))).toEqual(['a.arrow', 'b.arrow', 'c.arrow']);
    await expect(listShards(plain, 'validation')).rejects.toThrow(/no "-train-"\/"-validation-" part/);
  });
});
