// Validation on a fixed set of tokens, collected once and kept in memory, so every evaluation sees the same tokens (and,
// for BERT, the same masks): by default `evalTokens` labelled tokens drawn across the whole validation split by a fixed
// seed (spreadSample), or with `train.evalSample: head` the first ones in the split's order (docs/training.md, "Validation").
import * as tf from '@tensorflow/tfjs';
import { IGNORE_LABEL } from '../model/lm.ts';
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
  /** With evaluate's `byPosition`: the loss of the same tokens by position in the sequence (positionBucketEdges). */
  byPosition?: PositionLoss[];
}

/** The labelled tokens at positions [from, to) of their sequence (GPT: the prediction made with from+1 … to tokens of context; BERT: the masked token's position). */
export interface PositionLoss {
  from: number;
  to: number;
  /** Mean cross-entropy, nats (NaN when the bucket holds no labelled token). */
  loss: number;
  ppl: number;
  tokens: number;
}

/** Bucket edges for sequences of `seqLen` positions: 0, 1, 2, 4, 8, … doubling, the last bucket ending at seqLen. */
export function positionBucketEdges(seqLen: number): number[] {
  const edges = [0];
  for (let end = 1; end < seqLen; end *= 2) edges.push(end);
  edges.push(seqLen);
  return edges;
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
 * `graph`: each batch shape as a forward-only TensorFlow function where the backend can (train.graph);
 * `byPosition`: also the loss by position bucket (positionBucketEdges of the longest batch), from the same forward pass.
 */
export async function evaluate(model: StepModel, batches: readonly Batch[], graph = true, byPosition = false): Promise<EvalResult> {
  let lossNats = 0;
  let correct = 0;
  let tokens = 0;
  let bytes = 0;
  const edges = byPosition ? positionBucketEdges(Math.max(1, ...batches.map((b) => b.seqLen))) : [];
  const bucketCount = Math.max(0, edges.length - 1);
  const bucketNats = new Float64Array(bucketCount);
  const bucketTokens = new Float64Array(bucketCount);
  for (const batch of batches) {
    let count = 0;
    const bucketOf = byPosition ? positionBucketsOf(batch, edges, bucketTokens) : null;
    const sums = tf.tidy(() => {
      const positions = bucketOf ? { bucketOf: tf.tensor1d(bucketOf, 'int32'), count: bucketCount } : undefined;
      const out = evalSumsThroughGraph(model, batch, graph, positions);
      count = out.count;
      return tf.concat([tf.stack([out.loss, out.correct]), ...(out.byPosition ? [out.byPosition] : [])]);
    });
    const [loss, hits, ...perBucket] = await sums.data();
    sums.dispose();
    lossNats += loss;
    correct += hits;
    tokens += count;
    bytes += batch.bytes;
    perBucket.forEach((nats, i) => (bucketNats[i] += nats));
  }
  const result = evalResult(lossNats, correct, tokens, bytes);
  return byPosition ? { ...result, byPosition: positionLosses(edges, bucketNats, bucketTokens) } : result;
}

/** Each bucket of `edges` with its mean loss from Σ nats and labelled tokens per bucket (NaN where it holds none). */
export function positionLosses(edges: readonly number[], nats: Float64Array, tokens: Float64Array): PositionLoss[] {
  return Array.from(nats, (sum, i) => {
    const mean = tokens[i] > 0 ? sum / tokens[i] : NaN;
    return { from: edges[i], to: edges[i + 1], loss: mean, ppl: Math.exp(mean), tokens: tokens[i] };
  });
}

/**
 * The bucket of each flat position of `batch` ([B·L]) under `edges`, adding its labelled positions to
 * `tokensPerBucket` when given. A position's bucket does not depend on the last edge (they double from 0), so the
 * buckets of a shorter batch's own edges are the first ones of a longer batch's.
 */
export function positionBucketsOf(batch: Pick<Batch, 'batchSize' | 'seqLen' | 'labels'>, edges: readonly number[], tokensPerBucket?: Float64Array): Int32Array {
  const ofPosition = new Int32Array(batch.seqLen);
  for (let bucket = 0; bucket < edges.length - 1; bucket++) ofPosition.fill(bucket, edges[bucket], Math.min(edges[bucket + 1], batch.seqLen));
  const bucketOf = new Int32Array(batch.batchSize * batch.seqLen);
  for (let i = 0; i < bucketOf.length; i++) {
    bucketOf[i] = ofPosition[i % batch.seqLen];
    if (tokensPerBucket && batch.labels[i] !== IGNORE_LABEL) tokensPerBucket[bucketOf[i]]++;
  }
  return bucketOf;
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
