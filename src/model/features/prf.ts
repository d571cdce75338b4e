// Positive random features (PRF) for the exponential kernel, shared by Performer, DARKFormer and SLAY:
//
//   φ(x)_j = m^(−1/2) · exp(ω_jᵀx − ‖x‖²/2),   ω_j ~ N(0, I)  ⇒  E[φ(x)ᵀφ(y)] = exp(xᵀy)
//
// (FAVOR+: Choromanski et al., Rethinking Attention with Performers, ICLR 2021;
// docs/notes/attention-kernels.md §2.1). SLAY's exp(√(2s)ωᵀu − s) for a unit u is this map at
// x = √(2s)·u.
import * as tf from '@tensorflow/tfjs';
import { clamp, projectPerHead, untaped } from '../ops.ts';

export type Stabilizer = 'none' | 'row' | 'global';

export interface PrfOptions {
  /**
   * Subtract a maximum from the exponent (it cancels in the normalised ratio):
   * 'row' — per position over features (queries), 'global' — per (batch, head) over positions and
   * features (keys; one shared scale). The maximum carries no gradient.
   */
  stabilizer?: Stabilizer;
  /** Clamp the exponent to [−clamp, clamp] (the SLAY reference clamps at 20). */
  clamp?: number;
  /**
   * Per-feature log importance weights log w_j, [H, m] (per-head omega) or [m] (src/model/features/importance.ts):
   * each side adds ½·log w_j to its exponent, so φ(q)ᵀφ(k) carries w_j once. Absent: w_j = 1 (ω ~ N(0, I)).
   */
  logWeights?: tf.Tensor;
}

export interface PrfResult {
  features: tf.Tensor4D;
  /** The exponent shift c that was removed (features carry a factor e^(−c)); 0 without stabilizer. */
  shift: tf.Tensor;
}

/**
 * x [B, H, L, d]; omega [H, d, m] (per head) or [d, m] (shared) with N(0, I) columns.
 */
export function positiveRandomFeatures(x: tf.Tensor4D, omega: tf.Tensor, opts: PrfOptions = {}): PrfResult {
  const m = omega.shape[omega.rank - 1]!;
  let logits = tf.sub(projectPerHead(x, omega), tf.mul(tf.sum(tf.square(x), -1, true), 0.5));
  if (opts.logWeights) {
    const perHead = opts.logWeights.rank === 2;
    logits = tf.add(logits, tf.mul(tf.reshape(opts.logWeights, perHead ? [1, opts.logWeights.shape[0], 1, m] : [1, 1, 1, m]), 0.5));
  }
  const axes = opts.stabilizer === 'row' ? -1 : opts.stabilizer === 'global' ? [2, 3] : null;
  const shift = axes === null ? tf.scalar(0) : untaped(() => tf.max(logits, axes, true));
  let exponents = axes === null ? logits : tf.sub(logits, shift);
  if (opts.clamp !== undefined) exponents = clamp(exponents, -opts.clamp, opts.clamp);
  return { features: tf.mul(tf.exp(exponents), 1 / Math.sqrt(m)) as tf.Tensor4D, shift };
}
