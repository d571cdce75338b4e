// The size of one epoch of a split, estimated before the first step without reading the split (docs/data.md, "Epoch
// size"): the schedule and the progress line rest on it.
import { describeSplit } from './dataset.ts';
import { windowCount } from './packing.ts';
import { shardFormatOf } from './shard-registry.ts';
import { validateStreamOptions } from './stream-options.ts';
import type { StreamOptions } from './stream-options.ts';

/** The sample estimateEpoch reads: the first documents of the split, up to either limit. */
export interface EpochSample {
  documents: number;
  bytes: number;
}
const DEFAULT_EPOCH_SAMPLE: EpochSample = { documents: 1000, bytes: 4e6 };

export interface EpochEstimate {
  /** Document tokens (as StreamStats.tokens counts them) and batches of one epoch. */
  tokens: number;
  batches: number;
  /** True when the sample was the whole split (then the counts are exact). */
  exact: boolean;
  /** What the estimate rests on: the sample's documents and text bytes, and the split's text bytes (null: unknown, rows used). */
  sample: { documents: number; bytes: number };
  splitBytes: number | null;
}

/**
 * Counts of one epoch, estimated without reading the split: the split's text bytes come from the shards' scans (Arrow:
 * the IPC headers, a few small reads per record batch; rows when the bytes cannot be told, e.g. dictionary-encoded text), and tokens
 * and examples per byte (or per row) from the first documents of the split, at most `sample.documents` documents or
 * `sample.bytes` of text. When the sample reaches the end of the split the counts are exact. `tokens` counts
 * document tokens as StreamStats.tokens does. A train split without one full batch is an error.
 */
export async function estimateEpoch(opts: Omit<StreamOptions, 'cursor'>, sample: EpochSample = DEFAULT_EPOCH_SAMPLE): Promise<EpochEstimate> {
  validateStreamOptions(opts);
  const { tokenizer, kind, seqLen, batchSize } = opts;
  const described = await describeSplit(opts.dataset, opts.split, opts.textColumn);
  let tokens = 0;
  let documents = 0;
  let bytes = 0;
  let rows = 0;
  let bertChunks = 0;
  outer: for (const shard of described.shards) {
    for await (const { texts } of shardFormatOf(shard).readTextBatches(shard, opts.textColumn)) {
      rows += texts.length;
      const kept = texts.filter((t): t is string => t !== null && t.trim().length > 0);
      const { starts } = await tokenizer.encodeFlat(kept);
      for (let i = 0; i < kept.length; i++) {
        const length = starts[i + 1] - starts[i];
        if (length === 0) continue;
        tokens += length;
        documents++;
        bertChunks += Math.ceil(length / (seqLen - 2));
      }
      for (const t of kept) bytes += Buffer.byteLength(t, 'utf8');
      if (documents >= sample.documents || bytes >= sample.bytes) break outer;
    }
  }
  const exact = rows === described.rows;
  // Scale the sample to the split: by text bytes when the headers tell them, else by rows.
  const scale = exact ? 1 : described.bytes !== null && bytes > 0 ? described.bytes / bytes : described.rows! / Math.max(1, rows);
  const examples = kind === 'gpt' ? windowCount(Math.round((tokens + documents) * scale), seqLen) : Math.round(bertChunks * scale);
  const batches = opts.split === 'train' ? Math.floor(examples / batchSize) : Math.ceil(examples / batchSize);
  // As collectEvalBatches refuses a validation split without a batch: a run of no step is no run.
  if (opts.split === 'train' && batches === 0) {
    const how = exact ? 'gave' : `is estimated (from its first ${documents} documents) to give`;
    throw new Error(`${opts.dataset}: the train split ${how} no batch of ${batchSize}×${seqLen} tokens; a train split with enough text is needed`);
  }
  return { tokens: Math.round(tokens * scale), batches, exact, sample: { documents, bytes }, splitBytes: described.bytes };
}
