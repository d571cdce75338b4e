// Random Maclaurin features: coefficients against independent closed forms, the fast level-wise
// forward against a direct float64 evaluation of the same draw, and unbiasedness by Monte Carlo.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import {
  degreeProbabilities,
  drawRandomMaclaurin,
  maclaurinCoefficients,
  MACLAURIN_KERNELS,
  RandomMaclaurinFeatures,
  type MaclaurinKernel,
} from '../../src/model/features/random-maclaurin.ts';
import { Rng } from '../../src/core/rng.ts';
import { dot, gradientCheck, meanAndStdErr } from '../helpers/reference.ts';

const factorial = (n: number): number => (n <= 1 ? 1 : n * factorial(n - 1));

/** Test-side coefficients, written from the closed forms independently of the library's recurrences. */
function expectedCoefficient(kernel: MaclaurinKernel, n: number): number {
  switch (kernel) {
    case 'exp':
    case 'trigh':
      return 1 / factorial(n);
    case 'inverse':
      return 1;
    case 'logi':
      return n === 0 ? 1 : 1 / n;
    case 'sqrt':
      // |binom(½, n)| = (2n)! / ((2n − 1)·4ⁿ·(n!)²) for n ≥ 1
      return n === 0 ? 1 : factorial(2 * n) / ((2 * n - 1) * 4 ** n * factorial(n) ** 2);
  }
}

const closedForm: Record<MaclaurinKernel, (x: number) => number> = {
  exp: Math.exp,
  inverse: (x) => 1 / (1 - x),
  logi: (x) => 1 - Math.log(1 - x),
  trigh: (x) => Math.cosh(x) + Math.sinh(x),
  sqrt: (x) => 2 - Math.sqrt(1 - x),
};

const truncatedSeries = (kernel: MaclaurinKernel, x: number, maxDegree = 20) =>
  Array.from({ length: maxDegree + 1 }, (_, n) => expectedCoefficient(kernel, n) * x ** n).reduce((a, b) => a + b, 0);

describe('random Maclaurin features', () => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it.each(MACLAURIN_KERNELS)('coefficients of %s match the closed form, and their series sums to f', (kernel) => {
    const coefficients = maclaurinCoefficients(kernel, 20);
    expect(coefficients).toHaveLength(21);
    coefficients.forEach((a, n) => expect(a).toBeCloseTo(expectedCoefficient(kernel, n), 14));
    for (const x of [-0.3, 0.1, 0.3]) expect(truncatedSeries(kernel, x)).toBeCloseTo(closedForm[kernel](x), 9);
  });

  it('sqrt coefficients start 1, 1/2, 1/8, 1/16, 5/128, 7/256, 21/1024 (reference code values)', () => {
    const expected = [1, 1 / 2, 1 / 8, 1 / 16, 5 / 128, 7 / 256, 21 / 1024];
    maclaurinCoefficients('sqrt', 6).forEach((a, n) => expect(a).toBeCloseTo(expected[n], 15));
  });

  it('unknown kernels and fewer than 2 features are rejected with the allowed values', () => {
    expect(() => maclaurinCoefficients('cos' as MaclaurinKernel, 20)).toThrow(/unknown kernel 'cos'.*exp, inverse, logi, trigh, sqrt/);
    expect(() => drawRandomMaclaurin(new Rng(1), 4, 1, maclaurinCoefficients('exp', 20))).toThrow(/features must be an integer ≥ 2/);
  });

  it('degree distribution is P(N=n) ∝ 2^-(n+1) on 1…maxDegree', () => {
    const p = degreeProbabilities(20);
    expect(p[0]).toBe(0);
    expect(p.reduce((a, x) => a + x, 0)).toBeCloseTo(1, 14);
    for (let n = 2; n <= 20; n++) expect(p[n] / p[n - 1]).toBeCloseTo(0.5, 14);
  });

  it('the level-wise tensor forward equals a direct float64 evaluation of the same draw', () => {
    const d = 5;
    const numFeatures = 40;
    const featureMap = new RandomMaclaurinFeatures({ rng: new Rng(11), inputDim: d, numFeatures, kernel: 'logi', scope: 't' });
    const draw = drawRandomMaclaurin(new Rng(11), d, numFeatures, maclaurinCoefficients('logi', 20));
    expect(featureMap.degrees).toEqual(draw.degrees);
    expect(featureMap.projections.trainable).toBe(false);

    const inputRng = new Rng(3);
    const x = Array.from({ length: 3 }, () => Array.from({ length: d }, () => inputRng.normal() * 0.5));
    // Row of feature j's l-th Rademacher vector: offset of level l plus j.
    const levelOffsets = draw.levelSizes.map((_, l) => draw.levelSizes.slice(0, l).reduce((a, m) => a + m, 0));
    const expected = x.map((row) => [
      Math.sqrt(1), // √a₀ of logi
      ...draw.degrees.map((degree, j) => {
        let product = draw.scales[j + 1];
        for (let l = 0; l < degree; l++) {
          let projection = 0;
          for (let i = 0; i < d; i++) projection += draw.projections[(levelOffsets[l] + j) * d + i] * row[i];
          product *= projection;
        }
        return product;
      }),
    ]);
    const actual = tf.tidy(() => featureMap.apply(tf.tensor2d(x)).arraySync() as number[][]);
    const flatActual = actual.flat();
    const flatExpected = expected.flat();
    flatExpected.forEach((e, i) => expect(Math.abs(flatActual[i] - e)).toBeLessThan(1e-5 * Math.max(1, Math.abs(e))));
    // The scales are √(a_N / P(N)) / √(D − 1).
    const p = degreeProbabilities(20);
    draw.degrees.forEach((n, j) => expect(draw.scales[j + 1]).toBeCloseTo(Math.sqrt(1 / n / p[n] / (numFeatures - 1)), 5));
    featureMap.dispose();
  });

  it('the forward pass is differentiable (gradient check) and keeps the leading shape', () => {
    const featureMap = new RandomMaclaurinFeatures({ rng: new Rng(5), inputDim: 4, numFeatures: 24, kernel: 'exp', scope: 't' });
    const x = tf.tidy(() => tf.mul(tf.randomNormal([2, 3, 4], 0, 1, 'float32', 1), 0.5));
    expect(tf.tidy(() => featureMap.apply(x).shape)).toEqual([2, 3, 24]);
    const weights = tf.randomNormal([2, 3, 24], 0, 1, 'float32', 2);
    const worst = gradientCheck((input) => tf.sum(tf.mul(featureMap.apply(input), weights)) as tf.Scalar, x);
    expect(worst).toBeLessThan(1e-2);
    tf.dispose([x, weights]);
    featureMap.dispose();
  });

  // Unbiasedness: the mean over many independent draws of φ(x)ᵀφ(y) must match Σ_{n≤20} a_n (xᵀy)ⁿ.
  // Norms are kept small enough (ρ⁴·6 < 1 for the heavy-tailed inverse-type kernels) that the
  // estimator has finite variance and its sample standard error is trustworthy.
  const cases: Array<{ kernel: MaclaurinKernel; norm: number; dots: number[] }> = [
    { kernel: 'exp', norm: 1, dots: [-0.8, 0.3, 0.9] },
    { kernel: 'trigh', norm: 1, dots: [-0.5, 0.7] },
    { kernel: 'inverse', norm: 0.5, dots: [-0.2, 0.1, 0.25] },
    { kernel: 'logi', norm: 0.5, dots: [-0.2, 0.1, 0.25] },
    { kernel: 'sqrt', norm: 0.5, dots: [-0.2, 0.1, 0.25] },
  ];
  it.each(cases)('E[φ(x)ᵀφ(y)] = f(xᵀy) for $kernel (Monte Carlo over seeds, 4 standard errors)', ({ kernel, norm, dots }) => {
    const d = 6;
    // x = ρ·e₁, y = ρ·(t e₁ + √(1−t²) e₂) with t = xᵀy / ρ², so ‖x‖ = ‖y‖ = ρ.
    const x = [norm, 0, 0, 0, 0, 0];
    const ys = dots.map((target) => {
      const t = target / norm ** 2;
      return [norm * t, norm * Math.sqrt(1 - t * t), 0, 0, 0, 0];
    });
    // A Householder reflection v ↦ v − 2(uᵀv)u keeps every dot product and makes the vectors dense,
    // so each Rademacher projection rᵀx mixes all coordinates.
    const mixRng = new Rng(77);
    const u = Array.from({ length: d }, () => mixRng.normal());
    const uNorm = Math.sqrt(dot(u, u));
    const reflect = (w: number[]) => {
      const c = (2 * dot(u, w)) / uNorm ** 2;
      return w.map((wi, i) => wi - c * u[i]);
    };
    const rows = [x, ...ys].map(reflect);
    const seeds = 300;
    const estimates: number[][] = dots.map(() => []);
    for (let seed = 0; seed < seeds; seed++) {
      const featureMap = new RandomMaclaurinFeatures({ rng: new Rng(1000 + seed), inputDim: d, numFeatures: 16, kernel, scope: 'mc' });
      const phi = tf.tidy(() => featureMap.apply(tf.tensor2d(rows)).arraySync() as number[][]);
      dots.forEach((_, i) => estimates[i].push(dot(phi[0], phi[i + 1])));
      featureMap.dispose();
    }
    dots.forEach((target, i) => {
      expect(dot(rows[0], rows[i + 1])).toBeCloseTo(target, 12);
      const { mean, stdErr } = meanAndStdErr(estimates[i]);
      const exact = truncatedSeries(kernel, target);
      expect(stdErr).toBeGreaterThan(0);
      expect(Math.abs(mean - exact)).toBeLessThan(4 * stdErr);
    });
  });
});
