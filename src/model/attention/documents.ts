// Document masking's one mask for the quadratic mechanisms (softmax, exact Yat) and their key/value cache: which keys
// share a query's document (docs/attention.md, "Documents kept apart"). The linear contraction builds its own, per
// chunk (chunked.ts).
import * as tf from '@tensorflow/tfjs';

/** [B, 1, Lq, Lk] 1 where key j is in query i's document, else 0, from document ids [B, Lq] and [B, Lk]. */
export function sameDocumentMask(queryIds: tf.Tensor2D, keyIds: tf.Tensor2D = queryIds): tf.Tensor4D {
  return tf.tidy(() => {
    const [b, lq] = queryIds.shape;
    const lk = keyIds.shape[1];
    return tf.cast(tf.equal(tf.reshape(queryIds, [b, 1, lq, 1]), tf.reshape(keyIds, [b, 1, 1, lk])), 'float32') as tf.Tensor4D;
  });
}
