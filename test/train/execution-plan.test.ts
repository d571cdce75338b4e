// The ExecutionPlan (src/train/execution-plan.ts): every knob a run's steps depend on resolved once from the train
// settings, the backend and the cluster — train.executor (auto and each name), train.graph, train.xla,
// train.dataParallel, the cluster's ranks, train.shardOptimizer, train.precision, train.devices — with the errors
// the run gives; and, on the native backend, that the op-by-op executor's plan makes AdamW's update run op by op:
// the reference records no TensorFlow function at all.
import { availableParallelism } from 'node:os';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Cluster } from '../../src/backend/collective.ts';
import { currentDevice } from '../../src/backend/current.ts';
import { describeDevice } from '../../src/backend/device.ts';
import { isTensorflowSetUp, SETUP_COMMAND } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import { createLanguageModel, LanguageModel, type StepModel } from '../../src/model/lm.ts';
import { resolveExecutionPlan, type ExecutionSettings } from '../../src/train/execution-plan.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { startStepExecutor } from '../../src/train/step-executors/index.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

const native = isTensorflowSetUp();
if (!native) console.log(`[execution-plan] the op-by-op-records-nothing tests skipped: needs the tensorflow backend (${SETUP_COMMAND})`);

const config = tinyGptConfig({ vocabSize: 32, maxSeqLen: 8, mlpRatio: 4, seed: 3 });

// Resolution reads the model only to know whether replica threads can rebuild it (a language model): a stand-in will do.
const gpt = Object.create(LanguageModel.prototype) as StepModel;
const cpu = describeDevice('cpu');
/** A device that has TensorFlow functions, as the tensorflow backend's description says (resolution reads only the description). */
const withFunctions = { ...cpu, graphSteps: true };
const rank = (r: number, worldSize: number) => ({ rank: r, worldSize }) as Cluster;
const plan = (settings: ExecutionSettings, device = cpu, cluster: Cluster | null = null, model: StepModel = gpt) =>
  resolveExecutionPlan(settings, device, cluster, model);

beforeAll(async () => {
  await initBackend('cpu', { quiet: true });
});

describe('resolving the plan', () => {
  it("a recipe's defaults on cpu: op by op everywhere, one replica, one process, fp32, no remat, one jax device", () => {
    expect(plan({})).toEqual({
      executor: 'op-by-op',
      backend: cpu,
      cluster: null,
      processes: 1,
      gradients: 'op-by-op',
      update: 'op-by-op',
      jit: false,
      replicas: 1,
      shard: null,
      precision: 'fp32',
      attentionKernel: 'composed',
      remat: false,
      jaxDevices: 1,
      gradAccum: 1,
    });
  });

  it('train.graph with a backend that has functions: auto = functions, gradients and update recorded; graph off = op by op', () => {
    expect(plan({}, withFunctions)).toMatchObject({ executor: 'functions', gradients: 'recorded', update: 'recorded' });
    expect(plan({ graph: false }, withFunctions)).toMatchObject({ executor: 'op-by-op', gradients: 'op-by-op', update: 'op-by-op' });
  });

  it('the op-by-op executor is op by op, AdamW included, whatever train.graph and the backend say', () => {
    expect(plan({ executor: 'op-by-op', graph: true }, withFunctions)).toMatchObject({ executor: 'op-by-op', gradients: 'op-by-op', update: 'op-by-op' });
  });

  it('train.xla is the TensorFlow JIT: off without TensorFlow functions to compile (the cpu backend), whatever the setting', () => {
    for (const xla of ['on', 'off', 'auto'] as const) expect(plan({ xla }).jit).toBe(false);
  });

  it('train.dataParallel: replicas capped by the batch rows; auto = one per core on cpu, 1 on a backend whose threads take every core', () => {
    expect(plan({ dataParallel: 4, batchSize: 2 })).toMatchObject({ executor: 'replicas', replicas: 2 });
    expect(plan({ dataParallel: 'auto', batchSize: 64 }).replicas).toBe(Math.min(availableParallelism(), 64));
    expect(plan({ dataParallel: 'auto', batchSize: 64 }, { ...withFunctions, coresPerReplica: 'all' })).toMatchObject({ executor: 'functions', replicas: 1 });
  });

  it('a rank of a cluster: collective, its ranks counted, its shard of the moments only with train.shardOptimizer and more than one rank', () => {
    expect(plan({}, withFunctions, rank(1, 3))).toMatchObject({ executor: 'collective', processes: 3, shard: null, gradients: 'recorded', update: 'recorded' });
    expect(plan({ shardOptimizer: true }, withFunctions, rank(1, 3)).shard).toEqual({ rank: 1, worldSize: 3 });
    expect(plan({ shardOptimizer: true }, withFunctions, rank(0, 1)).shard).toBeNull();
    expect(plan({ shardOptimizer: true }, withFunctions).shard).toBeNull();
    expect(plan({ graph: false }, withFunctions, rank(0, 2))).toMatchObject({ executor: 'collective', gradients: 'op-by-op', update: 'op-by-op' });
  });

  it('train.precision, train.attentionKernel, train.devices and train.gradAccum pass through as the xla executor reads them', () => {
    expect(plan({ precision: 'bf16', gradAccum: 4 })).toMatchObject({ precision: 'bf16', gradAccum: 4, jaxDevices: 1 });
    expect(plan({ attentionKernel: 'fused' })).toMatchObject({ attentionKernel: 'fused' });
  });

  it('refuses what the run cannot do, with the messages the run has always given', () => {
    const refused = (settings: ExecutionSettings, device = cpu, cluster: Cluster | null = null, model: StepModel = gpt) => {
      try {
        plan(settings, device, cluster, model);
      } catch (err) {
        return (err as Error).message;
      }
      return null;
    };
    expect(refused({ executor: 'functions' })).toBe(
      'train.executor functions: the cpu backend has no TensorFlow functions (npm run setup:tensorflow builds a binding that has)',
    );
    expect(refused({ executor: 'replicas' })).toBe('train.executor replicas: train.dataParallel resolves to 1 replica');
    expect(refused({ executor: 'replicas', dataParallel: 2 }, cpu, null, { dropout: 0 } as unknown as StepModel)).toBe(
      'train.executor replicas: worker-thread replicas rebuild a GPT or BERT from its config; this model is not one',
    );
    // auto asks for replicas when train.dataParallel resolves above 1, and is refused alike for such a model.
    expect(refused({ dataParallel: 2 }, cpu, null, { dropout: 0 } as unknown as StepModel)).toBe(
      'train.executor replicas: worker-thread replicas rebuild a GPT or BERT from its config; this model is not one',
    );
    expect(refused({ executor: 'collective' }, withFunctions)).toBe(
      'train.executor collective: this process is not a rank of a cluster (start the run with --processes N, or under srun)',
    );
    expect(refused({ executor: 'collective' }, cpu, rank(0, 2))).toBe(
      'train.executor collective: the cpu backend has no TensorFlow collectives (npm run setup:tensorflow builds a binding that has)',
    );
    expect(refused({ executor: 'op-by-op' }, withFunctions, rank(0, 2))).toBe(
      "train.executor op-by-op: this process is a rank of a run across processes, whose steps run as 'collective', 'xla' or 'auto'",
    );
    expect(refused({ executor: 'warp' })).toBe("train.executor: unknown executor 'warp' (one of auto, op-by-op, functions, replicas, collective, xla)");
    expect(refused({ devices: 2 })).toBe(
      "train.devices 2: several devices are the xla executor's (train.executor: xla, docs/xla.md); this run's train.executor is auto",
    );
    expect(refused({ executor: 'xla' })).toMatch(
      /^train\.executor xla: (no Python with jax for its runner|its programs are recorded on the tensorflow backend)/,
    );
  });
});

describe.skipIf(!native)('on the tensorflow backend', () => {
  type Binding = { registerFunction: (...args: unknown[]) => unknown };
  let registered = 0;
  let restore = () => {};

  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
    // Every TensorFlow function the process makes is registered through the binding (CompiledGraph.load,
    // src/backend/tf-graph.ts); its own properties are read-only, so the backend is given a counting view of it.
    const backend = tf.backend() as unknown as { binding: Binding };
    const binding = backend.binding;
    const view = Object.create(binding) as Binding;
    Object.defineProperty(view, 'registerFunction', {
      value: (...args: unknown[]) => {
        registered++;
        return binding.registerFunction(...args);
      },
    });
    backend.binding = view;
    restore = () => void (backend.binding = binding);
  });
  afterAll(async () => {
    restore();
    await initBackend('cpu', { quiet: true });
  });

  /** Three steps of `executor` as its plan says on this backend: the TensorFlow functions they registered and how AdamW's update ran. */
  async function steps(executor: string): Promise<{ functions: number; update: string; losses: number[] }> {
    const model: LanguageModel = createLanguageModel(config);
    const executionPlan = resolveExecutionPlan({ executor }, currentDevice(), null, model);
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, update: executionPlan.update });
    const running = await startStepExecutor({ plan: executionPlan, model, optimizer });
    const before = registered;
    try {
      const rng = new Rng(5);
      const losses: number[] = [];
      for (let i = 0; i < 3; i++)
        losses.push((await running.step([randomBatch(rng, 'gpt', 2, 8, config.vocabSize)], { lr: 1e-2, clip: 1, dropoutSeed: null })).loss);
      return { functions: registered - before, update: optimizer.graphStatus(), losses };
    } finally {
      await running.close();
      optimizer.dispose();
      model.dispose();
    }
  }

  it('the op-by-op plan records nothing, AdamW included; the functions plan records the step and the update', async () => {
    const reference = await steps('op-by-op');
    expect(reference).toMatchObject({ functions: 0, update: 'eager' });
    const recorded = await steps('functions');
    expect(recorded.functions).toBeGreaterThan(0);
    expect(recorded.update).toBe('graph');
    // The same steps either way, to float rounding.
    recorded.losses.forEach((loss, i) => expect(loss).toBeCloseTo(reference.losses[i], 4));
  });
});
