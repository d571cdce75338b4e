// Validation on a fixed set of tokens, collected once and kept in memory, so every evaluation sees the same tokens (and,
// for BERT, the same masks): by default `evalTokens` labelled tokens drawn across the whole validation split by a fixed
// seed (spreadSample), or with `train.evalSample: head` the first ones in the split's order (docs/training.md, "Validation").
import * as tf from '@tensorflow/tfjs';
import type { StepModel } from '../model/lm.ts';
import { evalSumsThroughGraph } from './compiled-step.ts';
import { spreadSample } from '../data/eval-sample.ts';
import type { EvalSample } from '../data/eval-sample.ts';
import { openBatchStream } from '../data/stream.ts';
import type { StreamOptions } from '../data/stream-options.ts';
import type { Batch } from '../data/batch.ts';
import type { EvalSampleKind } from '../data/batch.ts';

export type { EvalSample };

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
 * The evaluation sample of at least `evalTokens` labelled tokens (fewer when the split holds fewer): `spread` draws
 * examples across the whole split, `head` reads batches from its start. Errors if the split yields no example at all.
 */
export async function collectEvalBatches(
  opts: Omit<StreamOptions, 'split' | 'cursor' | 'shuffleBuffer'>,
  evalTokens: number,
  sample: EvalSampleKind = 'spread',
): Promise<EvalSample> {
  const collected = sample === 'spread' && Number.isFinite(evalTokens) ? await spreadSample(opts, evalTokens) : await headSample(opts, evalTokens);
  if (collected.batches.length === 0) {
    throw new Error(
      `${opts.dataset}: the validation split gave no batch of ${opts.batchSize}×${opts.seqLen} tokens; a validation split with enough text is needed`,
    );
  }
  return collected;
}

/** Whole batches from the start of the validation split until they hold `evalTokens` labelled tokens. */
async function headSample(opts: Omit<StreamOptions, 'split' | 'cursor' | 'shuffleBuffer'>, evalTokens: number): Promise<EvalSample> {
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
    return { batches, documents: stream.stats.documents };
  } finally {
    await stream.close();
  }
}

/**
 * Loss, perplexity, bits per byte and top-1 accuracy of the model on the given batches (no dropout);
 * `graph`: each batch shape as a forward-only TensorFlow function where the backend can (train.graph).
 */
export async function evaluate(model: StepModel, batches: readonly Batch[], graph = true): Promise<EvalResult> {
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
  return evalResult(lossNats, correct, tokens, bytes);
}

/** The result from validation's sums: Σ cross-entropy (nats), Σ correct, labelled tokens, bytes of their targets. */
export function evalResult(lossNats: number, correct: number, tokens: number, bytes: number): EvalResult {
  const mean = tokens > 0 ? lossNats / tokens : NaN;
  return {
    loss: mean,
    ppl: Math.exp(mean),
    bpb: bytes > 0 ? lossNats / (Math.LN2 * bytes) : NaN,
    accuracy: tokens > 0 ? correct / tokens : NaN,
    tokens,
    bytes,
  };
}
