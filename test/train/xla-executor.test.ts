// The xla step executor (src/train/step-executors/xla.ts, docs/xla.md) against the TensorFlow-function steps:
// every mechanism, GPT and BERT, a few steps with gradient accumulation — losses, gradient norms, weights and
// AdamW's moments after (pulled back) agree within float32 rounding; validation agrees; the non-finite rule
// leaves the state untouched; programs are cached by content; a run from compiled programs needs no
// TensorFlow. Needs the native backend and `npm run setup:xla`; skipped with one line otherwise.
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { currentDevice } from '../../src/backend/current.ts';
import { initBackend } from '../../src/backend/start.ts';
import { isXlaSetUp, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { attentionIsCausalOnly, attentionNames } from '../../src/model/attention/index.ts';
import { createLanguageModel, type LanguageModel, type LanguageModelConfig, type ModelBatch } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { partitionParameters } from '../../src/train/finetune.ts';
import type { StepExecutor } from '../../src/train/step-executor.ts';
import { startStepExecutor } from '../../src/train/step-executors/index.ts';
import { XlaExecutor } from '../../src/train/step-executors/xla.ts';
import { resolveExecutionPlan, XLA_PROGRAMS_ENV } from '../../src/train/execution-plan.ts';
import { describeDevice } from '../../src/backend/device.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { recordGradientProgram } from '../../src/train/xla-recording.ts';
import { exportPrograms } from '../../src/backend/xla/program-cache.ts';
import type { Batch } from '../../src/data/batch.ts';

const available = isTensorflowSetUp() && isXlaSetUp();
if (!available) console.log(`[xla-executor] skipped: needs the tensorflow backend and ${XLA_SETUP_COMMAND}`);

const STEPS = 3;

/** Transformer++ (rotary positions, SwiGLU, RMSNorm, no biases): what the XLA route records, as every other body. */
const TRANSFORMER_PP: Partial<LanguageModelConfig> = { positional: 'rope', mlp: 'swiglu', norm: 'rmsnorm', bias: false };

function tinyModel(attention: string, kind: 'gpt' | 'bert', architecture: Partial<LanguageModelConfig> = {}): LanguageModel {
  return createLanguageModel({
    kind,
    vocabSize: 61,
    maxSeqLen: 16,
    dModel: 16,
    numLayers: 2,
    numHeads: 2,
    mlpRatio: 4,
    dropout: 0,
    bias: true,
    attention: { name: attention, options: {} },
    seed: 4,
    ...architecture,
  });
}

function stepsOf(kind: 'gpt' | 'bert'): ModelBatch[][] {
  const rng = new Rng(kind === 'gpt' ? 11 : 12);
  // Two micro-batches per step: accumulation in the runner against accumulation in TensorFlow.
  return Array.from({ length: STEPS }, () => [randomBatch(rng, kind, 2, 16, 61), randomBatch(rng, kind, 2, 16, 61)]);
}

async function run(
  attention: string,
  kind: 'gpt' | 'bert',
  executor: string,
  steps: ModelBatch[][],
  freeze: 'none' | 'all-but-qkv' = 'none',
  architecture: Partial<LanguageModelConfig> = {},
) {
  const model = tinyModel(attention, kind, architecture);
  const { trainable } = partitionParameters(model, freeze);
  const plan = resolveExecutionPlan({ executor }, currentDevice(), null, model);
  const optimizer = new AdamW(trainable, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, update: plan.update });
  const initial = new Map([...model.parameters()].map(([n, v]) => [n, v.dataSync().slice() as Float32Array]));
  let running: StepExecutor | null = null;
  try {
    running = await startStepExecutor({ plan, model, optimizer, trainable });
    const results = [];
    for (const micro of steps) results.push(await running.step(micro, { lr: 1e-2, clip: 0.5, dropoutSeed: null }));
    const evalBatches = steps[0].map((b) => ({ ...b, tokens: b.batchSize * b.seqLen, bytes: 100 }) as unknown as Batch);
    const evaluation = await running.evaluate(evalBatches, true);
    await running.pull();
    const params = new Map([...model.parameters()].map(([n, v]) => [n, v.dataSync().slice() as Float32Array]));
    const moments = optimizer.flatMoments();
    return { results, evaluation, params, initial, moments, step: optimizer.stepCount };
  } finally {
    await running?.close();
    optimizer.dispose();
    model.dispose();
  }
}

const maxRelative = (a: Float32Array, b: Float32Array) => {
  let scale = 0;
  let diff = 0;
  for (let i = 0; i < a.length; i++) {
    scale = Math.max(scale, Math.abs(b[i]));
    diff = Math.max(diff, Math.abs(a[i] - b[i]));
  }
  return diff / (scale || 1);
};

/**
 * ‖Δa − Δb‖ / ‖Δb‖ of two parameters' updates from `initial`. Element by element AdamW divides by √v, so where a
 * gradient is rounding-sized its step is lr-sized with either sign on any two routes; the update as a whole is
 * what two roundings of the same step must agree on.
 */
const updateDifference = (a: Float32Array, b: Float32Array, initial: Float32Array) => {
  let diff = 0;
  let norm = 0;
  for (let i = 0; i < a.length; i++) {
    diff += (a[i] - b[i]) ** 2;
    norm += (b[i] - initial[i]) ** 2;
  }
  return Math.sqrt(diff / (norm || 1));
};

describe('choosing the xla executor', () => {
  it('auto never picks it; on a backend without recorded programs it is refused naming why and what would do', async () => {
    await initBackend('cpu', { quiet: true });
    const model = tinyModel('softmax', 'gpt');
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
    try {
      const plan = (executor: string) => resolveExecutionPlan({ executor }, describeDevice('cpu'), null, model);
      expect(plan('auto').executor).not.toBe('xla');
      expect(() => plan('xla')).toThrow(
        /^train\.executor xla: (no Python with jax for its runner \(npm run setup:xla|its programs are recorded on the tensorflow backend \(this run's is cpu\); or train from programs compiled ahead of time: \$SLAYFORMER_XLA_PROGRAMS)/,
      );
      if (isXlaSetUp()) {
        const empty = mkdtempSync(join(tmpdir(), 'slay-xla-empty-'));
        process.env[XLA_PROGRAMS_ENV] = empty;
        try {
          await expect(startStepExecutor({ plan: plan('xla'), model, optimizer })).rejects.toThrow(
            `xla: ${join(empty, 'manifest.json')} not found (npm run compile`,
          );
        } finally {
          delete process.env[XLA_PROGRAMS_ENV];
          rmSync(empty, { recursive: true, force: true });
        }
      }
    } finally {
      optimizer.dispose();
      model.dispose();
    }
  });
});

describe.skipIf(!available)('xla executor against TensorFlow functions', () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
  });

  const cases: Array<[kind: 'gpt' | 'bert', attention: string, label: string, architecture: Partial<LanguageModelConfig>]> = [
    ...(['gpt', 'bert'] as const).flatMap((kind) =>
      attentionNames()
        .filter((name) => kind === 'gpt' || !attentionIsCausalOnly(name))
        .map((name): [kind: 'gpt' | 'bert', string, string, Partial<LanguageModelConfig>] => [kind, name, name, {}]),
    ),
    ['gpt', 'softmax', 'softmax, Transformer++', TRANSFORMER_PP],
    ['gpt', 'gla', 'gla, Transformer++', TRANSFORMER_PP],
  ];
  for (const [kind, attention, label, architecture] of cases) {
    it(`${kind} ${label}: ${STEPS} accumulated steps, validation, weights and moments`, async () => {
      const steps = stepsOf(kind);
      const reference = await run(attention, kind, 'functions', steps, 'none', architecture);
      const xla = await run(attention, kind, 'xla', steps, 'none', architecture);
      xla.results.forEach((r, i) => {
        expect(r.applied).toBe(true);
        expect(r.tokens).toBe(reference.results[i].tokens);
        expect(Math.abs(r.loss - reference.results[i].loss)).toBeLessThan(1e-4 * Math.abs(reference.results[i].loss));
        expect(Math.abs(r.gradNorm - reference.results[i].gradNorm)).toBeLessThan(1e-3 * reference.results[i].gradNorm);
      });
      expect(Math.abs(xla.evaluation.loss - reference.evaluation.loss)).toBeLessThan(1e-4 * reference.evaluation.loss);
      expect(xla.evaluation.accuracy).toBeCloseTo(reference.evaluation.accuracy, 6);
      // The validation program's loss by position bucket (sum:byPosition) is evaluate's on TensorFlow functions.
      const buckets = reference.evaluation.byPosition!;
      expect(xla.evaluation.byPosition!.map((b) => [b.from, b.to, b.tokens])).toEqual(buckets.map((b) => [b.from, b.to, b.tokens]));
      expect(buckets.map((b) => [b.from, b.to])).toEqual([
        [0, 1],
        [1, 2],
        [2, 4],
        [4, 8],
        [8, 16],
      ]);
      xla.evaluation.byPosition!.forEach((b, i) => {
        if (buckets[i].tokens === 0) expect(b.loss).toBeNaN();
        else expect(Math.abs(b.loss - buckets[i].loss), `[${b.from}, ${b.to})`).toBeLessThan(1e-4 * buckets[i].loss);
      });
      expect(xla.step).toBe(STEPS);
      for (const [name, values] of reference.params) {
        // Softmax is invariant to a constant added to a row's scores, so the keys' bias gets a gradient of pure
        // rounding noise: its whole update is noise on any two routes.
        if (attention === 'softmax' && name.endsWith('attn.k.bias')) continue;
        expect(updateDifference(xla.params.get(name)!, values, reference.initial.get(name)!), name).toBeLessThan(2e-2);
      }
      expect(maxRelative(xla.moments.m, reference.moments.m)).toBeLessThan(1e-3);
      expect(maxRelative(xla.moments.v, reference.moments.v)).toBeLessThan(1e-3);
    });
  }

  it('a non-finite loss leaves weights, moments and the step count as they were', async () => {
    const model = tinyModel('softmax', 'gpt');
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
    const plan = resolveExecutionPlan({ executor: 'xla' }, currentDevice(), null, model);
    const executor = (await startStepExecutor({ plan, model, optimizer })) as XlaExecutor;
    try {
      const [batch] = stepsOf('gpt')[0];
      await executor.step([batch], { lr: 1e-2, clip: 0.5, dropoutSeed: null });
      await executor.pull();
      // A NaN weight makes the loss and the norm NaN: the guard inside the program keeps the old state.
      const head = [...model.parameters()].find(([n]) => n.startsWith('blocks.0.mlp'))![1];
      tf.tidy(() => head.assign(tf.fill(head.shape, NaN)));
      await executor.push();
      const before = new Map([...model.parameters()].map(([n, v]) => [n, v.dataSync().slice()]));
      const momentsBefore = optimizer.flatMoments().m.slice();
      const r = await executor.step([batch], { lr: 1e-2, clip: 0.5, dropoutSeed: null });
      expect(r.applied).toBe(false);
      expect(Number.isNaN(r.loss)).toBe(true);
      await executor.pull();
      for (const [n, v] of model.parameters()) expect(Array.from(v.dataSync())).toEqual(Array.from(before.get(n)!));
      expect(Array.from(optimizer.flatMoments().m)).toEqual(Array.from(momentsBefore));
      expect(optimizer.stepCount).toBe(1);
      expect(executor.describe()).toMatch(/jax 0\.10\.2 cpu .*loaded as portable artifact/);
      // On jax's CPU the MFU's peak is jax's own GEMM rate, timed by the runner; a size out of range is refused naming it.
      const gemm = executor.accelerator?.cpuGemm;
      expect(gemm?.jax).toBe('0.10.2');
      const rate = await gemm!.measure(64);
      expect(Number.isFinite(rate) && rate > 0).toBe(true);
      await expect(gemm!.measure(0)).rejects.toThrow(/gemm: size must be an integer from 16 to 8192 \(got 0\)/);
    } finally {
      await executor.close();
      optimizer.dispose();
      model.dispose();
    }
  });

  it('a program is exported once per content: the same recording again writes nothing, another shape is another program', () => {
    const model = tinyModel('softmax', 'gpt');
    const cache = mkdtempSync(join(tmpdir(), 'slay-xla-cache-'));
    try {
      const variables = [...model.parameters().values()];
      const rng = new Rng(5);
      const batch = randomBatch(rng, 'gpt', 2, 16, 61);
      const [first] = exportPrograms([recordGradientProgram(model, batch, variables, null, 32)], cache);
      const written = statSync(`${first.base}.vhlo`).mtimeMs;
      const [again] = exportPrograms([recordGradientProgram(model, randomBatch(rng, 'gpt', 2, 16, 61), variables, null, 32)], cache);
      expect(again.hash).toBe(first.hash);
      expect(statSync(`${again.base}.vhlo`).mtimeMs).toBe(written);
      const [other] = exportPrograms([recordGradientProgram(model, randomBatch(rng, 'gpt', 3, 16, 61), variables, null, 48)], cache);
      expect(other.hash).not.toBe(first.hash);
    } finally {
      rmSync(cache, { recursive: true, force: true });
      model.dispose();
    }
  });

  it('train.freeze all-but-qkv: only the q/k/v projections move, as with TensorFlow functions', async () => {
    const steps = stepsOf('gpt');
    const reference = await run('linear-elu', 'gpt', 'functions', steps, 'all-but-qkv');
    const xla = await run('linear-elu', 'gpt', 'xla', steps, 'all-but-qkv');
    xla.results.forEach((r, i) => expect(Math.abs(r.loss - reference.results[i].loss)).toBeLessThan(1e-4 * reference.results[i].loss));
    for (const [name, values] of xla.params) {
      if (/\.attn\.(q|k|v)\./.test(name)) expect(updateDifference(values, reference.params.get(name)!, reference.initial.get(name)!), name).toBeLessThan(2e-2);
      else expect(Array.from(values), name).toEqual(Array.from(reference.initial.get(name)!));
    }
  });
});
