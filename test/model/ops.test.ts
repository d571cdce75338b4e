// The wasm fast paths against tf.matMul / the stock kernels: same values, same gradients.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { batchMatMul, clamp, rowOuterProduct, untaped, vjp } from '../../src/model/ops.ts';
import { Rng } from '../../src/core/rng.ts';
import { relL2 } from '../helpers/reference.ts';

const random = (rng: Rng, shape: number[]) => tf.tensor(Float32Array.from(rng.normalArray(shape.reduce((a, b) => a * b, 1))), shape);

describe('wasm fast paths', () => {
  beforeAll(async () => {
    await initBackend(testBackend('wasm'));
  });

  it.each([
    [false, false],
    [true, false],
    [false, true],
    [true, true],
  ])('batchMatMul (transposeA=%s, transposeB=%s) equals tf.matMul in value and gradient', (ta, tb) => {
    const rng = new Rng(1);
    const [n, m, k, c] = [5, 48, 40, 36]; // m·k·c above the split threshold: the 2-D path runs
    const a = random(rng, ta ? [n, k, m] : [n, m, k]);
    const b = random(rng, tb ? [n, c, k] : [n, k, c]);
    const weights = random(rng, [n, m, c]);
    const run = (f: (x: tf.Tensor, y: tf.Tensor) => tf.Tensor) =>
      tf.tidy(() => {
        const value = f(a, b).arraySync();
        const grads = tf
          .grads((x: tf.Tensor, y: tf.Tensor) => tf.sum(tf.mul(f(x, y), weights)))([a, b])
          .map((g) => g.arraySync());
        return { value, grads };
      });
    const expected = run((x, y) => tf.matMul(x as tf.Tensor3D, y as tf.Tensor3D, ta, tb));
    const actual = run((x, y) => batchMatMul(x, y, ta, tb));
    expect(relL2(actual.value, expected.value)).toBeLessThan(1e-6);
    expect(relL2(actual.grads[0], expected.grads[0])).toBeLessThan(1e-6);
    expect(relL2(actual.grads[1], expected.grads[1])).toBeLessThan(1e-6);
    tf.dispose([a, b, weights]);
  });

  it('contiguous and strided slices return the right elements', () => {
    const x = tf.tensor(
      Array.from({ length: 4 * 3 * 5 }, (_, i) => i),
      [4, 3, 5],
    );
    // Contiguous: one batch entry, and a block of rows of it.
    expect(tf.slice(x, [2, 0, 0], [1, 3, 5]).dataSync()).toEqual(Float32Array.from({ length: 15 }, (_, i) => 30 + i));
    expect(tf.slice(x, [1, 1, 0], [1, 2, 5]).dataSync()).toEqual(Float32Array.from({ length: 10 }, (_, i) => 20 + i));
    // Strided: a column range.
    expect([...tf.slice(x, [0, 0, 1], [2, 1, 2]).dataSync()]).toEqual([1, 2, 16, 17]);
    x.dispose();
  });

  // Element (i0, …, i4) of the source holds its flat index, so a slice's values are checkable by index arithmetic.
  const shape5 = [3, 4, 2, 5, 6];
  const flatIndex = (idx: number[]) => idx.reduce((acc, v, d) => acc * shape5[d] + v, 0);
  const expectedSlice = (start: number[], extent: number[]) => {
    const out: number[] = [];
    const walk = (d: number, idx: number[]) => {
      if (d === extent.length) return void out.push(flatIndex(idx));
      for (let i = 0; i < extent[d]; i++) walk(d + 1, [...idx, start[d] + i]);
    };
    walk(0, []);
    return out;
  };

  it('random 5-D slices (contiguous or not, float32 and int32) equal index arithmetic', () => {
    const rng = new Rng(3);
    const total = shape5.reduce((a, b) => a * b, 1);
    for (const dtype of ['float32', 'int32'] as const) {
      const x = tf.tensor(
        Array.from({ length: total }, (_, i) => i),
        shape5,
        dtype,
      );
      for (let trial = 0; trial < 40; trial++) {
        const start = shape5.map((n) => rng.int(n));
        const extent = shape5.map((n, d) => 1 + rng.int(n - start[d]));
        const piece = tf.slice(x, start, extent);
        expect(piece.dtype).toBe(dtype);
        expect([...piece.dataSync()]).toEqual(expectedSlice(start, extent));
        piece.dispose();
      }
      x.dispose();
    }
  });

  it('split along every axis returns the pieces, and concat then split round-trips gradients', () => {
    const total = shape5.reduce((a, b) => a * b, 1);
    const x = tf.tensor(
      Array.from({ length: total }, (_, i) => i),
      shape5,
    );
    for (let axis = 0; axis < shape5.length; axis++) {
      const sizes = shape5[axis] === 2 ? [1, 1] : [1, shape5[axis] - 3, 2];
      const pieces = tf.split(x, sizes, axis);
      let offset = 0;
      pieces.forEach((p, i) => {
        const start = shape5.map((_, d) => (d === axis ? offset : 0));
        const extent = shape5.map((n, d) => (d === axis ? sizes[i] : n));
        expect(p.shape).toEqual(extent);
        expect([...p.dataSync()]).toEqual(expectedSlice(start, extent));
        offset += sizes[i];
      });
      tf.dispose(pieces);
    }
    // concat's gradient is a SplitV: d/dpiece Σ w·concat(pieces) = the matching block of w.
    const w = tf.tensor(
      Array.from({ length: total }, (_, i) => i),
      shape5,
    );
    const parts = tf.split(x, [2, 1], 0);
    const grads = tf.grads((a: tf.Tensor, b: tf.Tensor) => tf.sum(tf.mul(tf.concat([a, b], 0), w)))(parts);
    expect([...grads[0].dataSync()]).toEqual(expectedSlice([0, 0, 0, 0, 0], [2, 4, 2, 5, 6]));
    expect([...grads[1].dataSync()]).toEqual(expectedSlice([2, 0, 0, 0, 0], [1, 4, 2, 5, 6]));
    tf.dispose([x, w, ...parts, ...grads]);
  });

  it('identity shares the buffer: a clone outlives its source and frees memory only when both are gone', () => {
    const before = tf.memory().numDataBuffers;
    const x = tf.tensor([1, 2, 3, 4], [2, 2]);
    const copy = tf.clone(x);
    expect(tf.memory().numDataBuffers - before).toBe(1); // one buffer for both
    x.dispose();
    expect([...copy.dataSync()]).toEqual([1, 2, 3, 4]);
    copy.dispose();
    expect(tf.memory().numDataBuffers).toBe(before);
  });
  it('rowOuterProduct: vec(a_n b_nᵀ) per row, and the closed-form gradient of Σ w·(a ⊗ b)', () => {
    const rng = new Rng(5);
    const [n, k, m] = [7, 3, 4];
    const a = random(rng, [n, k]) as tf.Tensor2D;
    const b = random(rng, [n, m]) as tf.Tensor2D;
    const w = random(rng, [n, k * m]);
    const [av, bv, wv] = [a.dataSync(), b.dataSync(), w.dataSync()];
    const value = rowOuterProduct(a, b).dataSync();
    const [da, db] = tf.grads((x: tf.Tensor, y: tf.Tensor) => tf.sum(tf.mul(rowOuterProduct(x as tf.Tensor2D, y as tf.Tensor2D), w)))([a, b]);
    const [dav, dbv] = [da.dataSync(), db.dataSync()];
    for (let r = 0; r < n; r++) {
      for (let i = 0; i < k; i++) {
        let expectedDa = 0;
        for (let j = 0; j < m; j++) {
          expect(value[r * k * m + i * m + j]).toBeCloseTo(av[r * k + i] * bv[r * m + j], 6);
          expectedDa += wv[r * k * m + i * m + j] * bv[r * m + j];
        }
        expect(dav[r * k + i]).toBeCloseTo(expectedDa, 5);
      }
      for (let j = 0; j < m; j++) {
        let expectedDb = 0;
        for (let i = 0; i < k; i++) expectedDb += wv[r * k * m + i * m + j] * av[r * k + i];
        expect(dbv[r * m + j]).toBeCloseTo(expectedDb, 5);
      }
    }
    tf.dispose([a, b, w, da, db]);
  });
  it('untaped: values as computed, no gradient flows through them', () => {
    const rng = new Rng(8);
    const x = random(rng, [2, 3, 4, 5]);
    for (const axis of [-1, [2, 3]]) {
      expect(untaped(() => tf.max(x, axis, true)).arraySync()).toEqual(tf.max(x, axis, true).arraySync());
      // d/dx Σ (x − max) = 1 everywhere when the max carries no gradient.
      const [g] = tf.grads((t: tf.Tensor) =>
        tf.sum(
          tf.sub(
            t,
            untaped(() => tf.max(t, axis, true)),
          ),
        ),
      )([x]);
      expect(new Set(g.dataSync())).toEqual(new Set([1]));
    }
    x.dispose();
  });
  it('vjp: gradients inside a custom gradient (recomputation) equal plain autodiff, leave the outer tape intact, leak nothing', () => {
    const inner = (t: tf.Tensor) => tf.sum(tf.exp(tf.sin(t)), -1, true);
    const recomputed = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
      const [t, save] = args as [tf.Tensor, tf.GradSaveFunc];
      save([t]);
      return { value: inner(t), gradFunc: (dy: tf.Tensor, [saved]: tf.Tensor[]) => vjp((s) => tf.sum(tf.mul(inner(s), dy)) as tf.Scalar, [saved]) };
    });
    const x = tf.variable(random(new Rng(9), [3, 5]));
    const w = random(new Rng(10), [3, 1]);
    const gradient = (f: (t: tf.Tensor) => tf.Tensor) =>
      tf.tidy(() =>
        tf
          .variableGrads(() => tf.sum(tf.mul(f(tf.mul(x, 2)), w)) as tf.Scalar)
          .grads[x.name].dataSync()
          .slice(),
      );
    const expected = gradient(inner);
    gradient(recomputed);
    const before = tf.memory().numTensors;
    expect([...gradient(recomputed)]).toEqual([...expected]);
    expect(tf.memory().numTensors).toBe(before);
    // A variable f does not depend on gets zeros.
    const [none] = vjp(() => tf.scalar(1), [w]);
    expect(new Set(none.dataSync())).toEqual(new Set([0]));
    tf.dispose([x, w, none]);
  });
  it('clamp: tf.clipByValue in value and in gradient (boundaries inclusive), asymmetric bounds too', () => {
    for (const [lo, hi] of [
      [-1, 1],
      [-46, 69],
    ]) {
      const x = tf.tensor1d([lo - 0.5, lo, lo + 1e-3, (lo + hi) / 2, hi - 1e-3, hi, hi + 2, 1 + 1e-6]);
      const w = tf.tensor1d([1, 2, 3, 4, 5, 6, 7, 8]);
      const f = (c: (t: tf.Tensor) => tf.Tensor) => tf.grads((t: tf.Tensor) => tf.sum(tf.mul(c(t), w)))([x])[0];
      expect([...clamp(x, lo, hi).dataSync()]).toEqual([...tf.clipByValue(x, lo, hi).dataSync()]);
      expect([...f((t) => clamp(t, lo, hi)).dataSync()]).toEqual([...f((t) => tf.clipByValue(t, lo, hi)).dataSync()]);
      tf.dispose([x, w]);
    }
  });
});
