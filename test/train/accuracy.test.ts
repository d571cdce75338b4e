// Validation accuracy against an independent host-side reference: the model's full logits at every position
// (LanguageModel.logits, not the labelled-rows path evaluate() takes), then in float64 on the host the loss
// −log softmax[target] and argmax == target over exactly the positions whose label is not −100 (GPT: every
// next token except the ignored ones; BERT: the masked positions, never padding). Targets are set to the
// argmax at a chosen subset of positions, so the expected accuracy is known in advance.
import { perturbParameters } from '../helpers/perturb.ts';
import * as tf from '@tensorflow/tfjs';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import type { Batch } from '../../src/data/batch.ts';
import { createLanguageModel, IGNORE_LABEL } from '../../src/model/lm.ts';
import type { LanguageModel, LanguageModelConfig } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { evaluate } from '../../src/train/evaluate.ts';
import { testBackend } from '../helpers/backend.ts';

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

let model: LanguageModel | null = null;
afterEach(() => {
  model?.dispose();
  model = null;
});

const VOCAB = 29;

function config(kind: 'gpt' | 'bert'): LanguageModelConfig {
  return {
    kind,
    vocabSize: VOCAB,
    maxSeqLen: 12,
    dModel: 16,
    numLayers: 2,
    numHeads: 2,
    mlpRatio: 2,
    dropout: 0,
    bias: true,
    attention: { name: 'softmax', options: {} },
    seed: 11,
  };
}

/** A model whose predictions depend on the input (weights moved well off the init). */
function perturbed(kind: 'gpt' | 'bert'): LanguageModel {
  return perturbParameters(createLanguageModel(config(kind)), 4);
}

/** Host float64: the loss sum and the argmax hits over the labelled positions, from the full logits. */
function reference(m: LanguageModel, batch: Batch): { lossSum: number; correct: number; count: number } {
  const { batchSize: b, seqLen: l } = batch;
  const logits = tf.tidy(() => {
    const ids = tf.tensor2d(batch.inputIds, [b, l], 'int32');
    const mask = batch.attentionMask ? tf.tensor2d(batch.attentionMask, [b, l]) : undefined;
    return m.logits(ids, mask);
  });
  const values = logits.dataSync();
  logits.dispose();
  let lossSum = 0;
  let correct = 0;
  let count = 0;
  for (let p = 0; p < b * l; p++) {
    const target = batch.labels[p];
    if (target === IGNORE_LABEL) continue;
    const row = Array.from(values.subarray(p * VOCAB, (p + 1) * VOCAB));
    const max = Math.max(...row);
    const logSum = max + Math.log(row.reduce((s, x) => s + Math.exp(x - max), 0));
    lossSum += logSum - row[target];
    if (row.indexOf(max) === target) correct++;
    count++;
  }
  return { lossSum, correct, count };
}

/** The argmax token at every position (from the full logits). */
function argmaxes(m: LanguageModel, batch: Omit<Batch, 'labels'>): Int32Array {
  return tf.tidy(() => {
    const ids = tf.tensor2d(batch.inputIds, [batch.batchSize, batch.seqLen], 'int32');
    const mask = batch.attentionMask ? tf.tensor2d(batch.attentionMask, [batch.batchSize, batch.seqLen]) : undefined;
    return tf.argMax(m.logits(ids, mask), -1).dataSync() as Int32Array;
  });
}

/**
 * A batch labelled at `labelled` positions: every other one of them (in order) gets the model's argmax (a hit), the
 * rest a token that is not the argmax (a miss); everything else −100.
 */
function labelledBatch(
  m: LanguageModel,
  inputIds: Int32Array,
  b: number,
  l: number,
  labelled: number[],
  attentionMask?: Float32Array,
): { batch: Batch; hits: number } {
  const unlabelled = { kind: m.kind, batchSize: b, seqLen: l, inputIds, attentionMask, tokens: labelled.length, bytes: 3 * labelled.length };
  const best = argmaxes(m, unlabelled);
  const labels = new Int32Array(b * l).fill(IGNORE_LABEL);
  labelled.forEach((p, i) => {
    labels[p] = i % 2 === 0 ? best[p] : (best[p] + 1 + (p % (VOCAB - 1))) % VOCAB;
  });
  return { batch: { ...unlabelled, labels } as Batch, hits: Math.ceil(labelled.length / 2) };
}

describe('validation accuracy', () => {
  it('GPT: next-token top-1 accuracy over the loss’s tokens, ignored labels left out, no tensors left', async () => {
    model = perturbed('gpt');
    const rng = new Rng(9);
    const [b, l] = [3, 10];
    const ids = Int32Array.from({ length: b * l }, () => rng.int(VOCAB));
    // Next-token labels except at each row's last position and at a few ignored ones (as at document boundaries).
    const labelled = Array.from({ length: b * l }, (_, p) => p).filter((p) => p % l !== l - 1 && p % 7 !== 3);
    const { batch, hits } = labelledBatch(model, ids, b, l, labelled);
    const second = labelledBatch(
      model,
      Int32Array.from({ length: b * l }, () => rng.int(VOCAB)),
      b,
      l,
      labelled.slice(0, 9),
    );
    const ref = [reference(model, batch), reference(model, second.batch)];
    expect(ref[0].correct).toBe(hits); // the reference agrees with how the batch was built
    const before = tf.memory().numTensors;
    const result = await evaluate(model, [batch, second.batch]);
    expect(tf.memory().numTensors).toBe(before);
    const count = ref[0].count + ref[1].count;
    expect(result.tokens).toBe(count);
    expect(result.accuracy).toBeCloseTo((hits + second.hits) / count, 12);
    expect(result.accuracy).toBe((ref[0].correct + ref[1].correct) / count);
    expect(result.loss).toBeCloseTo((ref[0].lossSum + ref[1].lossSum) / count, 4);
  });

  it('BERT: masked-token accuracy over the masked positions only, padding never counted', async () => {
    model = perturbed('bert');
    const rng = new Rng(10);
    const [b, l] = [2, 12];
    const ids = Int32Array.from({ length: b * l }, () => rng.int(VOCAB));
    // Row 1 is padded after 7 tokens; masked positions are real tokens only.
    const attentionMask = Float32Array.from({ length: b * l }, (_, p) => (p >= l && p % l >= 7 ? 0 : 1));
    const masked = [0, 3, 4, 8, 11, 12, 14, 17];
    const { batch, hits } = labelledBatch(model, ids, b, l, masked, attentionMask);
    const ref = reference(model, batch);
    expect(ref).toMatchObject({ count: masked.length, correct: hits });
    const before = tf.memory().numTensors;
    const result = await evaluate(model, [batch]);
    expect(tf.memory().numTensors).toBe(before);
    expect(result.tokens).toBe(masked.length);
    expect(result.accuracy).toBe(hits / masked.length);
    expect(result.loss).toBeCloseTo(ref.lossSum / ref.count, 4);
    // Changing padded tokens (keys masked, no labels) changes neither number.
    const repadded = { ...batch, inputIds: Int32Array.from(ids, (id, p) => (attentionMask[p] === 0 ? (id + 5) % VOCAB : id)) };
    const again = await evaluate(model, [repadded]);
    expect(again.accuracy).toBe(result.accuracy);
    expect(again.loss).toBeCloseTo(result.loss, 5);
  });

  it('is NaN with no labelled token, like the loss', async () => {
    model = perturbed('gpt');
    const batch = {
      kind: 'gpt',
      batchSize: 1,
      seqLen: 4,
      inputIds: new Int32Array(4),
      labels: new Int32Array(4).fill(IGNORE_LABEL),
      tokens: 0,
      bytes: 0,
    } as Batch;
    const result = await evaluate(model, [batch]);
    expect(result.tokens).toBe(0);
    expect(result.accuracy).toBeNaN();
    expect(result.loss).toBeNaN();
  });
});
