// softmax: exact scaled dot-product attention, causal by a constant additive mask.
import * as tf from '@tensorflow/tfjs';
import { batchMatMul, causalMask01, ConstantCache, flattenHeads } from '../ops.ts';
import { kvCacheMethods } from './kv-cache.ts';
import { registerAttention } from './registry.ts';
import type { AttentionModule } from './types.ts';

const NEG = -1e9;

registerAttention('softmax', {
  description: 'exact scaled dot-product attention softmax(qkᵀ/√d)v',
  options: {},
  create(config): AttentionModule {
    const masks = new ConstantCache();
    const scale = 1 / Math.sqrt(config.headDim);
    // q [B, H, Lq, D] against keys/values [B, H, Lk, D]; `additiveMask` broadcasts to [B, H, Lq, Lk].
    const attend = (q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, additiveMask?: tf.Tensor) =>
      tf.tidy(() => {
        const [b, h, lq, d] = q.shape;
        const lk = k.shape[2];
        let scores: tf.Tensor = tf.reshape(tf.mul(batchMatMul(flattenHeads(q), flattenHeads(k), false, true), scale), [b, h, lq, lk]);
        if (additiveMask) scores = tf.add(scores, additiveMask);
        const weights = tf.reshape(tf.softmax(scores), [b * h, lq, lk]);
        return tf.reshape(batchMatMul(weights, flattenHeads(v)), [b, h, lq, d]) as tf.Tensor4D;
      });
    return {
      name: 'softmax',
      options: {},
      trainableVariables: [],
      buffers: [],
      apply(q, k, v, opts = {}) {
        return tf.tidy(() => {
          const [b, , l] = q.shape;
          let mask: tf.Tensor | undefined;
          if (config.causal) mask = masks.get(`causal${l}`, () => tf.mul(tf.sub(1, causalMask01(l)), NEG));
          if (opts.keyMask) {
            const padding = tf.mul(tf.sub(1, tf.reshape(opts.keyMask, [b, 1, 1, l])), NEG);
            mask = mask ? tf.add(mask, padding) : padding;
          }
          return attend(q, k, v, mask);
        });
      },
      ...kvCacheMethods('softmax', config, (q, keys, values) => attend(q, keys, values)),
      dispose: () => masks.dispose(),
    };
  },
});
