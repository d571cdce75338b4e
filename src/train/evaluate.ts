// Validation on a fixed set of tokens: the first `evalTokens` labelled tokens of the validation split,
// read once in the stream's fixed order and kept in memory, so every evaluation sees the same tokens
// (and, for BERT, the same masks).
import * as tf from '@tensorflow/tfjs';
import type { LanguageModel } from '../model/lm.ts';
import { evalSumsThroughGraph } from './compiled-step.ts';
import { openBatchStream } from '../data/stream.ts';
import type { Batch } from '../data/batch.ts';
import type { StreamOptions } from '../data/stream.ts';

export interface EvalResult {
  /** Mean cross-entropy per labelled token, nats. */
  loss: number;
  ppl: number;
  /** Bits per byte: Σ loss (nats) / (ln 2 · Σ bytes of the target tokens). */
  bpb: number;
  /** Top-1 accuracy over the same labelled tokens as the loss: next-token (GPT) or masked-token (BERT). */
  accuracy: number;
  tokens: number;
  bytes: number;
}

/**
 * Reads validation batches until they hold at least `evalTokens` labelled tokens (or the split ends).
 * Errors if the split yields no batch at all.
 */
export async function collectEvalBatches(
  opts: Omit<StreamOptions, 'split' | 'cursor' | 'shuffleBuffer'>,
  evalTokens: number,
): Promise<Batch[]> {
  const stream = await openBatchStream({ ...opts, split: 'validation', shuffleBuffer: 0 });
  const batches: Batch[] = [];
  let tokens = 0;
  try {
    while (tokens < evalTokens) {
      const batch = await stream.next();
      if (!batch) break;
      batches.push(batch);
      tokens += batch.tokens;
    }
  } finally {
    await stream.close();
  }
  if (batches.length === 0) {
    throw new Error(`${opts.dataset}: the validation split gave no batch of ${opts.batchSize}×${opts.seqLen} tokens; a validation split with enough text is needed`);
  }
  return batches;
}

/**
 * Loss, perplexity, bits per byte and top-1 accuracy of the model on the given batches (no dropout);
 * `graph`: each batch shape as a forward-only TensorFlow function where the backend can (train.graph).
 */
export async function evaluate(model: LanguageModel, batches: readonly Batch[], graph = true): Promise<EvalResult> {
  let lossNats = 0;
  let correct = 0;
  let tokens = 0;
  let bytes = 0;
  for (const batch of batches) {
    let count = 0;
    const sums = tf.tidy(() => {
      const out = evalSumsThroughGraph(model, batch, graph);
      count = out.count;
      return tf.stack([out.loss, out.correct]);
    });
    const [loss, hits] = await sums.data();
    sums.dispose();
    lossNats += loss;
    correct += hits;
    tokens += count;
    bytes += batch.bytes;
  }
  const mean = tokens > 0 ? lossNats / tokens : NaN;
  return {
    loss: mean, ppl: Math.exp(mean), bpb: bytes > 0 ? lossNats / (Math.LN2 * bytes) : NaN,
    accuracy: tokens > 0 ? correct / tokens : NaN, tokens, bytes,
  };
}
