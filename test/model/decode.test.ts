// Incremental decoding: next-token logits from the layers' recurrent states equal the full forward's
// logits at every position; sampling honours temperature 0 (argmax), top-k and top-p and matches
// softmax(logits/T) in distribution; generate with temperature 0 equals greedy decoding by full forward.
import { perturbParameters } from '../helpers/perturb.ts';
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { generateTokens, IncrementalDecoder, nucleus, sampleToken } from '../../src/model/decode.ts';
import { createLanguageModel, type LanguageModel, type LanguageModelConfig } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { relL2 } from '../helpers/reference.ts';

const VOCAB = 23;
const MAX_LEN = 12;

/** A tiny GPT with weights drawn larger than the init, so attention and position visibly matter. */
function tinyGpt(attention: string, options: Record<string, unknown> = {}, architecture: Partial<LanguageModelConfig> = {}): LanguageModel {
  const model = createLanguageModel({
    kind: 'gpt',
    vocabSize: VOCAB,
    maxSeqLen: MAX_LEN,
    dModel: 16,
    numLayers: 2,
    numHeads: 2,
    mlpRatio: 2,
    dropout: 0.1,
    bias: true,
    attention: { name: attention, options },
    seed: 7,
    ...architecture,
  });
  return perturbParameters(model, 99);
}

/** Transformer++: rotary positions (at each decoded position), SwiGLU, RMSNorm, no biases. */
const TRANSFORMER_PP: Partial<LanguageModelConfig> = { positional: 'rope', mlp: 'swiglu', norm: 'rmsnorm', bias: false };

const MODELS: Array<[string, string, Record<string, unknown>, Partial<LanguageModelConfig>?]> = [
  ['softmax', 'softmax', {}],
  ['performer', 'performer', { features: 16, chunkSize: 4 }],
  ['linear-elu', 'linear-elu', { chunkSize: 4 }],
  ['cosformer (M = maxSeqLen)', 'cosformer', { chunkSize: 4, reweightLength: MAX_LEN }],
  ['softmax, Transformer++', 'softmax', {}, TRANSFORMER_PP],
  ['performer, Transformer++', 'performer', { features: 16, chunkSize: 4 }, TRANSFORMER_PP],
];

function randomIds(rng: Rng, n: number): number[] {
  return Array.from({ length: n }, () => rng.int(VOCAB));
}

/** Greedy continuation recomputing the full forward over the whole prefix for every token. */
function greedyByFullForward(model: LanguageModel, prompt: number[], count: number): number[] {
  const ids = [...prompt];
  for (let i = 0; i < count; i++) {
    const row = tf.tidy(() => {
      const logits = model.logits(tf.tensor2d([ids], [1, ids.length], 'int32'));
      return tf.slice(logits, [0, ids.length - 1, 0], [1, 1, VOCAB]).dataSync();
    });
    ids.push(sampleToken(row, { temperature: 0, topK: 0 }, new Rng(0)));
  }
  return ids.slice(prompt.length);
}

describe.each(MODELS)('GPT with %s', (_, attention, options, architecture) => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it('incremental logits equal the full forward at every position (batch of 2), without leaks', () => {
    const model = tinyGpt(attention, options, architecture);
    const rng = new Rng(3);
    const rows = [randomIds(rng, MAX_LEN), randomIds(rng, MAX_LEN)];
    const full = tf.tidy(() => model.logits(tf.tensor2d(rows, [2, MAX_LEN], 'int32')).arraySync());
    const before = tf.memory().numTensors;
    const decoder = new IncrementalDecoder(model, 2);
    let worst = 0;
    for (let t = 0; t < MAX_LEN; t++) {
      const logits = decoder.feed([rows[0][t], rows[1][t]]);
      const got = logits.arraySync();
      logits.dispose();
      worst = Math.max(worst, relL2(got, [full[0][t], full[1][t]]));
    }
    expect(worst).toBeLessThan(1e-5);
    expect(() => decoder.feed([0, 0])).toThrow(/maxSeqLen 12 is reached/);
    decoder.dispose();
    expect(tf.memory().numTensors).toBe(before);
    model.dispose();
  });

  it('generate at temperature 0 equals greedy decoding by full forward', () => {
    const model = tinyGpt(attention, options, architecture);
    const prompt = randomIds(new Rng(4), 3);
    const { tokens, truncated } = generateTokens(model, prompt, { temperature: 0, topK: 50, maxNewTokens: 6, seed: 1 });
    expect(truncated).toBe(false);
    expect(tokens).toEqual(greedyByFullForward(model, prompt, 6));
    model.dispose();
  });

  it('a prompt fed in blocks (prefill) gives the logits of the full forward, then decoding goes on from there', () => {
    const model = tinyGpt(attention, options, architecture);
    const rng = new Rng(6);
    const rows = [randomIds(rng, MAX_LEN), randomIds(rng, MAX_LEN)];
    const full = tf.tidy(() => model.logits(tf.tensor2d(rows, [2, MAX_LEN], 'int32')).arraySync());
    const decoder = new IncrementalDecoder(model, 2);
    const after = (t: number) => [full[0][t], full[1][t]];
    for (const [start, end] of [
      [0, 7],
      [7, 8],
      [8, 12],
    ]) {
      const logits = decoder.feedBlock(rows.map((row) => row.slice(start, end)));
      expect(relL2(logits.arraySync(), after(end - 1)), `after ${end} tokens`).toBeLessThan(1e-5);
      logits.dispose();
    }
    expect(() => decoder.feedBlock([[1], [2]])).toThrow(/maxSeqLen 12 is reached/);
    decoder.dispose();
    const prompt = randomIds(new Rng(7), 7);
    const greedy = { temperature: 0, topK: 0, maxNewTokens: 4, seed: 1 };
    expect(generateTokens(model, prompt, { ...greedy, prefillBlock: 3 }).tokens).toEqual(generateTokens(model, prompt, { ...greedy, prefillBlock: 1 }).tokens);
    model.dispose();
  });
});

describe('sampling', () => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it('temperature 0 is argmax; top-k never leaves the k most likely tokens', () => {
    const logits = [0.1, 2, -1, 1.5, 1.9, 0];
    expect(sampleToken(logits, { temperature: 0, topK: 0 }, new Rng(1))).toBe(1);
    const rng = new Rng(2);
    const seen = new Set<number>();
    for (let i = 0; i < 300; i++) seen.add(sampleToken(logits, { temperature: 5, topK: 3 }, rng));
    expect([...seen].sort()).toEqual([1, 3, 4]);
  });

  it('top-k = 1 is greedy, whatever the temperature and seed', () => {
    const logits = [0.1, 2, -1, 1.5, 1.9, 0];
    const rng = new Rng(3);
    for (let i = 0; i < 50; i++) expect(sampleToken(logits, { temperature: 3, topK: 1 }, rng)).toBe(1);
    const model = tinyGpt('linear-elu');
    const greedy = generateTokens(model, [1, 2], { temperature: 0, topK: 0, maxNewTokens: 6, seed: 0 }).tokens;
    expect(generateTokens(model, [1, 2], { temperature: 2, topK: 1, maxNewTokens: 6, seed: 9 }).tokens).toEqual(greedy);
    model.dispose();
  });

  it('top-p keeps exactly the fewest most likely tokens whose mass reaches p', () => {
    // Dyadic probabilities: the partial sums are exact in float64.
    const probabilities = [0.125, 0.5, 0.0625, 0.25, 0.0625];
    expect(nucleus(probabilities, 0.5)).toEqual([1]);
    expect(nucleus(probabilities, 0.5001)).toEqual([1, 3]);
    expect(nucleus(probabilities, 0.75)).toEqual([1, 3]);
    expect(nucleus(probabilities, 0.8)).toEqual([1, 3, 0]);
    expect(nucleus(probabilities, 0.9375)).toEqual([1, 3, 0, 2]); // of two equal ones, the lower id
    expect(nucleus(probabilities, 1)).toEqual([1, 3, 0, 2, 4]);
    expect(
      nucleus(
        probabilities.map((q) => q * 8),
        0.75,
      ),
    ).toEqual([1, 3]); // unnormalised weights alike

    // Sampling with top-p 0.75 at T = 1 draws only from {1, 3}, in the ratio 2 : 1 (within 4 standard errors).
    const logits = probabilities.map(Math.log);
    const rng = new Rng(8);
    const counts = new Map<number, number>();
    const n = 3000;
    for (let i = 0; i < n; i++) {
      const id = sampleToken(logits, { temperature: 1, topK: 0, topP: 0.75 }, rng);
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    expect([...counts.keys()].sort()).toEqual([1, 3]);
    expect(Math.abs(counts.get(1)! / n - 2 / 3)).toBeLessThan(4 * Math.sqrt(2 / 9 / n));
    // After top-k: the nucleus is taken of the k survivors' renormalised mass.
    for (let i = 0; i < 200; i++) expect([1, 3]).toContain(sampleToken(logits, { temperature: 1, topK: 3, topP: 0.85 }, rng));
    const model = tinyGpt('softmax');
    for (const topP of [0, -0.5, 1.5, Number.NaN]) {
      expect(() => generateTokens(model, [1], { temperature: 1, topK: 0, topP, maxNewTokens: 1, seed: 0 })).toThrow(/top-p must be a number > 0 and ≤ 1/);
    }
    model.dispose();
  });

  it('draws from softmax(logits / T): frequencies within 4 standard errors', () => {
    const logits = [1, 0, -0.5, 2];
    const temperature = 1.5;
    const weights = logits.map((x) => Math.exp(x / temperature));
    const total = weights.reduce((a, b) => a + b, 0);
    const n = 4000;
    const counts = new Array(logits.length).fill(0);
    const rng = new Rng(5);
    for (let i = 0; i < n; i++) counts[sampleToken(logits, { temperature, topK: 0 }, rng)]++;
    weights.forEach((w, i) => {
      const p = w / total;
      expect(Math.abs(counts[i] / n - p)).toBeLessThan(4 * Math.sqrt((p * (1 - p)) / n));
    });
  });

  it('the same seed gives the same sample; a BERT model is refused', () => {
    const model = tinyGpt('linear-elu');
    const opts = { temperature: 1, topK: 10, maxNewTokens: 5, seed: 11 };
    expect(generateTokens(model, [1, 2], opts).tokens).toEqual(generateTokens(model, [1, 2], opts).tokens);
    const nucleusOpts = { ...opts, topK: 0, topP: 0.9 };
    expect(generateTokens(model, [1, 2], nucleusOpts).tokens).toEqual(generateTokens(model, [1, 2], nucleusOpts).tokens);
    model.dispose();
    const bert = createLanguageModel({
      kind: 'bert',
      vocabSize: VOCAB,
      maxSeqLen: MAX_LEN,
      dModel: 8,
      numLayers: 1,
      numHeads: 1,
      mlpRatio: 2,
      dropout: 0,
      bias: true,
      attention: { name: 'softmax', options: {} },
      seed: 1,
    });
    expect(() => new IncrementalDecoder(bert)).toThrow(/needs a GPT \(causal\) model; this one is 'bert'/);
    bert.dispose();
  });
});
