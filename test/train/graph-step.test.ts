// Training steps run as TensorFlow functions (train.graph, src/train/compiled-step.ts) against the
// same steps run op by op: every mechanism's losses and updated weights agree, also compiled by XLA
// (train.xla), the graph is really what ran (forward + backward, and AdamW's update), finetune
// freezing holds, a step reads back O(1) values whatever the model's size, data-parallel replicas
// follow train.graph, the synthetic-task runner gives the same accuracies, nothing leaks. Native
// backend only.
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { isTensorflowSetUp, SETUP_COMMAND } from '../../src/backend/native-build.ts';
import { attentionNames } from '../../src/model/attention/index.ts';
import { createLanguageModel, type LanguageModel, type ModelBatch } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { graphStatus } from '../../src/train/compiled-step.ts';
import { partitionParameters } from '../../src/train/finetune.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { readback, readSince } from '../../src/backend/readback.ts';
import { trainOnTask } from '../../src/paper/task-runner.ts';
import { DataParallelGroup } from '../../src/train/data-parallel.ts';
import { evaluate } from '../../src/train/evaluate.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { trainStep } from '../../src/train/step.ts';

const available = isTensorflowSetUp();
const STEPS = 5;

function tinyModel(attention: string, kind: 'gpt' | 'bert' = 'gpt', dropout = 0): LanguageModel {
  return createLanguageModel({
    kind,
    vocabSize: 61,
    maxSeqLen: 16,
    dModel: 16,
    numLayers: 2,
    numHeads: 2,
    mlpRatio: 4,
    dropout,
    bias: true,
    attention: { name: attention, options: {} },
    seed: 4,
  });
}

/** A fresh tiny model trained by `train` and disposed (models share variable names: one at a time). */
async function trainFresh(
  attention: string,
  kind: 'gpt' | 'bert',
  batches: ModelBatch[],
  graph: boolean,
  dropoutSeed: ((step: number) => number) | null = null,
  xla = false,
) {
  const model = tinyModel(attention, kind, dropoutSeed ? 0.2 : 0);
  try {
    return await train(model, batches, graph, model.parameters(), dropoutSeed, xla);
  } finally {
    model.dispose();
  }
}

/** STEPS optimizer steps on fixed batches: the losses, the weights after, and how the last step ran. */
async function train(
  model: LanguageModel,
  batches: ModelBatch[],
  graph: boolean,
  trainable = model.parameters(),
  dropoutSeed: ((step: number) => number) | null = null,
  xla = false,
) {
  const initial = new Map([...model.parameters()].map(([n, v]) => [n, Array.from(v.dataSync())]));
  const optimizer = new AdamW(trainable, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, update: graph ? 'recorded' : 'op-by-op', jit: xla });
  const losses: number[] = [];
  const tensorCounts: number[] = [];
  let optimizerStatus: string;
  try {
    for (const [i, batch] of batches.entries()) {
      // A learning rate that changes every step: it must reach the graph as an input, not a constant.
      losses.push(
        (await trainStep(model, optimizer, [batch], { lr: 1e-2 / (i + 1), clip: 1, dropoutSeed: dropoutSeed?.(i) ?? null, trainable, graph, jit: xla })).loss,
      );
      tensorCounts.push(tf.memory().numTensors);
    }
    optimizerStatus = optimizer.graphStatus();
  } finally {
    optimizer.dispose();
  }
  const weights = new Map([...model.parameters()].map(([n, v]) => [n, Array.from(v.dataSync())]));
  return { losses, initial, weights, status: graphStatus(model, batches[0], [...trainable.values()], dropoutSeed !== null), optimizerStatus, tensorCounts };
}

function maxRelativeDifference(a: Map<string, number[]>, b: Map<string, number[]>): number {
  let worst = 0;
  for (const [name, x] of a) {
    const y = b.get(name)!;
    const scale = Math.max(1e-3, ...x.map(Math.abs));
    worst = Math.max(worst, ...x.map((v, i) => Math.abs(v - y[i]) / scale));
  }
  return worst;
}

describe.skipIf(!available)(`training steps as TensorFlow graphs (skipped when not built: ${SETUP_COMMAND})`, () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
  });
  afterAll(async () => {
    await initBackend('cpu', { quiet: true });
  });

  const batchesFor = (kind: 'gpt' | 'bert', seed: number) => {
    const rng = new Rng(seed);
    return Array.from({ length: STEPS }, () => randomBatch(rng, kind, 2, 16, 61));
  };

  it.each(attentionNames())('%s: graph steps give the losses and weights of op-by-op steps', async (attention) => {
    const batches = batchesFor('gpt', 9);
    const graph = await trainFresh(attention, 'gpt', batches, true);
    const eager = await trainFresh(attention, 'gpt', batches, false);
    expect([graph.status, graph.optimizerStatus]).toEqual(['graph', 'graph']);
    expect([eager.status, eager.optimizerStatus]).toEqual(['not recorded', 'eager']); // op by op throughout
    graph.losses.forEach((loss, i) => expect(Math.abs(loss - eager.losses[i]), `step ${i + 1}`).toBeLessThan(1e-5 * Math.abs(eager.losses[i])));
    // Softmax is invariant to a shift of every key, so ∂loss/∂(k bias) is 0 and what either run
    // computes for it is float rounding, which Adam's normalisation turns into lr-sized steps.
    const compared = (w: Map<string, number[]>) => new Map([...w].filter(([n]) => !(attention === 'softmax' && n.endsWith('.attn.k.bias'))));
    // The two runs' gradients differ by float rounding (~1e-10 absolute here, as the fused and composed kernels do), and
    // Adam's normalisation turns the rounding of near-zero gradient entries into fractions of an lr-sized step.
    // GLA's per-head output RMSNorm scales up its small outputs at this init, and their rounding with them: measured
    // 7e-4 at its ε 1e-5 (within 5e-4 at ε 1e-2).
    expect(maxRelativeDifference(compared(graph.weights), compared(eager.weights))).toBeLessThan(attention === 'gla' ? 1.5e-3 : 5e-4);
    // The weights moved (a graph that returned stale or zero gradients would leave them near the start).
    expect(maxRelativeDifference(graph.weights, graph.initial)).toBeGreaterThan(1e-2);
    // Steps 3… ran as graphs: the tensor count stays flat.
    expect(new Set(graph.tensorCounts.slice(2)).size).toBe(1);
  });

  it.each(['softmax', 'slay', 'performer', 'darkformer'])('%s compiled by XLA: the losses and weights of op-by-op steps', async (attention) => {
    const batches = batchesFor('gpt', 21);
    const xla = await trainFresh(attention, 'gpt', batches, true, null, true);
    const eager = await trainFresh(attention, 'gpt', batches, false);
    expect([xla.status, xla.optimizerStatus]).toEqual(['graph', 'graph']); // 'graph (without XLA: …)' where XLA failed
    xla.losses.forEach((loss, i) => expect(Math.abs(loss - eager.losses[i]), `step ${i + 1}`).toBeLessThan(1e-5 * Math.abs(eager.losses[i])));
    const compared = (w: Map<string, number[]>) => new Map([...w].filter(([n]) => !(attention === 'softmax' && n.endsWith('.attn.k.bias'))));
    expect(maxRelativeDifference(compared(xla.weights), compared(eager.weights))).toBeLessThan(1e-4);
    expect(new Set(xla.tensorCounts.slice(2)).size).toBe(1);
  });

  it("a step reads back a constant handful of values into JavaScript, whatever the model's size", async () => {
    const readPerStep: number[] = [];
    for (const [dModel, numLayers] of [
      [16, 1],
      [64, 3],
    ]) {
      const model = createLanguageModel({
        kind: 'gpt',
        vocabSize: 61,
        maxSeqLen: 16,
        dModel,
        numLayers,
        numHeads: 2,
        mlpRatio: 4,
        dropout: 0,
        bias: true,
        attention: { name: 'performer', options: {} },
        seed: 4,
      });
      const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, update: 'recorded' });
      try {
        const batches = batchesFor('gpt', 17);
        let read = readback();
        for (const batch of batches) {
          const before = readback();
          await trainStep(model, optimizer, [batch], { lr: 1e-3, clip: 1, dropoutSeed: null, graph: true });
          read = readSince(before);
        }
        expect(graphStatus(model, batches[0], [...model.parameters().values()])).toBe('graph');
        readPerStep.push(read.values);
      } finally {
        optimizer.dispose();
        model.dispose();
      }
    }
    // The loss and the gradient norm: the same two values for 4× the width and 3× the layers.
    expect(readPerStep).toEqual([2, 2]);
  });

  it('data-parallel replicas follow train.graph: op by op when it is off, TensorFlow functions when on', async () => {
    for (const graph of [false, true]) {
      const model = tinyModel('performer');
      const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, update: graph ? 'recorded' : 'op-by-op' });
      const group = await DataParallelGroup.start(model, 2);
      try {
        for (const batch of batchesFor('gpt', 19)) await group.step(optimizer, [batch], { lr: 1e-3, clip: 1, dropoutSeed: null, graph });
        expect(group.replicaExecution[0], `train.graph ${graph}`).toBe(graph ? 'graph' : 'not recorded');
      } finally {
        await group.close();
        optimizer.dispose();
        model.dispose();
      }
    }
  });

  it('the synthetic-task runner: function steps give the accuracies and losses of op-by-op steps', async () => {
    for (const task of ['copy', 'sort']) {
      const run = (graph: boolean) =>
        trainOnTask({ task, attention: 'slay', seed: 42, steps: 12, batchSize: 8, evalSamples: 16, lr: 1e-3, weightDecay: 0.01, graph });
      const [functions, eager] = [await run(true), await run(false)];
      expect([functions.execution, eager.execution]).toEqual(['graph', 'eager']);
      expect(functions.accuracy, task).toBe(eager.accuracy);
      expect(Math.abs(functions.loss! - eager.loss!)).toBeLessThan(1e-5 * eager.loss!);
      functions.lossCurve.forEach((loss, i) => expect(Math.abs(loss - eager.lossCurve[i])).toBeLessThan(1e-5 * eager.lossCurve[i]));
    }
  });

  it('an overflowing step is dropped by the same rule in both modes: weights and moments untouched', async () => {
    for (const graph of [true, false]) {
      const model = tinyModel('softmax');
      const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, update: graph ? 'recorded' : 'op-by-op' });
      try {
        const batches = batchesFor('gpt', 23);
        await trainStep(model, optimizer, [batches[0]], { lr: 1e-3, clip: 1, dropoutSeed: null, graph });
        // An embedding row of 3e38 overflows the forward pass to Inf/NaN, as a diverged run does.
        const embedding = model.parameters().get('embed.tokens.weight')!;
        embedding.assign(tf.tidy(() => tf.mul(embedding, tf.scalar(3e38))));
        const before = new Map([...model.parameters()].map(([n, v]) => [n, Array.from(v.dataSync())]));
        const result = await trainStep(model, optimizer, [batches[1]], { lr: 1e-3, clip: 1, dropoutSeed: null, graph });
        expect(result.applied, `graph ${graph}`).toBe(false);
        expect(Number.isFinite(result.loss) && Number.isFinite(result.gradNorm)).toBe(false);
        for (const [name, v] of model.parameters()) expect(Array.from(v.dataSync()), name).toEqual(before.get(name));
        if (graph) expect(graphStatus(model, batches[1], [...model.parameters().values()])).toBe('graph');
      } finally {
        optimizer.dispose();
        model.dispose();
      }
    }
  });

  it.each(['gpt', 'bert'] as const)('%s validation as forward-only functions gives the loss and accuracy of op-by-op evaluation', async (kind) => {
    const model = tinyModel('slay', kind);
    try {
      const batches = batchesFor(kind, 29).map((b) => ({ ...b, kind, tokens: b.labels.filter((x) => x >= 0).length, bytes: 100 }));
      const eager = await evaluate(model, batches, false);
      const before = tf.memory().numTensors;
      const first = await evaluate(model, batches, true);
      const again = await evaluate(model, batches, true);
      expect(tf.memory().numTensors).toBe(before); // the functions hold no tfjs tensor
      for (const run of [first, again]) {
        expect(Math.abs(run.loss - eager.loss)).toBeLessThan(1e-5 * eager.loss);
        expect(run.accuracy).toBe(eager.accuracy);
        expect(run.tokens).toBe(eager.tokens);
      }
    } finally {
      model.dispose();
    }
  });

  it('dropout: graph steps draw the masks from the fed step seed, as op-by-op steps do', async () => {
    const batches = batchesFor('gpt', 13);
    const seeds = (offset: number) => (step: number) => 7919 * (step + offset);
    const graph = await trainFresh('performer', 'gpt', batches, true, seeds(1));
    const eager = await trainFresh('performer', 'gpt', batches, false, seeds(1));
    const otherMasks = await trainFresh('performer', 'gpt', batches, true, seeds(2));
    const noDropout = await trainFresh('performer', 'gpt', batches, true);
    expect(graph.status).toBe('graph');
    graph.losses.forEach((loss, i) => expect(Math.abs(loss - eager.losses[i]), `step ${i + 1}`).toBeLessThan(1e-5 * eager.losses[i]));
    expect(maxRelativeDifference(graph.weights, eager.weights)).toBeLessThan(1e-4);
    // Equal to eager steps, which draw each step's masks afresh: a graph that froze a mask would differ
    // from step 3 on. And the masks are on and follow the seed:
    for (const i of [2, 3, 4]) {
      expect(Math.abs(graph.losses[i] - otherMasks.losses[i]), `step ${i + 1}`).toBeGreaterThan(1e-4);
      expect(Math.abs(graph.losses[i] - noDropout.losses[i]), `step ${i + 1}`).toBeGreaterThan(1e-4);
    }
  });

  it('AdamW as a graph: the op-by-op update for every step and learning rate; a parameter without a gradient keeps its value and moments', () => {
    const rng = new Rng(12);
    const start = { a: Array.from({ length: 6 }, () => rng.normal()), b: Array.from({ length: 4 }, () => rng.normal()) };
    const grads = Array.from({ length: 5 }, () => Array.from({ length: 6 }, () => rng.normal()));
    const run = (graph: boolean) => {
      const a = tf.variable(tf.tensor2d(start.a, [2, 3]), true, `graph-adamw-${graph}.a.weight`);
      const b = tf.variable(tf.tensor1d(start.b), true, `graph-adamw-${graph}.b`);
      const optimizer = new AdamW(
        new Map<string, tf.Variable>([
          [a.name, a],
          [b.name, b],
        ]),
        { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, update: graph ? 'recorded' : 'op-by-op' },
      );
      try {
        const counts: number[] = [];
        grads.forEach((g, i) => {
          tf.tidy(() => optimizer.applyGradients(new Map([[a.name, tf.tensor2d(g, [2, 3])]]), 0.1 / (i + 1)));
          counts.push(tf.memory().numTensors);
        });
        const state = optimizer.getState();
        const bMoments = [...state.m.get(b.name)!.dataSync(), ...state.v.get(b.name)!.dataSync()];
        tf.dispose([...state.m.values(), ...state.v.values()]);
        return { a: Array.from(a.dataSync()), b: Array.from(b.dataSync()), bMoments, status: optimizer.graphStatus(), counts };
      } finally {
        optimizer.dispose();
        tf.dispose([a, b]);
      }
    };
    const graph = run(true);
    const eager = run(false);
    expect([graph.status, eager.status]).toEqual(['graph', 'eager']);
    expect(Math.max(...graph.a.map((x, i) => Math.abs(x - eager.a[i])))).toBeLessThan(1e-6);
    expect(Math.max(...graph.a.map((x, i) => Math.abs(x - start.a[i])))).toBeGreaterThan(0.1);
    expect(graph.b).toEqual(Array.from(Float32Array.from(start.b)));
    expect(graph.bMoments.every((x) => x === 0)).toBe(true);
    expect(new Set(graph.counts.slice(2)).size).toBe(1);
  });

  it('keeps frozen weights fixed under train.freeze all-but-qkv', async () => {
    const model = tinyModel('darkformer');
    try {
      const { trainable, frozen } = partitionParameters(model, 'all-but-qkv');
      const before = new Map([...frozen].map(([n, v]) => [n, Array.from(v.dataSync())]));
      const run = await train(model, batchesFor('gpt', 10), true, trainable);
      expect([run.status, run.optimizerStatus]).toEqual(['graph', 'graph']);
      for (const [name, values] of before) expect(run.weights.get(name), name).toEqual(values);
      const moved = [...trainable.keys()].filter((n) => maxRelativeDifference(new Map([[n, run.weights.get(n)!]]), new Map([[n, run.initial.get(n)!]])) > 0);
      expect(moved.length).toBe(trainable.size);
    } finally {
      model.dispose();
    }
  });

  it('BERT batches (a different count of masked rows each step, padded to one shape) train as op-by-op steps would', async () => {
    const batches = batchesFor('bert', 11);
    const graph = await trainFresh('performer', 'bert', batches, true);
    const eager = await trainFresh('performer', 'bert', batches, false);
    expect(new Set(batches.map((b) => b.labels.filter((x) => x >= 0).length)).size).toBeGreaterThan(1);
    expect(graph.status).toBe('graph');
    graph.losses.forEach((loss, i) => expect(Math.abs(loss - eager.losses[i])).toBeLessThan(1e-5 * Math.abs(eager.losses[i])));
    expect(maxRelativeDifference(graph.weights, eager.weights)).toBeLessThan(1e-4);
  });
});
