// softmax: exact scaled dot-product attention, causal by a constant additive mask. With a key mask, a
// row none of whose visible keys is real outputs 0 (nothing to attend to), never a mix of padded and
// future keys.
import * as tf from '@tensorflow/tfjs';
import { batchMatMul, causalMask01, ConstantCache, flattenHeads } from '../ops.ts';
import { attentionBoundary, attentionBoundaryEnabled } from '../../backend/attention-boundary.ts';
import { fusedFormsEnabled } from '../../backend/fused-kernels.ts';
import { fusedAttentionSoftmaxGrad, fusedCausalAttention } from '../fused.ts';
import { sameDocumentMask } from './documents.ts';
import { kvCacheMethods } from './kv-cache.ts';
import { registerAttention } from './registry.ts';
import type { AttentionModule } from './types.ts';

const NEG = -1e9;

/** What each query's scores see: its keys j ≤ i ('causal', queries and keys of one sequence), an additive mask broadcasting to the scores, or every key. */
type ScoreMask = 'causal' | tf.Tensor | undefined;

/** Softmax over the keys of scores [B, H, Lq, Lk], under the mask it was made for. */
type MaskedSoftmax = (scores: tf.Tensor) => tf.Tensor;

/** The reference twin of attentionProducts: the same maths, differentiated by tfjs op by op. */
function composedAttention(q: tf.Tensor3D, k: tf.Tensor3D, v: tf.Tensor3D, scoresShape: number[], softmax: MaskedSoftmax): tf.Tensor3D {
  const scores = tf.reshape(batchMatMul(q, k, false, true), scoresShape);
  return batchMatMul(tf.reshape(softmax(scores), [q.shape[0], q.shape[1], k.shape[1]]), v);
}

/**
 * O = softmax(q·kᵀ under the mask)·v over flattened heads (q already scaled), with the gradient written by hand:
 * tf.softmax's own backward forms dP⊙P, its row sums and a second product with P, all on [.., Lq, Lk];
 * here the row term is rowsum(dO⊙O), on [.., Lq, D] (equal, since O = P·v: FlashAttention's identity),
 * so the [Lq, Lk]-sized work of the softmax backward is one subtraction and one product, or one fused
 * kernel where the backend has it (model/fused.ts; docs/benchmarks.md, "Fewer ops"). The mask is a
 * constant of the call: no gradient reaches it.
 */
function attentionProducts(q: tf.Tensor3D, k: tf.Tensor3D, v: tf.Tensor3D, scoresShape: number[], softmax: MaskedSoftmax): tf.Tensor3D {
  const [bh, lq, lk] = [q.shape[0], q.shape[1], k.shape[1]];
  const run = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const [qs, ks, vs, save] = args as [tf.Tensor3D, tf.Tensor3D, tf.Tensor3D, tf.GradSaveFunc];
    const probs = tf.reshape(softmax(tf.reshape(batchMatMul(qs, ks, false, true), scoresShape)), [bh, lq, lk]);
    const out = batchMatMul(probs, vs);
    save([qs, ks, vs, probs, out]);
    return {
      value: out,
      gradFunc: (dOut: tf.Tensor, saved: tf.Tensor[]) => {
        const [sq, sk, sv, sp, so] = saved as tf.Tensor3D[];
        return attentionGradients(sq, sk, sv, sp, so, dOut as tf.Tensor3D);
      },
    };
  }) as (qs: tf.Tensor3D, ks: tf.Tensor3D, vs: tf.Tensor3D) => tf.Tensor3D;
  return run(q, k, v);
}

/** dq, dk, dv of O = P·v, P = softmax(q·kᵀ under a constant mask), from P, O and dO (attentionProducts says why this form). */
function attentionGradients(q: tf.Tensor3D, k: tf.Tensor3D, v: tf.Tensor3D, probs: tf.Tensor3D, out: tf.Tensor3D, dOut: tf.Tensor3D): tf.Tensor3D[] {
  const dProbs = batchMatMul(dOut, v, false, true);
  const fusedGrad = fusedAttentionSoftmaxGrad();
  const dScores = (fusedGrad ? fusedGrad(probs, dProbs, dOut, out) : tf.mul(probs, tf.sub(dProbs, tf.sum(tf.mul(dOut, out), -1, true)))) as tf.Tensor3D;
  return [batchMatMul(dScores, k), batchMatMul(dScores, q, true, false), batchMatMul(probs, dOut, true, false)];
}

/**
 * Attention recorded as the XLA route's boundary (backend/attention-boundary.ts): forward and backward each one op
 * of the program, which jax fills in; their values here, eagerly, are the composed form's.
 */
function boundaryAttention(q: tf.Tensor3D, k: tf.Tensor3D, v: tf.Tensor3D, scoresShape: number[], softmax: MaskedSoftmax, causal: boolean): tf.Tensor3D {
  const probsOf = (qs: tf.Tensor3D, ks: tf.Tensor3D) =>
    tf.reshape(softmax(tf.reshape(batchMatMul(qs, ks, false, true), scoresShape)), [qs.shape[0], qs.shape[1], ks.shape[1]]) as tf.Tensor3D;
  const run = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const [qs, ks, vs, save] = args as [tf.Tensor3D, tf.Tensor3D, tf.Tensor3D, tf.GradSaveFunc];
    const [out] = attentionBoundary('forward', [qs, ks, vs], causal, () => [batchMatMul(probsOf(qs, ks), vs)]);
    save([qs, ks, vs, out]);
    return {
      value: out,
      gradFunc: (dOut: tf.Tensor, saved: tf.Tensor[]) => {
        const [sq, sk, sv, so] = saved as tf.Tensor3D[];
        return attentionBoundary('gradient', [sq, sk, sv, dOut], causal, () => attentionGradients(sq, sk, sv, probsOf(sq, sk), so, dOut as tf.Tensor3D));
      },
    };
  }) as (qs: tf.Tensor3D, ks: tf.Tensor3D, vs: tf.Tensor3D) => tf.Tensor3D;
  return run(q, k, v);
}

registerAttention('softmax', {
  description: 'exact scaled dot-product attention softmax(qkᵀ/√d)v',
  quadratic: true,
  options: {},
  tensors: () => [],
  create(config): AttentionModule {
    const masks = new ConstantCache();
    const additiveCausal = (l: number) => masks.get(`causal${l}`, () => tf.mul(tf.sub(1, causalMask01(l)), NEG));
    const scale = 1 / Math.sqrt(config.headDim);
    const maskedSoftmax =
      (mask: ScoreMask): MaskedSoftmax =>
      (scores) => {
        const addend = mask === 'causal' ? additiveCausal(scores.shape[scores.rank - 1] as number) : mask;
        return tf.softmax(addend ? tf.add(scores, addend) : scores);
      };
    // q [B, H, Lq, D] against keys/values [B, H, Lk, D].
    const attend = (q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, mask: ScoreMask) =>
      tf.tidy(() => {
        const [b, h, lq, d] = q.shape;
        const lk = k.shape[2];
        // The scale goes on q ([.., Lq, D]) rather than on the scores ([.., Lq, Lk]): L/D times fewer
        // multiplications forward and backward.
        const [qs, ks, vs] = [flattenHeads(tf.mul(q, scale)), flattenHeads(k), flattenHeads(v)];
        const fused = fusedFormsEnabled();
        // Causal attention whole as one kernel where the backend has it (the masked key tiles never computed).
        const causalKernel = mask === 'causal' && fused ? fusedCausalAttention() : null;
        const products = fused ? attentionProducts : composedAttention;
        // The XLA route's boundary takes self-attention, causal or unmasked (jax's causal mask is the same as ours).
        const boundary = attentionBoundaryEnabled() && lq === lk && (mask === 'causal' || mask === undefined);
        const out = boundary
          ? boundaryAttention(qs, ks, vs, [b, h, lq, lk], maskedSoftmax(mask), mask === 'causal')
          : causalKernel
            ? causalKernel(qs, ks, vs)
            : products(qs, ks, vs, [b, h, lq, lk], maskedSoftmax(mask));
        return tf.reshape(out, [b, h, lq, d]) as tf.Tensor4D;
      });
    return {
      name: 'softmax',
      options: {},
      trainableVariables: [],
      buffers: [],
      apply(q, k, v, opts = {}) {
        return tf.tidy(() => {
          const [b, , l] = q.shape;
          // Document masking: keys of other documents get the additive −∞ too.
          const otherDocuments = opts.documents && tf.mul(tf.sub(1, sameDocumentMask(opts.documents.ids)), NEG);
          if (!opts.keyMask && !otherDocuments) return attend(q, k, v, config.causal ? 'causal' : undefined);
          if (!opts.keyMask) return attend(q, k, v, config.causal ? tf.add(additiveCausal(l), otherDocuments!) : otherDocuments);
          const paddedKeys = tf.mul(tf.sub(1, tf.reshape(opts.keyMask, [b, 1, 1, l])), NEG);
          const padding = otherDocuments ? tf.add(paddedKeys, otherDocuments) : paddedKeys;
          // A row that sees no real key (causal, every key up to it padded) would average over padded
          // and future keys alike; it outputs 0 instead, as kernel-normalised attention does (0/δ).
          const seen = config.causal ? tf.cumsum(opts.keyMask, 1) : tf.sum(opts.keyMask, 1, true);
          const seesAKey = tf.reshape(tf.cast(tf.greater(seen, 0), 'float32'), [b, 1, config.causal ? l : 1, 1]);
          return tf.mul(attend(q, k, v, config.causal ? tf.add(additiveCausal(l), padding) : padding), seesAKey) as tf.Tensor4D;
        });
      },
      ...kvCacheMethods('softmax', config, (q, keys, values, visible) => attend(q, keys, values, visible && tf.mul(tf.sub(1, visible), NEG))),
      dispose: () => masks.dispose(),
    };
  },
});
