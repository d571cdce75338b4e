import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { estimateEpoch } from '../../src/data/epoch.ts';
import { openBatchStream, parseCursor } from '../../src/data/stream.ts';
import type { DataCursor } from '../../src/data/stream.ts';
import type { StreamOptions } from '../../src/data/stream-options.ts';
import type { Batch } from '../../src/data/batch.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { syntheticDocuments, writeDataset } from './stream-fixtures.ts';

// Records every record batch the stream reads, to check that a resumed stream reads no consumed one.
const reads = vi.hoisted(() => [] as { shard: string; batchIndex: number }[]);
vi.mock('../../src/data/arrow.ts', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../src/data/arrow.ts')>();
  return {
    ...original,
    arrowShards: {
      ...original.arrowShards,
      async *readTextBatches(file: string, column: string, fromBatch = 0) {
        for await (const batch of original.readTextBatches(file, column, fromBatch)) {
          reads.push({ shard: basename(file), batchIndex: batch.batchIndex });
          yield batch;
        }
      },
    },
  };
});

let dir: string;
let tokenizer: TextTokenizer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'resume-test-'));
  const docs = syntheticDocuments(420, 3);
  await trainByteLevelBpeFromTexts(docs, 300, join(dir, 'tok.json'));
  tokenizer = await TextTokenizer.load(join(dir, 'tok.json'));
  const withBlank = (d: string[]) => d.flatMap((x, i) => (i % 17 === 5 ? [x, ''] : [x]));
  await writeDataset(
    join(dir, 'data'),
    { train: [withBlank(docs.slice(0, 130)), withBlank(docs.slice(130, 300)), withBlank(docs.slice(300, 400))], validation: [docs.slice(400)] },
    16,
  );
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function options(kind: 'gpt' | 'bert', cursor?: DataCursor): StreamOptions {
  return {
    dataset: join(dir, 'data'),
    split: 'train',
    textColumn: 'text',
    tokenizer,
    kind,
    seqLen: kind === 'gpt' ? 32 : 24,
    batchSize: 3,
    seed: 5,
    shuffleBuffer: 12,
    readAhead: 2,
    cursor,
  };
}

const snapshot = (b: Batch) => ({
  batchSize: b.batchSize,
  inputIds: Array.from(b.inputIds),
  labels: Array.from(b.labels),
  attentionMask: b.attentionMask ? Array.from(b.attentionMask) : null,
  tokens: b.tokens,
  bytes: b.bytes,
});

describe.each(['gpt', 'bert'] as const)('exact resume (%s, shuffle on)', (kind) => {
  it('a stream restored from a JSON round-tripped cursor yields exactly the remaining batches, reading no consumed record batch', async () => {
    const full = await openBatchStream(options(kind));
    const all: ReturnType<typeof snapshot>[] = [];
    for (let b = await full.next(); b !== null; b = await full.next()) all.push(snapshot(b));
    const finalStats = full.stats;
    const finalCursor = full.cursor();
    await full.close();
    expect(all.length).toBeGreaterThan(20);
    expect(finalCursor.done).toBe(true);

    const stops = [1, 7, Math.floor(all.length / 2), all.length - 2, all.length];
    let sawMidDocument = false;
    for (const k of stops) {
      const first = await openBatchStream(options(kind));
      for (let i = 0; i < k; i++) expect(snapshot((await first.next())!)).toEqual(all[i]);
      const cursor = JSON.parse(JSON.stringify(first.cursor())) as DataCursor;
      await first.close();
      sawMidDocument ||= cursor.offset > 0;
      expect(cursor.batches).toBe(k);
      // Small: the shuffle buffer's tokens (base64 uint16) dominate.
      const seqLen = options(kind).seqLen;
      expect(JSON.stringify(cursor).length).toBeLessThan(1500 + Math.ceil((12 * (seqLen + 1) * 2 * 4) / 3));

      reads.length = 0;
      const resumed = await openBatchStream(options(kind, cursor));
      const rest: ReturnType<typeof snapshot>[] = [];
      for (let b = await resumed.next(); b !== null; b = await resumed.next()) rest.push(snapshot(b));
      // Compared batch by batch as JSON: a deep-equality diff of thousands of numbers takes minutes to print.
      const firstMismatch = rest.findIndex((b, i) => JSON.stringify(b) !== JSON.stringify(all[k + i]));
      expect({ remaining: rest.length, firstMismatch }).toEqual({ remaining: all.length - k, firstMismatch: -1 });
      expect(resumed.stats).toEqual(finalStats);
      expect(resumed.cursor()).toEqual(finalCursor);
      await resumed.close();

      // No record batch before the cursor's position is read again.
      const shardNames = [0, 1, 2].map((i) => `corpus-train-0000${i}-of-00003.arrow`);
      for (const r of reads) {
        const position = cursor.shardOrder.indexOf(shardNames.indexOf(r.shard));
        expect(position).toBeGreaterThanOrEqual(cursor.shard);
        if (position === cursor.shard) expect(r.batchIndex).toBeGreaterThanOrEqual(cursor.recordBatch);
      }
      // Each record batch is read once.
      expect(new Set(reads.map((r) => `${r.shard}#${r.batchIndex}`)).size).toBe(reads.length);
    }
    expect(sawMidDocument).toBe(true);
  });

  it('readAhead bounds the shards read ahead of the consumer', async () => {
    // With readAhead 1 a shard is read only once the consumer has finished the one before it: after every batch, no
    // shard past the consumer's position in the visiting order has been read. (Checked at each batch, an event,
    // rather than after a pause: with readAhead 2 the next shard's reads show up while the first is consumed.)
    reads.length = 0;
    const stream = await openBatchStream({ ...options(kind), readAhead: 1 });
    const shardNames = [0, 1, 2].map((i) => `corpus-train-0000${i}-of-00003.arrow`);
    let batches = 0;
    for (let batch = await stream.next(); batch; batch = await stream.next()) {
      const { shard, shardOrder } = stream.cursor();
      const furthestRead = Math.max(...reads.map((r) => shardOrder.indexOf(shardNames.indexOf(r.shard))));
      expect(furthestRead, `after batch ${batches}`).toBeLessThanOrEqual(shard);
      batches++;
    }
    expect(new Set(reads.map((r) => r.shard)).size).toBe(3); // every shard was read in the end
    await stream.close();
  });

  it('restoring a finished cursor yields nothing', async () => {
    const stream = await openBatchStream(options(kind));
    while ((await stream.next()) !== null);
    const cursor = JSON.parse(JSON.stringify(stream.cursor())) as DataCursor;
    await stream.close();
    reads.length = 0;
    const resumed = await openBatchStream(options(kind, cursor));
    expect(await resumed.next()).toBeNull();
    expect(reads.length).toBe(0);
    await resumed.close();
  });
});

describe('untrusted cursors are checked against the dataset, naming the file and the field', () => {
  const source = '/ck/step-000004/cursor.json';
  /** A GPT cursor taken in the middle of a document of the first shard visited. */
  async function midDocumentCursor(): Promise<DataCursor> {
    const stream = await openBatchStream(options('gpt'));
    for (let i = 0; i < 40; i++) {
      await stream.next();
      const cursor = stream.cursor();
      if (cursor.offset > 0 && cursor.shard === 0) {
        await stream.close();
        return JSON.parse(JSON.stringify(cursor)) as DataCursor;
      }
    }
    throw new Error('no mid-document cursor in the first 40 batches');
  }

  it('its structure: null, wrong types, missing fields', () => {
    expect(() => parseCursor(null, source)).toThrow(`${source}: the data cursor must be a JSON object (got null)`);
    expect(() => parseCursor([], source)).toThrow(/must be a JSON object/);
    expect(() => parseCursor({ version: 1, kind: 'gpt', split: 'train', seqLen: '32' }, source)).toThrow(`${source}: seqLen must be an integer ≥ 0 (got "32")`);
  });

  it('an all-zero generator state (xoshiro128 would only yield 0), and 2⁶⁰ printed exactly', async () => {
    const good = await midDocumentCursor();
    expect(() => parseCursor({ ...good, shuffle: { ...good.shuffle!, rng: [0, 0, 0, 0] } }, source)).toThrow(
      `${source}: shuffle.rng must be four 32-bit words, not all zero (got [0,0,0,0])`,
    );
    expect(() => parseCursor({ ...good, offset: 2 ** 60 }, source)).toThrow(`${source}: offset must be an integer ≥ 0 (got 1152921504606846976)`);
  });

  it('its position: shard, record batch, row, offset and shard order inside the dataset; tokens inside the vocabulary', async () => {
    const good = await midDocumentCursor();
    const cases: [Partial<DataCursor>, RegExp][] = [
      [{ shard: 99 }, /shard = 99 is past the dataset's 3 shards/],
      [{ recordBatch: 999 }, /recordBatch = 999, row = \d+ is past the end of shard \d, which has \d+ record batches/],
      [{ row: 999 }, /row = 999 is past the end of record batch \d+ \(16 rows\) of shard \d/],
      [{ shardOrder: [0, 0, 1] }, /shardOrder must be an order of the shards 0…2/],
      [{ shardOrder: [0, 1] }, /shardOrder lists 2 shards but .* \(train\) has 3/],
      [{ carry: [100000] }, /carry holds a token id ≥ the vocabulary size 300/],
      [{ shuffle: null }, /shuffle must be an object for shuffleBuffer 12/],
      // An end only at the end of the split: a cursor never ends an epoch early.
      [{ done: true }, /done = true, but the position \(shard 0 of 3, record batch \d+, row \d+\) is not the end of the split/],
      [{ shuffle: { ...good.shuffle!, exhausted: true } }, /shuffle\.exhausted = true, but the position \(shard 0 of 3, .*\) is not the end of the split/],
      // The offset inside the document is checked when the stream opens, before anything reads a batch.
      [{ offset: 1_000_000 }, /offset = 1000000 is past the end of the document it points into/],
    ];
    for (const [change, message] of cases) {
      const cursor = { ...good, ...change };
      await expect(openBatchStream({ ...options('gpt', cursor), cursorFile: source }), JSON.stringify(change)).rejects.toThrow(
        new RegExp(`^${source.replace(/[./]/g, '\\$&')}: ${message.source}`),
      );
    }
    // The unchanged cursor restores.
    const restored = await openBatchStream({ ...options('gpt', good), cursorFile: source });
    expect(await restored.next()).not.toBeNull();
    await restored.close();
  });
});

describe('the epoch estimate before the first step', () => {
  it('reads only a sample of the split (the first record batches), and says it is an estimate', async () => {
    reads.length = 0;
    const estimate = await estimateEpoch(options('gpt'), { documents: 40, bytes: Infinity });
    // 16-row record batches: 40 documents are in the first three of the first shard; the header scan reads no text.
    expect(reads.map((r) => r.batchIndex)).toEqual([0, 1, 2]);
    expect(new Set(reads.map((r) => r.shard)).size).toBe(1);
    expect(estimate.exact).toBe(false);
    expect(estimate.sample.documents).toBeGreaterThanOrEqual(40);
    expect(estimate.splitBytes).toBeGreaterThan(estimate.sample.bytes);
    // Close to the real counts (the stream's own, read in full).
    const stream = await openBatchStream({ ...options('gpt'), shuffleBuffer: 0 });
    let batches = 0;
    while (await stream.next()) batches++;
    const { tokens } = stream.stats;
    await stream.close();
    expect(Math.abs(estimate.tokens / tokens - 1)).toBeLessThan(0.15);
    expect(Math.abs(estimate.batches / batches - 1)).toBeLessThan(0.15);
  });
});
