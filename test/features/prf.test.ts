// The shared PRF map (src/model/features/prf.ts): unbiasedness for exp(xᵀy), SLAY's use at
// x = √(2s)·û, and the stabilisers' invariance of normalised attention.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { linearAttention } from '../../src/model/attention/linear-attention.ts';
import { positiveRandomFeatures, type Stabilizer } from '../../src/model/features/prf.ts';
import { gaussianProjection } from '../../src/model/features/projections.ts';
import { slayQuadrature } from '../../src/model/features/quadrature.ts';
import { Rng } from '../../src/core/rng.ts';
import { dot, meanAndStdErr, randomArray4, relL2, tensor4, toArray4, unit } from '../helpers/reference.ts';

beforeAll(async () => {
  await initBackend(testBackend());
});

/**
 * Each random feature j is one independent draw ω_j, so m·φ_j(x)φ_j(y) for j = 1…m are iid samples
 * of the estimator with one feature; their mean is φ(x)ᵀφ(y) and their spread gives its standard error.
 */
function prfSamples(x: number[], y: number[], m: number, seed: number, heads: number | null): number[] {
  return tf.tidy(() => {
    const d = x.length;
    const omega = gaussianProjection(new Rng(seed), heads, d, m);
    const h = heads ?? 1;
    const points = tf.tensor4d([Array.from({ length: h }, () => [x, y])]); // [1, h, 2, d]
    const phi = positiveRandomFeatures(points, omega).features.arraySync() as number[][][][];
    return phi[0].flatMap((head) => head[0].map((fx, j) => m * fx * head[1][j]));
  });
}

function expectWithin4StdErr(samples: number[], expected: number) {
  const { mean, stdErr } = meanAndStdErr(samples);
  expect(Math.abs(mean - expected), `mean ${mean} vs ${expected} (SE ${stdErr})`).toBeLessThan(4 * stdErr);
  // The Monte-Carlo must be informative: a few per cent at most (bounded tails: see the case choice below).
  expect(stdErr / expected).toBeLessThan(0.03);
}

describe('positiveRandomFeatures', () => {
  it('is unbiased for exp(xᵀy) (shared ω [d, m])', () => {
    const x = [0.5, -0.3, 0.2, 0.4, -0.1, 0.3];
    const y = [0.2, 0.4, -0.5, 0.1, 0.3, 0.2];
    for (const [scale, seed] of [
      [1, 11],
      [0.6, 12],
    ] as const) {
      const xs = x.map((v) => v * scale);
      expectWithin4StdErr(prfSamples(xs, y, 40000, seed, null), Math.exp(dot(xs, y)));
    }
  });

  it('is unbiased with per-head ω [H, d, m] (each head an independent draw)', () => {
    const x = [0.7, 0.1, -0.2, 0.3];
    const y = [-0.4, 0.5, 0.3, 0.1];
    expectWithin4StdErr(prfSamples(x, y, 10000, 21, 3), Math.exp(dot(x, y)));
  });

  it("estimates e^{2s x̂ᵀŷ} at SLAY's input √(2s)·û for the R = 2 quadrature scales", () => {
    const { scales } = slayQuadrature(2, 1e-3);
    const rng = new Rng(5);
    const d = 8;
    const u = unit(Array.from(rng.normalArray(d)));
    const w = unit(Array.from(rng.normalArray(d)));
    // ŷ with a chosen cosine c to û: ŷ = c·û + √(1−c²)·(unit part of w orthogonal to û).
    const along = (cos: number) => {
      const perp = unit(w.map((wi, i) => wi - dot(w, u) * u[i]));
      return u.map((ui, i) => cos * ui + Math.sqrt(1 - cos * cos) * perp[i]);
    };
    // Large s with x̂ᵀŷ → 1 has a heavy log-normal tail (variance e^{2s‖x̂+ŷ‖²}); these pairs keep it moderate.
    const cases: Array<[number, number, number]> = [
      [scales[0], 0.8, 31],
      [scales[0], -0.5, 32],
      [scales[1], -0.6, 33],
      [scales[1], -0.85, 34],
    ];
    for (const [s, cos, seed] of cases) {
      const v = along(cos);
      expect(dot(u, v)).toBeCloseTo(cos, 12);
      const a = Math.sqrt(2 * s);
      expectWithin4StdErr(
        prfSamples(
          u.map((x) => a * x),
          v.map((x) => a * x),
          60000,
          seed,
          null,
        ),
        Math.exp(2 * s * cos),
      );
    }
  });

  it('clamps the exponent to [−clamp, clamp] when asked', () => {
    const omega = tf.tensor2d([
      [1, -1],
      [0, 0],
    ]); // columns ω₁ = (1, 0), ω₂ = (−1, 0)
    const wide = tf.tensor4d([[[[3, 0]]]]);
    const clamped = positiveRandomFeatures(wide, omega, { clamp: 2 }).features.dataSync();
    // exponents 3 − 4.5 = −1.5 and −3 − 4.5 = −7.5 → clamp to [−2, 2]: −1.5 and −2.
    expect(clamped[0]).toBeCloseTo(Math.exp(-1.5) / Math.SQRT2, 6);
    expect(clamped[1]).toBeCloseTo(Math.exp(-2) / Math.SQRT2, 6);
    tf.dispose([omega, wide]);
  });

  it('leaves kernel-normalised attention unchanged under the row and global stabilisers', () => {
    const rng = new Rng(9);
    const shape: [number, number, number, number] = [2, 2, 7, 5];
    const q = tensor4(randomArray4(rng, shape, 0.9));
    const k = tensor4(randomArray4(rng, shape, 0.9));
    const v = tensor4(randomArray4(rng, shape));
    const omega = gaussianProjection(rng, 2, 5, 12);
    const attend = (sq: Stabilizer, sk: Stabilizer, causal: boolean) =>
      tf.tidy(() => {
        const fq = positiveRandomFeatures(q, omega, { stabilizer: sq });
        const fk = positiveRandomFeatures(k, omega, { stabilizer: sk });
        return toArray4(linearAttention(fq.features, fk.features, v, { causal, chunkSize: 3, delta: 0 }));
      });
    for (const causal of [false, true]) {
      const plain = attend('none', 'none', causal);
      expect(relL2(attend('row', 'global', causal), plain)).toBeLessThan(1e-5);
      expect(relL2(attend('global', 'global', causal), plain)).toBeLessThan(1e-5);
    }
    // The shift is really applied: with the row stabiliser each query's largest feature is m^(−1/2).
    const rowMax = tf.tidy(() => tf.max(positiveRandomFeatures(q, omega, { stabilizer: 'row' }).features, -1).arraySync() as number[][][]);
    for (const x of rowMax.flat(2)) expect(x).toBeCloseTo(1 / Math.sqrt(12), 6);
    tf.dispose([q, k, v, omega]);
  });
});
