// linear-elu against the float64 kernel-normalised attention with κ(q, k) = (elu(q)+1)ᵀ(elu(k)+1),
// positivity of its scores and denominator on random and adversarial inputs, and its gradient.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { eluPlusOne } from '../../src/model/attention/linear-elu.ts';
import { createAttention } from '../../src/model/attention/registry.ts';
import { Rng } from '../../src/core/rng.ts';
import { dot, kernelAttentionRef, randomArray4, relL2, tensor4, toArray4, type Array4 } from '../helpers/reference.ts';

const eluPlusOneRef = (row: number[]) => row.map((x) => (x > 0 ? x + 1 : Math.exp(x)));
const kernel = (qi: number[], kj: number[]) => dot(eluPlusOneRef(qi), eluPlusOneRef(kj));
const mapArray4 = (a: Array4, f: (x: number) => number): Array4 => a.map((b) => b.map((h) => h.map((row) => row.map(f))));

describe('linear-elu', () => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it.each([
    [true, 12, 4],
    [true, 11, 4],
    [false, 9, 4],
  ])('equals the float64 reference (causal %s, L=%i, chunk %i)', (causal, length, chunkSize) => {
    const rng = new Rng(length + (causal ? 100 : 0));
    const shape: [number, number, number, number] = [2, 2, length, 5];
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, shape));
    const module = createAttention('linear-elu', { numHeads: 2, headDim: 5, causal, chunkSize });
    expect(module.options).toEqual({ delta: 1e-6, chunkSize, segmentLength: 0 });
    const actual = tf.tidy(() => toArray4(module.apply(tensor4(q), tensor4(k), tensor4(v))));
    expect(relL2(actual, kernelAttentionRef(q, k, v, kernel, { causal, delta: 1e-6 }))).toBeLessThan(1e-5);
    module.dispose();
  });

  const rng = new Rng(5);
  const shape: [number, number, number, number] = [1, 2, 8, 4];
  const base = randomArray4(rng, shape);
  const other = randomArray4(rng, shape);
  const adversarial: Array<[string, Array4, Array4]> = [
    ['random', base, other],
    ['q = k', base, base],
    ['q = −k', base, mapArray4(base, (x) => -x)],
    ['huge norms (×1e6)', mapArray4(base, (x) => x * 1e6), mapArray4(other, (x) => x * 1e6)],
    ['very negative inputs (−1e3 − |x|)', mapArray4(base, (x) => -1e3 - Math.abs(x)), mapArray4(other, (x) => -1e3 - Math.abs(x))],
  ];
  it.each(adversarial)('scores are ≥ 0, the denominator > 0 and outputs stay in the hull of v: %s', (_, q, k) => {
    const v = randomArray4(new Rng(6), shape);
    const [phiQ, phiK] = [q, k].map((x) => tf.tidy(() => eluPlusOne(tensor4(x))));
    const scores = tf.tidy(() => tf.matMul(tf.reshape(phiQ, [2, 8, 4]), tf.reshape(phiK, [2, 8, 4]), false, true));
    const causalDenominators = tf.tidy(() => tf.add(tf.cumsum(scores, 2), 1e-6)); // prefix sums over keys
    expect(tf.min(phiQ).dataSync()[0]).toBeGreaterThanOrEqual(0);
    expect(tf.min(scores).dataSync()[0]).toBeGreaterThanOrEqual(0);
    expect(tf.min(causalDenominators).dataSync()[0]).toBeGreaterThan(0);
    for (const causal of [true, false]) {
      const module = createAttention('linear-elu', { numHeads: 2, headDim: 4, causal, chunkSize: 4 });
      const out = tf.tidy(() => toArray4(module.apply(tensor4(q), tensor4(k), tensor4(v))));
      // Non-negative weights over a positive denominator: each output channel lies between
      // min(0, min_j v_j) and max(0, max_j v_j) (δ pulls towards 0).
      out.forEach((bb, b) =>
        bb.forEach((h, hh) =>
          h.forEach((row) =>
            row.forEach((x, c) => {
              const column = v[b][hh].map((vr) => vr[c]);
              expect(Number.isFinite(x)).toBe(true);
              expect(x).toBeGreaterThanOrEqual(Math.min(0, ...column) - 1e-5);
              expect(x).toBeLessThanOrEqual(Math.max(0, ...column) + 1e-5);
            }),
          ),
        ),
      );
      module.dispose();
    }
    tf.dispose([phiQ, phiK, scores, causalDenominators]);
  });
});
