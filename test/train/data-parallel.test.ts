// Data parallelism (train.dataParallel): replicas in worker threads give the update of trainStep over
// the same shards, with dropout, redrawn buffers, frozen weights and BERT's uneven label counts.
import { availableParallelism } from 'node:os';
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { describeDevice } from '../../src/backend/device.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import type { LanguageModelConfig, ModelBatch } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { resolveDataParallel } from '../../src/backend/device.ts';
import { DataParallelGroup, shardMicroBatches } from '../../src/train/data-parallel.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { trainStep } from '../../src/train/step.ts';
import type { StepResult } from '../../src/train/optimizer.ts';
import { concat, makeBatch, SEQ, VOCAB } from './batch-fixtures.ts';

beforeAll(async () => {
  await initBackend('wasm', { quiet: true });
});

interface Run {
  params: Map<string, Float32Array>;
  results: StepResult[];
}

/** Two optimizer steps; `step` is trainStep or a data-parallel group's step. */
async function train(
  config: LanguageModelConfig,
  steps: ModelBatch[][],
  replicas: number,
  opts: { dropout?: boolean; trainable?: (name: string) => boolean; shardsAsMicroBatches?: boolean } = {},
): Promise<Run> {
  const model = createLanguageModel(config);
  const trainable = new Map([...model.parameters()].filter(([n]) => opts.trainable?.(n) ?? true));
  const optimizer = new AdamW(trainable, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
  const group = replicas > 1 ? await DataParallelGroup.start(model, replicas) : null;
  const results: StepResult[] = [];
  try {
    for (let s = 0; s < steps.length; s++) {
      model.onTrainStep(s);
      const stepOpts = { lr: 1e-2, clip: 0.5, dropoutSeed: opts.dropout ? 1000 + s : null, trainable };
      if (group) {
        results.push(await group.step(optimizer, steps[s], stepOpts));
      } else {
        // The reference: the shards of every micro-batch as micro-batches, in (micro-batch, replica) order.
        const micro = opts.shardsAsMicroBatches ? steps[s].flatMap((b) => shardMicroBatches([b], 2, null).map((sh) => sh.batches[0])) : steps[s];
        results.push(await trainStep(model, optimizer, micro, stepOpts));
      }
    }
    return { params: new Map([...model.parameters()].map(([n, v]) => [n, v.dataSync() as Float32Array])), results };
  } finally {
    await group?.close();
    optimizer.dispose();
    model.dispose();
  }
}

function expectSameRun(actual: Run, expected: Run, start: Map<string, Float32Array>, tolerance = 2e-5): void {
  for (let s = 0; s < expected.results.length; s++) {
    expect(actual.results[s].loss).toBeCloseTo(expected.results[s].loss, 5);
    expect(actual.results[s].gradNorm).toBeCloseTo(expected.results[s].gradNorm, 4);
    expect(actual.results[s].tokens).toBe(expected.results[s].tokens);
  }
  let maxDiff = 0;
  let maxMove = 0;
  for (const [name, values] of expected.params) {
    const other = actual.params.get(name)!;
    const initial = start.get(name)!;
    for (let i = 0; i < values.length; i++) {
      maxDiff = Math.max(maxDiff, Math.abs(values[i] - other[i]));
      maxMove = Math.max(maxMove, Math.abs(values[i] - initial[i]));
    }
  }
  expect(maxMove).toBeGreaterThan(1e-3); // the parameters did move
  expect(maxDiff).toBeLessThan(tolerance);
}

function initialParameters(config: LanguageModelConfig): Map<string, Float32Array> {
  const model = createLanguageModel(config);
  const out = new Map([...model.parameters()].map(([n, v]) => [n, v.dataSync().slice() as Float32Array]));
  model.dispose();
  return out;
}

const config = (kind: 'gpt' | 'bert', attention: LanguageModelConfig['attention'], dropout = 0): LanguageModelConfig => ({
  kind,
  vocabSize: VOCAB,
  maxSeqLen: SEQ,
  dModel: 12,
  numLayers: 2,
  numHeads: 2,
  mlpRatio: 2,
  dropout,
  bias: true,
  attention,
  seed: 9,
});

describe('data-parallel replicas', () => {
  it('shards: contiguous rows, sizes differing by at most one, none empty, seeds in (micro-batch, replica) order', () => {
    const rng = new Rng(3);
    const batches = [makeBatch('gpt', 5, rng), makeBatch('gpt', 1, rng)];
    const shards = shardMicroBatches(batches, 2, 7);
    expect(shards.map((s) => s.batches.map((b) => b.batchSize))).toEqual([[3, 1], [2]]);
    expect([...shards[1].batches[0].inputIds]).toEqual([...batches[0].inputIds.subarray(3 * SEQ)]);
    expect(shards[0].seeds[1]).not.toBe(shards[1].seeds[0]);
    expect(shardMicroBatches(batches, 1, null)[0].batches).toHaveLength(2);
    // data.documentMask's document ids go with their rows.
    const documentIds = Int32Array.from({ length: 5 * SEQ }, (_, i) => i);
    const [first, second] = shardMicroBatches([{ ...batches[0], documentIds }], 2, null);
    expect([...first.batches[0].documentIds!]).toEqual([...documentIds.subarray(0, 3 * SEQ)]);
    expect([...second.batches[0].documentIds!]).toEqual([...documentIds.subarray(3 * SEQ)]);
  });

  it('GPT, performer redrawn every step, dropout: 2 replicas = trainStep over the same shards', async () => {
    const c = config('gpt', { name: 'performer', options: { features: 8, redrawInterval: 1 } }, 0.1);
    const rng = new Rng(1);
    const steps = [0, 1].map(() => [makeBatch('gpt', 3, rng), makeBatch('gpt', 2, rng)]);
    const parallel = await train(c, steps, 2, { dropout: true });
    const reference = await train(c, steps, 1, { dropout: true, shardsAsMicroBatches: true });
    expectSameRun(parallel, reference, initialParameters(c));
  });

  it('BERT (uneven labels and padding), frozen all but q/k/v, 3 replicas = one batch of all rows', async () => {
    const c = config('bert', { name: 'softmax', options: {} });
    const rng = new Rng(2);
    const steps = [0, 1].map(() => [makeBatch('bert', 4, rng), makeBatch('bert', 3, rng)]);
    const trainable = (name: string) => /\.attn\.(q|k|v)\./.test(name);
    const parallel = await train(c, steps, 3, { trainable });
    const whole = await train(
      c,
      steps.map((micro) => [concat(micro)]),
      1,
      { trainable },
    );
    const initial = initialParameters(c);
    expectSameRun(parallel, whole, initial);
    for (const [name, values] of parallel.params) {
      if (!trainable(name)) expect(values, name).toEqual(initial.get(name)); // frozen stay bit-identical
    }
  });

  it('leaks no tensors across steps, on the main thread or in the replicas', async () => {
    const model = createLanguageModel(config('gpt', { name: 'softmax', options: {} }));
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
    const group = await DataParallelGroup.start(model, 2);
    const rng = new Rng(5);
    const counts: number[] = [];
    const replicaCounts: number[] = [];
    for (let s = 0; s < 4; s++) {
      await group.step(optimizer, [makeBatch('gpt', 4, rng)], { lr: 1e-3, clip: 1, dropoutSeed: null });
      counts.push(tf.memory().numTensors);
      replicaCounts.push(group.replicaTensors[0]);
    }
    await group.close();
    optimizer.dispose();
    model.dispose();
    expect(new Set(counts).size).toBe(1);
    expect(replicaCounts[0]).toBeGreaterThan(0);
    expect(new Set(replicaCounts).size).toBe(1);
  });

  it("a replica's error reaches the caller, naming the replica and the cause; the main thread's too", async () => {
    const model = createLanguageModel(config('gpt', { name: 'softmax', options: {} }));
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
    const group = await DataParallelGroup.start(model, 2);
    const bad = makeBatch('gpt', 2, new Rng(6));
    bad.labels[SEQ + 1] = VOCAB + 5; // row 1 → replica 1
    await expect(group.step(optimizer, [bad], { lr: 1e-3, clip: 1, dropoutSeed: null })).rejects.toThrow(
      /data-parallel replica 1: batch label 24 at position 1 is outside the vocabulary/,
    );
    await group.close();
    // The main thread's own shard failing while a replica computes: its error, and nothing left unhandled.
    const other = await DataParallelGroup.start(model, 2);
    const badHere = makeBatch('gpt', 2, new Rng(7));
    badHere.labels[2] = VOCAB + 1; // row 0 → the main thread
    await expect(other.step(optimizer, [badHere], { lr: 1e-3, clip: 1, dropoutSeed: null })).rejects.toThrow(
      /^batch label 20 at position 2 is outside the vocabulary/,
    );
    const fine = await other.step(optimizer, [makeBatch('gpt', 2, new Rng(8))], { lr: 1e-3, clip: 1, dropoutSeed: null });
    expect(fine.applied).toBe(true); // the group still works after a step that failed on the main thread
    await other.close();
    optimizer.dispose();
    model.dispose();
  });

  it('resolveDataParallel: auto = cores on CPU backends, 1 on tensorflow, never more than the batch rows', () => {
    const [tensorflow, wasm, cpu] = (['tensorflow', 'wasm', 'cpu'] as const).map((name) => describeDevice(name));
    expect(resolveDataParallel('auto', tensorflow, 8)).toBe(1);
    expect(resolveDataParallel('auto', wasm, 1)).toBe(1);
    expect(resolveDataParallel('auto', wasm, 64)).toBe(Math.min(64, availableParallelism()));
    expect(resolveDataParallel(4, wasm, 3)).toBe(3);
    expect(resolveDataParallel(2, cpu, 8)).toBe(2);
  });
});
