// What a batch stream is opened with (src/data/stream.ts), and the check of those options that the stream, the epoch
// estimate (src/data/epoch.ts) and the evaluation sample (src/data/eval-sample.ts) share.
import { seqLenProblem } from './batch.ts';
import type { SequenceKind } from './batch.ts';
import type { DataCursor } from './cursor.ts';
import type { Split } from './dataset.ts';
import type { TextTokenizer } from './tokenizer.ts';

export interface StreamOptions {
  dataset: string;
  split: Split;
  textColumn: string;
  tokenizer: TextTokenizer;
  kind: SequenceKind;
  seqLen: number;
  batchSize: number;
  seed: number;
  shuffleBuffer: number;
  readAhead: number;
  mlmProbability?: number;
  /** GPT: batches carry each position's document (Batch.documentIds) so that attention stays within documents. */
  documentMask?: boolean;
  cursor?: DataCursor;
  /** Where the cursor was read from, named in its errors (default 'data cursor'). */
  cursorFile?: string;
  /** Problems that do not stop the stream (invalid UTF-8, once per shard); default: a line on stderr. */
  onWarning?: (message: string) => void;
}

export function validateStreamOptions(opts: StreamOptions): void {
  const positiveInt = (name: string, v: number, min: number) => {
    if (!Number.isInteger(v) || v < min) throw new Error(`stream option ${name} must be an integer ≥ ${min}, got ${v}`);
  };
  if (opts.kind !== 'gpt' && opts.kind !== 'bert') throw new Error(`stream option kind must be 'gpt' or 'bert', got ${String(opts.kind)}`);
  if (opts.split !== 'train' && opts.split !== 'validation') {
    throw new Error(`stream option split must be 'train' or 'validation', got ${String(opts.split)}`);
  }
  const seqLen = seqLenProblem(opts.seqLen, opts.kind);
  if (seqLen !== null) throw new Error(`stream option seqLen must be ${seqLen}, got ${opts.seqLen}`);
  positiveInt('batchSize', opts.batchSize, 1);
  positiveInt('shuffleBuffer', opts.shuffleBuffer, 0);
  positiveInt('readAhead', opts.readAhead, 1);
  if (opts.mlmProbability !== undefined && !(opts.mlmProbability > 0 && opts.mlmProbability < 1)) {
    throw new Error(`stream option mlmProbability must be in (0, 1), got ${opts.mlmProbability}`);
  }
  if (!Number.isInteger(opts.seed)) throw new Error(`stream option seed must be an integer, got ${opts.seed}`);
  if (opts.documentMask && opts.kind !== 'gpt') {
    throw new Error(`stream option documentMask applies to GPT packing only; a BERT sequence already holds one document`);
  }
  if (opts.kind === 'gpt' && opts.tokenizer.specialIds.eos === undefined) {
    throw new Error(`tokenizer ${opts.tokenizer.path} has no end-of-text token (<|endoftext|> or </s>) to join GPT documents`);
  }
}
