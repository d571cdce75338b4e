// The part the op-by-op and TensorFlow-function executors share: the step (step.ts) run in this
// thread on the model's own variables, so there is no state elsewhere to pull or push. Whether its parts
// are recorded is the plan's (gradients; AdamW was built with its update).
import type { Batch } from '../../data/batch.ts';
import type { ModelBatch } from '../../model/lm.ts';
import { evaluate, type EvalResult } from '../evaluate.ts';
import type { StepResult } from '../optimizer.ts';
import { stepGradients } from '../step.ts';
import type { StepExecutor, StepExecutorContext, StepInputs } from '../step-executor.ts';

export abstract class InProcessExecutor implements StepExecutor {
  abstract readonly name: string;

  constructor(protected readonly context: StepExecutorContext) {}

  async step(microBatches: readonly ModelBatch[], inputs: StepInputs): Promise<StepResult> {
    const { model, optimizer, trainable, plan } = this.context;
    const { grads, loss, total } = stepGradients(model, microBatches, { ...inputs, trainable, graph: plan.gradients === 'recorded', jit: plan.jit });
    return optimizer.update(grads, loss, total, inputs);
  }

  evaluate(batches: readonly Batch[], byPosition = false): Promise<EvalResult> {
    return evaluate(this.context.model, batches, this.context.plan.gradients === 'recorded', byPosition);
  }

  async pull(): Promise<void> {}

  async push(): Promise<void> {}

  abstract describe(firstBatch: ModelBatch): string | null;

  async close(): Promise<void> {}
}
