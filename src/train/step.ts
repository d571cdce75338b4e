// One optimizer step's maths, shared by the training loop (trainer.ts), the data-parallel replicas
// (data-parallel.ts, replica.ts), the throughput measure (throughput.ts) and the synthetic-task runner
// (src/paper/task-runner.ts), on any StepModel (src/model/lm.ts): the micro-batches' gradients summed
// over the step's labelled tokens, handed to AdamW.update (optimizer.ts: clipping, the NaN/Inf guard, the update).
import * as tf from '@tensorflow/tfjs';
import { deriveSeed } from '../core/rng.ts';
import { IGNORE_LABEL } from '../model/lm.ts';
import type { StepModel, ModelBatch } from '../model/lm.ts';
import { microBatchGradients } from './compiled-step.ts';
import type { AdamW, StepResult } from './optimizer.ts';

function labelledCount(batch: ModelBatch): number {
  let n = 0;
  for (let i = 0; i < batch.labels.length; i++) if (batch.labels[i] !== IGNORE_LABEL) n++;
  return n;
}

export interface StepOptions {
  lr: number;
  clip: number;
  dropoutSeed: number | null;
  /** Only these get gradients (train.freeze); default all parameters. */
  trainable?: Map<string, tf.Variable>;
  /** Run forward and backward as a TensorFlow graph where the backend can (train.graph; default true). */
  graph?: boolean;
  /** Compile those graphs with TensorFlow's XLA JIT (train.xla resolved: the plan's jit; default false). */
  jit?: boolean;
}

/** Labelled tokens over all micro-batches: the divisor of every summed loss in the step. */
export function stepTokens(microBatches: readonly ModelBatch[]): number {
  if (microBatches.length === 0) throw new Error('trainStep: no micro-batch');
  const total = microBatches.reduce((n, b) => n + labelledCount(b), 0);
  if (total === 0) throw new Error('trainStep: the micro-batches hold no labelled token');
  return total;
}

/**
 * Σ_i ∇(lossSum(batch_i, seed_i) / total) over the given batches, and Σ_i lossSum_i / total. The
 * caller owns the returned tensors. Shared by trainStep and by the data-parallel replicas.
 */
export function accumulateGradients(
  model: StepModel,
  batches: readonly ModelBatch[],
  seeds: readonly (number | null)[],
  total: number,
  variables: tf.Variable[],
  graph = true,
  jit = false,
): { grads: Map<string, tf.Tensor>; loss: tf.Scalar } {
  let accumulated: Record<string, tf.Tensor> | null = null;
  let loss: tf.Scalar | null = null;
  try {
    for (let i = 0; i < batches.length; i++) {
      const previous: Record<string, tf.Tensor> | null = accumulated;
      const previousLoss: tf.Scalar | null = loss;
      const out: { value: tf.Scalar; grads: Record<string, tf.Tensor> } = tf.tidy(() => {
        const { value, grads } = microBatchGradients(model, batches[i], seeds[i], total, variables, graph, jit);
        if (!previous) return { value, grads };
        const sum: Record<string, tf.Tensor> = {};
        for (const [name, g] of Object.entries(grads)) sum[name] = tf.add(previous[name], g);
        return { value: tf.add(previousLoss!, value) as tf.Scalar, grads: sum };
      });
      if (previous) tf.dispose([...Object.values(previous), previousLoss!]);
      accumulated = out.grads;
      loss = out.value;
    }
  } catch (err) {
    if (accumulated) tf.dispose([...Object.values(accumulated), loss!]);
    throw err;
  }
  if (!accumulated) throw new Error('accumulateGradients: no batch');
  return { grads: new Map(Object.entries(accumulated)), loss: loss! };
}

/** Dropout seed of micro-batch i (null = no dropout). */
export const microBatchSeed = (dropoutSeed: number | null, i: number) => (dropoutSeed === null ? null : deriveSeed(dropoutSeed, i));

/**
 * The step's gradients over k micro-batches, summed (accumulateGradients), with the labelled tokens they are divided
 * by: what every in-process step hands to AdamW.update. Dropout of micro-batch i uses deriveSeed(dropoutSeed, i).
 */
export function stepGradients(
  model: StepModel,
  microBatches: readonly ModelBatch[],
  opts: Pick<StepOptions, 'dropoutSeed' | 'trainable' | 'graph' | 'jit'>,
): { grads: Map<string, tf.Tensor>; loss: tf.Scalar; total: number } {
  const total = stepTokens(microBatches);
  const variables = [...(opts.trainable ?? model.parameters()).values()];
  const seeds = microBatches.map((_, i) => microBatchSeed(opts.dropoutSeed, i));
  return { ...accumulateGradients(model, microBatches, seeds, total, variables, opts.graph ?? true, opts.jit ?? false), total };
}

/**
 * One optimizer step over k micro-batches. Each micro-batch's summed loss is divided by the labelled
 * tokens of ALL k micro-batches, so the accumulated gradient is exactly the gradient of the mean loss
 * over the union — the update of one batch of k× rows (also for BERT, whose micro-batches hold
 * different numbers of labelled tokens).
 */
export async function trainStep(model: StepModel, optimizer: AdamW, microBatches: readonly ModelBatch[], opts: StepOptions): Promise<StepResult> {
  const { grads, loss, total } = stepGradients(model, microBatches, opts);
  return optimizer.update(grads, loss, total, opts);
}
