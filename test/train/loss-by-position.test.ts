// Validation loss by position bucket (evaluate's byPosition) against an independent host-side reference: the model's
// full logits at every position (LanguageModel.logits, not the labelled-rows path evaluate() takes), then in float64
// on the host −log softmax[target] at each labelled position, bucketed by its position in the sequence
// ([0,1), [1,2), [2,4), … to seqLen). GPT: the next-token positions; BERT: the masked tokens' positions. And the
// trainer's validation records (metrics.jsonl's by_position) against the same reference on the final model.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { perturbParameters } from '../helpers/perturb.ts';
import * as tf from '@tensorflow/tfjs';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import type { Batch } from '../../src/data/batch.ts';
import { createLanguageModel, IGNORE_LABEL } from '../../src/model/lm.ts';
import type { LanguageModel, LanguageModelConfig } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { collectEvalBatches, evaluate, positionBucketEdges } from '../../src/train/evaluate.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { loadModel, loadModelTokenizer } from '../../src/store/load-model.ts';
import { checkRecord, readMetrics, type MetricRecord } from '../../src/store/run-record.ts';
import { toWandbRow } from '../../src/telemetry/wandb.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { streamOptions } from '../../src/train/plan.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';
import { testBackend } from '../helpers/backend.ts';

let dir: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-by-position-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

let model: LanguageModel | null = null;
afterEach(() => {
  model?.dispose();
  model = null;
});

const VOCAB = 23;

function perturbed(kind: 'gpt' | 'bert'): LanguageModel {
  const config: LanguageModelConfig = {
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
    seed: 5,
  };
  return perturbParameters(createLanguageModel(config), 6);
}

/** A batch of random tokens labelled at `labelled` flat positions with random targets, −100 elsewhere. */
function batchOf(kind: 'gpt' | 'bert', rng: Rng, b: number, l: number, labelled: number[], attentionMask?: Float32Array): Batch {
  const labels = new Int32Array(b * l).fill(IGNORE_LABEL);
  for (const p of labelled) labels[p] = rng.int(VOCAB);
  const inputIds = Int32Array.from({ length: b * l }, () => rng.int(VOCAB));
  return { kind, batchSize: b, seqLen: l, inputIds, labels, attentionMask, tokens: labelled.length, bytes: 2 * labelled.length } as Batch;
}

/** Host float64: Σ −log softmax[target] and the count per bucket of `edges`, over the labelled positions of `batches`. */
function reference(m: LanguageModel, batches: readonly Batch[], edges: number[]): { nats: number[]; tokens: number[] } {
  const nats = new Array<number>(edges.length - 1).fill(0);
  const tokens = new Array<number>(edges.length - 1).fill(0);
  for (const batch of batches) {
    const { batchSize: b, seqLen: l } = batch;
    const logits = tf.tidy(() =>
      m.logits(tf.tensor2d(batch.inputIds, [b, l], 'int32'), batch.attentionMask ? tf.tensor2d(batch.attentionMask, [b, l]) : undefined),
    );
    const values = logits.dataSync();
    const vocab = logits.shape[2]!;
    logits.dispose();
    for (let p = 0; p < b * l; p++) {
      const target = batch.labels[p];
      if (target === IGNORE_LABEL) continue;
      const row = Array.from(values.subarray(p * vocab, (p + 1) * vocab));
      const max = Math.max(...row);
      const loss = max + Math.log(row.reduce((s, x) => s + Math.exp(x - max), 0)) - row[target];
      const bucket = edges.findIndex((from, i) => from <= p % l && p % l < edges[i + 1]);
      nats[bucket] += loss;
      tokens[bucket]++;
    }
  }
  return { nats, tokens };
}

describe('loss by position', () => {
  it('buckets double from [0,1) and the last ends at the sequence length', () => {
    expect(positionBucketEdges(1)).toEqual([0, 1]);
    expect(positionBucketEdges(2)).toEqual([0, 1, 2]);
    expect(positionBucketEdges(10)).toEqual([0, 1, 2, 4, 8, 10]);
    expect(positionBucketEdges(16)).toEqual([0, 1, 2, 4, 8, 16]);
  });

  for (const graph of [true, false]) {
    it(`GPT (graph ${graph}): each bucket's mean is the float64 reference's, their token-weighted mean the overall loss, no tensors left`, async () => {
      model = perturbed('gpt');
      const rng = new Rng(12);
      const [b, l] = [3, 10];
      // Next-token labels except at each row's last position and a few ignored ones; a second batch labelled sparsely.
      const all = Array.from({ length: b * l }, (_, p) => p);
      const batches = [
        batchOf(
          'gpt',
          rng,
          b,
          l,
          all.filter((p) => p % l !== l - 1 && p % 7 !== 3),
        ),
        batchOf('gpt', rng, b, l, [0, 5, 9, 11, 18, 29]),
      ];
      const plain = await evaluate(model, batches, graph);
      const before = tf.memory().numTensors;
      const result = await evaluate(model, batches, graph, true);
      expect(tf.memory().numTensors).toBe(before);
      // The overall numbers do not change when the buckets are asked for.
      expect(result.loss).toBeCloseTo(plain.loss, 6);
      expect(result.accuracy).toBe(plain.accuracy);
      expect(result.tokens).toBe(plain.tokens);
      const edges = positionBucketEdges(l);
      const ref = reference(model, batches, edges);
      const byPosition = result.byPosition!;
      expect(byPosition.map((r) => [r.from, r.to])).toEqual(edges.slice(0, -1).map((from, i) => [from, edges[i + 1]]));
      expect(byPosition.map((r) => r.tokens)).toEqual(ref.tokens);
      byPosition.forEach((r, i) => {
        expect(r.loss).toBeCloseTo(ref.nats[i] / ref.tokens[i], 4);
        expect(r.ppl).toBeCloseTo(Math.exp(r.loss), 10);
      });
      const weighted = byPosition.reduce((s, r) => s + r.loss * r.tokens, 0) / byPosition.reduce((s, r) => s + r.tokens, 0);
      expect(weighted).toBeCloseTo(result.loss, 5);
      // The buckets differ from one another: a sum over all positions in every bucket would not.
      expect(new Set(byPosition.map((r) => r.loss.toFixed(6))).size).toBe(byPosition.length);
    });
  }

  it("BERT: each masked token counts in its own position's bucket, padding never; an empty bucket is NaN with 0 tokens", async () => {
    model = perturbed('bert');
    const rng = new Rng(13);
    const [b, l] = [2, 12];
    const attentionMask = Float32Array.from({ length: b * l }, (_, p) => (p >= l && p % l >= 7 ? 0 : 1));
    // No masked position in [1,2) (flat 1 and 13).
    const batch = batchOf('bert', rng, b, l, [0, 3, 4, 8, 11, 12, 14, 17, 18], attentionMask);
    const before = tf.memory().numTensors;
    const result = await evaluate(model, [batch], true, true);
    expect(tf.memory().numTensors).toBe(before);
    const edges = positionBucketEdges(l);
    expect(edges).toEqual([0, 1, 2, 4, 8, 12]);
    const ref = reference(model, [batch], edges);
    const byPosition = result.byPosition!;
    expect(byPosition.map((r) => r.tokens)).toEqual([2, 0, 2, 3, 2]);
    expect(byPosition.map((r) => r.tokens)).toEqual(ref.tokens);
    expect(byPosition[1].loss).toBeNaN();
    for (const i of [0, 2, 3, 4]) expect(byPosition[i].loss).toBeCloseTo(ref.nats[i] / ref.tokens[i], 4);
    const weighted = byPosition.filter((r) => r.tokens > 0).reduce((s, r) => s + r.loss * r.tokens, 0) / result.tokens;
    expect(weighted).toBeCloseTo(result.loss, 5);
  });
});

describe('training-time validation', () => {
  it('every validation record in metrics.jsonl holds the loss by position; the final one is the float64 reference on the final model', async () => {
    const docs = syntheticDocuments(200, 7);
    const data = join(dir, 'data');
    await writeDataset(data, { train: [docs.slice(0, 170)], validation: [docs.slice(170)] }, 50);
    const tokenizerFile = join(dir, 'tokenizer.json');
    await trainByteLevelBpeFromTexts(docs.slice(0, 170), 300, tokenizerFile);
    const recipe = parseRecipe(
      `model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2, preset: transformer++ }
data: { dataset: ${data}, tokenizer: ${tokenizerFile}, seqLen: 12, shuffleBuffer: 0 }
train: { batchSize: 4, lr: 1e-2, warmupSteps: 1, evalInterval: 4, evalTokens: 200, logInterval: 4, runDir: ${join(dir, 'runs')}, seed: 3, maxTokens: 384 }
tensorboard: { enabled: false }
wandb: { enabled: false }
`,
      join(dir, 'tiny.yaml'),
    );
    const result = await runTraining(recipe);
    const val = readMetrics(result.runDir).filter((r) => r.split === 'val');
    expect(val.map((r) => r.step)).toEqual([0, 4, 8]);
    const edges = positionBucketEdges(12);
    for (const r of val) {
      expect(r.by_position!.map((b) => [b.from, b.to])).toEqual(edges.slice(0, -1).map((from, i) => [from, edges[i + 1]]));
      // The buckets hold the record's tokens, and their token-weighted mean is its loss.
      expect(r.by_position!.reduce((n, b) => n + b.tokens, 0)).toBe(result.finalVal.tokens);
      expect(r.by_position!.reduce((s, b) => s + b.loss! * b.tokens, 0) / result.finalVal.tokens).toBeCloseTo(r.loss, 5);
    }
    // The model before training and after it: the curve moved.
    expect(val[2].by_position!.map((b) => b.loss)).not.toEqual(val[0].by_position!.map((b) => b.loss));

    const loaded = await loadModel(result.finalDir);
    try {
      const tokenizer = await loadModelTokenizer(loaded);
      const { batches } = await collectEvalBatches(streamOptions(recipe, tokenizer), recipe.train.evalTokens, recipe.train.evalSample);
      const ref = reference(loaded.model as LanguageModel, batches, edges);
      expect(val[2].by_position!.map((b) => b.tokens)).toEqual(ref.tokens);
      val[2].by_position!.forEach((b, i) => expect(b.loss, `[${b.from}, ${b.to})`).toBeCloseTo(ref.nats[i] / ref.tokens[i], 4));
    } finally {
      loaded.model.dispose();
    }
  });
});

describe('by_position in a metric record', () => {
  const record: MetricRecord = {
    step: 8,
    tokens: 384,
    split: 'val',
    loss: 2,
    ppl: Math.exp(2),
    lr: 1e-3,
    grad_norm: null,
    tokens_per_s: 1,
    elapsed_s: 1,
    by_position: [
      { from: 0, to: 1, loss: 3.5, tokens: 4 },
      { from: 1, to: 2, loss: null, tokens: 0 },
      { from: 2, to: 4, loss: 1.25, tokens: 8 },
    ],
  };

  it('is checked when read, naming the bucket; W&B and TensorBoard get one scalar per bucket that holds tokens', () => {
    expect(() => checkRecord(record, 'm:1')).not.toThrow();
    const broken = (rows: unknown) => () => checkRecord({ ...record, by_position: rows }, 'm:1');
    expect(broken([{ from: 2, to: 1, loss: 1, tokens: 1 }])).toThrow(
      'm:1: metric record field by_position[0] must be {from, to, loss, tokens} with 0 ≤ from < to',
    );
    expect(broken([{ from: 0, to: 1, loss: 'x', tokens: 1 }])).toThrow('by_position[0] must be');
    expect(broken([])).toThrow('field by_position must be a list of 1 to 64 buckets');
    const row = toWandbRow(record);
    expect(Object.entries(row).filter(([k]) => k.includes('by_position'))).toEqual([
      ['val/loss_by_position/0-1', 3.5],
      ['val/loss_by_position/2-4', 1.25],
    ]);
  });
});
