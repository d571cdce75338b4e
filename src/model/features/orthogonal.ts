// Orthogonal Gaussian random features (Performer's ORF; Choromanski et al. 2021, docs/notes/attention-kernels.md §2.2):
// ⌊m/d⌋ full blocks of d mutually orthogonal directions plus one partial block, each block from
// the QR decomposition of a fresh d×d standard-Gaussian matrix with the sign fix (Q·diag(sign R_ii))
// that makes Q Haar-distributed, every direction then scaled by the length of an independent
// d-dimensional Gaussian vector (χ_d) so each row is marginally N(0, I) — the PRF estimator stays
// unbiased, only the correlation between rows of a block changes (it lowers the variance).
//
// QR is written here (modified Gram–Schmidt, run twice) rather than tf.linalg.qr because that one
// is float32, returns no sign convention we could rely on, and would put a tfjs graph on what is a
// tiny one-off float64 computation; Gram–Schmidt's R has a positive diagonal by construction, so it
// *is* the sign-fixed QR, and the second pass ("twice is enough") restores orthogonality to
// machine precision.
import * as tf from '@tensorflow/tfjs';
import { Rng } from '../../core/rng.ts';

/**
 * m directions in R^d as m rows of a row-major [m, d] Float64Array: blocks of d orthogonal rows,
 * each row marginally N(0, I_d).
 */
export function orthogonalGaussianRows(rng: Rng, d: number, m: number): Float64Array {
  if (!Number.isInteger(d) || d < 1) throw new Error(`orthogonalGaussianRows: d must be an integer ≥ 1 (got ${d})`);
  if (!Number.isInteger(m) || m < 1) throw new Error(`orthogonalGaussianRows: m must be an integer ≥ 1 (got ${m})`);
  const rows = new Float64Array(m * d);
  for (let start = 0; start < m; start += d) {
    const block = haarOrthonormalRows(rng, d);
    const count = Math.min(d, m - start);
    for (let r = 0; r < count; r++) {
      const length = Math.hypot(...rng.normalArray(d));
      for (let c = 0; c < d; c++) rows[(start + r) * d + c] = block[r][c] * length;
    }
  }
  return rows;
}

/**
 * Orthogonal Gaussian projections in the layout positiveRandomFeatures expects: [heads, d, m]
 * (column j is ω_j), or [d, m] when heads is null. Heads draw independent blocks in turn.
 */
export function orthogonalGaussianProjection(rng: Rng, heads: number | null, d: number, m: number): tf.Tensor {
  const count = heads ?? 1;
  const values = new Float32Array(count * d * m);
  for (let h = 0; h < count; h++) {
    const rows = orthogonalGaussianRows(rng, d, m);
    for (let j = 0; j < m; j++) for (let i = 0; i < d; i++) values[h * d * m + i * m + j] = rows[j * d + i];
  }
  return heads === null ? tf.tensor2d(values, [d, m]) : tf.tensor3d(values, [heads, d, m]);
}

/** The d orthonormal columns of Q from G = QR, G a fresh standard-Gaussian d×d matrix, as rows. */
function haarOrthonormalRows(rng: Rng, d: number): number[][] {
  const g = rng.normalArray(d * d);
  // Column c of G (row-major) becomes basis[c].
  const basis = Array.from({ length: d }, (_, c) => Array.from({ length: d }, (_, r) => g[r * d + c]));
  for (let c = 0; c < d; c++) {
    const v = basis[c];
    for (let pass = 0; pass < 2; pass++) {
      for (let p = 0; p < c; p++) {
        const u = basis[p];
        let proj = 0;
        for (let i = 0; i < d; i++) proj += u[i] * v[i];
        for (let i = 0; i < d; i++) v[i] -= proj * u[i];
      }
    }
    const length = Math.hypot(...v);
    // A Gaussian matrix is singular with probability 0; guard against a (never seen) breakdown.
    if (!(length > 1e-12)) throw new Error('orthogonalGaussianRows: Gaussian block is numerically singular');
    for (let i = 0; i < d; i++) v[i] /= length;
  }
  return basis;
}
