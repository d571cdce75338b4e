// linear-elu: linear attention with φ(x) = elu(x) + 1 (Katharopoulos et al. 2020; docs/notes/attention-kernels.md §5):
//
//   Y_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + δ)       j ≤ i if causal
//
// φ is positive (elu(x) + 1 = eˣ for x < 0, x + 1 otherwise), so every score is ≥ 0 and the
// denominator ≥ δ. No 1/√d scaling: this is its own kernel, not a softmax approximation.
import * as tf from '@tensorflow/tfjs';
import { contractionOptions, contractionOptionSpecs, featureMapMethods } from './linear-attention.ts';
import { registerAttention } from './registry.ts';
import type { AttentionModule } from './types.ts';

/** φ(x) = elu(x) + 1, element-wise. */
export function eluPlusOne<T extends tf.Tensor>(x: T): T {
  return tf.tidy(() => tf.add(tf.elu(x), 1) as T);
}

registerAttention('linear-elu', {
  description: 'linear attention with the positive feature map elu(x)+1 (Katharopoulos et al. 2020)',
  quadratic: false,
  options: {
    delta: { kind: 'number', default: 1e-6, min: 0, doc: 'δ added to the denominator (the reference ε)' },
    ...contractionOptionSpecs,
  },
  tensors: () => [],
  featureMap: ({ headDim }) => ({ features: headDim, flopsPerSide: headDim }),
  create(config, options): AttentionModule {
    const side = (x: tf.Tensor4D) => ({ features: eluPlusOne(x) });
    const maps = { featureDim: config.headDim, shiftedKeys: false, query: side, key: side };
    return {
      name: 'linear-elu',
      options,
      trainableVariables: [],
      buffers: [],
      ...featureMapMethods('linear-elu', config, () => maps, { ...contractionOptions(options), delta: options.delta as number }),
      dispose() {},
    };
  },
});
