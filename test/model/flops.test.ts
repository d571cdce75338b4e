// Model FLOPs per token (src/model/flops.ts) against closed forms written out here, and each linear mechanism's declared
// feature count against the state its recurrent form really carries.
import * as tf from '@tensorflow/tfjs';
import { describe, expect, it } from 'vitest';
import { attentionFeatureMap, attentionIsQuadratic, attentionNames, createAttention } from '../../src/model/attention/index.ts';
import { modelFlops } from '../../src/model/flops.ts';
import type { LanguageModelConfig } from '../../src/model/lm.ts';

const gpt2Small: LanguageModelConfig = {
  kind: 'gpt',
  vocabSize: 50257,
  maxSeqLen: 1024,
  dModel: 768,
  numLayers: 12,
  numHeads: 12,
  mlpRatio: 4,
  dropout: 0,
  bias: true,
  normPosition: 'pre',
  embeddingNorm: false,
  typeVocabSize: 0,
  activation: 'gelu-tanh',
  layerNormEps: 1e-5,
  attention: { name: 'softmax', options: {} },
  seed: 1,
};

describe('modelFlops', () => {
  it("GPT-2 small at 1,024 tokens: PaLM's 6N + 12·L·d·T with N the non-embedding matrices and the tied head", () => {
    const n = 12 * (4 * 768 * 768 + 2 * 768 * 3072) + 50257 * 768;
    const flops = modelFlops(gpt2Small, 1024);
    expect(flops.matrixWeights).toBe(n);
    expect(flops.dense).toBe(6 * n);
    expect(flops.attention).toBe(12 * 12 * 768 * 1024);
    expect(flops.perToken).toBe(6 * n + 12 * 12 * 768 * 1024);
  });

  it('a linear mechanism does not grow with the length; softmax grows by 12·L·d per token of context', () => {
    const performer = { ...gpt2Small, attention: { name: 'performer', options: { features: 64 } } };
    expect(modelFlops(performer, 16_384).perToken).toBe(modelFlops(performer, 1024).perToken);
    expect(modelFlops(gpt2Small, 2048).perToken - modelFlops(gpt2Small, 1024).perToken).toBe(12 * 12 * 768 * 1024);
    // Performer's φ: the projection 2·d_h·m and m exponentials per side; the contraction 4·m·(d_h + 1) per head.
    const dh = 64;
    const m = 64;
    const perLayer = 12 * (2 * (2 * dh * m + m) + 4 * m * (dh + 1));
    expect(modelFlops(performer, 1024).attention).toBe(3 * 12 * perLayer);
  });

  it("BERT's head counts on the masked fraction of positions only", () => {
    const bert = { ...gpt2Small, kind: 'bert', normPosition: 'post', embeddingNorm: true, typeVocabSize: 2 } as LanguageModelConfig;
    const all = modelFlops(bert, 128, 1);
    const masked = modelFlops(bert, 128, 0.15);
    const head = 768 * 768 + 50257 * 768;
    expect(all.matrixWeights - masked.matrixWeights).toBeCloseTo(0.85 * head, 6);
  });
});

describe('declared feature maps', () => {
  const linear = attentionNames().filter((name) => !attentionIsQuadratic(name));

  it('every mechanism that is not quadratic declares one, with positive counts', () => {
    expect(linear.length).toBeGreaterThanOrEqual(6);
    for (const name of linear) {
      const map = attentionFeatureMap(name, { numHeads: 2, headDim: 8, causal: true, seed: 3 });
      expect(map, name).not.toBeNull();
      expect(map!.features, name).toBeGreaterThan(0);
      expect(map!.flopsPerSide, name).toBeGreaterThan(0);
    }
    expect(attentionFeatureMap('softmax', { numHeads: 2, headDim: 8 })).toBeNull();
  });

  it.each(['slay', 'performer', 'darkformer', 'schoenbat', 'linear-elu', 'cosformer'])('%s: the features equal the rows of its recurrent state', (name) => {
    const config = { numHeads: 2, headDim: 8, causal: true, seed: 3 };
    const declared = attentionFeatureMap(name, config)!.features;
    const module = createAttention(name, config);
    const before = tf.memory().numTensors;
    const state = module.initState(1, 16);
    const sums = Object.values(state.tensors).find((t) => t.rank === 4)!;
    // [batch, heads, features, headDim + 1]: Σ φ(k)[v, 1]ᵀ.
    expect(sums.shape.slice(1), name).toEqual([2, declared, 9]);
    tf.dispose(Object.values(state.tensors));
    expect(tf.memory().numTensors).toBe(before);
    module.dispose();
  });
});
