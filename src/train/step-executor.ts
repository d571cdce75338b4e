// The step-executor contract: HOW a recorded training step runs, separate from WHAT it computes
// (step.ts: the micro-batches' gradients summed over the step's labelled tokens, clipping, the
// non-finite rule, AdamW). Each way is one file under step-executors/ behind this interface,
// registered in step-executors/index.ts; which one runs, and how, the run's ExecutionPlan says
// (execution-plan.ts). The trainer, the task runner and the throughput benchmark hold a StepExecutor and
// never ask which one it is (docs/execution.md).
import type { XlaPrecision } from '../backend/xla/program-cache.ts';
import type { Batch } from '../data/batch.ts';
import type { StepModel, ModelBatch } from '../model/lm.ts';
import type { EvalResult } from './evaluate.ts';
import type { ExecutionPlan, StepExecutorName } from './execution-plan.ts';
import type { AdamW, StepResult } from './optimizer.ts';

/** What changes from one optimizer step to the next. */
export interface StepInputs {
  lr: number;
  clip: number;
  /** Seed of the step's dropout masks (null = no dropout). */
  dropoutSeed: number | null;
  /**
   * A signal asked this process to stop after the step. Across ranks the request travels with the step's all-reduce
   * and StepResult.stopRequested says whether any rank asked (executors within one process ignore it).
   */
  stopRequested?: boolean;
}

/** What an executor is built from: the run's plan, and the model and optimizer it updates. */
export interface StepExecutorContext {
  plan: ExecutionPlan;
  model: StepModel;
  /** Built with the plan's update (op by op or recorded). */
  optimizer: AdamW;
  /** Only these get gradients (train.freeze); default all parameters. */
  trainable?: Map<string, import('@tensorflow/tfjs').Variable>;
}

export interface StepExecutor {
  /** The registry name (step-executors/index.ts). */
  readonly name: string;
  /** One optimizer step over the micro-batches; model and optimizer change only when the result says applied. */
  step(microBatches: readonly ModelBatch[], inputs: StepInputs): Promise<StepResult>;
  /**
   * Loss, perplexity, bits per byte and accuracy of the model as it is now on these batches (no dropout);
   * `byPosition`: also the loss by position bucket (EvalResult.byPosition, evaluate.ts), from the same forward pass.
   */
  evaluate(batches: readonly Batch[], byPosition?: boolean): Promise<EvalResult>;
  /**
   * Brings state the executor keeps elsewhere (a device, other processes) back into the model's
   * variables and the optimizer's moments, before they are read (checkpoint, export). In-process
   * executors keep none: a no-op. In a run across ranks every rank calls it at the same points
   * (a sharded optimizer's moments are gathered from all of them).
   */
  pull(): Promise<void>;
  /** Sends the model and optimizer as they are now (restored, initialised from another model) to where the executor keeps them. */
  push(): Promise<void>;
  /** Where the steps run when it is not the tfjs backend's device (the XLA executor's jax device): its MFU's peak (mfu.ts). */
  readonly accelerator?: {
    platform: string;
    device: string;
    precision?: XlaPrecision;
    devices?: number;
    /** On a CPU: the jax version and its float32 GEMM rate at size² (FLOP/s, the MFU's peak, mfu.ts). */
    cpuGemm?: { jax: string; measure(size: number): Promise<number> };
  };
  /** One line for the run's log after its first step: what ran where (null = nothing to say). */
  describe(firstBatch: ModelBatch): string | null;
  /** Frees what the executor holds (threads, processes, device buffers); the model and optimizer stay the caller's. */
  close(): Promise<void>;
}

/** One way of running the step, as the registry lists it (whether it can run is the plan's to say: execution-plan.ts). */
export interface StepExecutorEntry {
  readonly name: StepExecutorName;
  /** One line for docs and --help. */
  readonly summary: string;
  create(context: StepExecutorContext): Promise<StepExecutor>;
}
