// The key/value cache of the quadratic mechanisms (softmax, exact spherical Yat) for decoding: the
// state holds every key and value so far, [B, H, t, D] each, and a step appends n positions and
// attends over all of them (one position needs no mask: the cache holds only the past; n > 1 are
// masked causally among themselves). With documents (StepOptions) the state also holds each cached
// key's document, documents [B, t], and a query sees only the cached keys of its own document.
import * as tf from '@tensorflow/tfjs';
import { sameDocumentMask } from './documents.ts';
import { checkPosition, checkStepDocuments, checkStepShapes, requireCausal } from './linear-attention.ts';
import type { AttentionConfig, AttentionModule, AttentionState } from './types.ts';

/**
 * initState and step from `attend(q, keys, values, visible)` (q [B, H, n, D] against keys/values
 * [B, H, t, D]; visible [n, t] or [B, 1, n, t] 1/0, absent when every key is visible); `prepareKey` maps a key once
 * before it is cached (exact Yat caches unit keys).
 */
export function kvCacheMethods(
  name: string,
  config: AttentionConfig,
  attend: (q: tf.Tensor4D, keys: tf.Tensor4D, values: tf.Tensor4D, visible?: tf.Tensor) => tf.Tensor4D,
  prepareKey: (k: tf.Tensor4D) => tf.Tensor4D = (k) => k,
): Pick<AttentionModule, 'initState' | 'step'> {
  return {
    initState(batch: number, maxLength: number): AttentionState {
      requireCausal(name, config);
      const empty = () => tf.zeros([batch, config.numHeads, 0, config.headDim]);
      return { maxLength, length: 0, tensors: { keys: empty(), values: empty() } };
    },
    step(q, k, v, state, position, opts = {}) {
      checkPosition(state, position);
      checkStepShapes(q, k, v, state);
      const layout = opts.documents;
      if (layout) checkStepDocuments(layout, q);
      const tensors = tf.tidy((): Record<string, tf.Tensor> => {
        const keys = tf.concat([state.tensors.keys, prepareKey(k)], 2) as tf.Tensor4D;
        const values = tf.concat([state.tensors.values, v], 2) as tf.Tensor4D;
        const n = q.shape[2];
        const causal = n === 1 ? undefined : visibleFrom(position, n);
        if (!layout) return { out: attend(q, keys, values, causal), keys, values };
        // Cached keys of a state that had no documents belong to none (−1): a query sees none of them.
        const [b] = layout.ids.shape;
        const cached = (state.tensors.documents as tf.Tensor2D | undefined) ?? tf.fill([b, position], -1);
        const documents = tf.concat([cached, layout.ids], 1) as tf.Tensor2D;
        const sameDocument = sameDocumentMask(layout.ids, documents);
        return { out: attend(q, keys, values, causal ? tf.mul(sameDocument, causal) : sameDocument), keys, values, documents };
      });
      const { out, ...next } = tensors;
      return { out: out as tf.Tensor4D, state: { maxLength: state.maxLength, length: position + q.shape[2], tensors: next } };
    },
  };
}

/** [n, t+n] 1 where key j is visible from query i at position t+i (j ≤ t + i). */
function visibleFrom(t: number, n: number): tf.Tensor2D {
  const values = new Float32Array(n * (t + n));
  for (let i = 0; i < n; i++) values.fill(1, i * (t + n), i * (t + n) + t + i + 1);
  return tf.tensor2d(values, [n, t + n]);
}
