// One run across processes (docs/distributed.md): every rank holds the whole model and AdamW, reads
// the same batches, and computes the gradients of its shard of every micro-batch — shard r of each
// micro-batch's rows, with dropout seed deriveSeed(seed, i·N + r), as the worker-thread replicas cut
// them (data-parallel.ts), so N ranks give the update of one process taking those shards as
// micro-batches. ONE all-reduce per optimizer step adds the raveled gradients and the loss over the
// ranks (CollectiveReduceV2 inside the recorded update function: ring over gRPC on CPUs, NCCL on
// GPUs), and every rank clips, decides the non-finite rule and applies AdamW on the same sums. Push
// (also at start) makes every rank's model and moments rank 0's. With train.shardOptimizer (ZeRO-1)
// each rank keeps AdamW's moments for its slice of the raveled parameters only: it updates that
// slice and an all-gather in the same recorded function gives every rank the whole parameters;
// pull gathers the moments for rank 0's checkpoint, so every rank calls it at the same points.
import * as tf from '@tensorflow/tfjs';
import { allGather, allReduceSum, checkGatherOrder, collectiveFailure, INSTANCE_KEYS, type Cluster } from '../../backend/collective.ts';
import type { Batch } from '../../data/batch.ts';
import type { ModelBatch } from '../../model/lm.ts';
import { graphStatus } from '../compiled-step.ts';
import { shardMicroBatches } from '../data-parallel.ts';
import { evaluate, type EvalResult } from '../evaluate.ts';
import type { StepResult } from '../optimizer.ts';
import { accumulateGradients, stepTokens } from '../step.ts';
import type { StepExecutor, StepExecutorContext, StepExecutorEntry, StepInputs } from '../step-executor.ts';

class CollectiveExecutor implements StepExecutor {
  readonly name = 'collective';
  /** Sharded: the optimizer step at which pull last gathered the moments (a second pull at the same step gathers nothing). */
  private momentsGatheredAt = -1;

  constructor(
    private readonly context: StepExecutorContext,
    private readonly cluster: Cluster,
  ) {}

  async step(microBatches: readonly ModelBatch[], inputs: StepInputs): Promise<StepResult> {
    try {
      return await this.stepOnRanks(microBatches, inputs);
    } catch (err) {
      throw collectiveFailure(this.cluster, err);
    }
  }

  private stepOnRanks(microBatches: readonly ModelBatch[], inputs: StepInputs): Promise<StepResult> {
    const { model, optimizer, trainable, plan } = this.context;
    const { rank, worldSize } = this.cluster;
    for (const batch of microBatches) {
      if (batch.batchSize < worldSize) throw new Error(`a batch of ${batch.batchSize} rows cannot be cut into shards for ${worldSize} ranks`);
    }
    const total = stepTokens(microBatches);
    const variables = [...(trainable ?? model.parameters()).values()];
    const { batches, seeds } = shardMicroBatches(microBatches, worldSize, inputs.dropoutSeed)[rank];
    const { grads, loss } = accumulateGradients(model, batches, seeds, total, variables, plan.gradients === 'recorded', plan.jit);
    return optimizer.update(grads, loss, total, inputs, {
      sum: (packed) => allReduceSum(this.cluster, packed) as tf.Tensor1D,
      ...(optimizer.shard ? { gather: (piece: tf.Tensor1D) => allGather(this.cluster, piece, INSTANCE_KEYS.parameters) as tf.Tensor1D } : {}),
      stopRequested: inputs.stopRequested ?? false,
    });
  }

  // Only rank 0 evaluates (trainer.ts); the others go on to the next all-reduce and wait there.
  evaluate(batches: readonly Batch[], byPosition = false): Promise<EvalResult> {
    return evaluate(this.context.model, batches, this.context.plan.gradients === 'recorded', byPosition);
  }

  // Every rank applies the same update to its own copy of the model. A sharded optimizer's moments are
  // gathered (every rank calls pull at the same points, trainer.ts); rank 0 keeps them for its checkpoint.
  async pull(): Promise<void> {
    const { optimizer } = this.context;
    if (!optimizer.shard || this.momentsGatheredAt === optimizer.stepCount) return;
    try {
      optimizer.gatherMoments((piece) => allGather(this.cluster, piece, INSTANCE_KEYS.moments) as tf.Tensor1D, this.cluster.rank === 0);
    } catch (err) {
      throw collectiveFailure(this.cluster, err);
    }
    this.momentsGatheredAt = optimizer.stepCount;
  }

  async push(): Promise<void> {
    try {
      broadcastFromRankZero(this.cluster, this.context);
    } catch (err) {
      throw collectiveFailure(this.cluster, err);
    }
  }

  describe(firstBatch: ModelBatch): string {
    const { model, trainable } = this.context;
    const variables = [...(trainable ?? model.parameters()).values()];
    const floats = variables.reduce((n, v) => n + v.size, 0) + 2;
    const { rank, worldSize, communication, device } = this.cluster;
    const shard = shardMicroBatches([firstBatch], worldSize, null)[rank].batches[0];
    const status = graphStatus(model, shard, variables, model.dropout > 0);
    const how = status.startsWith('graph') ? 'TensorFlow functions' : `ops (${status.replace(/^eager: /, '')})`;
    const mib = (n: number) => `${((n * 4) / 2 ** 20).toFixed(2)} MiB`;
    const sliced = this.context.optimizer.shard;
    const zero = sliced
      ? `; AdamW's moments sharded (ZeRO-1): this rank keeps ${sliced.size.toLocaleString('en-US')} of each (${mib(2 * sliced.size)}), ` +
        `then one all-gather of the parameters`
      : '';
    return (
      `train.executor collective: rank ${rank} of ${worldSize} on ${device}, steps as ${how}; one ${communication} all-reduce of ` +
      `${floats.toLocaleString('en-US')} floats (${mib(floats)}) per step${zero}`
    );
  }

  async close(): Promise<void> {}
}

/**
 * Makes every rank's model and optimizer rank 0's: an all-reduce of rank 0's values and the others'
 * zeros (x + 0 is x exactly). The ranks build the same model from the same seed already; this also
 * covers an initFrom or a data-dependent init that could differ in the last bit. A sharded optimizer's
 * moments stay as they are: zeros, or each rank's slice of the checkpoint every rank read.
 */
function broadcastFromRankZero(cluster: Cluster, { model, optimizer }: StepExecutorContext): void {
  const variables = [...model.parameters().values(), ...model.buffers().values()].filter((t) => t.dtype === 'float32');
  const state = optimizer.shard ? null : optimizer.getState();
  const moments = state ? [...state.m.values(), ...state.v.values()] : [];
  const tensors = [...variables, ...moments];
  const pieces = tf.tidy(() => {
    const flat = tf.concat(tensors.map((t) => tf.reshape(t, [-1])));
    const summed = allReduceSum(cluster, cluster.rank === 0 ? flat : tf.zerosLike(flat), INSTANCE_KEYS.broadcast);
    return tf
      .split(
        summed,
        tensors.map((t) => t.size),
      )
      .map((p, i) => tf.reshape(p, tensors[i].shape));
  });
  variables.forEach((v, i) => v.assign(pieces[i]));
  if (state) {
    const names = [...state.m.keys()];
    const m = new Map(names.map((name, i) => [name, pieces[variables.length + i]]));
    const v = new Map(names.map((name, i) => [name, pieces[variables.length + names.length + i]]));
    optimizer.setState(state.step, m, v);
  }
  tf.dispose([...pieces, ...moments]);
}

export const collective: StepExecutorEntry = {
  name: 'collective',
  summary: 'one rank of a run across processes or hosts (--processes N, srun): TensorFlow collectives (tensorflow backend)',
  create: async (context) => {
    // The plan chose this executor only for a rank of a cluster (execution-plan.ts).
    const cluster = context.plan.cluster!;
    const executor = new CollectiveExecutor(context, cluster);
    if (context.optimizer.shard) {
      try {
        checkGatherOrder(cluster);
      } catch (err) {
        throw collectiveFailure(cluster, err);
      }
    }
    await executor.push();
    return executor;
  },
};
