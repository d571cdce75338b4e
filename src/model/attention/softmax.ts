// softmax: exact scaled dot-product attention, causal by a constant additive mask.
import * as tf from '@tensorflow/tfjs';
import { batchMatMul, causalMask01, ConstantCache, flattenHeads } from '../ops.ts';
import { registerAttention } from './registry.ts';
import type { AttentionModule } from './types.ts';

const NEG = -1e9;

registerAttention('softmax', {
  description: 'exact scaled dot-product attention softmax(qkᵀ/√d)v',
  options: {},
  create(config): AttentionModule {
    const masks = new ConstantCache();
    const scale = 1 / Math.sqrt(config.headDim);
    return {
      name: 'softmax',
      options: {},
      trainableVariables: [],
      buffers: [],
      apply(q, k, v, opts = {}) {
        return tf.tidy(() => {
          const [b, h, l, d] = q.shape;
          let scores: tf.Tensor = tf.reshape(
            tf.mul(batchMatMul(flattenHeads(q), flattenHeads(k), false, true), scale),
            [b, h, l, l],
          );
          if (config.causal) {
            scores = tf.add(scores, masks.get(`causal${l}`, () => tf.mul(tf.sub(1, causalMask01(l)), NEG)));
          }
          if (opts.keyMask) scores = tf.add(scores, tf.mul(tf.sub(1, tf.reshape(opts.keyMask, [b, 1, 1, l])), NEG));
          const weights = tf.reshape(tf.softmax(scores), [b * h, l, l]);
          return tf.reshape(batchMatMul(weights, flattenHeads(v)), [b, h, l, d]) as tf.Tensor4D;
        });
      },
      dispose: () => masks.dispose(),
    };
  },
});
