// The linear-attention contraction, written once for every kernel (feature-map) mechanism.
//
//   Y_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + δ)       j over all keys, or j ≤ i if causal
//
// The denominator rides along as an extra value column of ones, so numerator and denominator come
// out of the same products. The causal form is chunkwise-parallel (as flash-linear-attention's
// naive chunk form): inside a chunk of C positions a masked C×C product, across chunks the
// per-chunk states φ(K_c)ᵀV_c combined by an exclusive prefix sum over the chunk axis. Memory is
// O(B·H·(L/C)·F·D) for the states plus O(B·H·L·C) for the score blocks, never the B·H·L·F·D of a
// cumulative sum of per-position outer products. All chunks are processed at once, so there is no
// JavaScript loop over the sequence in the graph.
import * as tf from '@tensorflow/tfjs';
import { batchMatMul, causalMask01, ConstantCache, flattenHeads } from '../ops.ts';

export interface ContractionOptions {
  causal: boolean;
  /** Chunk length of the causal form. */
  chunkSize: number;
  /** Added to the denominator: a number, or a tensor broadcastable to [B, H, L, 1]. */
  delta?: number | tf.Tensor;
  /** Instead of adding δ, clamp the denominator from below (for signed features, e.g. SchoenbAt's 1.0). */
  clampMin?: number;
  /** [B, L] 1/0: padded keys contribute nothing. */
  keyMask?: tf.Tensor2D;
}

const masks = new ConstantCache();

/**
 * phiQ, phiK: [B, H, L, F] features; v: [B, H, L, D]. Returns [B, H, L, D].
 */
export function linearAttention(
  phiQ: tf.Tensor4D,
  phiK: tf.Tensor4D,
  v: tf.Tensor4D,
  opts: ContractionOptions,
): tf.Tensor4D {
  return tf.tidy(() => {
    const [b, h, l, d] = v.shape;
    let keys: tf.Tensor4D = phiK;
    if (opts.keyMask) keys = tf.mul(keys, tf.reshape(opts.keyMask, [b, 1, l, 1]));
    const valuesAndOnes = tf.concat([v, tf.ones([b, h, l, 1])], 3) as tf.Tensor4D;
    const out = opts.causal
      ? causalContraction(phiQ, keys, valuesAndOnes, opts.chunkSize)
      : bidirectionalContraction(phiQ, keys, valuesAndOnes);
    const numerator = tf.slice(out, [0, 0, 0, 0], [b, h, l, d]);
    const denominator = tf.slice(out, [0, 0, 0, d], [b, h, l, 1]);
    return tf.div(numerator, normalizeDenominator(denominator, opts)) as tf.Tensor4D;
  });
}

export function normalizeDenominator(denominator: tf.Tensor, opts: Pick<ContractionOptions, 'delta' | 'clampMin'>): tf.Tensor {
  if (opts.clampMin !== undefined) return tf.maximum(denominator, opts.clampMin);
  return tf.add(denominator, opts.delta ?? 0);
}

/** Σ_j φ(k_j)[v_j, 1] once, then every query reads it: [B, H, L, D+1]. */
function bidirectionalContraction(phiQ: tf.Tensor4D, phiK: tf.Tensor4D, values: tf.Tensor4D): tf.Tensor4D {
  const [b, h, l, dv] = values.shape;
  const state = batchMatMul(flattenHeads(phiK), flattenHeads(values), true, false); // [BH, F, D+1]
  return tf.reshape(batchMatMul(flattenHeads(phiQ), state), [b, h, l, dv]);
}

function causalContraction(phiQ: tf.Tensor4D, phiK: tf.Tensor4D, values: tf.Tensor4D, chunkSize: number): tf.Tensor4D {
  const [b, h, l, dv] = values.shape;
  const f = phiQ.shape[3];
  const c = Math.min(chunkSize, l);
  const chunks = Math.ceil(l / c);
  const padded = chunks * c;
  // Zero-padding at the end is harmless: padded keys come after every real query.
  const pad = (x: tf.Tensor4D) => (padded === l ? x : tf.pad(x, [[0, 0], [0, 0], [0, padded - l], [0, 0]]));
  const bh = b * h;
  const q = tf.reshape(pad(phiQ), [bh * chunks, c, f]);
  const k = tf.reshape(pad(phiK), [bh * chunks, c, f]);
  const vv = tf.reshape(pad(values), [bh * chunks, c, dv]);

  const mask = masks.get(`causal${c}`, () => causalMask01(c));
  const scores = tf.mul(batchMatMul(q, k, false, true), mask); // [BH·nC, C, C]
  let out = batchMatMul(scores, vv); // intra-chunk part

  if (chunks > 1) {
    // State entering chunk n: Σ_{m<n} φ(K_m)ᵀ[V_m, 1]. tfjs's cumsum gradient works only on the
    // last axis, so the chunk axis is moved last for the prefix sum.
    const perChunk = tf.reshape(batchMatMul(k, vv, true, false), [bh, chunks, f * dv]);
    const prefix = tf.transpose(tf.cumsum(tf.transpose(perChunk, [0, 2, 1]), 2, true), [0, 2, 1]);
    out = tf.add(out, batchMatMul(q, tf.reshape(prefix, [bh * chunks, f, dv])));
  }
  const full = tf.reshape(out, [b, h, padded, dv]) as tf.Tensor4D;
  return padded === l ? full : (tf.slice(full, [0, 0, 0, 0], [b, h, l, dv]) as tf.Tensor4D);
}
