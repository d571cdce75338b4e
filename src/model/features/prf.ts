// Positive random features (PRF) for the exponential kernel, shared by Performer, DARKFormer and SLAY:
//
//   φ(x)_j = m^(−1/2) · exp(ω_jᵀx − ‖x‖²/2),   ω_j ~ N(0, I)  ⇒  E[φ(x)ᵀφ(y)] = exp(xᵀy)
//
// (FAVOR+, Choromanski et al. 2021; "Cheap Attention" in ../shared/papers). SLAY's
// exp(√(2s)ωᵀu − s) for a unit u is this map at x = √(2s)·u.
import * as tf from '@tensorflow/tfjs';
import { clamp, maxWithoutGradient, projectPerHead } from '../ops.ts';

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
  let logits: tf.Tensor = tf.sub(projectPerHead(x, omega), tf.mul(tf.sum(tf.square(x), -1, true), 0.5));
  let shift: tf.Tensor = tf.scalar(0);
  if (opts.stabilizer === 'row') shift = maxWithoutGradient(logits, -1);
  else if (opts.stabilizer === 'global') shift = maxWithoutGradient(logits, [2, 3]);
  if (opts.stabilizer && opts.stabilizer !== 'none') logits = tf.sub(logits, shift);
  if (opts.clamp !== undefined) logits = clamp(logits, -opts.clamp, opts.clamp);
  return { features: tf.mul(tf.exp(logits), 1 / Math.sqrt(m)) as tf.Tensor4D, shift };
}

