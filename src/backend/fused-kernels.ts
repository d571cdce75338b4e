// Kernels a backend may run as one native op. They are looked up by name at run time: the model
// calls the fused kernel where the active backend registered one (tensorflow.ts) and its composed
// tf-op form everywhere else, so every backend computes the same function.
import * as tf from '@tensorflow/tfjs';

/**
 * logits [N, V] float32, labels [N] int32 → [loss [N], backprop [N, V]]: per row −log softmax(logits)[label]
 * and its gradient softmax − onehot(label) (TensorFlow's SparseSoftmaxCrossEntropyWithLogits).
 */
export const SPARSE_CROSS_ENTROPY = 'SlayformerSparseSoftmaxCrossEntropy';

/**
 * shape [rank] int32, seed [2] int32 → float32 uniform on [0, 1) of that shape from a counter-based
 * generator (TensorFlow's StatelessRandomUniform): the numbers are a function of the seed tensor, so
 * a recorded graph draws new ones when it is fed a new seed (dropout in graph steps).
 */
export const STATELESS_UNIFORM = 'SlayformerStatelessRandomUniform';

export function hasFusedKernel(name: string): boolean {
  return tf.getKernel(name, tf.getBackend()) !== undefined;
}
