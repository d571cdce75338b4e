// The shared linear-attention contraction against the quadratic masked form in float64.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackends } from '../helpers/backend.ts';
import { linearAttention, productLinearAttention } from '../../src/model/attention/linear-attention.ts';
import { Rng } from '../../src/core/rng.ts';
import { featureAttentionRef, kernelAttentionRef, dot, randomArray4, relL2, tensor4, toArray4, type Array4 } from '../helpers/reference.ts';

const positive = (a: Array4) => a.map((b) => b.map((h) => h.map((row) => row.map((x) => Math.exp(0.5 * x)))));

describe.each(testBackends())('linear-attention contraction on %s', (backend) => {
  beforeAll(async () => {
    await initBackend(backend);
  });

  for (const length of [16, 13, 3]) {
    it(`causal chunked form equals the quadratic masked form (L=${length}, chunk 4)`, () => {
      const rng = new Rng(length);
      const phiQ = positive(randomArray4(rng, [2, 3, length, 5]));
      const phiK = positive(randomArray4(rng, [2, 3, length, 5]));
      const v = randomArray4(rng, [2, 3, length, 4]);
      const expected = featureAttentionRef(phiQ, phiK, v, { causal: true, delta: 1e-3 });
      const actual = tf.tidy(() => toArray4(linearAttention(tensor4(phiQ), tensor4(phiK), tensor4(v), { causal: true, chunkSize: 4, delta: 1e-3 })));
      expect(relL2(actual, expected)).toBeLessThan(1e-5);
    });
  }

  it('bidirectional form equals the quadratic unmasked form', () => {
    const rng = new Rng(99);
    const phiQ = positive(randomArray4(rng, [1, 2, 9, 6]));
    const phiK = positive(randomArray4(rng, [1, 2, 9, 6]));
    const v = randomArray4(rng, [1, 2, 9, 3]);
    const expected = featureAttentionRef(phiQ, phiK, v, { causal: false, delta: 1e-6 });
    const actual = tf.tidy(() => toArray4(linearAttention(tensor4(phiQ), tensor4(phiK), tensor4(v), { causal: false, chunkSize: 4, delta: 1e-6 })));
    expect(relL2(actual, expected)).toBeLessThan(1e-5);
  });

  it('a key mask removes padded keys (δ denominator, positive features)', () => {
    const rng = new Rng(4);
    const phiQ = positive(randomArray4(rng, [2, 1, 7, 4]));
    const phiK = positive(randomArray4(rng, [2, 1, 7, 4]));
    const v = randomArray4(rng, [2, 1, 7, 3]);
    const keyMask = [
      [1, 1, 1, 1, 1, 0, 0],
      [1, 1, 0, 1, 1, 1, 1],
    ];
    for (const causal of [false, true]) {
      const expected = kernelAttentionRef(phiQ, phiK, v, (a, b) => dot(a, b), { causal, keyMask, delta: 1e-6 });
      const actual = tf.tidy(() =>
        toArray4(linearAttention(tensor4(phiQ), tensor4(phiK), tensor4(v), { causal, chunkSize: 3, delta: 1e-6, keyMask: tf.tensor2d(keyMask) })),
      );
      expect(relL2(actual, expected)).toBeLessThan(1e-5);
    }
  });

  it('clampMin floors the denominator of signed features', () => {
    const rng = new Rng(5);
    const phiQ = randomArray4(rng, [2, 1, 7, 4]);
    const phiK = randomArray4(rng, [2, 1, 7, 4]);
    const v = randomArray4(rng, [2, 1, 7, 3]);
    for (const causal of [false, true]) {
      const expected = phiQ.map((qb, b) =>
        qb.map((qh, h) =>
          qh.map((qi, i) => {
            let den = 0;
            const num = new Array(3).fill(0);
            for (let j = 0; j < 7 && (!causal || j <= i); j++) {
              const w = dot(qi, phiK[b][h][j]);
              den += w;
              for (let c = 0; c < 3; c++) num[c] += w * v[b][h][j][c];
            }
            return num.map((x) => x / Math.max(den, 1));
          }),
        ),
      );
      const actual = tf.tidy(() => toArray4(linearAttention(tensor4(phiQ), tensor4(phiK), tensor4(v), { causal, chunkSize: 3, clampMin: 1 })));
      expect(relL2(actual, expected)).toBeLessThan(1e-5);
    }
  });

  it('keeps gradients finite when a whole denominator is a tiny δ (no b² underflow)', () => {
    // Row 0's query is orthogonal to key 0: its denominator is exactly δ = 1e−30, as when every
    // stabilised feature product of a row underflows.
    const phiQ = tf.tensor4d([
      [
        [
          [1, 0],
          [1, 1],
          [0.5, 0.5],
        ],
      ],
    ]);
    const phiK = tf.tensor4d([
      [
        [
          [0, 1],
          [1, 0],
          [1, 1],
        ],
      ],
    ]);
    const v = tf.tensor4d([[[[1], [2], [3]]]]);
    const f = (a: tf.Tensor, b: tf.Tensor) => tf.sum(linearAttention(a as tf.Tensor4D, b as tf.Tensor4D, v, { causal: true, chunkSize: 2, delta: 1e-30 }));
    const grads = tf.grads(f)([phiQ, phiK]);
    for (const g of grads) expect(tf.all(tf.isFinite(g)).dataSync()[0]).toBe(1);
    // Row 0 is 0/δ = 0, row 1 (1·1 + 1·2)/2, row 2 (½·1 + ½·2 + 1·3)/2.
    expect(f(phiQ, phiK).dataSync()[0]).toBeCloseTo(0 + 3 / 2 + 4.5 / 2, 5);
    tf.dispose([phiQ, phiK, v, ...grads]);
  });

  it('gradients of the chunked form match the gradients of the quadratic form', () => {
    const rng = new Rng(17);
    const phiQ = tensor4(positive(randomArray4(rng, [1, 2, 11, 4])));
    const phiK = tensor4(positive(randomArray4(rng, [1, 2, 11, 4])));
    const v = tensor4(randomArray4(rng, [1, 2, 11, 3]));
    const weights = tf.tensor4d(randomArray4(rng, [1, 2, 11, 3]));
    const mask = tf.linalg.bandPart(tf.ones([11, 11]), -1, 0);
    const quadratic = (q: tf.Tensor, k: tf.Tensor, vv: tf.Tensor) => {
      const scores = tf.mul(tf.matMul(tf.reshape(q, [2, 11, 4]), tf.reshape(k, [2, 11, 4]), false, true), mask);
      const out = tf.div(tf.matMul(scores, tf.reshape(vv, [2, 11, 3])), tf.add(tf.sum(scores, -1, true), 1e-3));
      return tf.sum(tf.mul(tf.reshape(out, [1, 2, 11, 3]), weights)) as tf.Scalar;
    };
    const chunked = (q: tf.Tensor, k: tf.Tensor, vv: tf.Tensor) =>
      tf.sum(tf.mul(linearAttention(q as tf.Tensor4D, k as tf.Tensor4D, vv as tf.Tensor4D, { causal: true, chunkSize: 4, delta: 1e-3 }), weights)) as tf.Scalar;
    const gradsA = tf.grads(quadratic)([phiQ, phiK, v]);
    const gradsB = tf.grads(chunked)([phiQ, phiK, v]);
    for (let i = 0; i < 3; i++) expect(relL2(gradsB[i].arraySync(), gradsA[i].arraySync())).toBeLessThan(1e-4);
    tf.dispose([...gradsA, ...gradsB, phiQ, phiK, v, weights, mask]);
  });
  // Segments (the memory-bounded form): lengths that are not multiples of the segment, segments that
  // are not multiples of the chunk; values against the float64 quadratic form, gradients against the
  // one-segment form (ordinary autodiff).
  for (const [causal, segmentLength] of [
    [true, 6],
    [true, 8],
    [false, 6],
  ] as const) {
    it(`segments of ${segmentLength} (chunk 4, L=21, ${causal ? 'causal' : 'bidirectional'}, key mask): the quadratic form, and the one-segment gradients`, () => {
      const rng = new Rng(700 + segmentLength);
      const l = 21;
      const phiQ = positive(randomArray4(rng, [2, 2, l, 5]));
      const phiK = positive(randomArray4(rng, [2, 2, l, 5]));
      const v = randomArray4(rng, [2, 2, l, 3]);
      const keyMask = [Array.from({ length: l }, (_, j) => (j % 7 === 3 ? 0 : 1)), Array.from({ length: l }, (_, j) => (j < 15 ? 1 : 0))];
      const mask = tf.tensor2d(keyMask);
      const opts = { causal, chunkSize: 4, delta: 1e-3, keyMask: mask };
      const expected = kernelAttentionRef(phiQ, phiK, v, (a, b) => dot(a, b), { causal, keyMask, delta: 1e-3 });
      const inputs = [phiQ, phiK, v].map(tensor4);
      const run = (segment: number) => (x: tf.Tensor[]) =>
        linearAttention(x[0] as tf.Tensor4D, x[1] as tf.Tensor4D, x[2] as tf.Tensor4D, { ...opts, segmentLength: segment });
      expect(
        relL2(
          tf.tidy(() => toArray4(run(segmentLength)(inputs))),
          expected,
        ),
      ).toBeLessThan(1e-5);
      const weights = tensor4(randomArray4(rng, [2, 2, l, 3]));
      const grad = (f: (x: tf.Tensor[]) => tf.Tensor) =>
        tf.tidy(() =>
          tf
            .grads((...x: tf.Tensor[]) => tf.sum(tf.mul(f(x), weights)))(inputs)
            .map((g) => toArray4(g)),
        );
      const [segmented, whole] = [grad(run(segmentLength)), grad(run(l))];
      for (let i = 0; i < 3; i++) expect(relL2(segmented[i], whole[i])).toBeLessThan(1e-5);
      tf.dispose([...inputs, weights, mask]);
    });
  }

  // Product features φ = concat_r a ⊗ b_r (SLAY's form): the output must be the quadratic form of the
  // expanded features in float64 — where the whole sequence is one block (L=6, 9) and where the form
  // is chunked or goes through states (L=40, chunk 4), causal and bidirectional, with a key mask —
  // and the gradients with respect to the factors must equal those through the explicit features.
  const expand = (a: Array4, b: Array4, nodes: number): Array4 =>
    a.map((ab, i) =>
      ab.map((ah, j) =>
        ah.map((row, t) => {
          const bRow = b[i][j][t];
          const m = bRow.length / nodes;
          const out: number[] = [];
          for (let r = 0; r < nodes; r++) for (const x of row) for (let c = 0; c < m; c++) out.push(x * bRow[r * m + c]);
          return out;
        }),
      ),
    );
  const expandTensor =
    (nodes: number) =>
    ({ a, b }: { a: tf.Tensor4D; b: tf.Tensor4D }) => {
      const [bs, h, l, fa] = a.shape;
      const m = b.shape[3] / nodes;
      const parts = Array.from({ length: nodes }, (_, r) =>
        tf.reshape(tf.mul(tf.reshape(a, [bs, h, l, fa, 1]), tf.reshape(tf.slice(b, [0, 0, 0, r * m], [bs, h, l, m]), [bs, h, l, 1, m])), [bs, h, l, fa * m]),
      );
      return tf.concat(parts, 3) as tf.Tensor4D;
    };

  for (const [length, causal] of [
    [6, true],
    [40, true],
    [9, false],
    [40, false],
  ] as const) {
    it(`product features: equal the expanded quadratic form, values and gradients (L=${length}, ${causal ? 'causal' : 'bidirectional'})`, () => {
      const rng = new Rng(500 + length);
      const nodes = 2;
      const shape = (f: number) => [2, 2, length, f] as [number, number, number, number];
      const [aq, ak] = [positive(randomArray4(rng, shape(3))), positive(randomArray4(rng, shape(3)))];
      const [bq, bk] = [positive(randomArray4(rng, shape(2 * nodes))), positive(randomArray4(rng, shape(2 * nodes)))];
      const v = randomArray4(rng, shape(3));
      const keyMask = [Array.from({ length }, (_, t) => (t % 5 === 2 ? 0 : 1)), Array.from({ length }, () => 1)];
      const opts = { causal, chunkSize: 4, delta: 1e-3 };
      const expected = kernelAttentionRef(expand(aq, bq, nodes), expand(ak, bk, nodes), v, (x, y) => dot(x, y), { ...opts, keyMask });
      const weights = tensor4(randomArray4(rng, shape(3)));
      const mask = tf.tensor2d(keyMask);
      const features = expandTensor(nodes);
      const viaFactors = (x: tf.Tensor[]) =>
        productLinearAttention({ a: x[0] as tf.Tensor4D, b: x[1] as tf.Tensor4D }, { a: x[2] as tf.Tensor4D, b: x[3] as tf.Tensor4D }, tensor4(v), features, {
          ...opts,
          keyMask: mask,
        });
      const viaFeatures = (x: tf.Tensor[]) =>
        linearAttention(
          features({ a: x[0] as tf.Tensor4D, b: x[1] as tf.Tensor4D }),
          features({ a: x[2] as tf.Tensor4D, b: x[3] as tf.Tensor4D }),
          tensor4(v),
          { ...opts, keyMask: mask },
        );
      const inputs = [aq, bq, ak, bk].map(tensor4);
      const actual = tf.tidy(() => toArray4(viaFactors(inputs)));
      expect(relL2(actual, expected)).toBeLessThan(1e-5);
      const grad = (f: (x: tf.Tensor[]) => tf.Tensor) =>
        tf.tidy(() =>
          tf
            .grads((...x: tf.Tensor[]) => tf.sum(tf.mul(f(x), weights)))(inputs)
            .map((g) => toArray4(g)),
        );
      const [g1, g2] = [grad(viaFactors), grad(viaFeatures)];
      for (let i = 0; i < 4; i++) expect(relL2(g1[i], g2[i])).toBeLessThan(1e-4);
      tf.dispose([...inputs, weights, mask]);
    });
  }
});
