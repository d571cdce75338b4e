// GLA's outputs against its float64 recurrent reference (test/helpers/mechanisms.ts): every chunk length and segment
// length computes the same function, with a key mask, and gates strong enough that e^(±Σ log α) over a chunk would
// overflow float32 were the exponents not kept ≤ 0.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import { createAttention } from '../../src/model/attention/index.ts';
import { testBackend } from '../helpers/backend.ts';
import { mechanismRef } from '../helpers/mechanisms.ts';
import { randomArray4, relL2, tensor4 } from '../helpers/reference.ts';

const [B, H, L, D] = [2, 2, 13, 4];

beforeAll(async () => {
  await initBackend(testBackend());
});

describe('gla', () => {
  it.each([
    [1, 0],
    [3, 0],
    [64, 0],
    [4, 5],
  ])('chunkSize %i, segmentLength %i: the float64 reference, with and without a key mask', (chunkSize, segmentLength) => {
    const attn = createAttention('gla', { numHeads: H, headDim: D, causal: true, seed: 2, chunkSize, segmentLength, gateRank: 3 });
    const rng = new Rng(8);
    tf.tidy(() => {
      attn.trainableVariables[0].assign(tf.tensor(Array.from({ length: H * D }, () => Array.from({ length: 3 }, () => rng.normal()))));
      attn.trainableVariables[1].assign(tf.tensor(Array.from({ length: 3 }, () => Array.from({ length: H * D }, () => rng.normal()))));
    });
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const keyMask = [Array.from({ length: L }, () => 1), Array.from({ length: L }, (_, j) => (j % 4 === 2 ? 0 : 1))];
    for (const mask of [undefined, keyMask]) {
      const ours = tf.tidy(() => attn.apply(tensor4(q), tensor4(k), tensor4(v), mask ? { keyMask: tf.tensor2d(mask) } : {}).arraySync());
      expect(relL2(ours, mechanismRef(attn, q, k, v, { causal: true, keyMask: mask, seed: 2 })), mask ? 'masked' : 'unmasked').toBeLessThan(1e-5);
    }
    attn.dispose();
  });

  it('stays finite and exact under gates that forget almost at once (Σ log α ≈ −10⁴ over a chunk of 64)', () => {
    const attn = createAttention('gla', { numHeads: H, headDim: D, causal: true, seed: 2, chunkSize: 64, gateNormalizer: 1 });
    // logsigmoid(−160) = −160 per position: a float32 e^(−G) within the chunk would be e^(10⁴).
    tf.tidy(() => attn.trainableVariables[2].assign(tf.fill([H * D], -160)));
    const rng = new Rng(9);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [1, H, 64, D]));
    const ours = tf.tidy(() => attn.apply(tensor4(q), tensor4(k), tensor4(v)).arraySync());
    expect(ours.flat(3).every(Number.isFinite)).toBe(true);
    expect(relL2(ours, mechanismRef(attn, q, k, v, { causal: true, seed: 2 }))).toBeLessThan(1e-5);
    attn.dispose();
  });
});
