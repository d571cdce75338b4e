// The key/value cache of the quadratic mechanisms (softmax, exact spherical Yat) for decoding one
// position at a time: the state holds every key and value so far, [B, H, t, D] each, and a step
// appends one position and attends over all of them (no mask needed: the cache holds only the past).
import * as tf from '@tensorflow/tfjs';
import { checkPosition, checkStepShapes, requireCausal } from './linear-attention.ts';
import type { AttentionConfig, AttentionModule, AttentionState } from './types.ts';

/**
 * initState and step from `attend(q, keys, values)` (q [B, H, 1, D] against keys/values [B, H, t, D]);
 * `prepareKey` maps a key once before it is cached (exact Yat caches unit keys).
 */
export function kvCacheMethods(
  name: string,
  config: AttentionConfig,
  attend: (q: tf.Tensor4D, keys: tf.Tensor4D, values: tf.Tensor4D) => tf.Tensor4D,
  prepareKey: (k: tf.Tensor4D) => tf.Tensor4D = (k) => k,
): Pick<AttentionModule, 'initState' | 'step'> {
  return {
    initState(batch: number, maxLength: number): AttentionState {
      requireCausal(name, config);
      const empty = () => tf.zeros([batch, config.numHeads, 0, config.headDim]);
      return { maxLength, length: 0, tensors: { keys: empty(), values: empty() } };
    },
    step(q, k, v, state, position) {
      checkPosition(state, position);
      checkStepShapes(q, k, v, state);
      const { out, keys, values } = tf.tidy(() => {
        const keys = tf.concat([state.tensors.keys, prepareKey(k)], 2) as tf.Tensor4D;
        const values = tf.concat([state.tensors.values, v], 2) as tf.Tensor4D;
        return { out: attend(q, keys, values), keys, values };
      });
      return { out, state: { maxLength: state.maxLength, length: position + 1, tensors: { keys, values } } };
    },
  };
}
