// Importance-sampled positive random features with the variance-optimal Gaussian proposal (DARKFormer paper,
// Lemma 3.1 and Theorem 3.2; docs/attention.md#variance-optimal-projections). For inputs x̃ with covariance Λ the PRF
// estimator of exp(x̃_qᵀx̃_k) has least expected variance when ω is drawn from
//
//   ψ* = N(0, Σ*),  Σ* = (I + 2Λ)(I − 2Λ)⁻¹  (eigenvalues s_i = (1 + 2λ_i)/(1 − 2λ_i), valid for λ_i < ½),
//
// each feature weighted by w(ω) = p_I(ω)/ψ*(ω), p_I = N(0, I), which keeps the estimator unbiased for the
// exponential kernel: E_ψ*[w(ω)·exp(ωᵀx̃_q − ‖x̃_q‖²/2)·exp(ωᵀx̃_k − ‖x̃_k‖²/2)] = exp(x̃_qᵀx̃_k).
// The weight is split between the two sides: φ(x)_j = m^(−1/2)·exp(ω_jᵀx̃ − ‖x̃‖²/2 + ½·log w_j).
//
// ω = Σ*^(1/2)·z with z a standard draw (iid or Performer's orthogonal blocks). In the eigenbasis U of Λ,
// log w = ½Σ_i log s_i − ½Σ_i (s_i − 1)(u_iᵀz)², computed in float64 and kept as a log (Σ log s_i reaches
// hundreds in 32 dimensions: w itself would overflow float32). Orthogonal z stays valid: every ω_j is still
// marginally N(0, Σ*) and its weight a function of ω_j alone, so each term is unbiased; the coupling only
// changes the covariance between the m terms, as it does for Performer's ORF.
import { symmetricEigen } from './linalg.ts';

/**
 * Λ's eigenvalues are clipped to at most ½ − PROPOSAL_MARGIN before Σ* is formed: at ½ the proposal's variance is
 * infinite. With margin 0.1 a direction's proposal variance is at most (1 + 0.8)/(1 − 0.8) = 9 (σ = 3). Directions
 * beyond it (λ > 0.4) get that widest proposal, no longer optimal but still unbiased. Why not closer to ½: the
 * theorem minimises the variance averaged over Gaussian pairs, which near λ = ½ is carried by rare large pairs; a
 * wider proposal costs each typical pair a factor √(s²/(2s − 1)) per direction in its second moment (closed form
 * for Gaussian q, k with covariance spectrum 1.0·0.75^i over 32 dimensions, about a trained head's scale: clipping
 * at 0.4 instead of 0.45 cuts the median pair's second moment to about a third, and the exp(qᵀk)-weighted mean too).
 */
export const PROPOSAL_MARGIN = 0.1;

/** The variance-optimal Gaussian proposal of one head: Σ* in Λ's eigenbasis. */
export interface GaussianProposal {
  /** Λ's eigenvalues after clipping to [0, ½ − margin], ascending. */
  clippedEigenvalues: number[];
  /** Σ*'s eigenvalues s_i = (1 + 2λ_i)/(1 − 2λ_i), in the same order. */
  variances: number[];
  /** vectors[i] is the unit eigenvector of Λ (and Σ*) for eigenvalue i. */
  vectors: number[][];
}

/** Σ* = (I + 2Λ)(I − 2Λ)⁻¹ for a symmetric positive semi-definite Λ (d×d), its eigenvalues clipped below ½. */
export function varianceOptimalProposal(lambda: number[][], margin = PROPOSAL_MARGIN): GaussianProposal {
  if (!(margin > 0 && margin < 0.5)) throw new Error(`varianceOptimalProposal: margin must be in (0, ½) (got ${margin})`);
  const { values, vectors } = symmetricEigen(lambda);
  const ceiling = 0.5 - margin;
  // A covariance has no negative eigenvalue; rounding can give one of −1e−17, taken as 0.
  const clippedEigenvalues = values.map((v) => Math.min(Math.max(v, 0), ceiling));
  return { clippedEigenvalues, variances: clippedEigenvalues.map((l) => (1 + 2 * l) / (1 - 2 * l)), vectors };
}

/**
 * Draws ω_j = Σ*^(1/2)·z_j from standard draws z (m rows of length d, row-major) and the log importance weight
 * log w_j = log p_I(ω_j) − log ψ*(ω_j) of each. Returns ω as m rows (row-major) and the m log weights.
 */
export function proposalDraws(proposal: GaussianProposal, z: Float64Array, m: number): { omegaRows: Float64Array; logWeights: Float64Array } {
  const d = proposal.vectors.length;
  if (z.length !== m * d) throw new Error(`proposalDraws: z has ${z.length} entries, expected m·d = ${m}·${d}`);
  const halfLogDet = proposal.variances.reduce((s, v) => s + Math.log(v), 0) / 2;
  const omegaRows = new Float64Array(m * d);
  const logWeights = new Float64Array(m);
  for (let j = 0; j < m; j++) {
    let quadratic = 0;
    for (let e = 0; e < d; e++) {
      const u = proposal.vectors[e];
      let coordinate = 0; // u_eᵀ z_j
      for (let i = 0; i < d; i++) coordinate += u[i] * z[j * d + i];
      const s = proposal.variances[e];
      quadratic += (s - 1) * coordinate * coordinate;
      const stretched = Math.sqrt(s) * coordinate;
      for (let i = 0; i < d; i++) omegaRows[j * d + i] += stretched * u[i];
    }
    logWeights[j] = halfLogDet - quadratic / 2;
  }
  return { omegaRows, logWeights };
}

/**
 * The interval every log weight that proposalDraws gives for the draw ω lies in: with s_i ∈ [1, S] (S = (1 − margin)/margin,
 * Σ*'s widest variance) and ‖ω‖² − ‖z‖² = Σ_i (s_i − 1)(u_iᵀz)², log w = ½Σ_i log s_i − ½(‖ω‖² − ‖z‖²) is at most
 * ½·d·log S and at least −½‖ω‖². A saved weight outside it was not fitted (a file crafted or corrupted): even a finite
 * one would silently let one feature outweigh the others or erase them all.
 */
export function logWeightRange(omegaSquaredNorm: number, d: number, margin = PROPOSAL_MARGIN): { min: number; max: number } {
  return { min: -omegaSquaredNorm / 2, max: (d / 2) * Math.log((1 - margin) / margin) };
}

/**
 * ½(Cov x_q + Cov x_k) of one head (centred, 1/(n−1)), float64: the Λ of Theorem 3.2, which assumes queries and keys
 * share one covariance; pooling is the estimate that treats them alike. rows: n vectors of length d each.
 */
export function pooledCovariance(queries: readonly Float64Array[], keys: readonly Float64Array[]): number[][] {
  const cq = sampleCovariance(queries);
  const ck = sampleCovariance(keys);
  return cq.map((row, i) => row.map((x, j) => (x + ck[i][j]) / 2));
}

/** Sample covariance (centred, 1/(n−1)) of n vectors, float64. */
export function sampleCovariance(rows: readonly Float64Array[]): number[][] {
  const n = rows.length;
  if (n < 2) throw new Error(`sampleCovariance: need at least 2 vectors (got ${n})`);
  const d = rows[0].length;
  const mean = new Array<number>(d).fill(0);
  for (const row of rows) for (let i = 0; i < d; i++) mean[i] += row[i] / n;
  const cov = Array.from({ length: d }, () => new Array<number>(d).fill(0));
  for (const row of rows) {
    for (let i = 0; i < d; i++) {
      const ci = row[i] - mean[i];
      for (let j = i; j < d; j++) cov[i][j] += (ci * (row[j] - mean[j])) / (n - 1);
    }
  }
  for (let i = 0; i < d; i++) for (let j = 0; j < i; j++) cov[i][j] = cov[j][i];
  return cov;
}
