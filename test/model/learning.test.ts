// "The loss falls" on real text: the State of the Union demo corpus, a small tokenizer trained once,
// a very small model per attention mechanism, a few dozen AdamW steps on wasm.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { prepareDemoCorpus } from '../../src/data/prepare/demo-corpus.ts';
import { listShards } from '../../src/data/dataset.ts';
import { readTextBatches } from '../../src/data/arrow.ts';
import { openBatchStream } from '../../src/data/stream.ts';
import type { Batch } from '../../src/data/batch.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { evaluate } from '../../src/train/evaluate.ts';
import { trainStep } from '../../src/train/step.ts';
import { writeDataset } from '../data/stream-fixtures.ts';

const MECHANISMS = ['softmax', 'yat-spherical', 'slay', 'performer', 'darkformer', 'schoenbat', 'linear-elu', 'cosformer'];
const STEPS = 40;
const SEQ = 32;
const BATCH = 4;

let dir: string;
let tokenizer: TextTokenizer;
const batches: Record<'gpt' | 'bert', { train: Batch[]; val: Batch[] }> = { gpt: { train: [], val: [] }, bert: { train: [], val: [] } };

async function take(kind: 'gpt' | 'bert', split: 'train' | 'validation', count: number, dataset: string): Promise<Batch[]> {
  const stream = await openBatchStream({
    dataset,
    split,
    textColumn: 'text',
    tokenizer,
    kind,
    seqLen: SEQ,
    batchSize: BATCH,
    seed: 1,
    shuffleBuffer: split === 'train' ? 64 : 0,
    readAhead: 1,
  });
  const out: Batch[] = [];
  try {
    while (out.length < count) {
      const b = await stream.next();
      if (!b) break;
      out.push(b);
    }
  } finally {
    await stream.close();
  }
  return out;
}

beforeAll(async () => {
  await initBackend(testBackend('wasm'), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-learning-'));
  const corpus = join(dir, 'sotu');
  // In year order (--keep-order): the slice below is the earliest addresses, of one era, which the bounds were set on.
  await prepareDemoCorpus(corpus, true);
  // A slice: the first addresses of each split (≈ 1 MB of train text) keep tokenizing cheap.
  const firstTexts = async (split: 'train' | 'validation', count: number) => {
    const out: string[] = [];
    for (const shard of await listShards(corpus, split)) {
      for await (const { texts } of readTextBatches(shard, 'text')) for (const t of texts) if (t && out.length < count) out.push(t);
    }
    return out;
  };
  const train = await firstTexts('train', 25);
  const validation = await firstTexts('validation', 3);
  const dataset = join(dir, 'slice');
  await writeDataset(dataset, { train: [train], validation: [validation] }, 10);
  const tokenizerPath = join(dir, 'tokenizer.json');
  await trainByteLevelBpeFromTexts(train, 512, tokenizerPath);
  tokenizer = await TextTokenizer.load(tokenizerPath);
  for (const kind of ['gpt', 'bert'] as const) {
    batches[kind].train = await take(kind, 'train', STEPS, dataset);
    batches[kind].val = await take(kind, 'validation', 4, dataset);
  }
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function lossDrop(kind: 'gpt' | 'bert', attention: string): Promise<{ before: number; after: number }> {
  const model = createLanguageModel({
    kind,
    vocabSize: tokenizer.vocabSize,
    maxSeqLen: SEQ,
    dModel: 32,
    numLayers: 2,
    numHeads: 2,
    mlpRatio: 2,
    dropout: 0,
    bias: true,
    attention: { name: attention, options: {} },
    seed: 2,
  });
  const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.01 });
  try {
    const before = (await evaluate(model, batches[kind].val)).loss;
    for (const [step, batch] of batches[kind].train.entries()) {
      model.onTrainStep(step);
      await trainStep(model, optimizer, [batch], { lr: 1e-2, clip: 1, dropoutSeed: null });
    }
    const after = (await evaluate(model, batches[kind].val)).loss;
    return { before, after };
  } finally {
    optimizer.dispose();
    model.dispose();
  }
}

describe('the validation loss falls over a few dozen steps on the demo corpus', () => {
  it('has the data it needs', () => {
    expect(batches.gpt.train.length).toBe(STEPS);
    expect(batches.bert.train.length).toBe(STEPS);
  });

  for (const attention of MECHANISMS) {
    it(`GPT with ${attention}`, async () => {
      const { before, after } = await lossDrop('gpt', attention);
      // Untrained: ≈ ln 512 = 6.24 nats; 40 steps of 128 tokens bring it to ≈ 5.3.
      expect(before).toBeGreaterThan(5.8);
      expect(after).toBeLessThan(before - 0.75);
    });
  }

  it('BERT (masked LM) with softmax', async () => {
    const { before, after } = await lossDrop('bert', 'softmax');
    expect(before).toBeGreaterThan(5.8);
    expect(after).toBeLessThan(before - 0.5);
  });
});
