// The hand-written gradients of the model's building blocks against float64 references.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { crossEntropyRef } from '../helpers/reference.ts';
import { crossEntropySum } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { columnSums, gelu, layerNorm, linear, multiHeadAttention, rmsNorm } from '../../src/model/layers.ts';

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

const rng = new Rng(3);
const randn = (n: number, scale = 1) => Array.from(rng.normalArray(n), (x) => x * scale);

function geluRef(x: number): number {
  return 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x ** 3)));
}

/** Central differences of a float64 function of a vector. */
function numericGradient(f: (x: number[]) => number, x: number[], h = 1e-6): number[] {
  return x.map((_, i) => {
    const plus = [...x];
    const minus = [...x];
    plus[i] += h;
    minus[i] -= h;
    return (f(plus) - f(minus)) / (2 * h);
  });
}

function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

describe('model building blocks', () => {
  it('gelu matches the tanh formula and its derivative', () => {
    const x = [...randn(40, 2), -8, -3, 0, 3, 8];
    const weights = randn(x.length);
    const y = tf.tidy(() => gelu(tf.tensor1d(x)).dataSync());
    expect(maxAbsDiff(y, x.map(geluRef))).toBeLessThan(2e-6);
    const grad = tf.tidy(() =>
      tf
        .grad((t: tf.Tensor) => tf.sum(tf.mul(gelu(t), weights)))(tf.tensor1d(x))
        .dataSync(),
    );
    const expected = numericGradient((v) => v.reduce((s, xi, i) => s + weights[i] * geluRef(xi), 0), x);
    expect(maxAbsDiff(grad, expected)).toBeLessThan(2e-5);
  });

  it('layerNorm matches (x − μ)/√(σ² + ε)·g + b and its gradients in x, g and b', () => {
    const rows = 3;
    const d = 5;
    const x = randn(rows * d, 3);
    const g = randn(d);
    const b = randn(d);
    const c = randn(rows * d);
    const lnRef = (xv: number[], gv: number[], bv: number[]) => {
      const out: number[] = [];
      for (let r = 0; r < rows; r++) {
        const row = xv.slice(r * d, r * d + d);
        const mean = row.reduce((s, v) => s + v, 0) / d;
        const variance = row.reduce((s, v) => s + (v - mean) ** 2, 0) / d;
        for (let j = 0; j < d; j++) out.push(((row[j] - mean) / Math.sqrt(variance + 1e-5)) * gv[j] + bv[j]);
      }
      return out;
    };
    const loss = (xv: number[], gv: number[], bv: number[]) => lnRef(xv, gv, bv).reduce((s, v, i) => s + c[i] * v, 0);
    const value = tf.tidy(() => layerNorm(tf.tensor2d(x, [rows, d]), tf.tensor1d(g), tf.tensor1d(b)).dataSync());
    expect(maxAbsDiff(value, lnRef(x, g, b))).toBeLessThan(1e-5);
    const grads = tf.tidy(() =>
      tf
        .grads((xt: tf.Tensor, gt: tf.Tensor, bt: tf.Tensor) =>
          tf.sum(tf.mul(layerNorm(xt as tf.Tensor2D, gt as tf.Tensor1D, bt as tf.Tensor1D), tf.tensor2d(c, [rows, d]))),
        )([tf.tensor2d(x, [rows, d]), tf.tensor1d(g), tf.tensor1d(b)])
        .map((t) => t.dataSync()),
    );
    expect(
      maxAbsDiff(
        grads[0],
        numericGradient((v) => loss(v, g, b), x),
      ),
    ).toBeLessThan(1e-4);
    expect(
      maxAbsDiff(
        grads[1],
        numericGradient((v) => loss(x, v, b), g),
      ),
    ).toBeLessThan(1e-4);
    expect(
      maxAbsDiff(
        grads[2],
        numericGradient((v) => loss(x, g, v), b),
      ),
    ).toBeLessThan(1e-4);
  });

  it('rmsNorm matches x/√(mean(x²) + ε)·g and its gradients in x and g', () => {
    const rows = 3;
    const d = 5;
    const eps = 1e-6;
    const x = randn(rows * d, 3);
    const g = randn(d);
    const c = randn(rows * d);
    const rmsRef = (xv: number[], gv: number[]) => {
      const out: number[] = [];
      for (let r = 0; r < rows; r++) {
        const row = xv.slice(r * d, r * d + d);
        const meanSquare = row.reduce((s, v) => s + v * v, 0) / d;
        for (let j = 0; j < d; j++) out.push((row[j] / Math.sqrt(meanSquare + eps)) * gv[j]);
      }
      return out;
    };
    const loss = (xv: number[], gv: number[]) => rmsRef(xv, gv).reduce((s, v, i) => s + c[i] * v, 0);
    const value = tf.tidy(() => rmsNorm(tf.tensor2d(x, [rows, d]), tf.tensor1d(g), eps).dataSync());
    expect(maxAbsDiff(value, rmsRef(x, g))).toBeLessThan(1e-5);
    const grads = tf.tidy(() =>
      tf
        .grads((xt: tf.Tensor, gt: tf.Tensor) => tf.sum(tf.mul(rmsNorm(xt as tf.Tensor2D, gt as tf.Tensor1D, eps), tf.tensor2d(c, [rows, d]))))([
          tf.tensor2d(x, [rows, d]),
          tf.tensor1d(g),
        ])
        .map((t) => t.dataSync()),
    );
    expect(
      maxAbsDiff(
        grads[0],
        numericGradient((v) => loss(v, g), x),
      ),
    ).toBeLessThan(1e-4);
    expect(
      maxAbsDiff(
        grads[1],
        numericGradient((v) => loss(x, v), g),
      ),
    ).toBeLessThan(1e-4);
  });

  for (const withBias of [true, false]) {
    for (const [n, inDim, outDim] of [
      [6, 3, 4],
      [6, 5, 2], // the other transpose choice for ∂W
    ]) {
      it(`linear ${n}×${inDim}→${outDim} ${withBias ? 'with' : 'without'} bias: value and gradients are xW + b, dy·Wᵀ, xᵀ·dy, Σ dy`, () => {
        const x = randn(n * inDim);
        const w = randn(inDim * outDim);
        const b = randn(outDim);
        const dy = randn(n * outDim);
        const at = (m: number[], cols: number, r: number, col: number) => m[r * cols + col];
        const yRef: number[] = [];
        for (let r = 0; r < n; r++)
          for (let o = 0; o < outDim; o++) {
            let s = withBias ? b[o] : 0;
            for (let i = 0; i < inDim; i++) s += at(x, inDim, r, i) * at(w, outDim, i, o);
            yRef.push(s);
          }
        const dxRef: number[] = [];
        for (let r = 0; r < n; r++)
          for (let i = 0; i < inDim; i++) {
            let s = 0;
            for (let o = 0; o < outDim; o++) s += at(dy, outDim, r, o) * at(w, outDim, i, o);
            dxRef.push(s);
          }
        const dwRef: number[] = [];
        for (let i = 0; i < inDim; i++)
          for (let o = 0; o < outDim; o++) {
            let s = 0;
            for (let r = 0; r < n; r++) s += at(x, inDim, r, i) * at(dy, outDim, r, o);
            dwRef.push(s);
          }
        const dbRef = Array.from({ length: outDim }, (_, o) => Array.from({ length: n }, (_, r) => at(dy, outDim, r, o)).reduce((s, v) => s + v, 0));
        const out = tf.tidy(() => {
          const args = [tf.tensor2d(x, [n, inDim]), tf.tensor2d(w, [inDim, outDim]), ...(withBias ? [tf.tensor1d(b)] : [])];
          const f = (...t: tf.Tensor[]) =>
            tf.sum(tf.mul(linear(t[0] as tf.Tensor2D, t[1] as tf.Tensor2D, t[2] as tf.Tensor1D | undefined), tf.tensor2d(dy, [n, outDim])));
          const value = linear(args[0] as tf.Tensor2D, args[1] as tf.Tensor2D, args[2] as tf.Tensor1D | undefined).dataSync();
          return {
            value,
            grads: tf
              .grads(f)(args)
              .map((t) => t.dataSync()),
          };
        });
        expect(maxAbsDiff(out.value, yRef)).toBeLessThan(1e-5);
        expect(maxAbsDiff(out.grads[0], dxRef)).toBeLessThan(1e-5);
        expect(maxAbsDiff(out.grads[1], dwRef)).toBeLessThan(1e-5);
        if (withBias) expect(maxAbsDiff(out.grads[2], dbRef)).toBeLessThan(1e-5);
      });
    }
  }

  it('columnSums sums over rows', () => {
    const x = randn(12);
    const got = tf.tidy(() => columnSums(tf.tensor2d(x, [4, 3])).dataSync());
    expect(
      maxAbsDiff(
        got,
        [0, 1, 2].map((j) => x[j] + x[3 + j] + x[6 + j] + x[9 + j]),
      ),
    ).toBeLessThan(1e-6);
  });

  it.each([
    { name: 'unweighted', weights: undefined, scale: 0.5 },
    { name: 'weighted, a weight-0 row counting for nothing', weights: [1, 0.5, 0, 2, 1], scale: 3 },
  ])(
    'cross-entropy sum ($name): value Σ w·(logsumexp − logit[target]), gradient w·(softmax − onehot), against float64; no tensor left',
    ({ weights, scale }) => {
      const [n, vocab] = [5, 9];
      const logits = randn(n * vocab, 6).map((x) => 6 * x);
      const targets = [8, 0, 8, 2, 5];
      const ref = crossEntropyRef(logits, targets, vocab, weights, scale);
      const before = tf.memory().numTensors;
      const out = tf.tidy(() => {
        const l = tf.tensor2d(logits, [n, vocab]);
        const t = tf.tensor1d(targets, 'int32');
        const w = weights && tf.tensor1d(weights);
        const value = crossEntropySum(l, t, w).dataSync()[0];
        const grad = tf
          .grad((x: tf.Tensor) => tf.mul(crossEntropySum(x as tf.Tensor2D, t, w), scale))(l)
          .dataSync();
        return { value, grad };
      });
      expect(Math.abs(out.value - ref.value) / ref.value).toBeLessThan(1e-6);
      expect(maxAbsDiff(out.grad, ref.grad)).toBeLessThan(1e-5);
      if (weights) expect(maxAbsDiff(out.grad.slice(2 * vocab, 3 * vocab), new Array(vocab).fill(0))).toBe(0);
      expect(tf.memory().numTensors).toBe(before);
    },
  );

  it.each([true, false])(
    'the multi-head attention block (bias %s): heads of the projected q, k, v attended and merged through out, against float64',
    (bias) => {
      const [b, l, heads, dh] = [2, 3, 2, 2];
      const d = heads * dh;
      const x = randn(b * l * d);
      const params = new Map<string, number[]>();
      for (const p of ['q', 'k', 'v', 'out']) {
        params.set(`blk.${p}.weight`, randn(d * d, 0.5));
        params.set(`blk.${p}.bias`, randn(d, 0.5));
      }
      // Row r of x (batch r / l, position r % l) projected: Σ_i x[r, i]·W[i, j] (+ b[j]).
      const project = (rows: number[], inDim: number, name: string) =>
        Array.from({ length: rows.length / inDim }, (_, r) =>
          Array.from({ length: d }, (_, j) => {
            let sum = bias ? params.get(`${name}.bias`)![j] : 0;
            for (let i = 0; i < inDim; i++) sum += rows[r * inDim + i] * params.get(`${name}.weight`)![i * d + j];
            return sum;
          }),
        );
      const [q, k, v] = ['q', 'k', 'v'].map((p) => project(x, d, `blk.${p}`));
      // Each head h takes columns h·dh … h·dh + dh − 1; attention here: out_t = Σ_{s ≤ t} (q_t·k_s)·v_s within a row.
      const merged: number[] = [];
      for (let r = 0; r < b * l; r++) {
        const first = r - (r % l);
        for (let h = 0; h < heads; h++) {
          const cols = Array.from({ length: dh }, (_, c) => h * dh + c);
          const out = cols.map(() => 0);
          for (let s = first; s <= r; s++) {
            const score = cols.reduce((sum, c) => sum + q[r][c] * k[s][c], 0);
            cols.forEach((c, i) => (out[i] += score * v[s][c]));
          }
          merged.push(...out);
        }
      }
      const expected = project(merged, d, 'blk.out').flat();
      const causal = tf.tidy(() => tf.keep(tf.linalg.bandPart(tf.ones([l, l]), -1, 0)));
      const before = tf.memory().numTensors;
      const got = tf.tidy(() => {
        const tensors = new Map([...params].map(([name, values]) => [name, tf.tensor(values, name.endsWith('weight') ? [d, d] : [d])]));
        const attend = (qh: tf.Tensor4D, kh: tf.Tensor4D, vh: tf.Tensor4D) => tf.matMul(tf.mul(tf.matMul(qh, kh, false, true), causal), vh) as tf.Tensor4D;
        return multiHeadAttention(tf.tensor2d(x, [b * l, d]), l, heads, 'blk', (name) => tensors.get(name)!, bias, attend).dataSync();
      });
      causal.dispose();
      expect(tf.memory().numTensors).toBe(before - 1);
      expect(maxAbsDiff(got, expected)).toBeLessThan(1e-5);
    },
  );
});
