// What SLAY's estimators converge to as their feature budgets grow, computed exactly in float64 on the inputs the
// kernel-fidelity harness draws (fidelity-cases.ts): each estimator's expected kernel, used in place of its features,
// against exact spherical Yat. An estimator's rel-ℓ2 cannot fall much below its limit's, whatever M and P are:
//   exact polynomial features (M → ∞):  Σ_r w_r x² e^{2 s_r x}         (the quadrature kernel, paper Remark 2)
//   anchor features (M, P → ∞):         Σ_r w_r (1 + 2x²) e^{2 s_r x}   (E over unit anchors of (aᵀq)²(aᵀk)² is
//                                        (1 + 2x²)/(d(d + 2)) for unit q, k; the constant cancels in the ratio)
//   laplace-only (M → ∞):               Σ_r w_r e^{2 s_r x}              (∝ 1/(C − 2x) as R grows)
// with x = q̂ᵀk̂, C = 2 + ε and (s_r, w_r) SLAY's Gauss–Laguerre rule (docs/attention.md, "What each estimator
// targets"; docs/notes/attention-kernels.md §1.4).
import { type LaplaceQuadrature, slayQuadrature } from '../model/features/quadrature.ts';
import { type DrawnLinear, drawFidelityInputs, type FidelitySettings } from './fidelity-cases.ts';

export const LIMIT_POLYS = ['exact', 'anchor', 'laplace-only'] as const;
export type LimitPoly = (typeof LIMIT_POLYS)[number];

/** The kernel each estimator converges to, as a function of the cosine x. */
export function limitKernel(poly: LimitPoly, rule: LaplaceQuadrature): (x: number) => number {
  const polynomial = { exact: (x: number) => x * x, anchor: (x: number) => 1 + 2 * x * x, 'laplace-only': () => 1 }[poly];
  return (x) => polynomial(x) * rule.scales.reduce((acc, s, r) => acc + rule.weights[r] * Math.exp(2 * s * x), 0);
}

/** y = x·w (+ b) for `rows` rows of width `width`. */
function affine(x: Float64Array, layer: DrawnLinear, rows: number, width: number): Float64Array {
  const y = new Float64Array(rows * width);
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < width; j++) {
      let sum = layer.b ? layer.b[j] : 0;
      for (let t = 0; t < width; t++) sum += x[i * width + t] * layer.w[t * width + j];
      y[i * width + j] = sum;
    }
  }
  return y;
}

/**
 * rel-ℓ2 of kernel-normalised attention with `kernel` against exact spherical Yat attention (kernel x²/(C − 2x), the
 * `yat-spherical` mechanism's, δ added to each denominator as there) on one seed's harness inputs, in float64.
 */
export function limitRelL2(kernel: (x: number) => number, settings: FidelitySettings, length: number, seed: number, epsilon: number, delta = 1e-6): number {
  const { embed, heads, batch, causal } = settings;
  const headDim = embed / heads;
  const draw = drawFidelityInputs(settings, length, seed);
  const rows = batch * length;
  const [q, k, v] = [draw.q, draw.k, draw.v].map((layer) => affine(draw.x, layer, rows, embed));
  const unit = (a: Float64Array) => {
    for (let row = 0; row < rows; row++) {
      for (let h = 0; h < heads; h++) {
        const at = row * embed + h * headDim;
        let norm = 0;
        for (let d = 0; d < headDim; d++) norm += a[at + d] ** 2;
        const scale = 1 / Math.sqrt(Math.max(norm, 1e-24));
        for (let d = 0; d < headDim; d++) a[at + d] *= scale;
      }
    }
  };
  unit(q);
  unit(k);
  const c = 2 + epsilon;
  const yat = (x: number) => (x * x) / (c - 2 * x);
  const [approx, exact] = [new Float64Array(rows * embed), new Float64Array(rows * embed)];
  const weights = [new Float64Array(length), new Float64Array(length)];
  for (let b = 0; b < batch; b++) {
    for (let h = 0; h < heads; h++) {
      for (let i = 0; i < length; i++) {
        const qi = (b * length + i) * embed + h * headDim;
        const last = causal ? i : length - 1;
        const sums = [delta, delta];
        for (let j = 0; j <= last; j++) {
          const kj = (b * length + j) * embed + h * headDim;
          let x = 0;
          for (let d = 0; d < headDim; d++) x += q[qi + d] * k[kj + d];
          x = Math.min(1, Math.max(-1, x));
          weights[0][j] = kernel(x);
          weights[1][j] = yat(x);
          sums[0] += weights[0][j];
          sums[1] += weights[1][j];
        }
        [approx, exact].forEach((y, which) => {
          for (let j = 0; j <= last; j++) {
            const vj = (b * length + j) * embed + h * headDim;
            const a = weights[which][j] / sums[which];
            for (let d = 0; d < headDim; d++) y[qi + d] += a * v[vj + d];
          }
        });
      }
    }
  }
  const [compared, reference] = draw.out ? [approx, exact].map((y) => affine(y, draw.out!, rows, embed)) : [approx, exact];
  let diff = 0;
  let norm = 0;
  for (let i = 0; i < compared.length; i++) {
    diff += (compared[i] - reference[i]) ** 2;
    norm += reference[i] ** 2;
  }
  return Math.sqrt(diff / norm);
}

/** Each seed's rel-ℓ2 of `poly`'s limit against exact spherical Yat with R quadrature nodes. */
export function estimatorLimit(poly: LimitPoly, quadratureNodes: number, settings: FidelitySettings, length: number, epsilon: number): number[] {
  const kernel = limitKernel(poly, slayQuadrature(quadratureNodes, epsilon));
  return settings.seeds.map((seed) => limitRelL2(kernel, settings, length, seed, epsilon));
}
