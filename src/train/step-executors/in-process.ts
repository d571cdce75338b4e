// The part the op-by-op and TensorFlow-function executors share: the step (step.ts) run in this
// thread on the model's own variables, so there is no state elsewhere to pull or push.
import type { Batch } from '../../data/batch.ts';
import type { ModelBatch } from '../../model/lm.ts';
import { evaluate, type EvalResult } from '../evaluate.ts';
import { trainStep, type StepResult } from '../step.ts';
import type { StepExecutor, StepExecutorContext, StepInputs } from '../step-executor.ts';

export abstract class InProcessExecutor implements StepExecutor {
  abstract readonly name: string;
  /** Whether the step asks for TensorFlow functions (step.ts falls back to ops where it cannot have them). */
  protected abstract readonly graph: boolean;

  constructor(protected readonly context: StepExecutorContext) {}

  step(microBatches: readonly ModelBatch[], inputs: StepInputs): Promise<StepResult> {
    const { model, optimizer, trainable, xla } = this.context;
    return trainStep(model, optimizer, microBatches, { ...inputs, trainable, graph: this.graph, xla });
  }

  evaluate(batches: readonly Batch[], byPosition = false): Promise<EvalResult> {
    return evaluate(this.context.model, batches, this.graph, byPosition);
  }

  async pull(): Promise<void> {}

  async push(): Promise<void> {}

  abstract describe(firstBatch: ModelBatch): string | null;

  async close(): Promise<void> {}
}
