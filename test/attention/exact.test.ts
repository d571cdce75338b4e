// softmax and exact spherical Yat against float64 references; registry validation.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend.ts';
import { testBackend } from '../helpers/backend.ts';
import { attentionNames, createAttention } from '../../src/model/attention/index.ts';
import { Rng } from '../../src/model/rng.ts';
import { dot, kernelAttentionRef, randomArray4, relL2, softmaxAttentionRef, tensor4, toArray4, unit } from '../helpers/reference.ts';

beforeAll(async () => {
  await initBackend(testBackend());
});

describe('softmax', () => {
  for (const causal of [true, false]) {
    it(`equals exact float64 attention (causal=${causal})`, () => {
      const rng = new Rng(1);
      const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [2, 2, 10, 8], 1.5));
      const attn = createAttention('softmax', { numHeads: 2, headDim: 8, causal });
      const actual = tf.tidy(() => toArray4(attn.apply(tensor4(q), tensor4(k), tensor4(v))));
      expect(relL2(actual, softmaxAttentionRef(q, k, v, causal))).toBeLessThan(1e-5);
      attn.dispose();
    });
  }

  it('ignores padded keys given a key mask', () => {
    const rng = new Rng(2);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [1, 2, 6, 4]));
    const keyMask = [[1, 1, 1, 1, 0, 0]];
    const expected = kernelAttentionRef(q, k, v, (a, b) => Math.exp(dot(a, b) / 2), { causal: false, keyMask });
    const attn = createAttention('softmax', { numHeads: 2, headDim: 4, causal: false });
    const actual = tf.tidy(() => toArray4(attn.apply(tensor4(q), tensor4(k), tensor4(v), { keyMask: tf.tensor2d(keyMask) })));
    expect(relL2(actual, expected)).toBeLessThan(1e-5);
  });
});

describe('yat-spherical', () => {
  for (const [causal, epsilon] of [
    [true, 1e-3],
    [false, 1e-2],
  ] as const) {
    it(`equals kernel-normalised x²/(C−2x) in float64 (causal=${causal}, ε=${epsilon})`, () => {
      const rng = new Rng(3);
      const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [2, 2, 9, 6], 2));
      const delta = 1e-6;
      const kernel = (a: number[], b: number[]) => {
        const x = dot(unit(a), unit(b));
        return (x * x) / (2 + epsilon - 2 * x);
      };
      const attn = createAttention('yat-spherical', { numHeads: 2, headDim: 6, causal, epsilon, delta });
      const actual = tf.tidy(() => toArray4(attn.apply(tensor4(q), tensor4(k), tensor4(v))));
      expect(relL2(actual, kernelAttentionRef(q, k, v, kernel, { causal, delta }))).toBeLessThan(1e-5);
    });
  }

  it('peaks at 1/ε when q = k and stays finite', () => {
    const epsilon = 1e-3;
    const attn = createAttention('yat-spherical', { numHeads: 1, headDim: 4, causal: false, epsilon });
    // One key equal to the query and one orthogonal key: weights 1/ε and 0, so the output is v₀.
    const q = tf.tensor4d([[[[1, 0, 0, 0], [1, 0, 0, 0]]]]);
    const k = tf.tensor4d([[[[3, 0, 0, 0], [0, 5, 0, 0]]]]);
    const v = tf.tensor4d([[[[2, 2, 2, 2], [-7, 1, 0, 4]]]]);
    const out = attn.apply(q, k, v).arraySync()[0][0][0];
    const w0 = 1 / epsilon;
    out.forEach((x) => expect(x).toBeCloseTo((2 * w0) / (w0 + 1e-6), 4));
  });
});

describe('registry', () => {
  it('builds every one of the eight mechanisms by name', () => {
    const expected = ['softmax', 'yat-spherical', 'slay', 'performer', 'darkformer', 'schoenbat', 'linear-elu', 'cosformer'];
    expect(attentionNames().sort()).toEqual([...expected].sort());
  });

  it('rejects an unknown name, listing the allowed ones', () => {
    expect(() => createAttention('flash', { numHeads: 1, headDim: 4 })).toThrow(/unknown attention 'flash'; allowed: .*softmax.*slay/);
  });

  it('rejects unknown options and bad values, naming them', () => {
    expect(() => createAttention('softmax', { numHeads: 1, headDim: 4, prfFeatures: 8 })).toThrow(/option 'prfFeatures'.*allowed: numHeads/);
    expect(() => createAttention('yat-spherical', { numHeads: 1, headDim: 4, epsilon: 0 })).toThrow(/'epsilon' must be a number > 0 \(got 0\)/);
    expect(() => createAttention('yat-spherical', { numHeads: 0, headDim: 4 })).toThrow(/'numHeads' must be an integer ≥ 1/);
    expect(() => createAttention('yat-spherical', { numHeads: 2, headDim: 4.5 })).toThrow(/'headDim' must be an integer ≥ 1/);
    expect(() => createAttention('yat-spherical', { numHeads: 2, headDim: 4, delta: 'small' })).toThrow(/'delta' must be a finite number \(got "small"\)/);
  });
});
