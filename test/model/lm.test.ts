import * as tf from '@tensorflow/tfjs';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { countParameters, createLanguageModel } from '../../src/model/lm.ts';
import type { LanguageModel, LanguageModelConfig } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

let model: LanguageModel | null = null;
afterEach(() => {
  model?.dispose();
  model = null;
});

function config(kind: 'gpt' | 'bert', attention = 'softmax', extra: Partial<LanguageModelConfig> = {}): LanguageModelConfig {
  return {
    kind,
    vocabSize: 23,
    maxSeqLen: 8,
    dModel: 16,
    numLayers: 2,
    numHeads: 2,
    mlpRatio: 2,
    dropout: 0,
    bias: true,
    attention: { name: attention, options: {} },
    seed: 5,
    ...extra,
  };
}

function randomIds(rng: Rng, n: number, vocab: number): Int32Array {
  return Int32Array.from({ length: n }, () => rng.int(vocab));
}

describe('language model parameters', () => {
  it('names every parameter stably, q/k/v/out separately, and counts them like countParameters', () => {
    model = createLanguageModel(config('bert', 'darkformer'));
    const params = model.parameters();
    for (const name of [
      'embed.tokens.weight',
      'embed.positions.weight',
      'blocks.0.ln1.weight',
      'blocks.1.attn.q.weight',
      'blocks.1.attn.k.bias',
      'blocks.1.attn.v.weight',
      'blocks.1.attn.out.weight',
      'blocks.0.mlp.fc.weight',
      'blocks.0.mlp.proj.bias',
      'norm.weight',
      'mlm.dense.weight',
      'mlm.norm.bias',
      'mlm.decoder.bias',
    ]) {
      expect(params.has(name), name).toBe(true);
      expect(params.get(name)!.name).toBe(name);
    }
    expect(params.get('blocks.1.attn.q.weight')!.shape).toEqual([16, 16]);
    expect(params.get('blocks.0.mlp.fc.weight')!.shape).toEqual([16, 32]);
    // DARKFormer's learned covariance factor is a mechanism parameter, named under the block's scope.
    expect([...params.keys()].filter((n) => n.startsWith('blocks.0.attn.') && !/\.(q|k|v|out)\./.test(n)).length).toBeGreaterThan(0);
    const total = [...params.values()].reduce((n, v) => n + v.size, 0);
    expect(countParameters(config('bert', 'darkformer')).total).toBe(total);
    for (const v of model.buffers().values()) expect(v.trainable).toBe(false);
  });

  it('initialises weights N(0, 0.02), residual projections N(0, 0.02/√(2·layers)), norms 1, biases 0', () => {
    model = createLanguageModel({ ...config('gpt'), dModel: 64, numHeads: 4, vocabSize: 300, numLayers: 8 });
    const stats = (name: string) => {
      const v = Array.from(model!.parameters().get(name)!.dataSync());
      const mean = v.reduce((s, x) => s + x, 0) / v.length;
      const std = Math.sqrt(v.reduce((s, x) => s + (x - mean) ** 2, 0) / v.length);
      return { mean, std, n: v.length };
    };
    // The sample std of n normals has standard error ≈ σ/√(2n); allow 4 of them.
    for (const [name, sigma] of [
      ['embed.tokens.weight', 0.02],
      ['blocks.3.attn.q.weight', 0.02],
      ['blocks.3.attn.out.weight', 0.02 / 4],
      ['blocks.7.mlp.proj.weight', 0.02 / 4],
    ] as const) {
      const s = stats(name);
      expect(Math.abs(s.std - sigma), name).toBeLessThan((4 * sigma) / Math.sqrt(2 * s.n));
      expect(Math.abs(s.mean), name).toBeLessThan((4 * sigma) / Math.sqrt(s.n));
    }
    expect(Array.from(model.parameters().get('blocks.2.ln2.weight')!.dataSync()).every((x) => x === 1)).toBe(true);
    expect(Array.from(model.parameters().get('blocks.2.mlp.fc.bias')!.dataSync()).every((x) => x === 0)).toBe(true);
  });

  it('rejects dModel not divisible by numHeads and unknown attention names', () => {
    expect(() => createLanguageModel({ ...config('gpt'), dModel: 15 })).toThrow(/model.dModel \(15\) must be divisible by model.numHeads \(2\)/);
    expect(() => createLanguageModel(config('gpt', 'nope'))).toThrow(/unknown attention 'nope'/);
  });
});

describe('GPT causality at the model level', () => {
  for (const attention of ['softmax', 'linear-elu']) {
    it(`${attention}: logits at position i do not change when tokens after i change`, () => {
      model = createLanguageModel(config('gpt', attention));
      const rng = new Rng(11);
      const b = 2;
      const l = 8;
      const ids = randomIds(rng, b * l, 23);
      const base = tf.tidy(() => model!.logits(tf.tensor2d(ids, [b, l], 'int32')).arraySync());
      for (const cut of [2, 5]) {
        const changed = Int32Array.from(ids);
        for (let r = 0; r < b; r++) for (let t = cut + 1; t < l; t++) changed[r * l + t] = (ids[r * l + t] + 1 + rng.int(22)) % 23;
        const other = tf.tidy(() => model!.logits(tf.tensor2d(changed, [b, l], 'int32')).arraySync());
        let before = 0;
        let after = 0;
        for (let r = 0; r < b; r++)
          for (let t = 0; t < l; t++)
            for (let v = 0; v < 23; v++) {
              const d = Math.abs(base[r][t][v] - other[r][t][v]);
              if (t <= cut) before = Math.max(before, d);
              else after = Math.max(after, d);
            }
        expect(before).toBeLessThan(1e-5);
        expect(after).toBeGreaterThan(1e-4); // later positions do see the change
      }
    });
  }
});

describe('BERT padding', () => {
  for (const attention of ['softmax', 'slay']) {
    it(`${attention}: outputs at real positions do not change when padded positions' tokens change`, () => {
      model = createLanguageModel(config('bert', attention));
      const rng = new Rng(12);
      const b = 2;
      const l = 8;
      const realLength = [5, 8];
      const mask = new Float32Array(b * l);
      for (let r = 0; r < b; r++) for (let t = 0; t < realLength[r]; t++) mask[r * l + t] = 1;
      const ids = randomIds(rng, b * l, 23);
      const changed = Int32Array.from(ids);
      for (let t = 5; t < l; t++) changed[t] = (ids[t] + 7) % 23;
      const run = (x: Int32Array) => tf.tidy(() => model!.logits(tf.tensor2d(x, [b, l], 'int32'), tf.tensor2d(mask, [b, l])).arraySync());
      const base = run(ids);
      const other = run(changed);
      let real = 0;
      for (let r = 0; r < b; r++)
        for (let t = 0; t < realLength[r]; t++) for (let v = 0; v < 23; v++) real = Math.max(real, Math.abs(base[r][t][v] - other[r][t][v]));
      expect(real).toBeLessThan(1e-5);
      // Bidirectional: without the mask, the real positions would see the change.
      const unmasked = (x: Int32Array) =>
        tf.tidy(() => model!.logits(tf.tensor2d(x, [b, l], 'int32'), tf.tensor2d(new Float32Array(b * l).fill(1), [b, l])).arraySync());
      const u0 = unmasked(ids);
      const u1 = unmasked(changed);
      expect(Math.abs(u0[0][0][0] - u1[0][0][0]) + Math.abs(u0[0][1][3] - u1[0][1][3])).toBeGreaterThan(1e-6);
    });
  }
});

describe('loss and dropout', () => {
  it('lossSum equals the cross-entropy of logits() over the labelled positions, in float64', () => {
    model = createLanguageModel(config('bert'));
    const rng = new Rng(13);
    const b = 2;
    const l = 8;
    const ids = randomIds(rng, b * l, 23);
    const labels = new Int32Array(b * l).fill(-100);
    for (const i of [1, 4, 9, 15]) labels[i] = rng.int(23);
    const mask = new Float32Array(b * l).fill(1);
    const logits = tf.tidy(() => model!.logits(tf.tensor2d(ids, [b, l], 'int32'), tf.tensor2d(mask, [b, l])).arraySync());
    let ref = 0;
    for (let i = 0; i < b * l; i++) {
      if (labels[i] === -100) continue;
      const row = logits[Math.floor(i / l)][i % l];
      const max = Math.max(...row);
      ref += max + Math.log(row.reduce((s, v) => s + Math.exp(v - max), 0)) - row[labels[i]];
    }
    const { value, count } = tf.tidy(() => {
      const out = model!.lossSum({ batchSize: b, seqLen: l, inputIds: ids, labels, attentionMask: mask });
      return { value: out.loss.dataSync()[0], count: out.count };
    });
    expect(count).toBe(4);
    expect(value).toBeCloseTo(ref, 4);
  });

  it('labelled rows padded to a bucket (weight-0 rows) give the same loss and gradients as unpadded', () => {
    model = createLanguageModel(config('bert'));
    const rng = new Rng(15);
    const [b, l] = [2, 8];
    const labels = new Int32Array(b * l).fill(-100);
    for (const i of [0, 3, 6, 10, 13]) labels[i] = rng.int(23);
    const batch = { batchSize: b, seqLen: l, inputIds: randomIds(rng, b * l, 23), labels, attentionMask: new Float32Array(b * l).fill(1) };
    const variables = [...model.parameters().values()];
    const run = (bucket: number) =>
      tf.tidy(() => {
        const inputs = model!.lossInputs(batch, bucket)!;
        const { value, grads } = tf.variableGrads(() => model!.lossOf(inputs), variables);
        return {
          rows: inputs.rows!.shape[0],
          count: inputs.count,
          value: value.dataSync()[0],
          grads: variables.map((v) => Array.from(grads[v.name].dataSync())),
        };
      });
    const plain = run(1);
    const padded = run(4);
    expect([plain.rows, padded.rows, padded.count]).toEqual([5, 8, 5]);
    expect(Math.abs(padded.value - plain.value)).toBeLessThan(1e-6 * plain.value);
    const worst = Math.max(...padded.grads.flatMap((g, i) => g.map((x, j) => Math.abs(x - plain.grads[i][j]))));
    const scale = Math.max(...plain.grads.flat().map(Math.abs));
    expect(worst / scale).toBeLessThan(1e-5);
  });

  it('dropout masks are reproducible from the seed and off without one', () => {
    model = createLanguageModel({ ...config('gpt'), dropout: 0.3 });
    const rng = new Rng(14);
    const batch = { batchSize: 2, seqLen: 8, inputIds: randomIds(rng, 16, 23), labels: randomIds(rng, 16, 23) };
    const loss = (seed: number | null) => tf.tidy(() => model!.lossSum(batch, seed).loss.dataSync()[0]);
    expect(loss(123)).toBe(loss(123));
    expect(loss(123)).not.toBe(loss(124));
    expect(loss(null)).toBe(loss(null));
    expect(loss(123)).not.toBe(loss(null));
  });
});
