// performer: FAVOR+ (Choromanski et al. 2021; docs/notes/attention-kernels.md §2). Positive random features
//
//   φ(x)_j = m^(−1/2)·exp(ω_jᵀx̃ − ‖x̃‖²/2),  x̃ = d^(−1/4)x,  ω_j ~ N(0, I)  ⇒  E[φ(q)ᵀφ(k)] = exp(qᵀk/√d)
//
// and the shared linear-attention contraction Y_i = Σ_j φ(q_i)ᵀφ(k_j) v_j / (Σ_j φ(q_i)ᵀφ(k_j) + δ).
//
// Stabilisers: every row (query or key) subtracts its own maximum exponent (the references' query
// stabiliser); keys are then brought to one shared scale by the contraction (featureMapAttention: a
// maximum over all positions, as the references' key stabiliser; featureMapStep: a running maximum,
// exact for decoding). δ goes in on the un-stabilised scale, so causal outputs do not depend on
// future keys at all and the zero gradient of the maxima is exact (see linear-attention.ts).
// Deviation from the references: no ε is added to the features (they add 1e−6 or 1e−4, which
// biases the kernel and, for keys, depends on the global maximum).
import * as tf from '@tensorflow/tfjs';
import { BOUNDS } from '../../core/bounds.ts';
import { dot } from '../features/linalg.ts';
import { logWeightRange, pooledCovariance, proposalDraws, varianceOptimalProposal } from '../features/importance.ts';
import { positiveRandomFeatures } from '../features/prf.ts';
import { orthogonalGaussianProjection } from '../features/orthogonal.ts';
import { gaussianProjection } from '../features/projections.ts';
import { namedVariable } from '../ops.ts';
import { deriveSeed, Rng } from '../../core/rng.ts';
import {
  contractionOptions,
  contractionOptionSpecs,
  featureMapAttention,
  featureMapMethods,
  type ContractionOptions,
  type FeatureMaps,
} from './linear-attention.ts';
import { registerAttention } from './registry.ts';
import type { ApplyOptions, AttentionModule, DataInitialization, KernelEstimate, OptionSpecs, TensorDeclaration } from './types.ts';

export const FAVOR_DATA_INITS = ['none', 'variance-optimal'] as const;

/** Options shared by Performer and DARKFormer (the names the registry validates). */
export const favorOptionSpecs: OptionSpecs = {
  features: {
    kind: 'int',
    default: 64,
    min: 1,
    max: BOUNDS.features.max,
    doc: 'random features m per head (64 as the SLAY paper’s Performer baseline; Google uses 256, lucidrains d·ln d)',
  },
  orthogonal: { kind: 'bool', default: true, doc: 'orthogonal Gaussian blocks (ORF) instead of iid Gaussian projections' },
  redrawInterval: {
    kind: 'int',
    default: 0,
    min: 0,
    max: null, // a number of steps, not a size
    doc: 'redraw the projection every this many optimizer steps (0 = never); draw n is seeded by deriveSeed(seed, n)',
  },
  ...contractionOptionSpecs,
  delta: { kind: 'number', default: 1e-6, min: 0, doc: 'δ added to the (un-stabilised) denominator' },
  dataInit: {
    kind: 'enum',
    default: 'none',
    values: FAVOR_DATA_INITS,
    doc: "'variance-optimal': a new run draws the projection from the DARKFormer paper's Theorem 3.2 proposal fitted to calibration queries and keys, with importance weights (the kernel, softmax's for Performer, is unchanged); needs redrawInterval 0",
  },
};

/** The buffer of per-feature log importance weights that dataInit 'variance-optimal' adds, [heads, features]. */
export function importanceWeightTensors(numHeads: number, options: Record<string, unknown>): TensorDeclaration[] {
  return options.dataInit === 'variance-optimal' ? [{ name: 'featureLogWeights', shape: [numHeads, options.features as number], trainable: false }] : [];
}

/**
 * dataInit 'variance-optimal' (src/model/features/importance.ts): the projection is redrawn from the variance-optimal
 * proposal of each head's calibration inputs x̃ = inputs(x) — the scale the features see — and each feature gets its
 * log importance weight, so the estimator stays unbiased for the mechanism's kernel. The standard draw z is the
 * mechanism's own draw 0 (the projection Performer would use), stretched to ω = Σ*^(1/2)z.
 */
export class ImportanceWeights {
  readonly variable: tf.Variable;
  readonly dataInit: DataInitialization;

  constructor(
    private readonly name: string,
    config: { scope: string; seed: number; numHeads: number },
    private readonly options: Record<string, unknown>,
    private readonly projection: tf.Variable,
    private readonly inputs: (x: tf.Tensor4D) => tf.Tensor4D,
  ) {
    checkImportanceOptions(name, options);
    const features = options.features as number;
    this.variable = tf.tidy(() => namedVariable(config.scope, 'featureLogWeights', tf.zeros([config.numHeads, features]), false));
    this.dataInit = {
      trigger: "dataInit 'variance-optimal'",
      fills: { variable: this.variable, label: 'projection and importance weights' },
      initializeFromData: (q, k) => this.fit(q, k, config.seed),
    };
  }

  private fit(q: tf.Tensor4D, k: tf.Tensor4D, seed: number): void {
    const [heads, dim, m] = this.projection.shape as [number, number, number];
    const [qData, kData] = tf
      .tidy(() => [this.inputs(q), this.inputs(k)])
      .map((t) => {
        const data = { values: t.dataSync(), shape: t.shape };
        t.dispose();
        return data;
      });
    if (qData.shape[1] !== heads || qData.shape[3] !== dim) {
      throw new Error(`${this.name}: dataInit 'variance-optimal' got inputs [${qData.shape.join(', ')}], expected [batch, ${heads}, length, ${dim}]`);
    }
    const standard = drawPrfProjection(seed, 0, heads, dim, m, this.options.orthogonal as boolean);
    const z = standard.dataSync();
    standard.dispose();
    const omega = new Float32Array(heads * dim * m);
    const logWeights = new Float32Array(heads * m);
    for (let h = 0; h < heads; h++) {
      const proposal = varianceOptimalProposal(pooledCovariance(headRows(qData.values, qData.shape, h), headRows(kData.values, kData.shape, h)));
      const zRows = new Float64Array(m * dim);
      for (let j = 0; j < m; j++) for (let i = 0; i < dim; i++) zRows[j * dim + i] = z[(h * dim + i) * m + j];
      const { omegaRows, logWeights: w } = proposalDraws(proposal, zRows, m);
      for (let j = 0; j < m; j++) for (let i = 0; i < dim; i++) omega[(h * dim + i) * m + j] = omegaRows[j * dim + i];
      logWeights.set(w, h * m);
    }
    tf.tidy(() => {
      this.projection.assign(tf.tensor3d(omega, [heads, dim, m]));
      this.variable.assign(tf.tensor2d(logWeights, [heads, m]));
    });
  }
}

const LOG_WEIGHTS = 'featureLogWeights';

type SavedTensor = { shape: readonly number[]; data: ArrayLike<number> };

/**
 * Saved featureLogWeights that no fit could give, one per buffer (its name and its first such value): each value must
 * lie in the range of importance.ts's logWeightRange for its feature's column of the projection beside it (NaN and ±∞
 * never do). `tensors` are a saved model's by name, already checked by name and shape (a buffer without its projection
 * is left to that check).
 */
export function unfittedImportanceWeights(tensors: ReadonlyMap<string, SavedTensor>): { tensor: string; problem: string }[] {
  const problems: { tensor: string; problem: string }[] = [];
  for (const [name, logWeights] of tensors) {
    if (!name.endsWith(`.${LOG_WEIGHTS}`)) continue;
    const projection = tensors.get(`${name.slice(0, -LOG_WEIGHTS.length)}projection`);
    if (projection?.shape.length !== 3 || logWeights.shape.join() !== `${projection.shape[0]},${projection.shape[2]}`) continue;
    const problem = firstUnfittedWeight(logWeights, projection);
    if (problem) problems.push({ tensor: name, problem });
  }
  return problems;
}

/** The first log weight [H, m] outside logWeightRange of its column of ω [H, d, m], described; null when none is. */
function firstUnfittedWeight(logWeights: SavedTensor, projection: SavedTensor): string | null {
  const [heads, dim, m] = projection.shape;
  for (let h = 0; h < heads; h++) {
    for (let j = 0; j < m; j++) {
      let squaredNorm = 0;
      for (let i = 0; i < dim; i++) squaredNorm += projection.data[(h * dim + i) * m + j] ** 2;
      const { min, max } = logWeightRange(squaredNorm, dim);
      const value = logWeights.data[h * m + j];
      // The slack covers the float32 rounding of the fit's float64 values.
      if (value >= min - 1e-4 * (1 + Math.abs(min)) && value <= max + 1e-4 * (1 + Math.abs(max))) continue;
      return (
        `holds ${value} at [${h}, ${j}], outside [${min.toPrecision(4)}, ${max.toPrecision(4)}]: ` +
        'no fit gives that log importance weight with this projection (docs/attention.md#variance-optimal-projections)'
      );
    }
  }
  return null;
}

/** dataInit 'variance-optimal' keeps one draw: a redraw would draw from N(0, I) again. Called before anything is built. */
export function checkImportanceOptions(name: string, options: Record<string, unknown>): void {
  if (options.dataInit === 'variance-optimal' && (options.redrawInterval as number) !== 0) {
    throw new Error(
      `attention '${name}': option dataInit 'variance-optimal' needs redrawInterval 0 (a redraw would draw from N(0, I) again; got ${options.redrawInterval})`,
    );
  }
}

/** Head h's vectors of x [B, H, L, d] (row-major data) as float64 rows. */
function headRows(data: tf.TypedArray, shape: readonly number[], h: number): Float64Array[] {
  const [b, heads, l, d] = shape;
  const rows: Float64Array[] = [];
  for (let bi = 0; bi < b; bi++) {
    for (let li = 0; li < l; li++) {
      const offset = ((bi * heads + h) * l + li) * d;
      rows.push(Float64Array.from(data.subarray(offset, offset + d)));
    }
  }
  return rows;
}

/**
 * Projection number `drawIndex` of a mechanism seeded `seed`: [heads, dim, features] with N(0, I)
 * columns, from its own sub-stream so any draw can be rebuilt from (seed, drawIndex) alone.
 */
export function drawPrfProjection(seed: number, drawIndex: number, heads: number, dim: number, features: number, orthogonal: boolean): tf.Tensor3D {
  const rng = new Rng(deriveSeed(seed, `prf-projection/${drawIndex}`));
  return (orthogonal ? orthogonalGaussianProjection(rng, heads, dim, features) : gaussianProjection(rng, heads, dim, features)) as tf.Tensor3D;
}

/**
 * The projection buffer with its redraw schedule. The draw in use is floor(step / interval), a
 * function of the optimizer step alone, so a resumed run (projection restored from the checkpoint
 * or not) lands on the same draw as an uninterrupted one.
 */
export class RedrawnProjection {
  readonly variable: tf.Variable;
  private draw = 0;

  constructor(
    scope: string,
    private readonly seed: number,
    private readonly interval: number,
    private readonly shape: { heads: number; dim: number; features: number; orthogonal: boolean },
  ) {
    this.variable = tf.tidy(() => namedVariable(scope, 'projection', this.make(0), false));
  }

  /** Index of the draw in use (0 until the first redraw). */
  get drawIndex(): number {
    return this.draw;
  }

  onTrainStep(step: number): void {
    if (this.interval === 0) return;
    if (!Number.isInteger(step) || step < 0) throw new Error(`onTrainStep: step must be an integer ≥ 0 (got ${step})`);
    const target = Math.floor(step / this.interval);
    if (target === this.draw) return;
    tf.tidy(() => this.variable.assign(this.make(target)));
    this.draw = target;
  }

  private make(drawIndex: number): tf.Tensor3D {
    const { heads, dim, features, orthogonal } = this.shape;
    return drawPrfProjection(this.seed, drawIndex, heads, dim, features, orthogonal);
  }
}

export type FavorOptions = Omit<ContractionOptions, 'clampMin'> & { delta: number };

/**
 * The FAVOR+ feature maps with projection omega [H, r, m]: row-stabilised positive random features of
 * x̃, where x̃ = scale·x (Performer: scale = d^(−1/4); 1: the inputs are x̃) or, when `prepare` is
 * given (DARKFormer: x̃ = M d^(−1/4)x, M trainable), x̃ = prepare(x); `logWeights` [H, m]: per-feature log
 * importance weights (dataInit 'variance-optimal').
 */
export function favorFeatureMaps(omega: tf.Tensor, scale: number, prepare?: (x: tf.Tensor4D) => tf.Tensor4D, logWeights?: tf.Tensor): FeatureMaps {
  const side = (x: tf.Tensor4D) =>
    positiveRandomFeatures(scale === 1 ? x : (tf.mul(x, scale) as tf.Tensor4D), omega, { stabilizer: 'row', logWeights }) as {
      features: tf.Tensor4D;
      shift: tf.Tensor4D;
    };
  return { featureDim: omega.shape[omega.rank - 1]!, shiftedKeys: true, ...(prepare ? { prepare } : {}), query: side, key: side };
}

/**
 * FAVOR+ on already-scaled inputs x̃ (q̃, k̃ [B, H, L, r]) with projection omega [H, r, m].
 */
export function favorAttention(qTilde: tf.Tensor4D, kTilde: tf.Tensor4D, v: tf.Tensor4D, omega: tf.Tensor, opts: FavorOptions): tf.Tensor4D {
  return featureMapAttention(favorFeatureMaps(omega, 1), qTilde, kTilde, v, opts);
}

/**
 * What FAVOR+ features of x̃ = kernelInputs(x) estimate, with or without importance weights: exp(x̃_qᵀx̃_k), the
 * features row-stabilised (their shift returned) so that large inputs stay in float32's range.
 */
export function favorKernel(formula: string, omega: tf.Variable, kernelInputs: (x: tf.Tensor4D) => tf.Tensor4D, logWeights?: tf.Variable): KernelEstimate {
  return {
    formula,
    features: (x) =>
      tf.tidy(() => {
        const { features, shift } = positiveRandomFeatures(kernelInputs(x), omega, { stabilizer: 'row', logWeights });
        return { features, shift: shift as tf.Tensor4D };
      }),
    kernelInputs: (x) => tf.tidy(() => kernelInputs(x)),
    logKernel: dot,
  };
}

/** Performer and DARKFormer modules: the attention interface plus read-outs for diagnostics and tests. */
export interface RandomFeatureModule extends AttentionModule {
  /**
   * The random feature map φ(x) [B, H, L, m] without stabiliser, so E[φ(q)ᵀφ(k)] is the
   * mechanism's kernel (exp(qᵀk/√d) for Performer). x: [B, H, L, headDim].
   */
  featureMap(x: tf.Tensor4D): tf.Tensor4D;
  /** Index of the projection draw in use (0 until the first redraw). */
  readonly drawIndex: number;
  /**
   * The inputs x̃ [B, H, L, r] whose exact kernel exp(x̃_qᵀx̃_k) the features estimate (Performer: d^(−1/4)x;
   * DARKFormer: M d^(−1/4)x): the same attention without random features is softmax over x̃_qᵀx̃_k.
   */
  kernelInputs(x: tf.Tensor4D): tf.Tensor4D;
}

/** Fails unless q, k, v are [B, H, L, headDim] with the configured heads. */
export function checkAttentionShapes(name: string, numHeads: number, headDim: number, q: tf.Tensor, k: tf.Tensor, v: tf.Tensor): void {
  for (const [label, t] of [
    ['q', q],
    ['k', k],
    ['v', v],
  ] as const) {
    if (t.rank !== 4 || t.shape[1] !== numHeads || t.shape[3] !== headDim) {
      throw new Error(`${name}: ${label} must be [batch, ${numHeads}, length, ${headDim}] (got [${t.shape.join(', ')}])`);
    }
  }
}

registerAttention('performer', {
  description: 'FAVOR+ positive (orthogonal) random features for exp(qᵀk/√d), linear in length',
  quadratic: false,
  options: favorOptionSpecs,
  tensors: ({ numHeads, headDim }, options) => [
    { name: 'projection', shape: [numHeads, headDim, options.features as number], trainable: false },
    ...importanceWeightTensors(numHeads, options),
  ],
  // The projection (2dm) and m exponentials.
  featureMap: ({ headDim }, options) => {
    const m = options.features as number;
    return { features: m, flopsPerSide: 2 * headDim * m + m };
  },
  create(config, options): RandomFeatureModule {
    const { numHeads, headDim } = config;
    const features = options.features as number;
    checkImportanceOptions('performer', options);
    const projection = new RedrawnProjection(config.scope, config.seed, options.redrawInterval as number, {
      heads: numHeads,
      dim: headDim,
      features,
      orthogonal: options.orthogonal as boolean,
    });
    const scale = headDim ** -0.25;
    const kernelInputs = (x: tf.Tensor4D) => tf.mul(x, scale) as tf.Tensor4D;
    const weights =
      options.dataInit === 'variance-optimal' ? new ImportanceWeights('performer', { ...config, numHeads }, options, projection.variable, kernelInputs) : null;
    const maps = favorFeatureMaps(projection.variable, scale, undefined, weights?.variable);
    const methods = featureMapMethods('performer', config, () => maps, { ...contractionOptions(options), delta: options.delta as number });
    return {
      name: 'performer',
      options,
      trainableVariables: [],
      buffers: weights ? [projection.variable, weights.variable] : [projection.variable],
      apply(q, k, v, opts: ApplyOptions = {}) {
        checkAttentionShapes('performer', numHeads, headDim, q, k, v);
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
      ...(weights ? { dataInit: weights.dataInit } : {}),
      kernel: favorKernel('exp(x̃_qᵀx̃_k), x̃ = d^(−1/4)x (softmax’s)', projection.variable, kernelInputs, weights?.variable),
      onTrainStep: (step) => projection.onTrainStep(step),
      dispose: () => {
        projection.variable.dispose();
        weights?.variable.dispose();
      },
    };
  },
});
