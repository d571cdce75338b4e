// schoenbat: Schoenberg's-theorem attention (arXiv 2505.12252; docs/notes/attention-kernels.md §4):
//
//   q̃ = preSBN(q)·d^(−1/4), k̃ = preSBN(k)·d^(−1/4)       preSBN: centre, divide by √(var+1e-12), unit-normalise
//   out = γ · RMFA(q̃, k̃, v) + β                             RMFA: linear attention over random Maclaurin features
//
// RMFA estimates kernel-normalised attention Σ_j f(q̃ᵀk̃_j) v_j / Σ_j f(q̃ᵀk̃_j) with f the chosen
// dot-product kernel; q̃ᵀk̃ ∈ [−1/√d, 1/√d], well inside every kernel's radius of convergence.
//
// Departures from the released code, each deliberate:
// * Causality follows config.causal (the released RMFA is always causal).
// * Post-SBN is γ·out + β (β init 0, so the module starts as plain RMFA). The released forward
//   intends γ·out^β with β init 1, but as released it reads an undefined variable, and an element-wise
//   power of signed outputs is NaN for negative entries with fractional β and has a log|out| gradient
//   for β that is infinite at out = 0. The affine form is the Batch-Normalisation-style rescaling the
//   paper names ("scaling batch normalization"), well defined and smooth everywhere.
// * The denominator guard: the features are signed, so the estimated denominator can be small or
//   negative and must be clamped from below. The released code clamps at 1.0, which also alters exact
//   results whenever the true denominator is below 1 (a first causal position whose only key has
//   q̃ᵀk̃ < 0). The default here clamps at f(−1/√d), the smallest value the exact denominator can take
//   with one visible key, so the guard never changes an exact estimate; 'reference' keeps 1.0.
import * as tf from '@tensorflow/tfjs';
import { BOUNDS } from '../../core/bounds.ts';
import { dot } from '../features/linalg.ts';
import { l2Normalize, namedVariable } from '../ops.ts';
import { deriveSeed, Rng } from '../../core/rng.ts';
import { DEFAULT_MAX_DEGREE, drawDegrees, MACLAURIN_KERNELS, RandomMaclaurinFeatures } from '../features/random-maclaurin.ts';
import type { MaclaurinKernel } from '../features/random-maclaurin.ts';
import { contractionOptions, contractionOptionSpecs, featureMapMethods } from './linear-attention.ts';
import { registerAttention } from './registry.ts';
import type { AttentionModule } from './types.ts';

const DENOMINATOR_CLAMPS = ['kernel-min', 'reference'] as const;

/** Pre-SBN over the last axis: centre, divide by √(biased var + 1e-12), then unit-normalise. */
export function preSbn(x: tf.Tensor4D): tf.Tensor4D {
  return tf.tidy(() => {
    const { mean, variance } = tf.moments(x, -1, true);
    return l2Normalize(tf.div(tf.sub(x, mean), tf.sqrt(tf.add(variance, 1e-12))) as tf.Tensor4D);
  });
}

const maclaurinRng = (seed: number) => new Rng(deriveSeed(seed, 'schoenbat.maclaurin'));

registerAttention('schoenbat', {
  description: 'SchoenbAt: pre-SBN, random Maclaurin feature attention for a dot-product kernel, post-SBN γ·out+β',
  quadratic: false,
  options: {
    kernel: {
      kind: 'enum',
      default: 'exp',
      values: MACLAURIN_KERNELS,
      doc: 'dot-product kernel f: exp eˣ, inverse 1/(1−x), logi 1−log(1−x), trigh cosh x+sinh x (= exp), sqrt 2−√(1−x)',
    },
    features: {
      kind: 'int',
      default: 128,
      min: 2,
      max: BOUNDS.features.max,
      doc: 'D: one constant feature plus D−1 random Maclaurin features (shared by all heads)',
    },
    maxDegree: { kind: 'int', default: DEFAULT_MAX_DEGREE, min: 1, max: 40, doc: 'largest sampled degree; the series is truncated there' },
    denominatorClamp: {
      kind: 'enum',
      default: 'kernel-min',
      values: DENOMINATOR_CLAMPS,
      doc: "lower clamp of the signed-feature denominator: 'kernel-min' = f(−1/√d), the least exact value with one visible key; 'reference' = 1.0 as the released code",
    },
    ...contractionOptionSpecs,
  },
  tensors: ({ headDim, seed }, options) => {
    // The projections hold one row per factor: Σ of the random features' degrees, drawn from the seed.
    const degrees = drawDegrees(maclaurinRng(seed), (options.features as number) - 1, options.maxDegree as number);
    return [
      { name: 'maclaurinProjections', shape: [degrees.reduce((a, n) => a + n, 0), headDim], trainable: false },
      { name: 'postSbnGamma', shape: [1], trainable: true },
      { name: 'postSbnBeta', shape: [headDim], trainable: true },
    ];
  },
  // Pre-SBN (~3d), one projection per factor (2d each, Σ degrees of them), their products and the D features.
  featureMap: ({ headDim, seed }, options) => {
    const features = options.features as number;
    const factors = drawDegrees(maclaurinRng(seed), features - 1, options.maxDegree as number).reduce((a, n) => a + n, 0);
    return { features, flopsPerSide: 3 * headDim + 2 * headDim * factors + factors + features };
  },
  create(config, options): AttentionModule {
    const kernel = options.kernel as MaclaurinKernel;
    const featureMap = new RandomMaclaurinFeatures({
      rng: maclaurinRng(config.seed),
      inputDim: config.headDim,
      numFeatures: options.features as number,
      kernel,
      maxDegree: options.maxDegree as number,
      scope: config.scope,
    });
    const inputScale = config.headDim ** -0.25;
    const clampMin = options.denominatorClamp === 'reference' ? 1 : featureMap.kernelValue(-1 / Math.sqrt(config.headDim));
    const gamma = namedVariable(config.scope, 'postSbnGamma', tf.ones([1]), true);
    const beta = namedVariable(config.scope, 'postSbnBeta', tf.zeros([config.headDim]), true);
    // Pre-SBN and post-SBN act per position, so the recurrent form is the plain feature-map one.
    const kernelInputs = (x: tf.Tensor4D) => tf.tidy(() => tf.mul(preSbn(x), inputScale) as tf.Tensor4D);
    const side = (x: tf.Tensor4D) => ({ features: featureMap.apply(kernelInputs(x)) as tf.Tensor4D });
    const maps = { featureDim: options.features as number, shiftedKeys: false, query: side, key: side };
    const methods = featureMapMethods('schoenbat', config, () => maps, { ...contractionOptions(options), clampMin });
    const postSbn = (attended: tf.Tensor4D) => tf.tidy(() => tf.add(tf.mul(attended, gamma), beta) as tf.Tensor4D);
    return {
      name: 'schoenbat',
      options,
      trainableVariables: [gamma, beta],
      buffers: [featureMap.projections],
      drawLayout: { maclaurinDegrees: featureMap.degrees },
      // The features estimate the series truncated at maxDegree (random-maclaurin.ts), positive on |x̃_qᵀx̃_k| ≤ 1/√d.
      kernel: {
        formula: `Σ_{n≤${options.maxDegree}} aₙ(x̃_qᵀx̃_k)ⁿ of f = ${kernel}, x̃ = d^(−1/4)·preSBN(x)`,
        features: (x) => tf.tidy(() => side(x)),
        kernelInputs,
        logKernel: (q, k) => Math.log(featureMap.kernelValue(dot(q, k))),
      },
      apply(q, k, v, opts = {}) {
        return tf.tidy(() => postSbn(methods.apply(q, k, v, opts)));
      },
      initState: methods.initState,
      step(q, k, v, state, position, stepOpts) {
        const { out, state: next } = methods.step(q, k, v, state, position, stepOpts);
        const scaled = postSbn(out);
        out.dispose();
        return { out: scaled, state: next };
      },
      dispose() {
        featureMap.dispose();
        gamma.dispose();
        beta.dispose();
      },
    };
  },
});
