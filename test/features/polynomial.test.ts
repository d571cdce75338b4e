// Feature maps for the degree-2 polynomial kernel (uᵀv)² (src/model/features/polynomial.ts).
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { createPolynomialMap, type PolynomialKind } from '../../src/model/features/polynomial.ts';
import { Rng } from '../../src/core/rng.ts';
import { dot, gradientCheck, meanAndStdErr, unit } from '../helpers/reference.ts';

beforeAll(async () => {
  await initBackend(testBackend());
});

const rows = (t: tf.Tensor) => t.arraySync() as number[][];

/** φ(u) for a few float64 rows, as float64 arrays. */
function featuresOf(kind: PolynomialKind, inputs: number[][], features: number, seed: number, extra: { nystromRidge?: number } = {}) {
  const map = createPolynomialMap({ kind, inputDim: inputs[0].length, features, rng: new Rng(seed), ...extra });
  const out = tf.tidy(() => rows(map.apply(tf.tensor2d(inputs))));
  const parameters = Object.fromEntries([...map.parameters].map(([name, t]) => [name, rows(t)]));
  map.dispose();
  return { out, parameters };
}

/** A unit vector pair with cosine `cos` in R^d. */
function pairWithCosine(rng: Rng, d: number, cos: number): [number[], number[]] {
  const u = unit(Array.from(rng.normalArray(d)));
  const w = Array.from(rng.normalArray(d));
  const perp = unit(w.map((wi, i) => wi - dot(w, u) * u[i]));
  return [u, u.map((ui, i) => cos * ui + Math.sqrt(1 - cos * cos) * perp[i])];
}

function expectWithin4StdErr(samples: number[], expected: number, label: string) {
  const { mean, stdErr } = meanAndStdErr(samples);
  expect(Math.abs(mean - expected), `${label}: mean ${mean} vs ${expected} (SE ${stdErr})`).toBeLessThan(4 * stdErr);
}

describe('exact map vec(uuᵀ)', () => {
  it('reproduces (uᵀv)² exactly (also for non-unit vectors)', () => {
    const rng = new Rng(1);
    const inputs = Array.from({ length: 4 }, () => Array.from(rng.normalArray(5)));
    const { out } = featuresOf('exact', inputs, 3, 0);
    expect(out[0]).toHaveLength(25);
    for (let i = 0; i < 4; i++) {
      for (let j = 0; j < 4; j++) {
        const want = dot(inputs[i], inputs[j]) ** 2;
        expect(Math.abs(dot(out[i], out[j]) - want)).toBeLessThan(1e-5 * Math.max(1, want));
      }
    }
  });
});

describe('anchor map (a_pᵀu)²/√P', () => {
  it('has unit anchors and non-negative features', () => {
    const rng = new Rng(2);
    const inputs = Array.from({ length: 6 }, () => Array.from(rng.normalArray(4)));
    const { out, parameters } = featuresOf('anchor', inputs, 16, 3);
    const anchorsT = parameters.anchors; // [d, P]
    for (let p = 0; p < 16; p++) expect(Math.hypot(...anchorsT.map((row) => row[p]))).toBeCloseTo(1, 6);
    expect(out.flat().every((x) => x >= 0)).toBe(true);
  });

  it('has expectation (1 + 2x²)/(d(d+2)) over anchor draws, not x² (docs/notes/attention-kernels.md §1.4)', () => {
    const d = 5;
    const p = 40000;
    const rng = new Rng(4);
    for (const [cos, seed] of [
      [0, 41],
      [0.5, 42],
      [-0.9, 43],
    ] as const) {
      const [u, v] = pairWithCosine(rng, d, cos);
      const { out } = featuresOf('anchor', [u, v], p, seed);
      // P·φ_p(u)φ_p(v) = (a_pᵀu)²(a_pᵀv)²: one iid sample per anchor.
      const samples = out[0].map((fu, i) => p * fu * out[1][i]);
      expectWithin4StdErr(samples, (1 + 2 * cos * cos) / (d * (d + 2)), `x=${cos}`);
      // … and the bias is real: x² alone (scaled the same way) is far outside the error bars.
      const { mean } = meanAndStdErr(samples);
      expect(Math.abs(mean - (3 * cos * cos) / (d * (d + 2)))).toBeGreaterThan(0.1 / (d * (d + 2)));
    }
  });
});

describe('random Maclaurin map (rᵀu)(sᵀu)/√P, Rademacher', () => {
  it('is unbiased for (uᵀv)² (unit and non-unit inputs)', () => {
    const p = 40000;
    const rng = new Rng(5);
    const pairs: Array<[number[], number[]]> = [pairWithCosine(rng, 6, 0.7), pairWithCosine(rng, 6, -0.3)];
    pairs.push([Array.from(rng.normalArray(6)), Array.from(rng.normalArray(6))]);
    pairs.forEach(([u, v], n) => {
      const { out, parameters } = featuresOf('random-maclaurin', [u, v], p, 50 + n);
      expect(parameters.maclaurin.flat().every((x) => x === 1 || x === -1)).toBe(true);
      const samples = out[0].map((fu, i) => p * fu * out[1][i]);
      expectWithin4StdErr(samples, dot(u, v) ** 2, `pair ${n}`);
    });
  });
});

describe('TensorSketch map CS₁(u) ⊛ CS₂(u)', () => {
  it('equals the circular convolution of its two CountSketches (float64 reference)', () => {
    const rng = new Rng(6);
    const d = 7;
    const p = 5;
    const inputs = Array.from({ length: 3 }, () => Array.from(rng.normalArray(d)));
    const { out, parameters } = featuresOf('tensorsketch', inputs, p, 61);
    const sketch = parameters.countSketch; // [d, 2P], one ±1 per row in each half
    for (const row of sketch) {
      expect(row.slice(0, p).filter((x) => x !== 0)).toHaveLength(1);
      expect(row.slice(p).filter((x) => x !== 0)).toHaveLength(1);
    }
    inputs.forEach((u, n) => {
      const c1 = Array.from({ length: p }, (_, m) => u.reduce((a, ui, i) => a + ui * sketch[i][m], 0));
      const c2 = Array.from({ length: p }, (_, m) => u.reduce((a, ui, i) => a + ui * sketch[i][p + m], 0));
      const conv = Array.from({ length: p }, (_, k) => c1.reduce((a, x, m) => a + x * c2[(k - m + p) % p], 0));
      conv.forEach((x, k) => expect(out[n][k]).toBeCloseTo(x, 4));
    });
  });

  it('is unbiased for (uᵀv)² over sketch draws', () => {
    const rng = new Rng(7);
    const [u, v] = pairWithCosine(rng, 5, 0.6);
    const samples: number[] = [];
    for (let seed = 0; seed < 1500; seed++) {
      const { out } = featuresOf('tensorsketch', [u, v], 4, 1000 + seed);
      samples.push(dot(out[0], out[1]));
    }
    expectWithin4StdErr(samples, 0.36, 'tensorsketch');
    expect(meanAndStdErr(samples).stdErr).toBeLessThan(0.03);
  });

  it('has correct gradients (the fold is an ordinary differentiable matmul)', () => {
    const map = createPolynomialMap({ kind: 'tensorsketch', inputDim: 4, features: 3, rng: new Rng(8) });
    const weights = tf.tensor2d([
      [0.3, -1.2, 0.7],
      [1.1, 0.4, -0.5],
    ]);
    const x = tf.tensor2d([
      [0.5, -0.2, 0.9, 0.1],
      [-0.4, 0.8, 0.3, -0.6],
    ]);
    const worst = gradientCheck((u) => tf.sum(tf.mul(map.apply(u as tf.Tensor2D), weights)), x);
    expect(worst).toBeLessThan(1e-2);
    tf.dispose([weights, x]);
    map.dispose();
  });
});

describe('Nyström map K(u, A)(K_AA + λI)^(−1/2)', () => {
  /** Worst |φ(a_i)ᵀφ(a_j) − (a_iᵀa_j)²| over the map's own anchors, and the map itself. */
  function anchorError(d: number, p: number, seed: number, nystromRidge?: number) {
    const map = createPolynomialMap({ kind: 'nystrom', inputDim: d, features: p, rng: new Rng(seed), nystromRidge });
    const anchorsT = rows(map.parameters.get('anchors')!); // [d, P]
    const anchors = anchorsT[0].map((_, i) => anchorsT.map((row) => row[i]));
    const out = tf.tidy(() => rows(map.apply(tf.tensor2d(anchors))));
    let worst = 0;
    for (let i = 0; i < p; i++) for (let j = 0; j < p; j++) worst = Math.max(worst, Math.abs(dot(out[i], out[j]) - dot(anchors[i], anchors[j]) ** 2));
    return { worst, map };
  }

  it('reproduces the kernel (a_iᵀa_j)² on its own anchors (λ → 0), and only approximates it elsewhere', () => {
    const { worst, map } = anchorError(4, 6, 71, 1e-9);
    expect(worst).toBeLessThan(2e-3);
    const rng = new Rng(72);
    const u = unit(Array.from(rng.normalArray(4)));
    const v = unit(Array.from(rng.normalArray(4)));
    const off = tf.tidy(() => rows(map.apply(tf.tensor2d([u, v]))));
    expect(Math.abs(dot(off[0], off[1]) - dot(u, v) ** 2)).toBeGreaterThan(1e-4);
    map.dispose();
  });

  it('with the default λ = 1e-3 is off by at most λ on the anchors (K − K(K+λI)^(−1)K has eigenvalues ≤ λ)', () => {
    const { worst, map } = anchorError(5, 8, 73);
    expect(worst).toBeLessThan(1e-3 + 2e-4);
    expect(worst).toBeGreaterThan(1e-6); // the ridge does act
    map.dispose();
  });
});

describe('createPolynomialMap input checks', () => {
  it('rejects unknown kinds and bad sizes, naming the allowed values', () => {
    const rng = new Rng(0);
    expect(() => createPolynomialMap({ kind: 'cubic' as PolynomialKind, inputDim: 4, features: 4, rng })).toThrow(
      /unknown kind 'cubic'; allowed: anchor, exact/,
    );
    expect(() => createPolynomialMap({ kind: 'anchor', inputDim: 4, features: 0, rng })).toThrow(/'features' must be an integer ≥ 1/);
    const map = createPolynomialMap({ kind: 'anchor', inputDim: 4, features: 2, rng });
    expect(() => map.apply(tf.zeros([3, 5]) as tf.Tensor2D)).toThrow(/expected input \[N, 4\]/);
    map.dispose();
  });
});
