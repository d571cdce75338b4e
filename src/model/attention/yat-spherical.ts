// yat-spherical: the exact spherical Yat kernel, quadratic in length (SLAY paper §3; reference
// notes §1.9). x = q̂·k̂, K = x²/(C − 2x) with C = 2 + ε, and kernel normalisation
// Y = KV / (K·1 + δ) — not a softmax. Future keys get weight 0.
import * as tf from '@tensorflow/tfjs';
import { batchMatMul, causalMask01, ConstantCache, flattenHeads, l2Normalize } from '../ops.ts';
import { registerAttention } from './registry.ts';
import type { AttentionModule } from './types.ts';

registerAttention('yat-spherical', {
  description: 'exact spherical Yat attention x²/(C−2x), kernel-normalised, O(L²)',
  options: {
    epsilon: { kind: 'number', default: 1e-3, exclusiveMin: 0, doc: 'ε in C = 2 + ε; the kernel peaks at 1/ε' },
    delta: { kind: 'number', default: 1e-6, min: 0, doc: 'δ added to the denominator' },
  },
  create(config, options): AttentionModule {
    const epsilon = options.epsilon as number;
    const delta = options.delta as number;
    const masks = new ConstantCache();
    return {
      name: 'yat-spherical',
      options,
      trainableVariables: [],
      buffers: [],
      apply(q, k, v, opts = {}) {
        return tf.tidy(() => {
          const [b, h, l, d] = q.shape;
          // Clipping x to [−1, 1] keeps C − 2x ≥ ε when rounding pushes q̂·k̂ just past 1.
          const x = tf.clipByValue(batchMatMul(flattenHeads(l2Normalize(q)), flattenHeads(l2Normalize(k)), false, true), -1, 1);
          let kernel: tf.Tensor = tf.div(tf.square(x), tf.sub(2 + epsilon, tf.mul(x, 2)));
          kernel = tf.reshape(kernel, [b, h, l, l]);
          if (config.causal) kernel = tf.mul(kernel, masks.get(`causal${l}`, () => causalMask01(l)));
          if (opts.keyMask) kernel = tf.mul(kernel, tf.reshape(opts.keyMask, [b, 1, 1, l]));
          const numerator = batchMatMul(tf.reshape(kernel, [b * h, l, l]), flattenHeads(v));
          const denominator = tf.add(tf.reshape(tf.sum(kernel, -1, true), [b * h, l, 1]), delta);
          return tf.reshape(tf.div(numerator, denominator), [b, h, l, d]) as tf.Tensor4D;
        });
      },
      dispose: () => masks.dispose(),
    };
  },
});
