// The step executors by name, and the one decision of which runs a step (train.executor). Adding a
// way to run the step is one file in this folder and one line here.
import type { StepExecutor, StepExecutorContext, StepExecutorEntry } from '../step-executor.ts';
import { collective } from './collective.ts';
import { functions } from './functions.ts';
import { opByOp } from './op-by-op.ts';
import { replicas } from './replicas.ts';
import { xla } from './xla.ts';

export const STEP_EXECUTORS: readonly StepExecutorEntry[] = [opByOp, functions, replicas, collective, xla];

export const STEP_EXECUTOR_NAMES = ['auto', ...STEP_EXECUTORS.map((e) => e.name)] as const;

/**
 * The executor `setting` names, or for `auto` what the run's other settings ask: a rank of a run across
 * processes when this process joined a cluster (--processes, srun), worker-thread replicas when
 * train.dataParallel resolves above 1, TensorFlow functions when train.graph is on and the backend has
 * them, else op by op. An explicit name the context cannot run is an error saying why.
 */
export function chooseStepExecutor(setting: string, context: StepExecutorContext): StepExecutorEntry {
  // Only the jax runner trains on several devices; elsewhere the key would be ignored unseen.
  if ((context.devices ?? 1) !== 1 && setting !== xla.name)
    throw new Error(
      `train.devices ${context.devices}: several devices are the xla executor's (train.executor: xla, docs/xla.md); this run's train.executor is ${setting}`,
    );
  if (setting === 'auto') {
    if (collective.unsupported(context) === null) return collective;
    if (context.replicas > 1) return replicas;
    return context.graph && functions.unsupported(context) === null ? functions : opByOp;
  }
  const entry = STEP_EXECUTORS.find((e) => e.name === setting);
  if (!entry) throw new Error(`train.executor: unknown executor '${setting}' (one of ${STEP_EXECUTOR_NAMES.join(', ')})`);
  const why = entry.unsupported(context);
  if (why) throw new Error(`train.executor ${setting}: ${why}`);
  // Any other executor in a rank would train without the all-reduce: the ranks would drift apart unseen. The xla
  // executor has its own, on jax's distributed runtime (docs/xla.md).
  if (entry !== collective && entry !== xla && collective.unsupported(context) === null)
    throw new Error(`train.executor ${setting}: this process is a rank of a run across processes, whose steps run as 'collective', 'xla' or 'auto'`);
  return entry;
}

/** The chosen executor, started. */
export function startStepExecutor(setting: string, context: StepExecutorContext): Promise<StepExecutor> {
  return chooseStepExecutor(setting, context).create(context);
}
