import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { estimateEpoch } from '../../src/data/epoch.ts';
import { openBatchStream } from '../../src/data/stream.ts';
import type { StreamOptions } from '../../src/data/stream-options.ts';
import type { Batch } from '../../src/data/batch.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { syntheticDocuments, writeDataset } from './stream-fixtures.ts';

let dir: string;
let tokenizer: TextTokenizer;
// Documents per shard as written (nulls and blanks included).
let trainShards: (string | null)[][];
let validationShards: (string | null)[][];

function withBlanks(docs: string[], every: number): (string | null)[] {
  const out: (string | null)[] = [];
  docs.forEach((d, i) => {
    out.push(d);
    if (i % every === every - 1) out.push(i % (2 * every) === every - 1 ? null : '  \n');
  });
  return out;
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'stream-test-'));
  const docs = syntheticDocuments(500, 7);
  await trainByteLevelBpeFromTexts(docs, 320, join(dir, 'tok.json'));
  tokenizer = await TextTokenizer.load(join(dir, 'tok.json'));
  trainShards = [withBlanks(docs.slice(0, 150), 25), withBlanks(docs.slice(150, 260), 30), withBlanks(docs.slice(260, 400), 40)];
  validationShards = [withBlanks(docs.slice(400, 450), 20), docs.slice(450, 500)];
  await writeDataset(join(dir, 'data'), { train: trainShards, validation: validationShards }, 32);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function options(overrides: Partial<StreamOptions> = {}): StreamOptions {
  return {
    dataset: join(dir, 'data'),
    split: 'train',
    textColumn: 'text',
    tokenizer,
    kind: 'gpt',
    seqLen: 24,
    batchSize: 5,
    seed: 11,
    shuffleBuffer: 0,
    readAhead: 2,
    ...overrides,
  };
}

async function drain(opts: StreamOptions): Promise<{ batches: Batch[]; stats: { documents: number; tokens: number; skippedEmpty: number; bytes: number } }> {
  const stream = await openBatchStream(opts);
  const batches: Batch[] = [];
  for (let b = await stream.next(); b !== null; b = await stream.next()) batches.push(b);
  expect(await stream.next()).toBeNull();
  const stats = stream.stats;
  await stream.close();
  return { batches, stats };
}

/** The expected GPT token stream: each non-blank document's tokens followed by eos, shards in the given order. */
async function tokenStream(
  shards: (string | null)[][],
): Promise<{ stream: number[]; documentOf: number[]; docTokens: number; documents: number; blanks: number; bytes: number }> {
  const stream: number[] = [];
  const documentOf: number[] = []; // the document (in stream order) each token of the stream belongs to, its eos included
  let docTokens = 0;
  let documents = 0;
  let blanks = 0;
  let bytes = 0;
  for (const shard of shards) {
    const kept = shard.filter((t): t is string => t !== null && t.trim() !== '');
    blanks += shard.length - kept.length;
    for (const ids of await tokenizer.encodeBatch(kept)) {
      stream.push(...ids, tokenizer.specialIds.eos!);
      documentOf.push(...Array.from({ length: ids.length + 1 }, () => documents));
      docTokens += ids.length;
      documents++;
    }
    bytes += kept.reduce((n, t) => n + Buffer.byteLength(t), 0);
  }
  return { stream, documentOf, docTokens, documents, blanks, bytes };
}

const rowsOf = (ids: Int32Array, seqLen: number) =>
  Array.from({ length: ids.length / seqLen }, (_, r) => Array.from(ids.subarray(r * seqLen, (r + 1) * seqLen)));

describe('GPT packing', () => {
  it('windows overlap by one token and, joined, give the eos-separated token stream; labels are inputs shifted by one', async () => {
    const seqLen = 24;
    const { batches, stats } = await drain(options({ split: 'validation', batchSize: 5 }));
    const expected = await tokenStream(validationShards);
    const windows = batches.flatMap((b) => {
      expect(b.kind).toBe('gpt');
      expect(b.seqLen).toBe(seqLen);
      const inputs = rowsOf(b.inputIds, seqLen);
      const labels = rowsOf(b.labels, seqLen);
      return inputs.map((row, r) => [...row, labels[r][seqLen - 1]]);
    });
    const windowCount = Math.floor((expected.stream.length - 1) / seqLen);
    expect(windows.length).toBe(windowCount);
    // Validation keeps the incomplete last batch.
    expect(batches.length).toBe(Math.ceil(windowCount / 5));
    expect(batches.at(-1)!.batchSize).toBe(windowCount - 5 * (batches.length - 1));
    const joined = [windows[0][0], ...windows.flatMap((w) => w.slice(1))];
    expect(joined).toEqual(expected.stream.slice(0, windowCount * seqLen + 1));
    for (const b of batches) {
      for (let r = 0; r < b.batchSize; r++) {
        const inputs = b.inputIds.subarray(r * seqLen, (r + 1) * seqLen);
        const labels = b.labels.subarray(r * seqLen, (r + 1) * seqLen);
        expect(Array.from(inputs.subarray(1))).toEqual(Array.from(labels.subarray(0, seqLen - 1)));
      }
      expect(b.tokens).toBe(b.batchSize * seqLen);
      expect(b.bytes).toBe(Array.from(b.labels).reduce((n, id) => n + tokenizer.tokenBytes(id), 0));
    }
    expect(stats).toEqual({ documents: expected.documents, tokens: expected.docTokens, skippedEmpty: expected.blanks, bytes: expected.bytes });
  });

  it('documentMask: each row numbers the documents its input positions come from, from 0; off, batches carry none', async () => {
    const seqLen = 24;
    const { batches } = await drain(options({ split: 'validation', batchSize: 5, documentMask: true }));
    const { documentOf } = await tokenStream(validationShards);
    let window = 0;
    let boundaries = 0;
    for (const b of batches) {
      for (const row of rowsOf(b.documentIds!, seqLen)) {
        // Window w's inputs are stream positions w·seqLen … w·seqLen + seqLen − 1.
        const first = documentOf[window * seqLen];
        expect(row).toEqual(Array.from({ length: seqLen }, (_, t) => documentOf[window * seqLen + t] - first));
        boundaries += row[seqLen - 1];
        window++;
      }
    }
    expect(boundaries).toBeGreaterThan(0);
    const plain = await drain(options({ split: 'validation', batchSize: 5 }));
    expect(plain.batches.every((b) => b.documentIds === undefined)).toBe(true);
    await expect(openBatchStream(options({ kind: 'bert', documentMask: true }))).rejects.toThrow(/documentMask applies to GPT packing only/);
  });

  it('train: one pass in the seeded shard order, incomplete last batch dropped, stats count the whole split', async () => {
    const opts = options({ batchSize: 7 });
    const stream = await openBatchStream(opts);
    const order = stream.cursor().shardOrder;
    expect([...order].sort()).toEqual([0, 1, 2]);
    await stream.close();
    const { batches, stats } = await drain(opts);
    const expected = await tokenStream(order.map((i) => trainShards[i]));
    const windowCount = Math.floor((expected.stream.length - 1) / 24);
    expect(batches.length).toBe(Math.floor(windowCount / 7));
    expect(batches.every((b) => b.batchSize === 7)).toBe(true);
    expect(Array.from(batches[0].inputIds.subarray(0, 24))).toEqual(expected.stream.slice(0, 24));
    expect(stats.tokens).toBe(expected.docTokens);
    expect(stats.skippedEmpty).toBe(expected.blanks);
    expect(stats.documents).toBe(expected.documents);
    const estimate = await estimateEpoch(opts);
    expect(estimate).toMatchObject({ tokens: expected.docTokens, batches: batches.length, exact: true });
  });

  it('the shuffle buffer permutes the same windows', async () => {
    const plain = await drain(options({ batchSize: 1 }));
    const shuffled = await drain(options({ batchSize: 1, shuffleBuffer: 16 }));
    const key = (b: Batch) => Array.from(b.inputIds).join(',') + '|' + b.labels[b.labels.length - 1];
    const a = plain.batches.map(key);
    const b = shuffled.batches.map(key);
    expect(b).not.toEqual(a);
    expect([...b].sort()).toEqual([...a].sort());
  });
});

describe('epoch estimate', () => {
  it('extrapolates from a sample when the split is large, close to the exact counts', async () => {
    for (const kind of ['gpt', 'bert'] as const) {
      const opts = options({ kind, batchSize: 2 });
      const exact = await estimateEpoch(opts);
      expect(exact.exact).toBe(true);
      const sampled = await estimateEpoch(opts, { documents: 60, bytes: Infinity });
      expect(sampled.exact).toBe(false);
      expect(Math.abs(sampled.tokens / exact.tokens - 1)).toBeLessThan(0.2);
      expect(Math.abs(sampled.batches / exact.batches - 1)).toBeLessThan(0.2);
    }
  });
});

describe('determinism', () => {
  const firstBatches = async (opts: StreamOptions, n: number) => {
    const stream = await openBatchStream(opts);
    const out: number[][] = [];
    for (let i = 0; i < n; i++) out.push(Array.from((await stream.next())!.inputIds));
    await stream.close();
    return out;
  };

  it('same seed → same batches, different seed → different order (GPT and BERT)', async () => {
    for (const kind of ['gpt', 'bert'] as const) {
      const a = await firstBatches(options({ kind, shuffleBuffer: 8, seed: 1 }), 4);
      const b = await firstBatches(options({ kind, shuffleBuffer: 8, seed: 1 }), 4);
      const c = await firstBatches(options({ kind, shuffleBuffer: 8, seed: 2 }), 4);
      expect(b).toEqual(a);
      expect(c).not.toEqual(a);
    }
  });

  it('validation order (and BERT masking) is fixed regardless of seed and shuffle buffer', async () => {
    for (const kind of ['gpt', 'bert'] as const) {
      const a = await drain(options({ kind, split: 'validation', seed: 1, shuffleBuffer: 8 }));
      const b = await drain(options({ kind, split: 'validation', seed: 99, shuffleBuffer: 0 }));
      expect(b.batches.map((x) => Array.from(x.inputIds))).toEqual(a.batches.map((x) => Array.from(x.inputIds)));
      expect(b.batches.map((x) => Array.from(x.labels))).toEqual(a.batches.map((x) => Array.from(x.labels)));
    }
  });
});

describe('BERT sequences', () => {
  it('unmasking the batches gives [CLS] chunk [SEP] pad… with chunks of seqLen − 2 covering every document', async () => {
    const seqLen = 20;
    const { batches, stats } = await drain(options({ kind: 'bert', split: 'validation', seqLen, batchSize: 6 }));
    const { eos, pad } = tokenizer.specialIds;
    const expected = await tokenStream(validationShards);
    const recovered: number[] = [];
    for (const b of batches) {
      expect(b.kind).toBe('bert');
      for (let r = 0; r < b.batchSize; r++) {
        const row: number[] = [];
        for (let t = 0; t < seqLen; t++) {
          const at = r * seqLen + t;
          row.push(b.labels[at] === -100 ? b.inputIds[at] : b.labels[at]);
          expect(b.attentionMask![at]).toBe(b.inputIds[at] === pad && b.labels[at] === -100 ? 0 : 1);
        }
        const real = row.filter((_, t) => b.attentionMask![r * seqLen + t] === 1);
        expect(real[0]).toBe(eos); // byte-level tokenizer: eos stands in for [CLS] and [SEP]
        expect(real.at(-1)).toBe(eos);
        expect(real.length).toBeLessThanOrEqual(seqLen);
        recovered.push(...real.slice(1, -1));
      }
    }
    // Joined chunks = document tokens (the eos separators of the GPT stream removed).
    expect(recovered).toEqual(expected.stream.filter((id) => id !== eos));
    expect(stats.tokens).toBe(expected.docTokens);
  });
});

describe('bad input', () => {
  it('rejects bad options and a cursor from another stream, naming the field', async () => {
    await expect(openBatchStream(options({ seqLen: 0 }))).rejects.toThrow(/seqLen must be an integer ≥ 2, ≤ 1048576, got 0/);
    await expect(openBatchStream(options({ readAhead: 0 }))).rejects.toThrow(/readAhead/);
    await expect(openBatchStream(options({ kind: 'xl' as 'gpt' }))).rejects.toThrow(/kind must be 'gpt' or 'bert'/);
    const stream = await openBatchStream(options({ shuffleBuffer: 4 }));
    await stream.next();
    const cursor = stream.cursor();
    await stream.close();
    await expect(openBatchStream(options({ shuffleBuffer: 4, seed: 12, cursor }))).rejects.toThrow(
      /data cursor: the data cursor does not match this stream: seed = 11, the stream has 12/,
    );
    await expect(openBatchStream(options({ shuffleBuffer: 4, kind: 'bert', cursor }))).rejects.toThrow(/does not match this stream: kind = "gpt"/);
    const wrongColumn = await openBatchStream(options({ textColumn: 'body' }));
    await expect(wrongColumn.next()).rejects.toThrow(/no column "body"; columns present: "text"/);
    await wrongColumn.close();
  });
});
