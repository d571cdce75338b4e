// Kernels a backend may run as one native op. They are looked up by name at run time: the model
// calls the fused kernel where the active backend registered one (tensorflow.ts) and its composed
// tf-op form everywhere else, so every backend computes the same function.
import * as tf from '@tensorflow/tfjs';

/**
 * shape [rank] int32, seed [2] int32 → float32 uniform on [0, 1) of that shape from a counter-based
 * generator (TensorFlow's StatelessRandomUniform): the numbers are a function of the seed tensor, so
 * a recorded graph draws new ones when it is fed a new seed (dropout in graph steps).
 */
export const STATELESS_UNIFORM = 'SlayformerStatelessRandomUniform';

export function hasFusedKernel(name: string): boolean {
  return tf.getKernel(name, tf.getBackend()) !== undefined;
}
