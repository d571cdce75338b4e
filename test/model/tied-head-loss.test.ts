// The tied head + cross-entropy with one hand-written gradient (src/model/tied-head-loss.ts) against a
// float64 reference of the composed form: value, ∂h, ∂E and ∂b, weight-0 rows, repeated targets (the
// segment sums), and a target whose probability underflows (finite, capped loss; exact gradient).
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import { tiedHeadCrossEntropySum } from '../../src/model/tied-head-loss.ts';
import { testBackend } from '../helpers/backend.ts';

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

const rng = new Rng(5);
const randn = (n: number, scale = 1) => Array.from(rng.normalArray(n), (x) => x * scale);

/** float64: loss Σ w·(logsumexp(z) − z[t]) of z = h·Eᵀ + b, and its gradients scaled by `scale`. */
function reference(h: number[], e: number[], b: number[] | null, targets: number[], weights: number[], n: number, d: number, v: number, scale: number) {
  const dh = new Array(n * d).fill(0);
  const de = new Array(v * d).fill(0);
  const db = new Array(v).fill(0);
  let value = 0;
  for (let i = 0; i < n; i++) {
    const z = Array.from({ length: v }, (_, j) => (b ? b[j] : 0) + Array.from({ length: d }, (_, k) => h[i * d + k] * e[j * d + k]).reduce((x, y) => x + y, 0));
    const max = Math.max(...z);
    const sum = z.reduce((acc, x) => acc + Math.exp(x - max), 0);
    value += weights[i] * (Math.log(sum) + max - z[targets[i]]);
    for (let j = 0; j < v; j++) {
      const g = scale * weights[i] * (Math.exp(z[j] - max) / sum - (j === targets[i] ? 1 : 0));
      db[j] += g;
      for (let k = 0; k < d; k++) {
        dh[i * d + k] += g * e[j * d + k];
        de[j * d + k] += g * h[i * d + k];
      }
    }
  }
  return { value, dh, de, db };
}

const maxRelDiff = (a: ArrayLike<number>, b: number[]) => {
  const top = Math.max(...b.map(Math.abs), 1e-12);
  let worst = 0;
  for (let i = 0; i < b.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
  return worst / top;
};

describe('tiedHeadCrossEntropySum', () => {
  const [n, d, v] = [6, 5, 11];
  const targets = [3, 0, 3, 10, 7, 3]; // 3 three times: the segment sums add rows
  it.each([
    { name: 'GPT (no bias), unweighted', bias: false, weights: null as number[] | null },
    { name: 'BERT (bias), a weight-0 padding row and fractional weights', bias: true, weights: [1, 0.5, 0, 2, 1, 1] },
  ])('$name: value and ∂h, ∂E, ∂b equal the float64 composed form; no tensor left', ({ bias, weights }) => {
    const h = randn(n * d, 1.5);
    const e = randn(v * d, 1.5);
    const b = bias ? randn(v) : null;
    const w = weights ?? new Array(n).fill(1);
    const scale = 0.7;
    const ref = reference(h, e, b, targets, w, n, d, v, scale);
    const before = tf.memory().numTensors;
    const out = tf.tidy(() => {
      const [ht, et] = [tf.tensor2d(h, [n, d]), tf.tensor2d(e, [v, d])];
      const bt = b ? tf.tensor1d(b) : undefined;
      const t = tf.tensor1d(targets, 'int32');
      const wt = weights ? tf.tensor1d(weights) : undefined;
      const f = (x: tf.Tensor, y: tf.Tensor, z?: tf.Tensor) =>
        tf.mul(tiedHeadCrossEntropySum(x as tf.Tensor2D, y as tf.Tensor2D, t, wt, z as tf.Tensor1D | undefined), scale);
      const value = tiedHeadCrossEntropySum(ht, et, t, wt, bt).dataSync()[0];
      const grads = bt ? tf.grads((x, y, z) => f(x, y, z))([ht, et, bt]) : tf.grads((x, y) => f(x, y))([ht, et]);
      return { value, grads: grads.map((g) => g.dataSync()) };
    });
    expect(Math.abs(out.value - ref.value) / ref.value).toBeLessThan(1e-5);
    expect(maxRelDiff(out.grads[0], ref.dh)).toBeLessThan(1e-5);
    expect(maxRelDiff(out.grads[1], ref.de)).toBeLessThan(1e-5);
    if (b) expect(maxRelDiff(out.grads[2], ref.db)).toBeLessThan(1e-5);
    if (weights) expect(Array.from(out.grads[0].slice(2 * d, 3 * d)).every((x) => x === 0)).toBe(true);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('a target whose probability underflows gives a finite loss capped at −log(FLT_MIN) and the exact gradient', () => {
    // Row 0's target logit is 200 below its best: exp underflows in float32, the composed loss would be 200.
    const h = [1, 0];
    const e = [100, 0, -100, 0];
    const out = tf.tidy(() => {
      const [ht, et, t] = [tf.tensor2d(h, [1, 2]), tf.tensor2d(e, [2, 2]), tf.tensor1d([1], 'int32')];
      const value = tiedHeadCrossEntropySum(ht, et, t).dataSync()[0];
      const [dh] = tf.grads((x) => tiedHeadCrossEntropySum(x as tf.Tensor2D, et, t))([ht]);
      return { value, dh: Array.from(dh.dataSync()) };
    });
    expect(Number.isFinite(out.value)).toBe(true);
    expect(out.value).toBeCloseTo(-Math.log(1.1754943508222875e-38), 3);
    // ∂h = p·E − E[t] = E[0] − E[1] (p = onehot(0)) = (200, 0).
    expect(out.dh[0]).toBeCloseTo(200, 3);
    expect(out.dh[1]).toBeCloseTo(0, 6);
  });
});
