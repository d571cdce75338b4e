// darkformer: data-aware random-feature kernel (DARKFormer, arXiv 2603.04127 §4.1, App. B;
// docs/notes/attention-kernels.md §3). The kernel is exp(x̃_qᵀx̃_k) with x̃ = M(d^(−1/4)x), i.e.
// exp(qᵀΣk/√d), Σ = MᵀM, and its positive random features are the ordinary PRF of x̃,
//
//   φ(x)_j = m^(−1/2)·exp(w_jᵀx̃ − ‖x̃‖²/2),  w_j ~ N(0, I_r)  (ω̃_j = Mᵀw_j ~ N(0, Σ)),
//
// so gradients reach M through both the projection and the −‖x̃‖²/2 term. Everything after x̃
// (projections, stabilisers, δ on the un-stabilised scale, redraw schedule) is Performer's.
//
// Choices (the paper specifies none of them, docs/notes/attention-kernels.md §3.2):
// * one M per head, [H, r, d] (as the third-party darkformer-pytorch; the paper has one Σ per layer):
//   heads see differently distributed queries and keys, and whitening is a per-head statistic;
// * M initialised to the identity (r < d: its first r rows), with the same projection draw as
//   Performer for the same seed, so at r = d it starts exactly as Performer;
// * init 'whitening' is data-dependent: M stays the identity until a new run calls its dataInit
//   (types.ts) with calibration queries and keys (a resumed run restores M instead);
// * dataInit 'variance-optimal' (Performer's, performer.ts) keeps M = I and draws the projection from the
//   paper's Theorem 3.2 proposal with importance weights: the kernel stays softmax's at step 0. It
//   replaces whitening (init must be 'identity'): one data-dependent init per mechanism.
import * as tf from '@tensorflow/tfjs';
import { BOUNDS } from '../../core/bounds.ts';
import { inverseSqrtSymmetric } from '../features/linalg.ts';
import { batchMatMul, namedVariable, projectPerHead } from '../ops.ts';
import { positiveRandomFeatures } from '../features/prf.ts';
import {
  checkAttentionShapes,
  favorAttention,
  favorFeatureMaps,
  favorKernel,
  favorOptionSpecs,
  checkImportanceOptions,
  ImportanceWeights,
  importanceWeightTensors,
  RedrawnProjection,
  type FavorOptions,
  type RandomFeatureModule,
} from './performer.ts';
import { contractionOptions, featureMapMethods } from './linear-attention.ts';
import { registerAttention } from './registry.ts';
import type { ApplyOptions } from './types.ts';

/** Ridge added to the calibration covariance, relative to its mean eigenvalue: caps the gain M puts on near-degenerate directions (≤ 100× that of an average one). */
const WHITENING_RIDGE = 1e-4;

export const DARKFORMER_INITS = ['identity', 'whitening'] as const;

export interface DarkformerModule extends RandomFeatureModule {
  /** The learnable covariance factor M, [heads, rank, headDim]; Σ = MᵀM. */
  readonly covarianceFactor: tf.Variable;
  /**
   * Data-aware initialisation (paper Prop. C.1): per head, M = Λ^(−1/2) with Λ the ridge-regularised
   * covariance of the raw queries and keys (½(Cov q + Cov k)). q, k: [batch, heads, length, headDim]
   * calibration samples. Needs rank = headDim. With init 'whitening' it is also the module's dataInit, which a new
   * run calls.
   */
  initializeFromData(q: tf.Tensor4D, k: tf.Tensor4D): void;
}

/** The rows r of M: option 'rank', 0 meaning headDim. */
function rankOf(options: Record<string, unknown>, headDim: number): number {
  const rank = (options.rank as number) || headDim;
  if (rank > headDim) throw new Error(`attention 'darkformer': option 'rank' must be an integer in 1 … headDim = ${headDim} (0 = headDim) (got ${rank})`);
  return rank;
}

registerAttention('darkformer', {
  description: 'DARKFormer: positive random features for exp(qᵀMᵀMk/√d) with a learnable M per head',
  quadratic: false,
  options: {
    ...favorOptionSpecs,
    rank: { kind: 'int', default: 0, min: 0, max: BOUNDS.width.max, doc: 'rows r of M (1 … headDim; 0 = headDim)' },
    init: {
      kind: 'enum',
      default: 'identity',
      values: DARKFORMER_INITS,
      doc: "M at creation: 'identity' (starts as Performer) or 'whitening' (set by initializeFromData from calibration q/k)",
    },
  },
  tensors: ({ numHeads, headDim }, options) => {
    const rank = rankOf(options, headDim);
    return [
      { name: 'projection', shape: [numHeads, rank, options.features as number], trainable: false },
      { name: 'covarianceFactor', shape: [numHeads, rank, headDim], trainable: true },
      ...importanceWeightTensors(numHeads, options),
    ];
  },
  // M·x (2rd), the projection (2rm) and m exponentials.
  featureMap: ({ headDim }, options) => {
    const rank = rankOf(options, headDim);
    const m = options.features as number;
    return { features: m, flopsPerSide: 2 * rank * headDim + 2 * rank * m + m };
  },
  create(config, options): DarkformerModule {
    const { numHeads, headDim } = config;
    const rank = rankOf(options, headDim);
    checkImportanceOptions('darkformer', options);
    if (options.dataInit === 'variance-optimal' && options.init !== 'identity') {
      throw new Error(`attention 'darkformer': option dataInit 'variance-optimal' keeps M = I and needs init 'identity' (got init '${options.init}')`);
    }
    const projection = new RedrawnProjection(config.scope, config.seed, options.redrawInterval as number, {
      heads: numHeads,
      dim: rank,
      features: options.features as number,
      orthogonal: options.orthogonal as boolean,
    });
    const covarianceFactor = tf.tidy(() => {
      const identityRows = tf.slice(tf.eye(headDim), [0, 0], [rank, headDim]);
      return namedVariable(config.scope, 'covarianceFactor', tf.tile(tf.expandDims(identityRows, 0), [numHeads, 1, 1]), true);
    });
    const kernelInputs = (x: tf.Tensor4D) => dataAlignedInputs(x, covarianceFactor);
    const weights =
      options.dataInit === 'variance-optimal' ? new ImportanceWeights('darkformer', { ...config, numHeads }, options, projection.variable, kernelInputs) : null;
    const maps = favorFeatureMaps(projection.variable, 1, kernelInputs, weights?.variable);
    const methods = featureMapMethods('darkformer', config, () => maps, { ...contractionOptions(options), delta: options.delta as number });

    const initializeFromData = (q: tf.Tensor4D, k: tf.Tensor4D): void => {
      if (rank !== headDim) {
        throw new Error(`darkformer.initializeFromData: whitening needs option 'rank' = headDim = ${headDim} (got ${rank})`);
      }
      for (const [label, t] of [
        ['q', q],
        ['k', k],
      ] as const) {
        if (t.rank !== 4 || t.shape[1] !== numHeads || t.shape[3] !== headDim) {
          throw new Error(`darkformer.initializeFromData: ${label} must be [batch, ${numHeads}, length, ${headDim}] (got [${t.shape.join(', ')}])`);
        }
      }
      const values = new Float32Array(numHeads * headDim * headDim);
      const qData = q.dataSync();
      const kData = k.dataSync();
      for (let h = 0; h < numHeads; h++) {
        const cq = headCovariance(qData, q.shape, h);
        const ck = headCovariance(kData, k.shape, h);
        const lambda = cq.map((row, i) => row.map((x, j) => (x + ck[i][j]) / 2));
        const meanEigen = lambda.reduce((s, row, i) => s + row[i], 0) / headDim;
        if (!(meanEigen > 0)) throw new Error(`darkformer.initializeFromData: queries and keys of head ${h} have no variance`);
        for (let i = 0; i < headDim; i++) lambda[i][i] += WHITENING_RIDGE * meanEigen;
        inverseSqrtSymmetric(lambda).forEach((row, i) => values.set(row, (h * headDim + i) * headDim));
      }
      // Why M = Λ^(−1/2) with Λ from the *raw* q, k (not M = d^(−1/4)Λ^(−1/2)): M acts after the
      // d^(−1/4) scale, so x̃ = d^(−1/4)Λ^(−1/2)x has covariance I/√d and the logits
      // x̃_qᵀx̃_k = (Λ^(−1/2)q)ᵀ(Λ^(−1/2)k)/√d are standard softmax attention of whitened, unit-
      // variance q and k — logit variance ≈ 1, the temperature softmax's 1/√d was chosen for.
      // (darkformer-pytorch's M = s·Λ̃^(−1/2), s = d^(−1/4), Λ̃ = Cov(d^(−1/4)x), is the same matrix.)
      // Putting another d^(−1/4) into M would give logit variance 1/d: near-uniform attention.
      tf.tidy(() => covarianceFactor.assign(tf.tensor3d(values, [numHeads, headDim, headDim])));
    };

    return {
      name: 'darkformer',
      options: { ...options, rank },
      trainableVariables: [covarianceFactor],
      buffers: weights ? [projection.variable, weights.variable] : [projection.variable],
      covarianceFactor,
      apply(q, k, v, opts: ApplyOptions = {}) {
        checkAttentionShapes('darkformer', numHeads, headDim, q, k, v);
        return methods.apply(q, k, v, opts);
      },
      initState: methods.initState,
      step: methods.step,
      featureMap(x) {
        return tf.tidy(() => positiveRandomFeatures(kernelInputs(x), projection.variable, { logWeights: weights?.variable }).features);
      },
      kernelInputs: (x) => tf.tidy(() => kernelInputs(x)),
      get drawIndex() {
        return projection.drawIndex;
      },
      initializeFromData,
      ...(options.init === 'whitening'
        ? { dataInit: { trigger: "init 'whitening'", fills: { variable: covarianceFactor, label: 'M' }, initializeFromData } }
        : {}),
      ...(weights ? { dataInit: weights.dataInit } : {}),
      kernel: favorKernel('exp(x̃_qᵀx̃_k), x̃ = M·d^(−1/4)x', projection.variable, kernelInputs, weights?.variable),
      onTrainStep: (step) => projection.onTrainStep(step),
      dispose: () => {
        projection.variable.dispose();
        weights?.variable.dispose();
        covarianceFactor.dispose();
      },
    };
  },
});

/**
 * x̃ = M(d^(−1/4)x) per head: x [B, H, L, d], M [H, r, d] → [B, H, L, r]. The gradient is written out,
 * (∂x, ∂M) = (s·∂x̃·M, s·Σ_{b,l} ∂x̃ᵀx) with s = d^(−1/4), so that only x and M are kept for it: autodiff
 * of the per-head product keeps its transposes and reshapes, ~8 KB per position at 8 heads of 32 —
 * for long sequences more than the attention itself.
 */
const dataAlignedInputs = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [x, m, save] = args as [tf.Tensor4D, tf.Tensor3D, tf.GradSaveFunc];
  const scale = x.shape[3] ** -0.25;
  save([x, m]);
  return {
    value: tf.mul(projectPerHead(x, tf.transpose(m, [0, 2, 1])), scale),
    gradFunc: (dy: tf.Tensor, [sx, sm]: tf.Tensor[]) =>
      tf.tidy(() => {
        const [b, h, l, d] = sx.shape;
        const r = sm.shape[1]!;
        const byHead = (t: tf.Tensor, width: number) => tf.reshape(tf.transpose(t, [1, 0, 2, 3]), [h, b * l, width]);
        const dx = tf.mul(projectPerHead(dy as tf.Tensor4D, sm), scale);
        const dm = tf.mul(batchMatMul(byHead(dy, r), byHead(sx, d), true, false), scale);
        return [dx, dm];
      }),
  };
}) as (x: tf.Tensor4D, covarianceFactor: tf.Tensor) => tf.Tensor4D;

/**
 * DARKFormer attention as a function of its parameters (the module's apply; separate so that
 * gradients with respect to M can be checked): q, k, v [B, H, L, d], covarianceFactor M [H, r, d],
 * omega [H, r, m].
 */
export function darkformerAttention(
  q: tf.Tensor4D,
  k: tf.Tensor4D,
  v: tf.Tensor4D,
  covarianceFactor: tf.Tensor,
  omega: tf.Tensor,
  opts: FavorOptions,
): tf.Tensor4D {
  return tf.tidy(() => favorAttention(dataAlignedInputs(q, covarianceFactor), dataAlignedInputs(k, covarianceFactor), v, omega, opts));
}

/** Sample covariance (centred, 1/(n−1)) of head h's vectors over batch and length, in float64. */
function headCovariance(data: tf.TypedArray, shape: readonly number[], h: number): number[][] {
  const [b, heads, l, d] = shape;
  const n = b * l;
  if (n < 2) throw new Error(`darkformer.initializeFromData: need at least 2 samples per head (got ${n})`);
  const mean = new Array<number>(d).fill(0);
  const rows: number[][] = [];
  for (let bi = 0; bi < b; bi++) {
    for (let li = 0; li < l; li++) {
      const offset = ((bi * heads + h) * l + li) * d;
      const row = Array.from(data.subarray(offset, offset + d));
      row.forEach((x, i) => (mean[i] += x / n));
      rows.push(row);
    }
  }
  const cov = Array.from({ length: d }, () => new Array<number>(d).fill(0));
  for (const row of rows) {
    for (let i = 0; i < d; i++) {
      const ci = row[i] - mean[i];
      for (let j = 0; j < d; j++) cov[i][j] += (ci * (row[j] - mean[j])) / (n - 1);
    }
  }
  return cov;
}
