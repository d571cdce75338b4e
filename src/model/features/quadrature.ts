// Gauss–Laguerre quadrature, and SLAY's scaled nodes for the Laplace integral of 1/(C − 2x).
//
//   ∫₀^∞ e^{−t} f(t) dt ≈ Σ_r α_r f(t_r)      exact for polynomials f of degree ≤ 2R − 1
//
// Nodes and weights come from the Golub–Welsch algorithm: the Jacobi matrix of the Laguerre
// polynomials (α = 0) is symmetric tridiagonal with diagonal 2i + 1 (i = 0…R−1) and off-diagonal i
// (i = 1…R−1); its eigenvalues are the nodes, and the weights are μ₀·v₀² with v₀ the first component
// of each unit eigenvector and μ₀ = ∫₀^∞ e^{−t} dt = 1. Computed rather than tabulated so any R works.
//
// The eigenvector of node t is known in closed form: its components are the orthonormal Laguerre
// polynomials (±L_i(t), i = 0…R−1), so v₀² = 1 / Σ_i L_i(t)². We evaluate that instead of reading
// v₀ off the numerical eigenvector: the solver's eigenvectors are accurate only to ~1e-16 in
// absolute terms, while the weights of the large nodes are tiny (≈1e-50 at R = 32), so the
// numerical v₀² is wrong there by orders of magnitude. The sum of squares has no cancellation.
// Each eigenvalue is also polished by two Newton steps on L_R (t·L_R′ = R·(L_R − L_{R−1})).
import { symmetricEigen } from './linalg.ts';

export interface QuadratureRule {
  /** Nodes in ascending order. */
  nodes: number[];
  weights: number[];
}

export function gaussLaguerre(points: number): QuadratureRule {
  if (!Number.isInteger(points) || points < 1) {
    throw new Error(`gaussLaguerre: the number of nodes must be an integer ≥ 1 (got ${String(points)})`);
  }
  const jacobi = Array.from({ length: points }, (_, i) =>
    Array.from({ length: points }, (_, j) => (i === j ? 2 * i + 1 : Math.abs(i - j) === 1 ? Math.max(i, j) : 0)),
  );
  const nodes = symmetricEigen(jacobi).values.map((t) => {
    for (let step = 0; step < 2; step++) {
      const l = laguerreValues(points, t);
      const derivative = (points * (l[points] - l[points - 1])) / t;
      if (derivative !== 0 && Number.isFinite(derivative)) t -= l[points] / derivative;
    }
    return t;
  });
  const weights = nodes.map((t) => {
    const l = laguerreValues(points - 1, t);
    return 1 / l.reduce((acc, li) => acc + li * li, 0);
  });
  return { nodes, weights };
}

/** [L_0(t), …, L_n(t)] by the three-term recurrence (k+1)L_{k+1} = (2k+1−t)L_k − k·L_{k−1}. */
function laguerreValues(n: number, t: number): number[] {
  const out = [1];
  if (n >= 1) out.push(1 - t);
  for (let k = 1; k < n; k++) out.push(((2 * k + 1 - t) * out[k] - k * out[k - 1]) / (k + 1));
  return out;
}

export interface LaplaceQuadrature {
  /** Scales s_r = t_r / C of the exponential factors e^{2 s_r x}. */
  scales: number[];
  /** Weights w_r = α_r / C, so that ∫₀^∞ e^{−Cs} h(s) ds ≈ Σ_r w_r h(s_r). */
  weights: number[];
}

/**
 * SLAY's discretisation of 1/(C − 2x) = ∫₀^∞ e^{−Cs} e^{2sx} ds with C = 2 + ε, after the change of
 * variables t = C·s (paper §2.3.1): 1/(C − 2x) ≈ Σ_r w_r e^{2 s_r x}.
 */
export function slayQuadrature(points: number, epsilon: number): LaplaceQuadrature {
  if (!(epsilon > 0)) throw new Error(`slayQuadrature: epsilon must be > 0 (got ${String(epsilon)})`);
  const c = 2 + epsilon;
  const { nodes, weights } = gaussLaguerre(points);
  return { scales: nodes.map((t) => t / c), weights: weights.map((a) => a / c) };
}

/** The quadrature kernel Σ_r w_r x² e^{2 s_r x} that SLAY's fused features target (paper Remark 1). */
export function quadratureYatKernel(x: number, rule: LaplaceQuadrature): number {
  return rule.scales.reduce((acc, s, r) => acc + rule.weights[r] * x * x * Math.exp(2 * s * x), 0);
}
