// The shard-format extension point: a toy JSON Lines format, written here and registered with one call, is listed,
// scanned and streamed by openBatchStream like Arrow (the same batches from the same rows), and a stream over it
// resumes from its cursor exactly.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Batch } from '../../src/data/batch.ts';
import { describeSplit, listShards } from '../../src/data/dataset.ts';
import type { ShardFormat, TextBatch } from '../../src/data/shard-format.ts';
import { registerShardFormat } from '../../src/data/shard-registry.ts';
import { estimateEpoch } from '../../src/data/epoch.ts';
import { openBatchStream } from '../../src/data/stream.ts';
import type { DataCursor } from '../../src/data/stream.ts';
import type { StreamOptions } from '../../src/data/stream-options.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { syntheticDocuments, writeDataset } from './stream-fixtures.ts';

/** Rows per batch of both corpora: the toy format's fixed chunk, and the Arrow fixture's record batches. */
const ROWS = 16;

/** One JSON object per line; batches are runs of ROWS lines. A toy: it reads the whole file (a real format would not). */
async function readRows(file: string, column: string): Promise<(string | null)[]> {
  const lines = (await readFile(file, 'utf8')).split('\n').filter((line) => line !== '');
  return lines.map((line, i) => {
    const row = JSON.parse(line) as Record<string, unknown>;
    if (!(column in row)) throw new Error(`${file}: line ${i + 1} has no "${column}"`);
    return row[column] as string | null;
  });
}

const jsonLinesShards: ShardFormat = {
  name: 'toy JSON Lines',
  extensions: ['.jsonl'],
  async scan(file, column) {
    const rows = await readRows(file, column);
    const batchRows: number[] = [];
    for (let start = 0; start < rows.length; start += ROWS) batchRows.push(Math.min(ROWS, rows.length - start));
    const textBytes = rows.reduce((n, text) => n + (text === null ? 0 : Buffer.byteLength(text, 'utf8')), 0);
    return { rows: rows.length, batches: batchRows.length, batchRows, textBytes };
  },
  async *readTextBatches(file, column, fromBatch = 0): AsyncGenerator<TextBatch> {
    const rows = await readRows(file, column);
    for (let batchIndex = fromBatch; batchIndex * ROWS < rows.length; batchIndex++) {
      yield { batchIndex, texts: rows.slice(batchIndex * ROWS, (batchIndex + 1) * ROWS), invalidUtf8: 0 };
    }
  },
};

let dir: string;
let tokenizer: TextTokenizer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'shard-format-test-'));
  const docs = syntheticDocuments(300, 4);
  await trainByteLevelBpeFromTexts(docs, 300, join(dir, 'tok.json'));
  tokenizer = await TextTokenizer.load(join(dir, 'tok.json'));
  const splits = { train: [docs.slice(0, 110), [...docs.slice(110, 180), null, ''], docs.slice(180, 260)], validation: [docs.slice(260)] };
  // The same rows twice: as Arrow shards, and as .jsonl shards named alike.
  await writeDataset(join(dir, 'arrow'), splits, ROWS);
  await mkdir(join(dir, 'jsonl'));
  for (const [split, shards] of Object.entries(splits)) {
    for (let i = 0; i < shards.length; i++) {
      const name = `corpus-${split}-${String(i).padStart(5, '0')}-of-${String(shards.length).padStart(5, '0')}.jsonl`;
      await writeFile(join(dir, 'jsonl', name), shards[i].map((text) => `${JSON.stringify({ text })}\n`).join(''));
    }
  }
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function options(format: 'arrow' | 'jsonl', kind: 'gpt' | 'bert', cursor?: DataCursor): StreamOptions {
  return {
    dataset: join(dir, format),
    split: 'train',
    textColumn: 'text',
    tokenizer,
    kind,
    seqLen: kind === 'gpt' ? 24 : 20,
    batchSize: 4,
    seed: 9,
    shuffleBuffer: 8,
    readAhead: 2,
    cursor,
  };
}

/** A batch as plain arrays, compared as JSON (a deep-equality diff of thousands of numbers is slow to print). */
function snapshot(batch: Batch): string {
  return JSON.stringify({ ...batch, inputIds: [...batch.inputIds], labels: [...batch.labels], attentionMask: batch.attentionMask && [...batch.attentionMask] });
}

async function drain(opts: StreamOptions): Promise<string[]> {
  const stream = await openBatchStream(opts);
  const out: string[] = [];
  for (let b = await stream.next(); b !== null; b = await stream.next()) out.push(snapshot(b));
  await stream.close();
  return out;
}

describe('a shard format registered with one call', () => {
  // In file order: the first test sees the registry without the toy format, the next ones with it.
  it('makes a folder of its files a dataset (before: no shard files)', async () => {
    await expect(listShards(join(dir, 'jsonl'), 'train')).rejects.toThrow(/has no dataset_dict\.json, no state\.json and no \.arrow files/);
    registerShardFormat(jsonLinesShards);
    expect((await listShards(join(dir, 'jsonl'), 'train')).map((f) => f.slice(dir.length))).toEqual(
      [0, 1, 2].map((i) => `/jsonl/corpus-train-0000${i}-of-00003.jsonl`),
    );
    await expect(listShards(join(dir, 'nowhere'), 'train')).rejects.toThrow(/expected a dataset folder, a \.arrow\/\.jsonl file/);
    expect(() => registerShardFormat({ ...jsonLinesShards, name: 'another' })).toThrow(/another: the ending \.jsonl is already read by toy JSON Lines/);
    // A split folder's state.json may list only files a format reads.
    await mkdir(join(dir, 'listed'));
    await writeFile(join(dir, 'listed', 'state.json'), JSON.stringify({ _data_files: [{ filename: 'data-00000-of-00001.csv' }], _split: 'train' }));
    await expect(listShards(join(dir, 'listed'), 'train')).rejects.toThrow(
      /listed\/state\.json: _data_files\[0\]\.filename data-00000-of-00001\.csv is not a \.arrow\/\.jsonl file/,
    );
  });

  it('streams the same GPT and BERT batches as Arrow shards of the same rows, and the same epoch estimate', async () => {
    const arrowSplit = await describeSplit(join(dir, 'arrow'), 'train', 'text');
    const jsonlSplit = await describeSplit(join(dir, 'jsonl'), 'train', 'text');
    expect({ rows: jsonlSplit.rows, bytes: jsonlSplit.bytes }).toEqual({ rows: arrowSplit.rows, bytes: arrowSplit.bytes });
    for (const kind of ['gpt', 'bert'] as const) {
      const fromArrow = await drain(options('arrow', kind));
      const fromJsonl = await drain(options('jsonl', kind));
      expect(fromJsonl.length).toBeGreaterThan(5);
      expect(fromJsonl.findIndex((b, i) => b !== fromArrow[i])).toBe(-1);
      expect(fromJsonl.length).toBe(fromArrow.length);
      expect(await estimateEpoch(options('jsonl', kind))).toEqual(await estimateEpoch(options('arrow', kind)));
    }
  });

  it('resumes from a cursor exactly, mid-shard', async () => {
    const all = await drain(options('jsonl', 'gpt'));
    const first = await openBatchStream(options('jsonl', 'gpt'));
    const k = Math.floor(all.length / 2);
    for (let i = 0; i < k; i++) await first.next();
    const cursor = JSON.parse(JSON.stringify(first.cursor())) as DataCursor;
    await first.close();
    expect(cursor.recordBatch + cursor.row).toBeGreaterThan(0); // inside a shard, not at its start
    const rest = await drain(options('jsonl', 'gpt', cursor));
    expect({ remaining: rest.length, firstMismatch: rest.findIndex((b, i) => b !== all[k + i]) }).toEqual({ remaining: all.length - k, firstMismatch: -1 });
  });
});
