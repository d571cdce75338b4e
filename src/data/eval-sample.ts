// The evaluation sample: validation examples drawn across the whole split (docs/training.md, "Validation"), read through
// the batch stream's example by example path (src/data/stream.ts).
import { Rng, deriveSeed } from '../core/rng.ts';
import type { Batch } from './batch.ts';
import { listShards } from './dataset.ts';
import { SmallestKeys } from './smallest-keys.ts';
import { ShardBatchStream, VALIDATION_MASK_SEED } from './stream.ts';
import type { ExampleRow } from './stream.ts';
import { validateStreamOptions } from './stream-options.ts';
import type { StreamOptions } from './stream-options.ts';

/** The evaluation sample: whole batches of validation examples and how many documents their tokens come from. */
export interface EvalSample {
  batches: Batch[];
  documents: number;
}

/** Seed of the spread sample's choice of examples: fixed, so every run on the same data and tokenizer sees the same tokens. */
const SPREAD_SAMPLE_SEED = 0x5eed;

/**
 * `evalTokens` labelled tokens drawn across the whole validation split (docs/training.md, "Validation"): every example
 * (GPT window, BERT chunk) of the split, read once in split order, gets a seeded random key, and the examples with the
 * smallest keys are kept until they hold `evalTokens` labels (SmallestKeys: memory bounded by the sample, not the split).
 * BERT masks each example with a generator seeded by its index, so the masks do not depend on which examples are kept.
 * The kept examples are batched in split order, `batchSize` rows a batch (the last may be smaller).
 */
export async function spreadSample(opts: Omit<StreamOptions, 'split' | 'cursor' | 'shuffleBuffer'>, evalTokens: number): Promise<EvalSample> {
  const full: StreamOptions = { ...opts, split: 'validation', shuffleBuffer: 0 };
  validateStreamOptions(full);
  const shards = await listShards(full.dataset, 'validation');
  const stream = new ShardBatchStream(full, shards, undefined, 'data cursor');
  const keys = new Rng(SPREAD_SAMPLE_SEED);
  const kept = new SmallestKeys<ExampleRow & { index: number }>(evalTokens);
  try {
    for (let index = 0; ; index++) {
      const example = await stream.nextRow(new Rng(deriveSeed(VALIDATION_MASK_SEED, index)));
      if (example === null) break;
      kept.offer(keys.uniform(), example.row.tokens, { ...example, index });
    }
  } finally {
    await stream.close();
  }
  const rows = kept.items().sort((a, b) => a.index - b.index);
  const documents = new Set<number>();
  for (const { firstDocument, lastDocument } of rows) for (let d = firstDocument; d <= lastDocument; d++) documents.add(d);
  const batches: Batch[] = [];
  for (let start = 0; start < rows.length; start += opts.batchSize) batches.push(joinRows(rows.slice(start, start + opts.batchSize).map((r) => r.row)));
  return { batches, documents: documents.size };
}

/** One-row batches of the same kind and sequence length as one batch. */
function joinRows(rows: readonly Batch[]): Batch {
  const { kind, seqLen } = rows[0];
  const width = seqLen;
  const inputIds = new Int32Array(rows.length * width);
  const labels = new Int32Array(rows.length * width);
  const attentionMask = kind === 'bert' ? new Float32Array(rows.length * width) : undefined;
  const documentIds = rows[0].documentIds ? new Int32Array(rows.length * width) : undefined;
  let tokens = 0;
  let bytes = 0;
  rows.forEach((row, r) => {
    inputIds.set(row.inputIds, r * width);
    labels.set(row.labels, r * width);
    if (attentionMask) attentionMask.set(row.attentionMask!, r * width);
    if (documentIds) documentIds.set(row.documentIds!, r * width);
    tokens += row.tokens;
    bytes += row.bytes;
  });
  return {
    kind,
    batchSize: rows.length,
    seqLen,
    inputIds,
    labels,
    ...(attentionMask ? { attentionMask } : {}),
    ...(documentIds ? { documentIds } : {}),
    tokens,
    bytes,
  };
}
