// softmax and exact spherical Yat against float64 references; registry validation.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { attentionNames, createAttention } from '../../src/model/attention/index.ts';
import { Rng } from '../../src/core/rng.ts';
import { dot, kernelAttentionRef, randomArray4, relL2, softmaxAttentionRef, tensor4, toArray4, unit, type Array4 } from '../helpers/reference.ts';

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

  it('causal with a key mask: a row that sees only padded keys outputs 0 and never sees the future', () => {
    const rng = new Rng(4);
    const [b, h, l, d] = [2, 2, 9, 4];
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [b, h, l, d]));
    // Left padding: sequence 0's first three keys and sequence 1's first key are padding.
    const keyMask = [
      [0, 0, 0, 1, 1, 1, 1, 1, 1],
      [0, 1, 1, 1, 0, 1, 1, 1, 1],
    ];
    const attn = createAttention('softmax', { numHeads: h, headDim: d, causal: true });
    const run = (keys: Array4, values: Array4) =>
      tf.tidy(() => toArray4(attn.apply(tensor4(q), tensor4(keys), tensor4(values), { keyMask: tf.tensor2d(keyMask) })));
    const actual = run(k, v);
    // δ = 1e−300 turns a row with no visible real key into 0/δ = 0 and changes no other row.
    const expected = kernelAttentionRef(q, k, v, (a, c) => Math.exp(dot(a, c) / 2), { causal: true, keyMask, delta: 1e-300 });
    expect(relL2(actual, expected)).toBeLessThan(1e-5);
    expect(actual[0].every((head) => head.slice(0, 3).every((row) => row.every((x) => x === 0)))).toBe(true);
    // Real future keys and values changed: rows up to 5 keep their outputs (and rows 0–2 stay 0).
    const future = (a: Array4, s: number) => a.map((bb) => bb.map((hh) => hh.map((row, i) => (i > 5 ? row.map((x) => x * s + 2) : row))));
    const after = run(future(k, 7), future(v, -3));
    const prefix = (a: Array4) => a.map((bb) => bb.map((hh) => hh.slice(0, 6)));
    expect(relL2(prefix(after), prefix(actual))).toBeLessThan(1e-6);
    attn.dispose();
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
    const q = tf.tensor4d([
      [
        [
          [1, 0, 0, 0],
          [1, 0, 0, 0],
        ],
      ],
    ]);
    const k = tf.tensor4d([
      [
        [
          [3, 0, 0, 0],
          [0, 5, 0, 0],
        ],
      ],
    ]);
    const v = tf.tensor4d([
      [
        [
          [2, 2, 2, 2],
          [-7, 1, 0, 4],
        ],
      ],
    ]);
    const out = attn.apply(q, k, v).arraySync()[0][0][0];
    const w0 = 1 / epsilon;
    out.forEach((x) => expect(x).toBeCloseTo((2 * w0) / (w0 + 1e-6), 4));
  });
});

describe('registry', () => {
  it('builds every one of the nine mechanisms by name', () => {
    const expected = ['softmax', 'yat-spherical', 'slay', 'performer', 'darkformer', 'schoenbat', 'linear-elu', 'cosformer', 'gla'];
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
