// Document masking through the model (docs/attention.md, "Documents kept apart"): a batch's document ids become the
// layout the attention takes (documentLayout), and a packed row's hidden states and loss equal those of its documents
// run alone — position embeddings restarting at each document — for GPT (causal) and BERT (bidirectional) bodies.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import { createLanguageModel, documentLayout, IGNORE_LABEL, type LanguageModelConfig } from '../../src/model/lm.ts';
import { testBackend } from '../helpers/backend.ts';

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

const [B, L, V] = [2, 8, 23];
/** Document lengths of each row. */
const LENGTHS = [
  [3, 4, 1],
  [1, 7],
];
const documentIdsOf = (lengths: number[][]) =>
  Int32Array.from(lengths.flatMap((row) => row.flatMap((len, doc) => Array.from({ length: len }, () => 10 * doc + 3))));

function config(kind: 'gpt' | 'bert', attention: string, options: Record<string, unknown>, body: Partial<LanguageModelConfig> = {}): LanguageModelConfig {
  return {
    ...body,
    kind,
    vocabSize: V,
    maxSeqLen: L,
    dModel: 16,
    numLayers: 2,
    numHeads: 2,
    mlpRatio: 2,
    dropout: 0,
    bias: true,
    attention: { name: attention, options },
    seed: 5,
  };
}

describe('documentLayout', () => {
  it('numbers the documents of each row from 0 by their boundaries and restarts positions there', () => {
    const { ids, positions } = documentLayout(Int32Array.from([7, 7, 2, 2, 2, 9, 4, 4, 4, 4, 4, 4]), 2, 6);
    expect(Array.from(ids)).toEqual([0, 0, 1, 1, 1, 2, 0, 0, 0, 0, 0, 0]);
    expect(Array.from(positions)).toEqual([0, 1, 0, 1, 2, 0, 0, 1, 2, 3, 4, 5]);
  });

  it('refuses ids that do not cover the batch', () => {
    expect(() => documentLayout(new Int32Array(5), 2, 3)).toThrow(/documentIds has 5 entries, expected batchSize × seqLen = 6/);
  });
});

const CASES: Array<[string, Record<string, unknown>]> = [
  ['softmax', {}],
  ['slay', { prfFeatures: 8, anchors: 4, chunkSize: 2 }],
  ['performer', { features: 16, chunkSize: 2 }],
  ['cosformer', { chunkSize: 2, reweightLength: L }],
];

/** Transformer++'s body: rotary positions restart per document as learned ones do. */
const TRANSFORMER_PP: Partial<LanguageModelConfig> = { positional: 'rope', mlp: 'swiglu', norm: 'rmsnorm' };

describe.each(CASES)('%s', (name, options) => {
  it.each([
    ['gpt', {}],
    ['bert', {}],
    ['gpt', TRANSFORMER_PP],
  ] as const)('%s %o: a packed batch with its documents equals each document run alone', (kind, body) => {
    const model = createLanguageModel(config(kind, name, options, body));
    const rng = new Rng(41);
    const inputIds = Int32Array.from({ length: B * L }, () => rng.int(V));
    const documentIds = documentIdsOf(LENGTHS);
    const layout = documentLayout(documentIds, B, L);
    const [packed, mixed] = tf.tidy(() => {
      const ids = tf.tensor2d(inputIds, [B, L], 'int32');
      const documents = { ids: tf.tensor2d(layout.ids, [B, L]), positions: tf.tensor2d(layout.positions, [B, L]) };
      return [model.body.forward(ids, { documents }).arraySync(), model.body.forward(ids).arraySync()];
    });
    let worst = 0;
    let worstMixed = 0;
    LENGTHS.forEach((row, b) => {
      let start = 0;
      for (const len of row) {
        const alone = tf.tidy(() => model.body.forward(tf.tensor2d(inputIds.slice(b * L + start, b * L + start + len), [1, len], 'int32')).arraySync());
        alone.forEach((expected, t) => {
          const scale = Math.max(...expected.map(Math.abs));
          worst = Math.max(worst, ...packed[b * L + start + t].map((x, i) => Math.abs(x - expected[i]) / scale));
          worstMixed = Math.max(worstMixed, ...mixed[b * L + start + t].map((x, i) => Math.abs(x - expected[i]) / scale));
        });
        start += len;
      }
    });
    expect(worst).toBeLessThan(1e-4);
    expect(worstMixed).toBeGreaterThan(1e-2); // without its documents the row mixes them
    model.dispose();
  });

  it('gpt: the loss of a packed batch with documentIds is the sum of its documents’ losses', () => {
    const model = createLanguageModel(config('gpt', name, options));
    const rng = new Rng(42);
    const inputIds = Int32Array.from({ length: B * L }, () => rng.int(V));
    const labels = Int32Array.from({ length: B * L }, (_, i) => (i % 5 === 4 ? IGNORE_LABEL : rng.int(V)));
    const documentIds = documentIdsOf(LENGTHS);
    const packed = tf.tidy(() => model.lossSum({ batchSize: B, seqLen: L, inputIds, labels, documentIds }).loss.dataSync()[0]);
    let alone = 0;
    LENGTHS.forEach((row, b) => {
      let start = 0;
      for (const len of row) {
        const slice = (x: Int32Array) => x.slice(b * L + start, b * L + start + len);
        alone += tf.tidy(() => model.lossSum({ batchSize: 1, seqLen: len, inputIds: slice(inputIds), labels: slice(labels) }).loss.dataSync()[0]);
        start += len;
      }
    });
    expect(Math.abs(packed - alone) / alone).toBeLessThan(1e-5);
    model.dispose();
  });
});
