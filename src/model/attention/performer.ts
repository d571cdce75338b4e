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
import { positiveRandomFeatures } from '../features/prf.ts';
import { orthogonalGaussianProjection } from '../features/orthogonal.ts';
import { gaussianProjection } from '../features/projections.ts';
import { namedVariable } from '../ops.ts';
import { deriveSeed, Rng } from '../../core/rng.ts';
import { contractionOptions, contractionOptionSpecs, featureMapAttention, featureMapMethods, type ContractionOptions, type FeatureMaps } from './linear-attention.ts';
import { registerAttention } from './registry.ts';
import type { ApplyOptions, AttentionModule, OptionSpecs } from './types.ts';

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
};

/**
 * Projection number `drawIndex` of a mechanism seeded `seed`: [heads, dim, features] with N(0, I)
 * columns, from its own sub-stream so any draw can be rebuilt from (seed, drawIndex) alone.
 */
export function drawPrfProjection(
  seed: number,
  drawIndex: number,
  heads: number,
  dim: number,
  features: number,
  orthogonal: boolean,
): tf.Tensor3D {
  const rng = new Rng(deriveSeed(seed, `prf-projection/${drawIndex}`));
  return (orthogonal
    ? orthogonalGaussianProjection(rng, heads, dim, features)
    : gaussianProjection(rng, heads, dim, features)) as tf.Tensor3D;
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
 * given (DARKFormer: x̃ = M d^(−1/4)x, M trainable), x̃ = prepare(x).
 */
export function favorFeatureMaps(omega: tf.Tensor, scale: number, prepare?: (x: tf.Tensor4D) => tf.Tensor4D): FeatureMaps {
  const side = (x: tf.Tensor4D) =>
    positiveRandomFeatures(scale === 1 ? x : (tf.mul(x, scale) as tf.Tensor4D), omega, { stabilizer: 'row' }) as { features: tf.Tensor4D; shift: tf.Tensor4D };
  return { featureDim: omega.shape[omega.rank - 1]!, shiftedKeys: true, ...(prepare ? { prepare } : {}), query: side, key: side };
}

/**
 * FAVOR+ on already-scaled inputs x̃ (q̃, k̃ [B, H, L, r]) with projection omega [H, r, m].
 */
export function favorAttention(
  qTilde: tf.Tensor4D,
  kTilde: tf.Tensor4D,
  v: tf.Tensor4D,
  omega: tf.Tensor,
  opts: FavorOptions,
): tf.Tensor4D {
  return featureMapAttention(favorFeatureMaps(omega, 1), qTilde, kTilde, v, opts);
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
}

/** Fails unless q, k, v are [B, H, L, headDim] with the configured heads. */
export function checkAttentionShapes(
  name: string,
  numHeads: number,
  headDim: number,
  q: tf.Tensor,
  k: tf.Tensor,
  v: tf.Tensor,
): void {
  for (const [label, t] of [['q', q], ['k', k], ['v', v]] as const) {
    if (t.rank !== 4 || t.shape[1] !== numHeads || t.shape[3] !== headDim) {
      throw new Error(`${name}: ${label} must be [batch, ${numHeads}, length, ${headDim}] (got [${t.shape.join(', ')}])`);
    }
  }
}

registerAttention('performer', {
  description: 'FAVOR+ positive (orthogonal) random features for exp(qᵀk/√d), linear in length',
  quadratic: false,
  options: favorOptionSpecs,
  tensors: ({ numHeads, headDim }, options) => [{ name: 'projection', shape: [numHeads, headDim, options.features as number], trainable: false }],
  create(config, options): RandomFeatureModule {
    const { numHeads, headDim } = config;
    const features = options.features as number;
    const projection = new RedrawnProjection(config.scope, config.seed, options.redrawInterval as number, {
      heads: numHeads,
      dim: headDim,
      features,
      orthogonal: options.orthogonal as boolean,
    });
    const scale = headDim ** -0.25;
    const maps = favorFeatureMaps(projection.variable, scale);
    const methods = featureMapMethods('performer', config, () => maps, { ...contractionOptions(options), delta: options.delta as number });
    return {
      name: 'performer',
      options,
      trainableVariables: [],
      buffers: [projection.variable],
      apply(q, k, v, opts: ApplyOptions = {}) {
        checkAttentionShapes('performer', numHeads, headDim, q, k, v);
        return methods.apply(q, k, v, opts);
      },
      initState: methods.initState,
      step: methods.step,
      featureMap(x) {
        return tf.tidy(() => positiveRandomFeatures(tf.mul(x, scale), projection.variable).features);
      },
      get drawIndex() {
        return projection.drawIndex;
      },
      onTrainStep: (step) => projection.onTrainStep(step),
      dispose: () => projection.variable.dispose(),
    };
  },
});
