// Worker-thread replicas in this process (train.dataParallel > 1; data-parallel.ts): each computes
// its shard of every micro-batch, the main thread sums, clips and applies AdamW. For wasm and cpu,
// whose backends use one core each.
import type { Batch } from '../../data/batch.ts';
import type { LanguageModel, ModelBatch } from '../../model/lm.ts';
import { DataParallelGroup } from '../data-parallel.ts';
import { evaluate, type EvalResult } from '../evaluate.ts';
import type { StepResult } from '../optimizer.ts';
import type { StepExecutor, StepExecutorContext, StepExecutorEntry, StepInputs } from '../step-executor.ts';

class ReplicasExecutor implements StepExecutor {
  readonly name = 'replicas';

  constructor(
    private readonly context: StepExecutorContext,
    readonly group: DataParallelGroup,
  ) {}

  step(microBatches: readonly ModelBatch[], inputs: StepInputs): Promise<StepResult> {
    const { optimizer, trainable, plan } = this.context;
    return this.group.step(optimizer, microBatches, { ...inputs, trainable, graph: plan.gradients === 'recorded', jit: plan.jit });
  }

  evaluate(batches: readonly Batch[], byPosition = false): Promise<EvalResult> {
    return evaluate(this.context.model, batches, this.context.plan.gradients === 'recorded', byPosition);
  }

  // The replicas receive the trainable weights with every step's batches: the main thread's copy is the state.
  async pull(): Promise<void> {}

  async push(): Promise<void> {
    this.group.sendAllWeights();
  }

  // The run's first lines already count the replicas (trainer.ts, logStart).
  describe(): null {
    return null;
  }

  close(): Promise<void> {
    return this.group.close();
  }
}

export const replicas: StepExecutorEntry = {
  name: 'replicas',
  summary: 'train.dataParallel worker-thread replicas in this process (wasm, cpu)',
  create: async (context) => {
    // The plan refused any other model (execution-plan.ts): a replica thread rebuilds a language model from its config.
    const model = context.model as LanguageModel;
    return new ReplicasExecutor(context, await DataParallelGroup.start(model, context.plan.replicas, context.plan.backend.backend));
  },
};
