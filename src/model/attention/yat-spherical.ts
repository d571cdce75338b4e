// yat-spherical: the exact spherical Yat kernel, quadratic in length (SLAY paper §3;
// docs/notes/attention-kernels.md §1.5). x = q̂·k̂, K = x²/(C − 2x) with C = 2 + ε, and kernel normalisation
// Y = KV / (K·1 + δ) — not a softmax. Future keys get weight 0.
import * as tf from '@tensorflow/tfjs';
import { batchMatMul, causalMask01, clamp, ConstantCache, flattenHeads, l2Normalize } from '../ops.ts';
import { sameDocumentMask } from './documents.ts';
import { kvCacheMethods } from './kv-cache.ts';
import { registerAttention } from './registry.ts';
import type { AttentionModule } from './types.ts';

registerAttention('yat-spherical', {
  description: 'exact spherical Yat attention x²/(C−2x), kernel-normalised, O(L²)',
  quadratic: true,
  options: {
    epsilon: { kind: 'number', default: 1e-3, exclusiveMin: 0, doc: 'ε in C = 2 + ε; the kernel peaks at 1/ε' },
    delta: { kind: 'number', default: 1e-6, min: 0, doc: 'δ added to the denominator' },
  },
  tensors: () => [],
  create(config, options): AttentionModule {
    const epsilon = options.epsilon as number;
    const delta = options.delta as number;
    const masks = new ConstantCache();
    // Unit queries q̂ [B, H, Lq, D] against unit keys k̂ and values [B, H, Lk, D]; `mask01` (1 = attend)
    // broadcasts to [B, H, Lq, Lk].
    const attend = (qUnit: tf.Tensor4D, kUnit: tf.Tensor4D, v: tf.Tensor4D, mask01?: tf.Tensor) =>
      tf.tidy(() => {
        const [b, h, lq, d] = qUnit.shape;
        const lk = kUnit.shape[2];
        // Clamping x to [−1, 1] keeps C − 2x ≥ ε when rounding pushes q̂·k̂ just past 1.
        const x = clamp(batchMatMul(flattenHeads(qUnit), flattenHeads(kUnit), false, true), -1, 1);
        let kernel: tf.Tensor = tf.reshape(tf.div(tf.square(x), tf.sub(2 + epsilon, tf.mul(x, 2))), [b, h, lq, lk]);
        if (mask01) kernel = tf.mul(kernel, mask01);
        const numerator = batchMatMul(tf.reshape(kernel, [b * h, lq, lk]), flattenHeads(v));
        const denominator = tf.add(tf.reshape(tf.sum(kernel, -1, true), [b * h, lq, 1]), delta);
        return tf.reshape(tf.div(numerator, denominator), [b, h, lq, d]) as tf.Tensor4D;
      });
    return {
      name: 'yat-spherical',
      options,
      trainableVariables: [],
      buffers: [],
      apply(q, k, v, opts = {}) {
        return tf.tidy(() => {
          const [b, , l] = q.shape;
          let mask: tf.Tensor | undefined;
          if (config.causal) mask = masks.get(`causal${l}`, () => causalMask01(l));
          if (opts.keyMask) {
            const padding = tf.reshape(opts.keyMask, [b, 1, 1, l]);
            mask = mask ? tf.mul(mask, padding) : padding;
          }
          if (opts.documents) {
            const sameDocument = sameDocumentMask(opts.documents.ids);
            mask = mask ? tf.mul(mask, sameDocument) : sameDocument;
          }
          return attend(l2Normalize(q), l2Normalize(k), v, mask);
        });
      },
      // The cache holds unit keys: normalisation is per key, so it is done once per position.
      ...kvCacheMethods('yat-spherical', config, (q, keys, values, visible) => attend(l2Normalize(q), keys, values, visible), l2Normalize),
      dispose: () => masks.dispose(),
    };
  },
});
