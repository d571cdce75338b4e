import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { orthogonalGaussianProjection, orthogonalGaussianRows } from '../../src/model/features/orthogonal.ts';
import { Rng } from '../../src/core/rng.ts';
import { meanAndStdErr } from '../helpers/reference.ts';

beforeAll(async () => {
  await initBackend(testBackend());
});

const row = (rows: Float64Array, d: number, i: number) => Array.from(rows.subarray(i * d, (i + 1) * d));
const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i], 0);
const cosine = (a: number[], b: number[]) => dot(a, b) / Math.sqrt(dot(a, a) * dot(b, b));

describe('orthogonalGaussianRows', () => {
  it('rows of a block are mutually orthogonal, rows of different blocks are not', () => {
    const d = 6;
    const m = 15; // blocks [0, 6), [6, 12), [12, 15)
    const rows = orthogonalGaussianRows(new Rng(3), d, m);
    const block = (i: number) => Math.floor(i / d);
    let worstWithin = 0;
    let largestAcross = 0;
    for (let i = 0; i < m; i++) {
      for (let j = i + 1; j < m; j++) {
        const c = Math.abs(cosine(row(rows, d, i), row(rows, d, j)));
        if (block(i) === block(j)) worstWithin = Math.max(worstWithin, c);
        else largestAcross = Math.max(largestAcross, c);
      }
    }
    expect(worstWithin).toBeLessThan(1e-12);
    expect(largestAcross).toBeGreaterThan(0.1);
  });

  it('rows are marginally N(0, I): squared norms have mean d, coordinates mean 0 and variance 1', () => {
    const d = 5;
    const rng = new Rng(11);
    const squaredNorms: number[] = [];
    const coordinates: number[][] = Array.from({ length: d }, () => []);
    for (let draw = 0; draw < 300; draw++) {
      const rows = orthogonalGaussianRows(rng, d, 7);
      for (let i = 0; i < 7; i++) {
        const r = row(rows, d, i);
        squaredNorms.push(dot(r, r));
        r.forEach((x, c) => coordinates[c].push(x));
      }
    }
    const norms = meanAndStdErr(squaredNorms);
    expect(Math.abs(norms.mean - d)).toBeLessThan(4 * norms.stdErr);
    // χ²_d has variance 2d: the sample variance of the squared norms should be near it.
    const variance = squaredNorms.reduce((s, x) => s + (x - norms.mean) ** 2, 0) / (squaredNorms.length - 1);
    expect(variance).toBeGreaterThan(2 * d * 0.75);
    expect(variance).toBeLessThan(2 * d * 1.25);
    for (const values of coordinates) {
      const first = meanAndStdErr(values);
      expect(Math.abs(first.mean)).toBeLessThan(4 * first.stdErr);
      const second = meanAndStdErr(values.map((x) => x * x));
      expect(Math.abs(second.mean - 1)).toBeLessThan(4 * second.stdErr);
    }
  });

  it('is determined by the seed', () => {
    const a = orthogonalGaussianRows(new Rng(5), 4, 9);
    const b = orthogonalGaussianRows(new Rng(5), 4, 9);
    const c = orthogonalGaussianRows(new Rng(6), 4, 9);
    expect(Array.from(a)).toEqual(Array.from(b));
    expect(Array.from(a)).not.toEqual(Array.from(c));
  });

  it('rejects a bad size, naming it', () => {
    expect(() => orthogonalGaussianRows(new Rng(1), 0, 4)).toThrow(/d must be an integer ≥ 1/);
    expect(() => orthogonalGaussianRows(new Rng(1), 4, 0)).toThrow(/m must be an integer ≥ 1/);
  });
});

describe('orthogonalGaussianProjection', () => {
  it('lays the rows out as columns of [heads, d, m], heads drawn in turn from the stream', () => {
    const d = 3;
    const m = 5;
    const projection = orthogonalGaussianProjection(new Rng(9), 2, d, m);
    expect(projection.shape).toEqual([2, d, m]);
    const values = projection.arraySync() as number[][][];
    const rng = new Rng(9);
    for (let h = 0; h < 2; h++) {
      const rows = orthogonalGaussianRows(rng, d, m);
      for (let j = 0; j < m; j++) {
        for (let i = 0; i < d; i++) expect(values[h][i][j]).toBeCloseTo(rows[j * d + i], 5);
      }
    }
    const shared = orthogonalGaussianProjection(new Rng(9), null, d, m);
    expect(shared.shape).toEqual([d, m]);
    expect(shared.arraySync()).toEqual(values[0]);
    tf.dispose([projection, shared]);
  });
});
