// Kernels a backend may run as one native op. They are looked up by name at run time: the model
// calls the fused kernel where the active backend registered one (tensorflow.ts) and its composed
// tf-op form everywhere else, so every backend computes the same function.
import * as tf from '@tensorflow/tfjs';

/**
 * logits [N, V] float32, labels [N] int32 → [loss [N], backprop [N, V]]: per row −log softmax(logits)[label]
 * and its gradient softmax − onehot(label) (TensorFlow's SparseSoftmaxCrossEntropyWithLogits).
 */
export const SPARSE_CROSS_ENTROPY = 'SlayformerSparseSoftmaxCrossEntropy';

export function hasFusedKernel(name: string): boolean {
  return tf.getKernel(name, tf.getBackend()) !== undefined;
}
