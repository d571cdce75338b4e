// Feature maps for the degree-2 polynomial kernel (uᵀv)², SLAY's x² factor (paper §2.3.2, App. C;
// docs/notes/attention-kernels.md §1.2–§1.4). Inputs are rows u ∈ R^d (SLAY passes unit vectors).
//
//   kind               output   φ(u)                                      E[φ(u)ᵀφ(v)] (unit u, v; x = uᵀv)
//   anchor             P        (a_pᵀu)² / √P, a_p uniform on the sphere  (1 + 2x²) / (d(d+2))   — biased, ≥ 0
//   exact              d²       vec(uuᵀ)                                  x² exactly
//   random-maclaurin   P        (r_pᵀu)(s_pᵀu) / √P, r, s Rademacher       x²                     — signed
//   tensorsketch       P        CS₁(u) ⊛ CS₂(u) (circular convolution)   x²                     — signed
//   nystrom            P        K(u, A) · (K_AA + λI)^(−1/2)               ≈ x² (exact on the anchors as λ → 0) — signed
//
// Random Maclaurin uses Rademacher vectors as in the paper (the reference code uses N(0, I/d));
// both are unbiased, Rademacher has the smaller fourth moment. All random matrices are shared by
// the heads of a layer (one set per layer, as the reference's anchors).
//
// TensorSketch without FFT: tfjs's FFT has no wasm kernel and no gradient we would trust, so the
// circular convolution is written as products with fixed matrices. One [d, 2P] product gives both
// CountSketches c₁, c₂; their outer product c₁c₂ᵀ (P² entries) is folded by a fixed 0/1 matrix
// F[(m, n), k] = [m + n ≡ k mod P] into (c₁ ⊛ c₂)_k = Σ_m c₁[m]·c₂[(k − m) mod P]. Costs O(dP + P³)
// per row and is differentiable with ordinary matmul gradients. No 1/√P factor: without it the
// sketch is unbiased for x² (the reference divides by √P, a constant that cancels in attention).
import * as tf from '@tensorflow/tfjs';
import { ConstantCache, matMul2d } from '../ops.ts';
import type { Rng } from '../../core/rng.ts';
import { inverseSqrtSymmetric } from './linalg.ts';

export const POLYNOMIAL_KINDS = ['anchor', 'exact', 'random-maclaurin', 'tensorsketch', 'nystrom'] as const;
export type PolynomialKind = (typeof POLYNOMIAL_KINDS)[number];

export interface PolynomialMapSpec {
  kind: PolynomialKind;
  /** d, the length of the input rows. */
  inputDim: number;
  /** P: anchors, Maclaurin pairs or sketch size (ignored by 'exact', whose output is d²). */
  features: number;
  rng: Rng;
  /** λ of Nyström's K_AA + λI (the reference's 1e-3: docs/notes/attention-kernels.md §1.3). */
  nystromRidge?: number;
  /**
   * Receives each fixed random matrix once, by name, and returns the tensor the map will use (SLAY
   * passes a function that turns it into a named non-trainable variable). Default: keep the tensor.
   */
  store?: (name: string, value: tf.Tensor2D) => tf.Tensor2D;
}

export interface PolynomialFeatureMap {
  readonly kind: PolynomialKind;
  readonly inputDim: number;
  readonly outputDim: number;
  /** The fixed matrices by name, as returned by `store`. */
  readonly parameters: ReadonlyMap<string, tf.Tensor2D>;
  /** u [N, d] → φ(u) [N, outputDim]. */
  apply(u: tf.Tensor2D): tf.Tensor2D;
  /** Disposes the parameters and any cached constant. */
  dispose(): void;
}

export function polynomialOutputDim(kind: PolynomialKind, inputDim: number, features: number): number {
  return kind === 'exact' ? inputDim * inputDim : features;
}

/** Name → shape of the fixed matrices createPolynomialMap stores (computed without drawing them). */
export function polynomialParameterShapes(kind: PolynomialKind, inputDim: number, features: number): [string, number[]][] {
  switch (kind) {
    case 'anchor':
      return [['anchors', [inputDim, features]]];
    case 'exact':
      return [];
    case 'random-maclaurin':
      return [['maclaurin', [inputDim, 2 * features]]];
    case 'tensorsketch':
      return [['countSketch', [inputDim, 2 * features]]];
    case 'nystrom':
      return [
        ['anchors', [inputDim, features]],
        ['whitening', [features, features]],
      ];
  }
}

export function createPolynomialMap(spec: PolynomialMapSpec): PolynomialFeatureMap {
  const { kind, inputDim: d, features: p, rng } = spec;
  if (!(POLYNOMIAL_KINDS as readonly string[]).includes(kind)) {
    throw new Error(`polynomial feature map: unknown kind '${String(kind)}'; allowed: ${POLYNOMIAL_KINDS.join(', ')}`);
  }
  for (const [name, value] of [
    ['inputDim', d],
    ['features', p],
  ] as const) {
    if (!Number.isInteger(value) || value < 1) {
      throw new Error(`polynomial feature map: '${name}' must be an integer ≥ 1 (got ${String(value)})`);
    }
  }
  const store = spec.store ?? ((_name: string, value: tf.Tensor2D) => value);
  const parameters = new Map<string, tf.Tensor2D>();
  const put = (name: string, values: Float32Array | number[], shape: [number, number]) => {
    parameters.set(name, store(name, tf.tensor2d(values, shape, 'float32')));
  };
  const constants = new ConstantCache();
  const get = (name: string) => parameters.get(name)!;
  let apply: (u: tf.Tensor2D) => tf.Tensor2D;

  switch (kind) {
    case 'anchor': {
      put('anchors', transposedRows(unitGaussianRows(rng, p, d)), [d, p]);
      apply = (u) => tf.mul(tf.square(matMul2d(u, get('anchors'))), 1 / Math.sqrt(p));
      break;
    }
    case 'exact': {
      apply = (u) => {
        const n = u.shape[0];
        return tf.reshape(tf.matMul(tf.reshape(u, [n, d, 1]) as tf.Tensor3D, tf.reshape(u, [n, 1, d]) as tf.Tensor3D), [n, d * d]);
      };
      break;
    }
    case 'random-maclaurin': {
      const signs = new Float32Array(d * 2 * p);
      for (let i = 0; i < signs.length; i++) signs[i] = rng.rademacher();
      put('maclaurin', signs, [d, 2 * p]);
      apply = (u) => {
        const both = matMul2d(u, get('maclaurin'));
        const n = u.shape[0];
        return tf.mul(tf.mul(tf.slice(both, [0, 0], [n, p]), tf.slice(both, [0, p], [n, p])), 1 / Math.sqrt(p));
      };
      break;
    }
    case 'tensorsketch': {
      // Column h(i) of the first half (and P + h'(i) of the second) holds the sign σ(i) of row i.
      const sketch = new Float32Array(d * 2 * p);
      for (let half = 0; half < 2; half++) {
        for (let i = 0; i < d; i++) sketch[i * 2 * p + half * p + rng.int(p)] = rng.rademacher();
      }
      put('countSketch', sketch, [d, 2 * p]);
      apply = (u) => {
        const n = u.shape[0];
        const both = matMul2d(u, get('countSketch'));
        const c1 = tf.reshape(tf.slice(both, [0, 0], [n, p]), [n, p, 1]) as tf.Tensor3D;
        const c2 = tf.reshape(tf.slice(both, [0, p], [n, p]), [n, 1, p]) as tf.Tensor3D;
        const outer = tf.matMul(c1, c2); // c₁c₂ᵀ per row
        return matMul2d(
          tf.reshape(outer, [n, p * p]),
          constants.get('fold', () => circularFold(p)),
        );
      };
      break;
    }
    case 'nystrom': {
      const anchors = unitGaussianRows(rng, p, d);
      const ridge = spec.nystromRidge ?? 1e-3;
      if (!(ridge >= 0)) throw new Error(`polynomial feature map: 'nystromRidge' must be ≥ 0 (got ${String(ridge)})`);
      const gram = anchors.map((a, i) => anchors.map((b, j) => dotSquared(a, b) + (i === j ? ridge : 0)));
      put('anchors', transposedRows(anchors), [d, p]);
      put('whitening', inverseSqrtSymmetric(gram).flat(), [p, p]);
      apply = (u) => matMul2d(tf.square(matMul2d(u, get('anchors'))), get('whitening'));
      break;
    }
  }
  return {
    kind,
    inputDim: d,
    outputDim: polynomialOutputDim(kind, d, p),
    parameters,
    apply: (u) => {
      if (u.rank !== 2 || u.shape[1] !== d) {
        throw new Error(`polynomial feature map '${kind}': expected input [N, ${d}], got [${u.shape.join(', ')}]`);
      }
      return tf.tidy(() => apply(u));
    },
    dispose: () => {
      for (const t of parameters.values()) t.dispose();
      parameters.clear();
      constants.dispose();
    },
  };
}

/** n rows of iid N(0, I_d) scaled to unit length (i.e. uniform on the sphere), float64. */
export function unitGaussianRows(rng: Rng, n: number, d: number): number[][] {
  return Array.from({ length: n }, () => {
    let row = Array.from(rng.normalArray(d));
    let norm = Math.hypot(...row);
    while (norm === 0) {
      row = Array.from(rng.normalArray(d));
      norm = Math.hypot(...row);
    }
    return row.map((x) => x / norm);
  });
}

/** Rows [n][d] as a flat row-major [d, n] matrix (columns = rows), for u · Aᵀ. */
function transposedRows(rows: number[][]): Float32Array {
  const n = rows.length;
  const d = rows[0].length;
  const out = new Float32Array(d * n);
  for (let i = 0; i < n; i++) for (let j = 0; j < d; j++) out[j * n + i] = rows[i][j];
  return out;
}

function dotSquared(a: number[], b: number[]): number {
  const s = a.reduce((acc, x, i) => acc + x * b[i], 0);
  return s * s;
}

/** F [P², P]: F[m·P + n, k] = 1 if (m + n) mod P = k — folds an outer product into a circular convolution. */
function circularFold(p: number): tf.Tensor2D {
  const values = new Float32Array(p * p * p);
  for (let m = 0; m < p; m++) for (let n = 0; n < p; n++) values[(m * p + n) * p + ((m + n) % p)] = 1;
  return tf.tensor2d(values, [p * p, p]);
}
