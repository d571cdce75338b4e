// Random projection matrices drawn from the project's seeded generator (so they are reproducible
// and can be saved with the model).
import * as tf from '@tensorflow/tfjs';
import { Rng } from '../../core/rng.ts';

/** [heads, d, m] (or [d, m] when heads is null) with iid N(0, 1) entries. */
export function gaussianProjection(rng: Rng, heads: number | null, d: number, m: number): tf.Tensor {
  const values = Float32Array.from(rng.normalArray((heads ?? 1) * d * m));
  return heads === null ? tf.tensor2d(values, [d, m]) : tf.tensor3d(values, [heads, d, m]);
}
