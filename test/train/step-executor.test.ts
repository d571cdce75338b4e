// The step-executor registry (src/train/step-executors/index.ts) and the plan's choice among them
// (src/train/execution-plan.ts): which executor `auto` picks, an explicit one the run cannot use refused
// with the reason, the recipe's names equal to the registry's,
// and the executors agreeing on the same steps (op by op is the reference).
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { describeDevice } from '../../src/backend/device.ts';
import { initBackend } from '../../src/backend/start.ts';
import { createLanguageModel, type LanguageModel, type StepModel } from '../../src/model/lm.ts';
import { SCHEMA } from '../../src/recipe/schema.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import type { StepExecutorContext } from '../../src/train/step-executor.ts';
import { resolveExecutionPlan, STEP_EXECUTOR_NAMES, type ExecutionSettings } from '../../src/train/execution-plan.ts';
import { startStepExecutor, STEP_EXECUTORS } from '../../src/train/step-executors/index.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { Rng } from '../../src/core/rng.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

beforeAll(async () => {
  await initBackend('cpu', { quiet: true });
});

const config = tinyGptConfig({ vocabSize: 32, maxSeqLen: 8, mlpRatio: 4, seed: 3 });

/** A context on a GPT, which the test disposes. */
type GptContext = StepExecutorContext & { model: LanguageModel };

function context(settings: ExecutionSettings = {}): GptContext {
  const model = createLanguageModel(config);
  const plan = resolveExecutionPlan(settings, describeDevice('cpu'), null, model);
  const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, update: plan.update });
  return { plan, model, optimizer };
}

/** The executor the plan of `settings` chooses for `model` on the cpu backend (or `device`). */
const chosen = (executor: string, settings: ExecutionSettings, model: StepModel, device = describeDevice('cpu')) =>
  resolveExecutionPlan({ ...settings, executor }, device, null, model).executor;

function free(c: GptContext): void {
  c.optimizer.dispose();
  c.model.dispose();
}

describe('choosing', () => {
  it('the recipe key lists exactly the registry names', () => {
    const type = SCHEMA['train.executor'].type as { values: readonly string[] };
    expect([...type.values]).toEqual([...STEP_EXECUTOR_NAMES]);
    expect(STEP_EXECUTORS.map((e) => e.name)).toEqual(STEP_EXECUTOR_NAMES.slice(1));
  });

  it('auto: replicas above 1, functions where the backend has them and train.graph is on, else op by op', () => {
    const c = context();
    const graphs = { ...describeDevice('cpu'), graphSteps: true };
    try {
      expect(chosen('auto', {}, c.model)).toBe('op-by-op'); // cpu has no TensorFlow functions
      expect(chosen('auto', { dataParallel: 2 }, c.model)).toBe('replicas');
      expect(chosen('auto', {}, c.model, graphs)).toBe('functions');
      expect(chosen('auto', { graph: false }, c.model, graphs)).toBe('op-by-op');
    } finally {
      free(c);
    }
  });

  it('an executor the run cannot use is refused, naming the key and why', () => {
    const c = context();
    try {
      expect(() => chosen('functions', {}, c.model)).toThrow(/train\.executor functions: the cpu backend has no TensorFlow functions/);
      expect(() => chosen('replicas', {}, c.model)).toThrow(/train\.executor replicas: train\.dataParallel resolves to 1/);
      expect(() => chosen('warp', {}, c.model)).toThrow(/unknown executor 'warp'/);
      expect(() => chosen('auto', { devices: 2 }, c.model)).toThrow(/train\.devices 2: several devices are the xla executor's/);
      expect(() => chosen('functions', { devices: 'all' }, c.model)).toThrow(/train\.devices all: .* this run's train\.executor is functions/);
      // Replica threads rebuild a language model from its config: another StepModel (the task model) is refused.
      const taskLike = { dropout: 0 } as unknown as StepModel;
      expect(() => chosen('replicas', { dataParallel: 2 }, taskLike)).toThrow(
        /train\.executor replicas: worker-thread replicas rebuild a GPT or BERT from its config/,
      );
    } finally {
      free(c);
    }
  });
});

it('op-by-op and two worker replicas take the same steps to float rounding, without leaking tensors', async () => {
  const rng = new Rng(11);
  const batches = Array.from({ length: 3 }, () => randomBatch(rng, 'gpt', 4, 8, config.vocabSize));
  const run = async (name: string, replicas: number) => {
    const c = context({ executor: name, dataParallel: replicas });
    const executor = await startStepExecutor(c);
    try {
      const losses: number[] = [];
      const live: number[] = [];
      for (const b of batches) {
        losses.push((await executor.step([b], { lr: 1e-2, clip: 1, dropoutSeed: null })).loss);
        live.push(tf.memory().numTensors);
      }
      // The first step makes what the model and optimizer keep (causal masks, AdamW's buffers); then nothing grows.
      expect(live.slice(1)).toEqual(live.slice(1).map(() => live[1]));
      const all = tf.tidy(() => tf.concat([...c.model.parameters().values()].map((v) => v.flatten())));
      const weights = await all.data();
      all.dispose();
      return { losses, weights: Float32Array.from(weights) };
    } finally {
      await executor.close();
      free(c);
    }
  };
  const reference = await run('op-by-op', 1);
  const replicated = await run('replicas', 2);
  for (let i = 0; i < batches.length; i++) expect(replicated.losses[i]).toBeCloseTo(reference.losses[i], 5);
  let worst = 0;
  reference.weights.forEach((w, i) => (worst = Math.max(worst, Math.abs(w - replicated.weights[i]))));
  expect(worst).toBeLessThan(1e-5);
});
