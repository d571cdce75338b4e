// How a run's steps run, decided once (docs/execution.md): from the recipe's train section, the backend its command
// started and the cluster this process joined, one ExecutionPlan says where the step runs (backend, executor), how
// (op by op, recorded as TensorFlow functions, compiled by XLA in jax), over how many replicas, processes and jax
// devices, and in which precision. The trainer, the step executors, the task runner, the throughput benchmark and
// AdamW receive it as a value; none of them decides any of it again.
import type { Variable } from '@tensorflow/tfjs';
import type { Cluster } from '../backend/collective.ts';
import type { AttentionKernel } from '../backend/attention-boundary.ts';
import type { Device } from '../backend/device.ts';
import { resolveDataParallel } from '../backend/device.ts';
import { resolveXla, type XlaSetting } from '../backend/tf-graph.ts';
import type { XlaPrecision } from '../backend/xla/program-cache.ts';
import { exporterPython, runnerPython, XLA_PYTHON_ENV, XLA_SETUP_COMMAND } from '../backend/xla/setup.ts';
import { LanguageModel, type StepModel } from '../model/lm.ts';
import { AdamW, type AdamWOptions, type ShardOf } from './optimizer.ts';

/** train.executor's values: `auto` and the registry's names (step-executors/index.ts lists one entry for each). */
export const STEP_EXECUTOR_NAMES = ['auto', 'op-by-op', 'functions', 'replicas', 'collective', 'xla'] as const;
export type StepExecutorName = Exclude<(typeof STEP_EXECUTOR_NAMES)[number], 'auto'>;

/** $SLAYFORMER_XLA_PROGRAMS: a folder of programs compiled ahead of time (npm run compile) to train from. */
export const XLA_PROGRAMS_ENV = 'SLAYFORMER_XLA_PROGRAMS';

/** How a part of the step runs: every op dispatched from JavaScript, or recorded once and run as a TensorFlow function. */
export type Dispatch = 'op-by-op' | 'recorded';

export interface ExecutionPlan {
  /** train.executor resolved (never `auto`): which step executor runs the steps. */
  readonly executor: StepExecutorName;
  /** The TensorFlow.js backend the command started, as its entry describes it. */
  readonly backend: Device;
  /** The run across processes this process is a rank of (--processes, train.processes, srun); null = one process. */
  readonly cluster: Cluster | null;
  /** Ranks of the run (the cluster's size; 1 alone). */
  readonly processes: number;
  /** train.graph for this executor and backend: each micro-batch's forward and backward pass recorded, or op by op. */
  readonly gradients: Dispatch;
  /** AdamW's update: one recorded TensorFlow function, or op by op (the op-by-op executor records nothing). */
  readonly update: Dispatch;
  /** train.xla resolved: TensorFlow's XLA JIT compiles the recorded functions (not the `xla` executor, which runs jax). */
  readonly jit: boolean;
  /** Worker-thread replicas in this process (train.dataParallel resolved; 1 = this thread alone). */
  readonly replicas: number;
  /** train.shardOptimizer in a run of more than one rank: this rank's share of AdamW's moments (ZeRO-1); else null. */
  readonly shard: ShardOf | null;
  /** train.precision: the xla executor's matrix products (the recipe allows bf16 with it alone). */
  readonly precision: XlaPrecision;
  /** train.attentionKernel: softmax attention in the xla executor's programs, composed or the boundary jax fills in (docs/xla.md). */
  readonly attentionKernel: AttentionKernel;
  /** train.remat: the xla executor's gradient programs recompute each transformer block's forward in its backward pass. */
  readonly remat: boolean;
  /** train.devices: the jax devices of each process the xla executor trains on. */
  readonly jaxDevices: number | 'all';
  /** train.gradAccum: micro-batches per step (the xla executor shares them out over its devices). */
  readonly gradAccum: number;
}

/** The recipe keys a plan is made from (train.*); a caller without a recipe gives what it sets and gets the recipe's defaults. */
export interface ExecutionSettings {
  executor?: string;
  graph?: boolean;
  xla?: XlaSetting;
  dataParallel?: number | 'auto';
  shardOptimizer?: boolean;
  precision?: XlaPrecision;
  attentionKernel?: AttentionKernel;
  remat?: boolean;
  devices?: number | 'all';
  gradAccum?: number;
  /** Caps train.dataParallel: never more replicas than rows of a batch. */
  batchSize?: number;
}

/** What decides whether an executor can run: the plan before its executor is chosen, and what the run trains. */
type Candidate = Omit<ExecutionPlan, 'executor' | 'gradients' | 'update'> & { graph: boolean; model: StepModel };

/** Why each executor cannot run with `c` (null = it can). */
const UNSUPPORTED: Record<StepExecutorName, (c: Candidate) => string | null> = {
  'op-by-op': () => null,
  functions: ({ backend }) =>
    backend.graphSteps ? null : `the ${backend.backend} backend has no TensorFlow functions (npm run setup:tensorflow builds a binding that has)`,
  replicas: ({ replicas, model }) => {
    if (replicas <= 1) return 'train.dataParallel resolves to 1 replica';
    // A replica thread rebuilds the model from its config (replica.ts), which only a language model carries.
    return model instanceof LanguageModel ? null : 'worker-thread replicas rebuild a GPT or BERT from its config; this model is not one';
  },
  collective: ({ cluster, backend }) => {
    if (!cluster) return 'this process is not a rank of a cluster (start the run with --processes N, or under srun)';
    return backend.graphSteps ? null : `the ${backend.backend} backend has no TensorFlow collectives (npm run setup:tensorflow builds a binding that has)`;
  },
  // train.dataParallel does not apply: the jax process runs the step on its devices, train.devices (docs/xla.md).
  xla: ({ backend, shard }) => {
    if (!runnerPython()) return `no Python with jax for its runner (${XLA_SETUP_COMMAND} makes one, or set $${XLA_PYTHON_ENV})`;
    // Every device keeps the whole moments: the ZeRO-1 slices of the collective route have no place here.
    if (shard) return 'train.shardOptimizer does not apply (every device keeps the whole moments): set it to false';
    if (process.env[XLA_PROGRAMS_ENV]) return null;
    if (!backend.graphSteps)
      return `its programs are recorded on the tensorflow backend (this run's is ${backend.backend}); or train from programs compiled ahead of time: $${XLA_PROGRAMS_ENV}=<folder of npm run compile>`;
    if (!exporterPython()) return `its exporter needs ${XLA_SETUP_COMMAND}`;
    return null;
  },
};

/**
 * The plan of a run that trains `model` with the train settings `settings` on `backend` (the device its command
 * started), as a rank of `cluster` or alone (null). train.executor `auto` = `collective` in a rank of a run across
 * processes, worker-thread `replicas` when train.dataParallel resolves above 1, `functions` when train.graph is on and
 * the backend has them, else `op-by-op`; an explicit name the run cannot use is an error saying why.
 */
export function resolveExecutionPlan(settings: ExecutionSettings, backend: Device, cluster: Cluster | null, model: StepModel): ExecutionPlan {
  const setting = settings.executor ?? 'auto';
  const graph = settings.graph ?? true;
  const jaxDevices = settings.devices ?? 1;
  const processes = cluster?.worldSize ?? 1;
  const candidate: Candidate = {
    backend,
    cluster,
    processes,
    graph,
    jit: resolveXla(settings.xla ?? 'off'),
    replicas: resolveDataParallel(settings.dataParallel ?? 1, backend, settings.batchSize ?? Number.MAX_SAFE_INTEGER),
    shard: settings.shardOptimizer && cluster && processes > 1 ? { rank: cluster.rank, worldSize: processes } : null,
    precision: settings.precision ?? 'fp32',
    attentionKernel: settings.attentionKernel ?? 'composed',
    remat: settings.remat ?? false,
    jaxDevices,
    gradAccum: settings.gradAccum ?? 1,
    model,
  };
  // Only the jax runner trains on several devices; elsewhere the key would be ignored unseen.
  if (jaxDevices !== 1 && setting !== 'xla')
    throw new Error(
      `train.devices ${jaxDevices}: several devices are the xla executor's (train.executor: xla, docs/xla.md); this run's train.executor is ${setting}`,
    );
  if (candidate.remat && setting !== 'xla')
    throw new Error(
      `train.remat: rematerialisation shapes the xla executor's programs (train.executor: xla, docs/xla.md); this run's train.executor is ${setting}`,
    );
  const executor = chooseExecutor(setting, candidate);
  const { model: _model, graph: _graph, ...plan } = candidate;
  // The reference runs every op from JavaScript, AdamW's update included; the others record where the backend can.
  const recorded: Dispatch = executor === 'functions' || (executor !== 'op-by-op' && graph && backend.graphSteps) ? 'recorded' : 'op-by-op';
  return { ...plan, executor, gradients: recorded, update: recorded };
}

/** AdamW over `params` with the run's hyperparameters, its update run as the plan says: recorded or op by op, JIT, this rank's shard. */
export function planAdamW(plan: ExecutionPlan, params: Map<string, Variable>, hyper: Omit<AdamWOptions, 'update' | 'jit' | 'shard'>): AdamW {
  return new AdamW(params, { ...hyper, update: plan.update, jit: plan.jit, ...(plan.shard ? { shard: plan.shard } : {}) });
}

function chooseExecutor(setting: string, c: Candidate): StepExecutorName {
  const can = (name: StepExecutorName) => UNSUPPORTED[name](c) === null;
  if (setting === 'auto') {
    if (can('collective')) return 'collective';
    if (c.replicas <= 1) return c.graph && can('functions') ? 'functions' : 'op-by-op';
  } else if (!(STEP_EXECUTOR_NAMES as readonly string[]).includes(setting))
    throw new Error(`train.executor: unknown executor '${setting}' (one of ${STEP_EXECUTOR_NAMES.join(', ')})`);
  // auto with train.dataParallel above 1 asks for replicas, and is refused as naming them would be.
  const executor = setting === 'auto' ? 'replicas' : (setting as StepExecutorName);
  const why = UNSUPPORTED[executor](c);
  if (why) throw new Error(`train.executor ${executor}: ${why}`);
  // Any other executor in a rank would train without the all-reduce: the ranks would drift apart unseen. The xla
  // executor has its own, on jax's distributed runtime (docs/xla.md).
  if (executor !== 'collective' && executor !== 'xla' && can('collective'))
    throw new Error(`train.executor ${setting}: this process is a rank of a run across processes, whose steps run as 'collective', 'xla' or 'auto'`);
  return executor;
}
