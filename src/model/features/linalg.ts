// Small dense float64 linear algebra for building feature maps (Golub–Welsch quadrature, Nyström
// anchors, DARKFormer's whitening). The matrices are tiny (≤ a few hundred rows) and are built
// once, off the training path, so a cyclic Jacobi eigen-solver written here is simpler than a
// dependency and accurate to machine precision.

export interface SymmetricEigen {
  /** Eigenvalues in ascending order. */
  values: number[];
  /** vectors[i] is the unit eigenvector of values[i]. */
  vectors: number[][];
}

export function symmetricEigen(matrix: number[][]): SymmetricEigen {
  const n = matrix.length;
  const a = matrix.map((row, i) => {
    if (row.length !== n) throw new Error(`symmetricEigen: row ${i} has ${row.length} entries, expected ${n}`);
    return row.slice();
  });
  const v: number[][] = Array.from({ length: n }, (_, i) => Array.from({ length: n }, (_, j) => (i === j ? 1 : 0)));
  for (let sweep = 0; sweep < 100; sweep++) {
    let off = 0;
    for (let p = 0; p < n; p++) for (let q = p + 1; q < n; q++) off += a[p][q] * a[p][q];
    if (off < 1e-30) break;
    for (let p = 0; p < n; p++) {
      for (let q = p + 1; q < n; q++) {
        if (Math.abs(a[p][q]) < 1e-300) continue;
        // Rotation that zeroes a[p][q] (Golub & Van Loan, Alg. 8.4.1).
        const theta = (a[q][q] - a[p][p]) / (2 * a[p][q]);
        const t = Math.sign(theta || 1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
        const c = 1 / Math.sqrt(t * t + 1);
        const s = t * c;
        for (let k = 0; k < n; k++) {
          const akp = a[k][p];
          const akq = a[k][q];
          a[k][p] = c * akp - s * akq;
          a[k][q] = s * akp + c * akq;
        }
        for (let k = 0; k < n; k++) {
          const apk = a[p][k];
          const aqk = a[q][k];
          a[p][k] = c * apk - s * aqk;
          a[q][k] = s * apk + c * aqk;
        }
        for (let k = 0; k < n; k++) {
          const vkp = v[k][p];
          const vkq = v[k][q];
          v[k][p] = c * vkp - s * vkq;
          v[k][q] = s * vkp + c * vkq;
        }
      }
    }
  }
  const order = Array.from({ length: n }, (_, i) => i).sort((i, j) => a[i][i] - a[j][j]);
  return { values: order.map((i) => a[i][i]), vectors: order.map((i) => v.map((row) => row[i])) };
}

/** A^(−1/2) for a symmetric positive semi-definite A, eigenvalues floored at `floor`. */
export function inverseSqrtSymmetric(matrix: number[][], floor = 1e-6): number[][] {
  const { values, vectors } = symmetricEigen(matrix);
  const n = matrix.length;
  const out = Array.from({ length: n }, () => new Array<number>(n).fill(0));
  values.forEach((lambda, e) => {
    const scale = 1 / Math.sqrt(Math.max(lambda, floor));
    const u = vectors[e];
    for (let i = 0; i < n; i++) for (let j = 0; j < n; j++) out[i][j] += scale * u[i] * u[j];
  });
  return out;
}

/** Σ_i a_i b_i of two float64 rows. */
export function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let sum = 0;
  for (let i = 0; i < a.length; i++) sum += a[i] * b[i];
  return sum;
}
