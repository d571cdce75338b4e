// The step executors by name: the plan chooses one (train.executor, execution-plan.ts) and the registry starts it.
// Adding a way to run the step is one file in this folder, one line here and its name in execution-plan.ts.
import type { StepExecutor, StepExecutorContext, StepExecutorEntry } from '../step-executor.ts';
import type { StepExecutorName } from '../execution-plan.ts';
import { collective } from './collective.ts';
import { functions } from './functions.ts';
import { opByOp } from './op-by-op.ts';
import { replicas } from './replicas.ts';
import { xla } from './xla.ts';

export const STEP_EXECUTORS: readonly StepExecutorEntry[] = [opByOp, functions, replicas, collective, xla];

/** The registry's entry of `name`. */
export function stepExecutorEntry(name: StepExecutorName): StepExecutorEntry {
  return STEP_EXECUTORS.find((e) => e.name === name)!;
}

/** The executor the context's plan names, started. */
export function startStepExecutor(context: StepExecutorContext): Promise<StepExecutor> {
  return stepExecutorEntry(context.plan.executor).create(context);
}
