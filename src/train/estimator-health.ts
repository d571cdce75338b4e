// Estimator health (train.estimatorHealth; docs/training.md#estimator-health): how well a kernel mechanism's random
// features estimate the exact kernel they stand for (its declared KernelEstimate, model/attention/types.ts), measured on
// the live queries, keys and values of each layer: the first positions of the first validation sequence, through the
// model as it is at that step. Per layer, over heads and queries i (keys j ≤ i when causal, all otherwise), in float64:
//   kernel error      ‖K̂_i − K_i‖ / ‖K_i‖            K_ij = κ(q_i, k_j), K̂_ij = φ(q_i)ᵀφ(k_j); the mean over queries
//   output error      ‖Ŷ_i − Y_i‖ / ‖Y_i‖            Y_i = Σ_j K_ij v_j / Σ_j K_ij, Ŷ_i the same with K̂ (no δ, no clamp)
//   denominator       D̂_i / D_i                     D_i = Σ_j K_ij: its min, 1% and 50% quantiles (≤ 0 or near 0 is
//                                                     where Performer-style estimators fail)
// Each row is scaled by its largest exact value before anything is summed, so exp kernels of large logits stay in range.
import * as tf from '@tensorflow/tfjs';
import type { KernelEstimate } from '../model/attention/index.ts';
import type { LanguageModel, ModelBatch } from '../model/lm.ts';
import type { EstimatorHealthRecord } from '../store/run-record.ts';
import { quantile } from './throughput.ts';

/** Positions of the sampled sequence: 64² pairs per head, cheap beside a validation run. */
export const HEALTH_POSITIONS = 64;

/** One layer's estimator health. */
export interface LayerHealth {
  kernelError: number;
  outputError: number;
  denominatorMin: number;
  denominatorP01: number;
  denominatorP50: number;
}

/** The layers' health as metrics.jsonl holds it: one list per measure, indexed by layer. */
export function healthRecord(layers: readonly LayerHealth[]): EstimatorHealthRecord {
  return {
    kernel_error: layers.map((l) => l.kernelError),
    output_error: layers.map((l) => l.outputError),
    denominator_min: layers.map((l) => l.denominatorMin),
    denominator_p01: layers.map((l) => l.denominatorP01),
    denominator_p50: layers.map((l) => l.denominatorP50),
  };
}

/** One head's sample in float64: features (with their per-row log shift), the exact log kernel, the values. */
export interface HeadSample {
  phiQ: Float64Array[];
  shiftQ: number[];
  phiK: Float64Array[];
  shiftK: number[];
  /** log κ(q_i, k_j), [queries][keys]. */
  logKernel: number[][];
  v: Float64Array[];
}

/** Per query of one head: the kernel and output errors and the denominator ratio (queries with no positive exact kernel are left out). */
export function headErrors(sample: HeadSample, causal: boolean): { kernelErrors: number[]; outputErrors: number[]; denominatorRatios: number[] } {
  const kernelErrors: number[] = [];
  const outputErrors: number[] = [];
  const denominatorRatios: number[] = [];
  const dim = sample.v[0]?.length ?? 0;
  for (let i = 0; i < sample.phiQ.length; i++) {
    const keys = causal ? i + 1 : sample.phiK.length;
    const logRow = sample.logKernel[i].slice(0, keys);
    const scale = Math.max(...logRow);
    if (!Number.isFinite(scale)) continue;
    // φ(q_i)ᵀφ(k_j) = product_j · e^(logScale_j); the estimate's own largest log term scales its output, so an
    // estimate far below the exact kernel (a ratio that underflows to 0) still has an output to compare.
    const products: number[] = [];
    const logScales: number[] = [];
    let estimateScale = Number.NEGATIVE_INFINITY;
    for (let j = 0; j < keys; j++) {
      let product = 0;
      for (let f = 0; f < sample.phiQ[i].length; f++) product += sample.phiQ[i][f] * sample.phiK[j][f];
      products.push(product);
      logScales.push(sample.shiftQ[i] + sample.shiftK[j]);
      if (product !== 0) estimateScale = Math.max(estimateScale, logScales[j] + Math.log(Math.abs(product)));
    }
    let errorSq = 0;
    let exactSq = 0;
    let exactSum = 0;
    let estimateSum = 0;
    let scaledEstimateSum = 0;
    const exactOut = new Float64Array(dim);
    const estimateOut = new Float64Array(dim);
    for (let j = 0; j < keys; j++) {
      const exact = Math.exp(logRow[j] - scale);
      const estimate = products[j] * Math.exp(logScales[j] - scale);
      const scaledEstimate = Number.isFinite(estimateScale) ? products[j] * Math.exp(logScales[j] - estimateScale) : 0;
      errorSq += (estimate - exact) ** 2;
      exactSq += exact ** 2;
      exactSum += exact;
      estimateSum += estimate;
      scaledEstimateSum += scaledEstimate;
      for (let c = 0; c < dim; c++) {
        exactOut[c] += exact * sample.v[j][c];
        estimateOut[c] += scaledEstimate * sample.v[j][c];
      }
    }
    kernelErrors.push(Math.sqrt(errorSq / exactSq));
    denominatorRatios.push(estimateSum / exactSum);
    let outErrorSq = 0;
    let outSq = 0;
    for (let c = 0; c < dim; c++) {
      const y = exactOut[c] / exactSum;
      outErrorSq += (estimateOut[c] / scaledEstimateSum - y) ** 2;
      outSq += y * y;
    }
    if (outSq > 0) outputErrors.push(Math.sqrt(outErrorSq / outSq));
  }
  return { kernelErrors, outputErrors, denominatorRatios };
}

/** A layer's health from its heads' samples. */
export function layerHealth(heads: readonly HeadSample[], causal: boolean): LayerHealth {
  const all = heads.map((h) => headErrors(h, causal));
  const kernelErrors = all.flatMap((h) => h.kernelErrors);
  const outputErrors = all.flatMap((h) => h.outputErrors);
  const ratios = all.flatMap((h) => h.denominatorRatios);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return {
    kernelError: mean(kernelErrors),
    outputError: mean(outputErrors),
    denominatorMin: Math.min(...ratios),
    denominatorP01: quantile(ratios, 0.01),
    denominatorP50: quantile(ratios, 0.5),
  };
}

/** [1, H, L, W] → per head, per position, a float64 row. */
function rowsByHead(t: tf.Tensor): Float64Array[][] {
  const [, heads, length, width] = t.shape as number[];
  const data = t.dataSync();
  return Array.from({ length: heads }, (_, h) =>
    Array.from({ length }, (_, l) => Float64Array.from(data.subarray((h * length + l) * width, (h * length + l + 1) * width))),
  );
}

/** One layer's health from its sampled q, k, v [1, H, S, d] and its mechanism's kernel estimate. */
export function attentionHealth(kernel: KernelEstimate, q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, causal: boolean): LayerHealth {
  if (q.shape[0] !== 1 || k.shape[0] !== 1 || v.shape[0] !== 1)
    throw new Error('estimator health: q, k, v must hold one sequence ([1, heads, length, headDim])');
  return layerHealth(headSamples(kernel, q, k, v), causal);
}

/** Each head's sample from one layer's q, k, v [1, H, S, d] and the mechanism's kernel. */
function headSamples(kernel: KernelEstimate, q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D): HeadSample[] {
  const read = (x: tf.Tensor4D) => {
    const { features, shift } = kernel.features(x);
    const inputs = kernel.kernelInputs(x);
    const out = { phi: rowsByHead(features), shift: shift ? rowsByHead(shift).map((rows) => rows.map((r) => r[0])) : null, inputs: rowsByHead(inputs) };
    tf.dispose([features, shift, inputs]);
    return out;
  };
  const qs = read(q);
  const ks = read(k);
  const vs = rowsByHead(v);
  return qs.phi.map((phiQ, h) => ({
    phiQ,
    shiftQ: qs.shift?.[h] ?? phiQ.map(() => 0),
    phiK: ks.phi[h],
    shiftK: ks.shift?.[h] ?? ks.phi[h].map(() => 0),
    logKernel: qs.inputs[h].map((qi) => ks.inputs[h].map((kj) => kernel.logKernel(qi, kj))),
    v: vs[h],
  }));
}

/**
 * Each layer's estimator health on the first real positions (at most HEALTH_POSITIONS) of the batch's first sequence,
 * for the model as it is (no dropout); null when the model's mechanism declares no kernel estimate (softmax, exact
 * Yat, and feature maps that are their own kernel: ELU+1, cosFormer).
 */
export function measureEstimatorHealth(model: LanguageModel, batch: ModelBatch): LayerHealth[] | null {
  const attention = model.body.attention;
  if (!attention.every((a) => a.kernel)) return null;
  const causal = model.kind === 'gpt';
  const mask = batch.attentionMask?.subarray(0, batch.seqLen);
  const real = mask ? mask.reduce((n, m) => n + (m > 0 ? 1 : 0), 0) : batch.seqLen;
  if (real === 0) throw new Error('estimator health: the first validation sequence has no real token');
  // A causal model's first positions see only each other: the prefix alone gives the same queries and keys.
  const length = causal ? Math.min(batch.seqLen, HEALTH_POSITIONS) : batch.seqLen;
  const sampled = Math.min(real, HEALTH_POSITIONS);
  const positions = mask ? [...mask.keys()].filter((l) => mask[l] > 0).slice(0, sampled) : [...Array(sampled).keys()];
  const health: LayerHealth[] = [];
  tf.tidy(() => {
    const ids = tf.tensor2d(batch.inputIds.subarray(0, length), [1, length], 'int32');
    const keyMask = mask && !causal ? tf.tensor2d(mask, [1, length]) : undefined;
    const at = tf.tensor1d(positions, 'int32');
    model.body.forwardAt(ids, 0, (layer, q, k, v) => {
      tf.tidy(() => {
        const pick = (x: tf.Tensor4D) => tf.gather(x, at, 2) as tf.Tensor4D;
        health.push(attentionHealth(attention[layer].kernel!, pick(q), pick(k), pick(v), causal));
      });
      return attention[layer].apply(q, k, v, { keyMask });
    });
  });
  return health;
}
