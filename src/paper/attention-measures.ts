// What a random-feature mechanism starts from, measured on a model right after its attention is swapped (before step
// 0): the geometry of each head's queries and keys, their scale at the kernel's input, the accuracy of the same model
// with its kernel computed exactly (no random features), and the random-feature outputs' error against exact softmax.
// darkformer-finetune writes these per unit so that its notes explain the results by measurement.
//
// Two passes over the validation batches, each layer's mechanism temporarily replaced (and put back):
// 1. every layer runs exact softmax — the pretrained function — so each layer sees the pretrained model's queries,
//    keys and values; there the queries' and keys' covariances and scales are accumulated, and the mechanism's own
//    output (random features) and its exact kernel's output are compared with softmax's on the same inputs, so the
//    errors are per layer, not compounded through the layers;
// 2. every layer runs the mechanism's kernel exactly, softmax over x̃_qᵀx̃_k with x̃ its kernel inputs (DARKFormer:
//    M d^(−1/4)x; Performer, or M = I: d^(−1/4)x, i.e. softmax itself): the validation accuracy of the kernel alone.
import * as tf from '@tensorflow/tfjs';
import type { Batch } from '../data/batch.ts';
import { createAttention } from '../model/attention/index.ts';
import type { RandomFeatureModule } from '../model/attention/performer.ts';
import type { AttentionModule } from '../model/attention/types.ts';
import { symmetricEigen } from '../model/features/linalg.ts';
import type { LanguageModel } from '../model/lm.ts';
import { evaluate } from '../train/evaluate.ts';

/** One head's queries (or keys): the spread of their covariance's eigenvalues and their scale at the kernel. */
export interface HeadGeometry {
  /** Largest over smallest eigenvalue of the centred covariance of the raw vectors (smallest floored at 1e−12 of the largest). */
  eigenRatio: number;
  /** exp(entropy of the normalised eigenvalues): d for isotropic vectors, 1 for vectors on a line. */
  effectiveRank: number;
  /** E‖d^(−1/4)x‖² (uncentred): the scale softmax's kernel and Performer's features see. */
  scaleBefore: number;
  /** E‖x̃‖² of the mechanism's kernel inputs after its init (null for softmax). */
  scaleAfter: number | null;
}

export interface StartMeasures {
  /** [layer][head]. */
  queries: HeadGeometry[][];
  keys: HeadGeometry[][];
  /** Validation accuracy and loss with every layer's kernel computed exactly (softmax's own for softmax). */
  exactKernel: { accuracy: number; loss: number } | null;
  /** ‖Y_rf − Y_softmax‖ / ‖Y_softmax‖ over all positions, per layer (null for softmax). */
  featureErrorVsSoftmax: number[] | null;
  /** ‖Y_rf − Y_kernel‖ / ‖Y_kernel‖: the random features' error alone, against the mechanism's exact kernel. */
  featureErrorVsKernel: number[] | null;
  /** ‖Y_kernel − Y_softmax‖ / ‖Y_softmax‖: how far the kernel itself is from softmax. */
  kernelErrorVsSoftmax: number[] | null;
}

const isRandomFeature = (m: AttentionModule): m is RandomFeatureModule => typeof (m as Partial<RandomFeatureModule>).kernelInputs === 'function';

/** Float64 sums of one head's vectors for their mean, covariance and second moment. */
class Moments {
  private n = 0;
  private readonly sum: Float64Array;
  private readonly outer: Float64Array;
  private squares = 0;
  private tildeSquares = 0;

  constructor(private readonly d: number) {
    this.sum = new Float64Array(d);
    this.outer = new Float64Array(d * d);
  }

  add(x: Float32Array | Float64Array | Int32Array | Uint8Array, offset: number, tildeSquare: number | null): void {
    const d = this.d;
    this.n++;
    for (let i = 0; i < d; i++) {
      const xi = x[offset + i];
      this.sum[i] += xi;
      this.squares += xi * xi;
      for (let j = i; j < d; j++) this.outer[i * d + j] += xi * x[offset + j];
    }
    if (tildeSquare !== null) this.tildeSquares += tildeSquare;
  }

  geometry(hasTilde: boolean): HeadGeometry {
    const { d, n } = this;
    const cov = Array.from({ length: d }, (_, i) =>
      Array.from({ length: d }, (__, j) => {
        const [a, b] = i <= j ? [i, j] : [j, i];
        return (this.outer[a * d + b] - (this.sum[a] * this.sum[b]) / n) / (n - 1);
      }),
    );
    const values = symmetricEigen(cov).values.map((v) => Math.max(v, 0));
    const largest = values[values.length - 1];
    const total = values.reduce((s, v) => s + v, 0);
    const entropy = values.reduce((s, v) => (v > 0 ? s - (v / total) * Math.log(v / total) : s), 0);
    return {
      eigenRatio: largest / Math.max(values[0], 1e-12 * largest),
      effectiveRank: Math.exp(entropy),
      scaleBefore: this.squares / n / Math.sqrt(d),
      scaleAfter: hasTilde ? this.tildeSquares / n : null,
    };
  }
}

/** ‖a − b‖² and ‖b‖² summed over calls. */
class RelativeError {
  private diff = 0;
  private norm = 0;
  add(a: tf.Tensor, b: tf.Tensor): void {
    const [diff, norm] = tf
      .tidy(() => [tf.sum(tf.square(tf.sub(a, b))), tf.sum(tf.square(b))])
      .map((t) => {
        const value = t.dataSync()[0];
        t.dispose();
        return value;
      });
    this.diff += diff;
    this.norm += norm;
  }
  get value(): number {
    return Math.sqrt(this.diff / this.norm);
  }
}

/**
 * The measures above for `model` (its mechanisms as a new run starts them) on `batches`. The model's attention
 * modules are put back before it returns, whatever happens.
 */
export async function measureStart(model: LanguageModel, batches: readonly Batch[]): Promise<StartMeasures> {
  const mechanisms = [...model.body.attention];
  const { numHeads, dModel, causal } = model.body.config;
  const headDim = dModel / numHeads;
  const softmax = createAttention('softmax', { numHeads, headDim, causal });
  const randomFeatures = mechanisms.every(isRandomFeature);
  // Softmax over x̃_qᵀx̃_k: softmax attention of r^(1/4)x̃ (its 1/√r undone); needs x̃ of the head's width.
  const exactKernel = (m: RandomFeatureModule, q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, keyMask?: tf.Tensor2D) =>
    tf.tidy(() => {
      const [qt, kt] = [m.kernelInputs(q), m.kernelInputs(k)];
      if (qt.shape[3] !== headDim)
        throw new Error(`measureStart: kernel inputs of width ${qt.shape[3]} ≠ headDim ${headDim} (DARKFormer rank < headDim) are not measured`);
      const up = headDim ** 0.25;
      return softmax.apply(tf.mul(qt, up) as tf.Tensor4D, tf.mul(kt, up) as tf.Tensor4D, v, { keyMask });
    });
  const moments = mechanisms.map(() => ({
    q: Array.from({ length: numHeads }, () => new Moments(headDim)),
    k: Array.from({ length: numHeads }, () => new Moments(headDim)),
  }));
  const errors = mechanisms.map(() => ({ rfSoftmax: new RelativeError(), rfKernel: new RelativeError(), kernelSoftmax: new RelativeError() }));

  const accumulate = (layer: number, label: 'q' | 'k', x: tf.Tensor4D, mechanism: AttentionModule) => {
    const data = x.dataSync() as Float32Array;
    const tilde = isRandomFeature(mechanism) ? tf.tidy(() => tf.sum(tf.square(mechanism.kernelInputs(x)), -1)) : null;
    const tildeData = tilde?.dataSync() ?? null;
    tilde?.dispose();
    const [b, h, l, d] = x.shape;
    for (let bi = 0; bi < b; bi++) {
      for (let hi = 0; hi < h; hi++) {
        for (let li = 0; li < l; li++) {
          const row = (bi * h + hi) * l + li;
          moments[layer][label][hi].add(data, row * d, tildeData ? tildeData[row] : null);
        }
      }
    }
  };

  const replace = (apply: (layer: number, q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, keyMask?: tf.Tensor2D) => tf.Tensor4D) => {
    mechanisms.forEach((mechanism, layer) => {
      model.body.attention[layer] = { ...mechanism, apply: (q, k, v, opts = {}) => apply(layer, q, k, v, opts.keyMask) };
    });
  };
  try {
    replace((layer, q, k, v, keyMask) => {
      const mechanism = mechanisms[layer];
      accumulate(layer, 'q', q, mechanism);
      accumulate(layer, 'k', k, mechanism);
      const exact = softmax.apply(q, k, v, { keyMask });
      if (isRandomFeature(mechanism)) {
        tf.tidy(() => {
          const features = mechanism.apply(q, k, v, { keyMask });
          const kernel = exactKernel(mechanism, q, k, v, keyMask);
          errors[layer].rfSoftmax.add(features, exact);
          errors[layer].rfKernel.add(features, kernel);
          errors[layer].kernelSoftmax.add(kernel, exact);
        });
      }
      return exact;
    });
    await evaluate(model, batches, false);
    let exact: StartMeasures['exactKernel'] = null;
    if (randomFeatures) {
      replace((layer, q, k, v, keyMask) => exactKernel(mechanisms[layer] as RandomFeatureModule, q, k, v, keyMask));
      const result = await evaluate(model, batches, false);
      exact = { accuracy: result.accuracy, loss: result.loss };
    } else {
      replace((_layer, q, k, v, keyMask) => softmax.apply(q, k, v, { keyMask }));
      const result = await evaluate(model, batches, false);
      exact = { accuracy: result.accuracy, loss: result.loss };
    }
    const geometry = (label: 'q' | 'k') => moments.map((layer, i) => layer[label].map((m) => m.geometry(isRandomFeature(mechanisms[i]))));
    return {
      queries: geometry('q'),
      keys: geometry('k'),
      exactKernel: exact,
      featureErrorVsSoftmax: randomFeatures ? errors.map((e) => e.rfSoftmax.value) : null,
      featureErrorVsKernel: randomFeatures ? errors.map((e) => e.rfKernel.value) : null,
      kernelErrorVsSoftmax: randomFeatures ? errors.map((e) => e.kernelSoftmax.value) : null,
    };
  } finally {
    mechanisms.forEach((mechanism, layer) => (model.body.attention[layer] = mechanism));
    softmax.dispose();
  }
}

/** min, median and max of a list (for the results' summaries). */
export function spread(values: readonly number[]): { min: number; median: number; max: number } {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return { min: sorted[0], median: sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2, max: sorted[sorted.length - 1] };
}
