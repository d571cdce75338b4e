// cosformer: ReLU features with cos-based re-weighting (Qin et al. 2022; docs/notes/attention-kernels.md §6):
//
//   κ(i, j) = ReLU(q_i)ᵀReLU(k_j) · cos(π/2 · (i − j)/M)
//
// decomposed by cos(a_i − a_j) = sin a_i sin a_j + cos a_i cos a_j, a_i = (π/2)·i/M, into the
// 2·headDim features [ReLU(x_i) sin a_i, ReLU(x_i) cos a_i], contracted by the shared linear attention
// with δ added to the (non-negative) denominator.
//
// Positions are 1-based, i = 1…L, as the official code. M: the official code uses the current
// sequence length, so a token's weights change as the sequence grows — fine for training, wrong
// for step-by-step generation. Option `reweightLength` fixes M (set it to the context length for
// generation); 0 keeps the official M = L. With a fixed M the length must stay ≤ M, so that every
// |i − j| ≤ L − 1 < M keeps the angle below π/2 and the weights positive. Decoding one position at a
// time (initState/step) needs one M for the whole sequence: reweightLength, or when it is 0 the
// state's maxLength (the model's maxSeqLen) — so a decoded sequence shorter than maxSeqLen does not
// reproduce the official M = L forward of that sequence, it reproduces the forward with M = maxSeqLen.
// With document masking i restarts at each packed document's first token and M stays the row's (a
// document then matches its run alone with the same M: set reweightLength; docs/attention.md).
import * as tf from '@tensorflow/tfjs';
import { BOUNDS } from '../../core/bounds.ts';
import { ConstantCache } from '../ops.ts';
import { contractionOptions, contractionOptionSpecs, featureMapMethods, type FeatureMaps } from './linear-attention.ts';
import { registerAttention } from './registry.ts';
import type { AttentionModule } from './types.ts';

/**
 * The re-weighting angles a_i = (π/2)·i/M of the 1-based positions i = start+1 … start+length (only
 * those: a segment or a decoding step late in a long sequence must not cost O(start)).
 */
export function cosformerAngles(length: number, reweightLength: number, start = 0): number[] {
  return Array.from({ length }, (_, index) => ((Math.PI / 2) * (start + index + 1)) / reweightLength);
}

registerAttention('cosformer', {
  description: 'cosFormer: ReLU features re-weighted by cos(π/2·(i−j)/M), linear attention',
  quadratic: false,
  options: {
    reweightLength: {
      kind: 'int',
      default: 0,
      min: 0,
      max: BOUNDS.positions.max,
      doc: 'M in cos(π/2·(i−j)/M) with 1-based positions; 0 = the current sequence length (official); set the context length for generation',
    },
    delta: { kind: 'number', default: 1e-6, min: 0, doc: 'δ added to the denominator' },
    ...contractionOptionSpecs,
  },
  tensors: () => [],
  // ReLU, then its products with sin and cos of the position.
  featureMap: ({ headDim }) => ({ features: 2 * headDim, flopsPerSide: 3 * headDim }),
  create(config, options): AttentionModule {
    const fixedLength = options.reweightLength as number;
    const constants = new ConstantCache();
    // Features of positions start … start+L−1 in sequences of totalLength positions.
    const maps = (totalLength: number): FeatureMaps => {
      if (fixedLength > 0 && totalLength > fixedLength) {
        throw new Error(
          `attention 'cosformer': sequence length ${totalLength} exceeds option 'reweightLength' = ${fixedLength}; use a length ≤ ${fixedLength} or a larger reweightLength`,
        );
      }
      const m = fixedLength > 0 ? fixedLength : totalLength;
      const side = (x: tf.Tensor4D, start: number, positions?: tf.Tensor2D) => {
        const length = x.shape[2];
        const angles = cosformerAngles(length, m, start);
        const weights = (f: (a: number) => number) => tf.tensor4d(angles.map(f), [1, 1, length, 1]);
        // Whole sequences reuse their weights (kept until dispose); decoding steps (one position)
        // make theirs inside the caller's tidy, so the cache does not grow with every position.
        // Packed documents (document masking) restart i at each document's first token, row by row.
        const documentAngles = positions && tf.reshape(tf.mul(tf.add(positions, 1), Math.PI / 2 / m), [x.shape[0], 1, length, 1]);
        const [sin, cos] = documentAngles
          ? [tf.sin(documentAngles), tf.cos(documentAngles)]
          : start === 0 && length > 1
            ? [constants.get(`sin${length}/${m}`, () => weights(Math.sin)), constants.get(`cos${length}/${m}`, () => weights(Math.cos))]
            : [weights(Math.sin), weights(Math.cos)];
        const positive = tf.relu(x);
        return { features: tf.concat([tf.mul(positive, sin), tf.mul(positive, cos)], 3) as tf.Tensor4D };
      };
      return { featureDim: 2 * config.headDim, shiftedKeys: false, query: side, key: side };
    };
    return {
      name: 'cosformer',
      options,
      trainableVariables: [],
      buffers: [],
      ...featureMapMethods('cosformer', config, maps, { ...contractionOptions(options), delta: options.delta as number }),
      dispose: () => constants.dispose(),
    };
  },
});
