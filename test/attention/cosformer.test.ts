// cosformer against the float64 kernel-normalised attention with
// κ(i, j) = ReLU(q_i)ᵀReLU(k_j)·cos(π/2·(i − j)/M), and its gradient.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { cosformerAngles } from '../../src/model/attention/cosformer.ts';
import { createAttention } from '../../src/model/attention/registry.ts';
import { Rng } from '../../src/core/rng.ts';
import { dot, kernelAttentionRef, randomArray4, relL2, tensor4, toArray4 } from '../helpers/reference.ts';

const relu = (row: number[]) => row.map((x) => Math.max(x, 0));
const cosformerKernel = (m: number) => (qi: number[], kj: number[], i: number, j: number) => dot(relu(qi), relu(kj)) * Math.cos(((Math.PI / 2) * (i - j)) / m);

describe('cosformer', () => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it.each([
    [true, 12, 4, 0],
    [true, 11, 4, 0],
    [false, 9, 4, 0],
    [true, 10, 3, 16],
    [false, 10, 3, 16],
  ])('equals the float64 reference (causal %s, L=%i, chunk %i, reweightLength %i)', (causal, length, chunkSize, reweightLength) => {
    const rng = new Rng(length * 7 + reweightLength + (causal ? 1 : 0));
    const shape: [number, number, number, number] = [2, 2, length, 4];
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, shape));
    const module = createAttention('cosformer', { numHeads: 2, headDim: 4, causal, chunkSize, reweightLength });
    const actual = tf.tidy(() => toArray4(module.apply(tensor4(q), tensor4(k), tensor4(v))));
    const m = reweightLength > 0 ? reweightLength : length; // 0: M is the current length
    expect(relL2(actual, kernelAttentionRef(q, k, v, cosformerKernel(m), { causal, delta: 1e-6 }))).toBeLessThan(1e-5);
    module.dispose();
  });

  it('uses 1-based positions a_i = (π/2)·i/M, so every weight cos(a_i − a_j) stays positive for L ≤ M', () => {
    const angles = cosformerAngles(4, 4);
    angles.forEach((a, index) => expect(a).toBeCloseTo((Math.PI / 2) * ((index + 1) / 4), 15));
    expect(Math.cos(angles[3] - angles[0])).toBeGreaterThan(0);
    // A later segment or decoding step gets its own positions' angles (and only those).
    expect(cosformerAngles(2, 8, 5)).toEqual(cosformerAngles(7, 8).slice(5));
  });

  it('rejects a sequence longer than a fixed reweightLength, naming the option', () => {
    const module = createAttention('cosformer', { numHeads: 1, headDim: 2, causal: true, reweightLength: 4 });
    const x = tf.ones([1, 1, 5, 2]) as tf.Tensor4D;
    expect(() => module.apply(x, x, x)).toThrow(/sequence length 5 exceeds option 'reweightLength' = 4/);
    x.dispose();
    module.dispose();
    expect(() => createAttention('cosformer', { numHeads: 1, headDim: 2, reweightLength: -1 })).toThrow(/'reweightLength' must be an integer ≥ 0/);
  });
});
