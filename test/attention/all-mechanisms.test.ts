// Properties every registered mechanism must have: strict causality, key masking, finite
// gradients that match finite differences, trainability on cpu and wasm, and no tensor leaks.
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend.ts';
import { testBackend, testBackends } from '../helpers/backend.ts';
import { attentionNames, createAttention, type AttentionModule } from '../../src/model/attention/index.ts';
import { dense } from '../../src/model/ops.ts';
import { Rng } from '../../src/model/rng.ts';
import { qkvGradientErrors, randomArray4, relL2, tensor4 } from '../helpers/reference.ts';

/** Small feature counts and a chunk smaller than the sequence, so chunking is exercised. */
const SMALL: Record<string, Record<string, unknown>> = {
  softmax: {},
  'yat-spherical': {},
  slay: { prfFeatures: 8, anchors: 4, chunkSize: 4 },
  performer: { features: 16, chunkSize: 4 },
  darkformer: { features: 16, chunkSize: 4 },
  schoenbat: { features: 16, chunkSize: 4 },
  'linear-elu': { chunkSize: 4 },
  cosformer: { chunkSize: 4 },
};
const MECHANISMS = Object.keys(SMALL);
const [B, H, L, D] = [2, 2, 11, 8];

function make(name: string, causal: boolean, seed = 3): AttentionModule {
  return createAttention(name, { numHeads: H, headDim: D, causal, seed, ...SMALL[name] });
}

it('the table above covers every registered mechanism', () => {
  expect([...attentionNames()].sort()).toEqual([...MECHANISMS].sort());
});

describe.each(MECHANISMS)('%s', (name) => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it('is strictly causal: outputs up to i ignore every later token, even huge ones', () => {
    const attn = make(name, true);
    const rng = new Rng(11);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const cut = 6;
    const changed = [q, k, v].map((x, n) =>
      x.map((b) => b.map((h) => h.map((row, i) => (i <= cut ? row : row.map(() => rng.normal() * (n === 1 ? 30 : 3)))))),
    );
    const prefix = (t: tf.Tensor4D) => tf.slice(t, [0, 0, 0, 0], [B, H, cut + 1, D]).arraySync();
    const a = tf.tidy(() => prefix(attn.apply(tensor4(q), tensor4(k), tensor4(v))));
    const b = tf.tidy(() => prefix(attn.apply(tensor4(changed[0]), tensor4(changed[1]), tensor4(changed[2]))));
    expect(relL2(b, a)).toBeLessThan(1e-5);
    attn.dispose();
  });

  it('bidirectional outputs ignore padded keys given a key mask', () => {
    const attn = make(name, false);
    const rng = new Rng(12);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const real = [8, 11];
    const mask = tf.tensor2d(real.map((n) => Array.from({ length: L }, (_, j) => (j < n ? 1 : 0))));
    const changed = [k, v].map((x) => x.map((bb, b) => bb.map((h) => h.map((row, j) => (j < real[b] ? row : row.map(() => rng.normal() * 5))))));
    const a = tf.tidy(() => attn.apply(tensor4(q), tensor4(k), tensor4(v), { keyMask: mask }).arraySync());
    const b = tf.tidy(() => attn.apply(tensor4(q), tensor4(changed[0]), tensor4(changed[1]), { keyMask: mask }).arraySync());
    expect(relL2(b, a)).toBeLessThan(1e-5);
    mask.dispose();
    attn.dispose();
  });

  it('has gradients that match central differences', () => {
    const attn = make(name, true);
    const rng = new Rng(13);
    const [q, k, v] = [0, 1, 2].map(() => tensor4(randomArray4(rng, [1, H, 6, D])));
    const weights = tensor4(randomArray4(rng, [1, H, 6, D]));
    const errors = qkvGradientErrors((a, b, c) => attn.apply(a, b, c), [q, k, v], weights, { step: 1e-2, coordinates: 8 });
    errors.forEach((error, which) => expect(error, `input ${'qkv'[which]}`).toBeLessThan(5e-2));
    tf.dispose([q, k, v, weights]);
    attn.dispose();
  });
});

/** A toy regression: x → attention(xWq, xWk, xWv) should fit a fixed random target a little. */
function trainToy(name: string, steps: number) {
  const rng = new Rng(21);
  const width = H * D;
  const init = (rows: number, cols: number, scale: number) =>
    tf.variable(tf.tensor2d(Float32Array.from(rng.normalArray(rows * cols), (x) => x * scale), [rows, cols]));
  const [wq, wk, wv] = [0, 1, 2].map(() => init(width, width, 0.3));
  const x = tf.tensor3d(Float32Array.from(rng.normalArray(B * L * width)), [B, L, width]);
  const target = tf.tensor3d(Float32Array.from(rng.normalArray(B * L * width), (t) => 0.5 * t), [B, L, width]);
  const attn = make(name, true);
  const heads = (t: tf.Tensor) => tf.transpose(tf.reshape(t, [B, L, H, D]), [0, 2, 1, 3]) as tf.Tensor4D;
  const vars = [wq, wk, wv, ...attn.trainableVariables];
  const optimizer = tf.train.adam(0.03);
  const losses: number[] = [];
  const tensorsAfterStep: number[] = [];
  for (let s = 0; s < steps; s++) {
    const value = tf.tidy(() => {
      const { value, grads } = tf.variableGrads(() => {
        const out = attn.apply(heads(dense(x, wq)), heads(dense(x, wk)), heads(dense(x, wv)));
        const merged = tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [B, L, width]);
        return tf.mean(tf.square(tf.sub(merged, target))) as tf.Scalar;
      }, vars);
      optimizer.applyGradients(grads as Record<string, tf.Variable>);
      return value;
    });
    losses.push(value.dataSync()[0]);
    value.dispose();
    tensorsAfterStep.push(tf.memory().numTensors);
  }
  tf.dispose([x, target, ...vars.slice(0, 3)]);
  optimizer.dispose();
  attn.dispose();
  return { losses, tensorsAfterStep };
}

describe.each(testBackends())('training on %s', (backend) => {
  beforeAll(async () => {
    await initBackend(backend);
  });
  afterAll(async () => {
    await initBackend(testBackend());
  });

  it.each(MECHANISMS)('%s: a few Adam steps lower the loss, with no tensor leak', (name) => {
    const { losses, tensorsAfterStep } = trainToy(name, 12);
    expect(losses.every(Number.isFinite)).toBe(true);
    expect(losses[losses.length - 1]).toBeLessThan(0.9 * losses[0]);
    // After the optimizer has created its slots (first step), the count stays flat.
    expect(new Set(tensorsAfterStep.slice(1)).size).toBe(1);
  });
});
