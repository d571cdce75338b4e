// Readers whose work or memory grew faster than their input (issue 33, item 10), held to bounds that are measured
// here by counts and sizes, never by the clock: JSON Lines splitting scans each character a bounded number of times,
// the tokenizer hands the native library a bounded number of texts per call (each native result holds ~1.5 KB, so a
// record batch of 2M one-character rows took ~4 GB) and keeps a batch's ids in one buffer, and a Parquet row group
// may decompress to a bounded size.
import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Tokenizer } from 'tokenizers';
import { BOUNDS } from '../../src/core/bounds.ts';
import { readJsonLines } from '../../src/data/sources/jsonl.ts';
import { parquetDecompressors, readParquet } from '../../src/data/sources/parquet.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { makeTempDir } from '../fixtures/data.ts';
import { syntheticDocuments } from './stream-fixtures.ts';

const dir = makeTempDir('reader-bounds');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));
const regex = (s: string) => new RegExp(s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));

describe('JSON Lines', () => {
  it('splits a 4 MB line reading each character a bounded number of times (it was quadratic: 120 s for 150 MB)', async () => {
    const long = 'x'.repeat(4 * 2 ** 20);
    const file = path.join(dir, 'long-line.jsonl');
    fs.writeFileSync(file, `{"text": "a"}\n{"text": "${long}"}\n{"text": "b"}`);
    // Characters searched for a newline: String.prototype.indexOf's work, from its start position to the string's end.
    const indexOf = String.prototype.indexOf;
    let searched = 0;
    String.prototype.indexOf = function (this: string, search: string, from?: number) {
      if (search === '\n') searched += this.length - (from ?? 0);
      return indexOf.call(this, search, from);
    };
    const texts: (string | null)[] = [];
    try {
      for await (const document of readJsonLines(file, 'text', [])) texts.push(document.text);
    } finally {
      String.prototype.indexOf = indexOf;
    }
    expect(texts.map((t) => t?.length)).toEqual([1, long.length, 1]);
    expect(searched).toBeLessThanOrEqual(2 * fs.statSync(file).size);
  });
});

describe('tokenizer', () => {
  let tokenizer: TextTokenizer;
  beforeAll(async () => {
    const file = path.join(dir, 'tokenizer.json');
    await trainByteLevelBpeFromTexts(syntheticDocuments(200, 5), 300, file);
    tokenizer = await TextTokenizer.load(file);
  });

  it('hands the native library at most 1,024 texts per call, with the ids of one call per text', async () => {
    const texts = Array.from({ length: 20_000 }, (_, i) => (i % 7 === 0 ? 'the nation' : String.fromCharCode(97 + (i % 26))));
    const native = vi.spyOn(Tokenizer.prototype, 'encodeBatch');
    let ids: Int32Array[];
    try {
      ids = await tokenizer.encodeBatch(texts);
      expect(native.mock.calls.length).toBeGreaterThanOrEqual(20);
      expect(Math.max(...native.mock.calls.map(([call]) => call.length))).toBeLessThanOrEqual(1024);
    } finally {
      native.mockRestore();
    }
    expect(ids.length).toBe(texts.length);
    for (const i of [0, 1, 6999, 19_999]) expect(ids[i]).toEqual((await tokenizer.encodeBatch([texts[i]]))[0]);
  });

  it('keeps the ids of all texts in one buffer with their starts: 4 bytes per token and per text, no object per text', async () => {
    const texts = Array.from({ length: 5000 }, (_, i) => (i % 3 === 0 ? '' : `the nation ${i}`));
    const { ids, starts } = await tokenizer.encodeFlat(texts);
    expect(starts.length).toBe(texts.length + 1);
    expect(starts[texts.length]).toBe(ids.length);
    for (const i of [0, 1, 2, 4999]) expect(ids.subarray(starts[i], starts[i + 1])).toEqual(Int32Array.from((await tokenizer.encodeBatch([texts[i]]))[0]));
    // encodeBatch's per-text arrays are views of such a buffer, not one allocation each.
    expect(new Set((await tokenizer.encodeBatch(texts)).map((a) => a.buffer)).size).toBe(1);
  });
});

describe('Parquet', () => {
  const fixtures = path.join(import.meta.dirname, '..', 'fixtures', 'parquet');

  it('refuses a row group whose columns declare more than the bound, before decoding it, naming the file and row group', async () => {
    const gzip = path.join(fixtures, 'gzip.parquet');
    const read = async (bound: number) => {
      let n = 0;
      for await (const _ of readParquet(gzip, 'text', ['url'], bound)) n++;
      return n;
    };
    expect(await read(BOUNDS.parquetRowGroupBytes.max)).toBe(20);
    await expect(read(100)).rejects.toThrow(regex(`${gzip} (row group 0): columns "text", "url" decompress to`));
    await expect(read(100)).rejects.toThrow(/more than the 100 bytes a row group may hold/);
  });

  it('stops a page that decompresses beyond its declared size, or beyond what is left of the bound', () => {
    const bomb = zlib.gzipSync(Buffer.alloc(2 ** 20));
    expect(bomb.length).toBeLessThan(2 ** 12);
    const budget = { left: 2 ** 30 };
    const decompress = parquetDecompressors(budget).GZIP!;
    expect(() => decompress(bomb, 1000)).toThrow('a page decompresses to more than the 1000 bytes its header declares');
    expect(decompress(bomb, 2 ** 20).length).toBe(2 ** 20);
    expect(budget.left).toBe(2 ** 30 - 1000 - 2 ** 20);
    const nearlySpent = parquetDecompressors({ left: 2 ** 19 });
    expect(() => nearlySpent.GZIP!(bomb, 2 ** 20)).toThrow(/more than the 524,288 bytes left of the bound/);
    expect(() => nearlySpent.SNAPPY!(new Uint8Array([0]), 2 ** 31)).toThrow(/more than the 524,288 bytes left of the bound/);
  });
});
