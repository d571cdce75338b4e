// One run across processes (docs/distributed.md): every rank holds the whole model and AdamW, reads
// the same batches, and computes the gradients of its shard of every micro-batch — shard r of each
// micro-batch's rows, with dropout seed deriveSeed(seed, i·N + r), as the worker-thread replicas cut
// them (data-parallel.ts), so N ranks give the update of one process taking those shards as
// micro-batches. ONE all-reduce per optimizer step adds the raveled gradients and the loss over the
// ranks (CollectiveReduceV2 inside the recorded update function: ring over gRPC on CPUs, NCCL on
// GPUs), and every rank clips, decides the non-finite rule and applies AdamW on the same sums. No
// state lives elsewhere: pull has nothing to bring back, and push (also at start) makes every rank's
// model and moments rank 0's.
import * as tf from '@tensorflow/tfjs';
import { allReduceSum, collectiveFailure, currentCluster, INSTANCE_KEYS, type Cluster } from '../../backend/collective.ts';
import type { Batch } from '../../data/batch.ts';
import type { ModelBatch } from '../../model/lm.ts';
import { graphStatus } from '../compiled-step.ts';
import { shardMicroBatches } from '../data-parallel.ts';
import { evaluate, type EvalResult } from '../evaluate.ts';
import { accumulateGradients, applyGradients, stepTokens, type StepResult } from '../step.ts';
import type { StepExecutor, StepExecutorContext, StepExecutorEntry, StepInputs } from '../step-executor.ts';

class CollectiveExecutor implements StepExecutor {
  readonly name = 'collective';

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
    const { model, optimizer, trainable, graph, xla } = this.context;
    const { rank, worldSize } = this.cluster;
    for (const batch of microBatches) {
      if (batch.batchSize < worldSize) throw new Error(`a batch of ${batch.batchSize} rows cannot be cut into shards for ${worldSize} ranks`);
    }
    const total = stepTokens(microBatches);
    const variables = [...(trainable ?? model.parameters()).values()];
    const { batches, seeds } = shardMicroBatches(microBatches, worldSize, inputs.dropoutSeed)[rank];
    const { grads, loss } = accumulateGradients(model, batches, seeds, total, variables, graph, xla);
    return applyGradients(optimizer, grads, loss, total, inputs, (packed) => allReduceSum(this.cluster, packed) as tf.Tensor1D);
  }

  // Only rank 0 evaluates (trainer.ts); the others go on to the next all-reduce and wait there.
  evaluate(batches: readonly Batch[]): Promise<EvalResult> {
    return evaluate(this.context.model, batches, this.context.graph);
  }

  // Every rank applies the same update to its own copy: the model and optimizer here are the state.
  async pull(): Promise<void> {}

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
    const floats = variables.reduce((n, v) => n + v.size, 0) + 1;
    const { rank, worldSize, communication, device } = this.cluster;
    const shard = shardMicroBatches([firstBatch], worldSize, null)[rank].batches[0];
    const status = graphStatus(model, shard, variables, model.dropout > 0);
    const how = status.startsWith('graph') ? 'TensorFlow functions' : `ops (${status.replace(/^eager: /, '')})`;
    return (
      `train.executor collective: rank ${rank} of ${worldSize} on ${device}, steps as ${how}; one ${communication} all-reduce of ` +
      `${floats.toLocaleString('en-US')} floats (${((floats * 4) / 2 ** 20).toFixed(2)} MiB) per step`
    );
  }

  async close(): Promise<void> {}
}

/**
 * Makes every rank's model and optimizer rank 0's: an all-reduce of rank 0's values and the others'
 * zeros (x + 0 is x exactly). The ranks build the same model from the same seed already; this also
 * covers an initFrom or a data-dependent init that could differ in the last bit.
 */
function broadcastFromRankZero(cluster: Cluster, { model, optimizer }: StepExecutorContext): void {
  const state = optimizer.getState();
  const variables = [...model.parameters().values(), ...model.buffers().values()].filter((t) => t.dtype === 'float32');
  const names = [...state.m.keys()];
  const tensors = [...variables, ...state.m.values(), ...state.v.values()];
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
  const m = new Map(names.map((name, i) => [name, pieces[variables.length + i]]));
  const v = new Map(names.map((name, i) => [name, pieces[variables.length + names.length + i]]));
  optimizer.setState(state.step, m, v);
  tf.dispose([...pieces, ...state.m.values(), ...state.v.values()]);
}

export const collective: StepExecutorEntry = {
  name: 'collective',
  summary: 'one rank of a run across processes or hosts (--processes N, srun): TensorFlow collectives (tensorflow backend)',
  unsupported: ({ device }) => {
    if (!currentCluster()) return 'this process is not a rank of a cluster (start the run with --processes N, or under srun)';
    return device.graphSteps ? null : `the ${device.backend} backend has no TensorFlow collectives (npm run setup:tensorflow builds a binding that has)`;
  },
  create: async (context) => {
    const executor = new CollectiveExecutor(context, currentCluster()!);
    await executor.push();
    return executor;
  },
};
