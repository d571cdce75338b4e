// Weights moved well off their initialisation, so that a model's predictions depend on its input (a freshly
// initialised model predicts nearly uniformly, which hides mistakes in what a test compares).
import * as tf from '@tensorflow/tfjs';
import { Rng } from '../../src/core/rng.ts';
import type { LanguageModel } from '../../src/model/lm.ts';

/** Adds N(0, scale²) noise, drawn from `seed`, to every parameter of `model`; returns the model. */
export function perturbParameters<M extends Pick<LanguageModel, 'parameters'>>(model: M, seed: number, scale = 0.3): M {
  const rng = new Rng(seed);
  for (const v of model.parameters().values()) {
    tf.tidy(() =>
      v.assign(
        tf.add(
          v,
          tf.tensor(
            Array.from(rng.normalArray(v.size), (x) => scale * x),
            v.shape,
          ),
        ),
      ),
    );
  }
  return model;
}
