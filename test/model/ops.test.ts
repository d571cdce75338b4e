// The wasm fast paths against tf.matMul / the stock kernels: same values, same gradients.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend.ts';
import { batchMatMul } from '../../src/model/ops.ts';
import { Rng } from '../../src/model/rng.ts';
import { relL2 } from '../helpers/reference.ts';

const random = (rng: Rng, shape: number[]) => tf.tensor(Float32Array.from(rng.normalArray(shape.reduce((a, b) => a * b, 1))), shape);

describe('wasm fast paths', () => {
  beforeAll(async () => {
    await initBackend('wasm');
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
        const grads = tf.grads((x: tf.Tensor, y: tf.Tensor) => tf.sum(tf.mul(f(x, y), weights)))([a, b]).map((g) => g.arraySync());
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
    const x = tf.tensor(Array.from({ length: 4 * 3 * 5 }, (_, i) => i), [4, 3, 5]);
    // Contiguous: one batch entry, and a block of rows of it.
    expect(tf.slice(x, [2, 0, 0], [1, 3, 5]).dataSync()).toEqual(Float32Array.from({ length: 15 }, (_, i) => 30 + i));
    expect(tf.slice(x, [1, 1, 0], [1, 2, 5]).dataSync()).toEqual(Float32Array.from({ length: 10 }, (_, i) => 20 + i));
    // Strided (a column range): handled by the stock kernel.
    expect([...tf.slice(x, [0, 0, 1], [2, 1, 2]).dataSync()]).toEqual([1, 2, 16, 17]);
    x.dispose();
  });
});
