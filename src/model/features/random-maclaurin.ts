// Random Maclaurin features (Kar & Karnick 2012) for a dot-product kernel f(xᵀy) = Σ_n a_n (xᵀy)ⁿ
// with a_n ≥ 0, as SchoenbAt uses them (docs/notes/attention-kernels.md §4.2; the SchoenbAt code's `random_features/maclaurin.py`):
//
//   φ(x)_0 = √a₀                                         (the constant term, exact)
//   φ(x)_j = √(a_{N_j} / P(N_j)) · Π_{l=1..N_j} (r_{j,l}ᵀx) / √(D−1),   j = 1…D−1
//
// with degrees N_j ~ P(N = n) ∝ 2^(−(n+1)), n = 1…maxDegree (renormalised), and independent
// Rademacher vectors r_{j,l} ∈ {±1}^d. Since E[(rᵀx)(rᵀy)] = xᵀy, E[φ(x)ᵀφ(y)] = Σ_{n≤maxDegree} a_n (xᵀy)ⁿ.
// The features are signed.
//
// Layout for a fast, differentiable forward pass with no per-feature loop: the random features are
// sorted by degree, highest first, so the features of degree ≥ l are a prefix of length m_l. Level l
// of the projection matrix holds r_{j,l} for j < m_l as rows; one matrix product R·xᵀ gives every rᵀx,
// and the running product over levels (running_l = running_{l−1}[:m_l] ⊙ level_l) costs Σ_j N_j
// multiplications in at most maxDegree element-wise ops; the features of degree exactly l are
// running_l[m_{l+1} : m_l]. Features run along the first axis so that every slice is a contiguous
// block of rows (the cpu backend copies strided column slices element by element, ~100× slower), and
// each feature's scale is folded into its level-1 row, so no broadcast multiply is needed.
import * as tf from '@tensorflow/tfjs';
import { matMul2d, namedVariable } from '../ops.ts';
import type { Rng } from '../../core/rng.ts';

export const MACLAURIN_KERNELS = ['exp', 'inverse', 'logi', 'trigh', 'sqrt'] as const;
export type MaclaurinKernel = (typeof MACLAURIN_KERNELS)[number];

/** The reference's cap on the sampled degree (`P_Measure(p=2, h01=False, max_val=20)`). */
export const DEFAULT_MAX_DEGREE = 20;

/**
 * Maclaurin coefficients a_0 … a_maxDegree of the five SchoenbAt kernels:
 *   exp      eˣ              a_n = 1/n!
 *   inverse  1/(1−x)         a_n = 1
 *   logi     1 − log(1−x)    a₀ = 1, a_n = 1/n
 *   trigh    cosh x + sinh x a_n = 1/n! for even n (cosh) plus 1/n! for odd n (sinh) — the same series
 *                            as exp, since cosh + sinh = exp; kept because the reference lists it
 *   sqrt     2 − √(1−x)      a₀ = 1, a_n = −binom(½, n)·(−1)ⁿ = |binom(½, n)|
 */
export function maclaurinCoefficients(kernel: MaclaurinKernel, maxDegree: number): number[] {
  if (!(MACLAURIN_KERNELS as readonly string[]).includes(kernel)) {
    throw new Error(`random Maclaurin: unknown kernel '${kernel}'; allowed: ${MACLAURIN_KERNELS.join(', ')}`);
  }
  const coefficients: number[] = [];
  let factorial = 1;
  let binomHalf = 1; // binom(½, n) by its recurrence binom(½, n) = binom(½, n−1)·(½ − n + 1)/n
  for (let n = 0; n <= maxDegree; n++) {
    if (n > 0) {
      factorial *= n;
      binomHalf *= (0.5 - (n - 1)) / n;
    }
    switch (kernel) {
      case 'exp':
        coefficients.push(1 / factorial);
        break;
      case 'trigh':
        coefficients.push((n % 2 === 0 ? 1 / factorial : 0) + (n % 2 === 1 ? 1 / factorial : 0));
        break;
      case 'inverse':
        coefficients.push(1);
        break;
      case 'logi':
        coefficients.push(n === 0 ? 1 : 1 / n);
        break;
      case 'sqrt':
        // 2 − √(1−x) = 2 − Σ_n binom(½, n)(−x)ⁿ
        coefficients.push((n === 0 ? 2 : 0) - binomHalf * (-1) ** n);
        break;
    }
  }
  return coefficients;
}

/** Σ_n a_n xⁿ: the kernel the features estimate (the series truncated where the coefficients end). */
export function maclaurinSeries(coefficients: readonly number[], x: number): number {
  let sum = 0;
  for (let n = coefficients.length - 1; n >= 0; n--) sum = sum * x + coefficients[n];
  return sum;
}

/** P(N = n) ∝ 2^(−(n+1)) for n = 1…maxDegree, renormalised; index 0 holds 0 (the constant is exact). */
export function degreeProbabilities(maxDegree: number): number[] {
  const weights = Array.from({ length: maxDegree + 1 }, (_, n) => (n === 0 ? 0 : 2 ** -(n + 1)));
  const total = weights.reduce((a, w) => a + w, 0);
  return weights.map((w) => w / total);
}

export interface MaclaurinDraw {
  /** Degree of each random feature, highest first. */
  degrees: number[];
  /** m_l = number of random features of degree ≥ l, for l = 1…max(degrees). */
  levelSizes: number[];
  /** [Σ degrees, inputDim] row-major ±1 entries: one Rademacher vector per row, level blocks of m_l rows. */
  projections: Float32Array;
  /** [numFeatures]: √a₀ for the constant feature, then √(a_N/P(N))/√(D−1) per random feature. */
  scales: Float32Array;
}

/** Draws degrees and Rademacher vectors for numFeatures = D features (one constant + D−1 random). */
export function drawRandomMaclaurin(rng: Rng, inputDim: number, numFeatures: number, coefficients: readonly number[]): MaclaurinDraw {
  if (!Number.isInteger(numFeatures) || numFeatures < 2) {
    throw new Error(`random Maclaurin: features must be an integer ≥ 2 (one constant and at least one random feature), got ${numFeatures}`);
  }
  const maxDegree = coefficients.length - 1;
  if (maxDegree < 1) throw new Error('random Maclaurin: need coefficients up to at least degree 1');
  const probabilities = degreeProbabilities(maxDegree);
  const randomCount = numFeatures - 1;
  const degrees = drawDegrees(rng, randomCount, maxDegree);

  const levelSizes: number[] = [];
  for (let level = 1; level <= degrees[0]; level++) levelSizes.push(degrees.filter((n) => n >= level).length);
  const total = levelSizes.reduce((a, m) => a + m, 0);
  const projections = new Float32Array(inputDim * total);
  for (let i = 0; i < projections.length; i++) projections[i] = rng.rademacher();

  const scales = new Float32Array(numFeatures);
  scales[0] = Math.sqrt(coefficients[0]);
  degrees.forEach((n, j) => {
    scales[j + 1] = Math.sqrt(coefficients[n] / probabilities[n] / randomCount);
  });
  return { degrees, levelSizes, projections, scales };
}

/**
 * The degrees of `count` random features, highest first: the first draws of `rng` in drawRandomMaclaurin, so the
 * shape of its projections ([Σ degrees, inputDim]) is known without drawing them.
 */
export function drawDegrees(rng: Rng, count: number, maxDegree: number): number[] {
  const probabilities = degreeProbabilities(maxDegree);
  return Array.from({ length: count }, () => sampleDegree(rng, probabilities)).sort((a, b) => b - a);
}

function sampleDegree(rng: Rng, probabilities: readonly number[]): number {
  const u = rng.uniform();
  let cumulative = 0;
  for (let n = 1; n < probabilities.length; n++) {
    cumulative += probabilities[n];
    if (u < cumulative) return n;
  }
  return probabilities.length - 1; // u within rounding of 1
}

export interface RandomMaclaurinOptions {
  rng: Rng;
  inputDim: number;
  /** D: one constant feature plus D−1 random ones. */
  numFeatures: number;
  kernel: MaclaurinKernel;
  maxDegree?: number;
  /** Prefix of the buffer names. */
  scope: string;
}

/**
 * A fixed draw of the random Maclaurin map; the scaled projections are a non-trainable variable
 * (drawn once, never redrawn, as in the reference).
 */
export class RandomMaclaurinFeatures {
  readonly kernel: MaclaurinKernel;
  readonly coefficients: number[];
  readonly degrees: number[];
  readonly numFeatures: number;
  /**
   * [Σ degrees, inputDim]: the Rademacher rows, those of level 1 (one per random feature) multiplied
   * by the feature's scale √(a_N/P(N))/√(D−1).
   */
  readonly projections: tf.Variable;
  private readonly constantFeature: number;
  private readonly levelSizes: number[];

  constructor(opts: RandomMaclaurinOptions) {
    const maxDegree = opts.maxDegree ?? DEFAULT_MAX_DEGREE;
    this.kernel = opts.kernel;
    this.coefficients = maclaurinCoefficients(opts.kernel, maxDegree);
    const draw = drawRandomMaclaurin(opts.rng, opts.inputDim, opts.numFeatures, this.coefficients);
    this.degrees = draw.degrees;
    this.levelSizes = draw.levelSizes;
    this.numFeatures = opts.numFeatures;
    const total = draw.levelSizes.reduce((a, m) => a + m, 0);
    const scaled = draw.projections.slice();
    for (let j = 0; j < draw.degrees.length; j++) {
      for (let i = 0; i < opts.inputDim; i++) scaled[j * opts.inputDim + i] *= draw.scales[j + 1];
    }
    this.projections = namedVariable(opts.scope, 'maclaurinProjections', tf.tensor2d(scaled, [total, opts.inputDim]), false);
    this.constantFeature = draw.scales[0];
  }

  /** The kernel the features estimate, Σ_{n≤maxDegree} a_n tⁿ, at t = xᵀy. */
  kernelValue(t: number): number {
    return maclaurinSeries(this.coefficients, t);
  }

  /** x [..., inputDim] → φ(x) [..., numFeatures]. */
  apply(x: tf.Tensor): tf.Tensor {
    return tf.tidy(() => {
      const inputDim = x.shape[x.rank - 1];
      const lead = x.shape.slice(0, -1);
      const columns = tf.transpose(tf.reshape(x, [-1, inputDim])) as tf.Tensor2D; // [inputDim, M]
      const m = columns.shape[1];
      const projected = matMul2d(this.projections as tf.Tensor2D, columns); // every rᵀx at once: [Σ degrees, M]
      // Level l holds one factor of every feature of degree ≥ l. Cut with tf.split, not tf.slice: a
      // slice's gradient is padded back to its whole input, so every level would add a [Σ degrees, M]
      // tensor in backward; split's gradient is one concat.
      const levels = tf.split(projected, this.levelSizes, 0);
      const byDegree: tf.Tensor[] = [];
      let running = levels[0];
      for (let index = 0; index < levels.length; index++) {
        if (index > 0) running = tf.mul(running, levels[index]);
        const size = this.levelSizes[index];
        const higher = this.levelSizes[index + 1] ?? 0;
        if (size === higher) continue;
        // Rows [higher, size) are complete (degree index + 1); the first `higher` go on. Highest degree first, the order of the draw.
        const [continuing, finished] = higher > 0 ? tf.split(running, [higher, size - higher], 0) : [running, running];
        byDegree.unshift(finished);
        running = continuing;
      }
      const features = tf.transpose(tf.concat([tf.fill([1, m], this.constantFeature), ...byDegree], 0)); // [M, D]
      return tf.reshape(features, [...lead, this.numFeatures]);
    });
  }

  dispose(): void {
    this.projections.dispose();
  }
}
