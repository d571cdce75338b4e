// The step compiled by XLA and run by JAX's runtime (docs/xla.md): the programs recorded as the TensorFlow-function
// steps record them (../xla-recording.ts), exported to StableHLO, run by a jax process beside Node
// (backend/xla/runner.py) that keeps parameters, buffers and AdamW's moments as device buffers. A step sends the
// micro-batches' token ids (and masks) and reads back the loss, the gradient norm and whether the update applied.
// Programs come recorded here (native backend + `npm run setup:xla`) or from a folder `npm run compile` wrote
// ($SLAYFORMER_XLA_PROGRAMS), which any backend, no TensorFlow, can train from.
import * as tf from '@tensorflow/tfjs';
import type { Batch } from '../../data/batch.ts';
import type { ModelBatch } from '../../model/lm.ts';
import { xlaCoordinator } from '../../backend/cluster-env.ts';
import { replyNumber, XlaRunner, type HostArray, type RunnerHello } from '../../backend/xla/runner.ts';
import type { XlaPrecision } from '../../backend/xla/program-cache.ts';
import { runnerPython } from '../../backend/xla/setup.ts';
import { XLA_PROGRAMS_ENV } from '../execution-plan.ts';
import { evalResult, positionBucketEdges, positionBucketsOf, positionLosses, type EvalResult } from '../evaluate.ts';
import { microBatchSeed, stepTokens } from '../step.ts';
import type { StepExecutor, StepExecutorContext, StepExecutorEntry, StepInputs } from '../step-executor.ts';
import type { ExecutionPlan } from '../execution-plan.ts';
import { STEP_SCALARS, type StepResult } from '../optimizer.ts';
import {
  CompiledBook,
  evalInputs,
  gradientInputs,
  hostArray,
  modelTensors,
  RecordingBook,
  recordApplyProgram,
  recordEvalProgram,
  recordGradientProgram,
  type BookEntry,
  type NamedArrays,
  type ProgramBook,
} from '../xla-recording.ts';

const f32 = (x: number): HostArray => ({ dtype: 'float32', shape: [], data: Float32Array.of(x) });

/**
 * What the runner's devices.py reads: how many of its devices to use (train.devices; 0 = all) and, in a rank of a run
 * across processes (src/cli/launch.ts, srun), where jax's coordination service is and which process this is.
 */
function devicesEnv({ jaxDevices, cluster }: ExecutionPlan): Record<string, string> {
  const env: Record<string, string> = { SLAYFORMER_XLA_DEVICES: jaxDevices === 'all' ? '0' : String(jaxDevices), SLAYFORMER_XLA_COORDINATOR: '' };
  if (cluster && cluster.worldSize > 1) {
    env.SLAYFORMER_XLA_COORDINATOR = xlaCoordinator(cluster);
    env.SLAYFORMER_XLA_PROCESSES = String(cluster.worldSize);
    env.SLAYFORMER_XLA_PROCESS_ID = String(cluster.rank);
    // Each rank's index among the ranks of its host: ranks sharing a host's GPUs take disjoint ones (devices.py).
    const hostOf = (address: string) => address.slice(0, address.lastIndexOf(':'));
    const localRanks = cluster.addresses.map((a, rank) => cluster.addresses.slice(0, rank).filter((b) => hostOf(b) === hostOf(a)).length);
    env.SLAYFORMER_XLA_LOCAL_RANKS = localRanks.join(',');
  }
  return env;
}

/**
 * The micro-batches of a step of `count` that device `device` of `devices` (over all processes) runs: a contiguous
 * block, as one device accumulating them all would take them in turn (docs/xla.md, "Several devices").
 */
export function deviceMicroBatches(count: number, device: number, devices: number): { from: number; to: number } {
  return { from: Math.floor((device * count) / devices), to: Math.floor(((device + 1) * count) / devices) };
}

export class XlaExecutor implements StepExecutor {
  readonly name = 'xla';
  private readonly loaded = new Map<string, { seconds: number; via: string }>();
  /** The step count AdamW's bias corrections use; the optimizer's own is set from it on pull. */
  private step_: number;
  /** The buffers (attention mechanisms' fixed or redrawn tensors) as last sent, by tensor identity. */
  private readonly sentBuffers = new Map<string, object>();
  /** Seconds spent compiling programs (XLA), apart from the steps. */
  compileSeconds = 0;

  private constructor(
    private readonly context: StepExecutorContext,
    private readonly runner: XlaRunner,
    readonly hello: RunnerHello,
    private readonly book: ProgramBook,
  ) {
    this.step_ = context.optimizer.stepCount;
  }

  /** train.precision of the gradient and validation programs (AdamW's update is float32 either way). */
  get precision(): XlaPrecision {
    return this.context.plan.precision;
  }

  /** Devices over all processes (the runner's hello; 1 from a runner that predates several devices). */
  get deviceCount(): number {
    return this.hello.deviceCount ?? 1;
  }

  get accelerator(): StepExecutor['accelerator'] & { platform: string; device: string; precision: XlaPrecision; devices: number } {
    const { platform, device, jax } = this.hello;
    // On jax's CPU the MFU's peak is jax's own float32 GEMM rate, timed in the runner (mfu.ts).
    const measure = async (size: number) => (await this.runner.request({ op: 'gemm', size })).header.flopsPerSecond as number;
    return { platform, device, precision: this.precision, devices: this.deviceCount, ...(platform === 'cpu' ? { cpuGemm: { jax, measure } } : {}) };
  }

  static async start(context: StepExecutorContext, book: ProgramBook): Promise<XlaExecutor> {
    const python = runnerPython()!;
    const { runner, hello } = await XlaRunner.start(python, devicesEnv(context.plan));
    const executor = new XlaExecutor(context, runner, hello, book);
    try {
      const { gradAccum } = context.plan;
      if (executor.deviceCount > 1 && gradAccum % executor.deviceCount !== 0)
        throw new Error(
          `train.gradAccum ${gradAccum} is not a multiple of the ${executor.deviceCount} devices (train.devices × processes): each device runs an equal share of the step's micro-batches (docs/xla.md)`,
        );
      await executor.push();
    } catch (err) {
      await runner.close();
      throw err;
    }
    return executor;
  }

  private get variables(): tf.Variable[] {
    const { model, trainable } = this.context;
    return [...(trainable ?? model.parameters()).values()];
  }

  /** Loads `entry` into the runner once (compiling it there) and sends its fixed inputs. */
  private async load(entry: BookEntry): Promise<string> {
    if (!this.loaded.has(entry.base)) {
      const reply = await this.runner.request({ op: 'load', key: entry.base, base: entry.base });
      const info = { seconds: reply.header.seconds as number, via: reply.header.via as string };
      this.compileSeconds += info.seconds;
      this.loaded.set(entry.base, info);
      if (entry.fixed.length) await this.put(entry.fixed);
    }
    return entry.base;
  }

  private put(arrays: NamedArrays) {
    return this.runner.request(
      { op: 'put', names: arrays.map(([n]) => n) },
      arrays.map(([, a]) => a),
    );
  }

  /** Re-sends any buffer the model replaced since it was sent (a redrawn projection: model.onTrainStep). */
  private async sendChangedBuffers(): Promise<void> {
    const changed = [...this.context.model.buffers()].filter(([n, v]) => this.sentBuffers.get(n) !== v.dataId);
    if (!changed.length) return;
    await this.put(changed.map(([n, v]) => [`buffer:${n}`, hostArray(v)]));
    for (const [n, v] of changed) this.sentBuffers.set(n, v.dataId);
  }

  async step(microBatches: readonly ModelBatch[], inputs: StepInputs): Promise<StepResult> {
    const { model, optimizer } = this.context;
    const total = stepTokens(microBatches);
    const variables = this.variables;
    await this.sendChangedBuffers();
    const micro: Array<{ program: string; names: string[]; device: number }> = [];
    const arrays: HostArray[] = [];
    let gradOutputs: string[] | null = null;
    // This process's devices are devices first … first + local − 1 of all processes'; each takes its block.
    const local = this.hello.devices ?? 1;
    const first = (this.hello.processIndex ?? 0) * local;
    const deviceOf = (i: number) => {
      for (let d = first; d < first + local; d++) {
        const { from, to } = deviceMicroBatches(microBatches.length, d, this.deviceCount);
        if (i >= from && i < to) return d - first;
      }
      return null;
    };
    for (let i = 0; i < microBatches.length; i++) {
      const seed = microBatchSeed(inputs.dropoutSeed, i);
      const batch = microBatches[i];
      const given = gradientInputs(model, batch, variables, seed, total);
      if (!given) continue;
      // Recorded (once per shape) on every process, so that all know the gradients' names, run or not here.
      const entry = this.book.get('gradient', given.key, () => ({ spec: recordGradientProgram(model, batch, variables, seed, total) }));
      gradOutputs ??= entry.outputs;
      const device = deviceOf(i);
      if (device === null) continue;
      micro.push({ program: await this.load(entry), names: given.arrays.map(([n]) => n), device });
      arrays.push(...given.arrays.map(([, a]) => a));
    }
    if (!gradOutputs) throw new Error('trainStep: the micro-batches hold no labelled token');
    const gradNames = gradOutputs.filter((n) => n.startsWith('grad:')).map((n) => n.slice('grad:'.length));
    const applyKey = `${gradNames.join(',')}|clip ${inputs.clip > 0}`;
    const apply = this.book.get('apply', applyKey, () => recordApplyProgram(optimizer, model, gradNames, inputs.clip));
    const scalars = optimizer.stepScalars(inputs.lr, inputs.clip, this.step_ + 1);
    const applyProgram = await this.load(apply);
    // What the devices add up (every process lists them alike): the loss and each parameter's gradient, with its shape.
    const shapes = new Map([...model.parameters()].map(([n, v]) => [`grad:${n}`, v.shape]));
    const sums = gradOutputs.map((name) => ({ name, shape: name === 'loss' ? [] : shapes.get(name) }));
    const reply = await this.runner.request(
      { op: 'step', micro, sums, stop: inputs.stopRequested === true, apply: { program: applyProgram, names: [...STEP_SCALARS] } },
      [...arrays, ...scalars.map(f32)],
    );
    const applied = reply.header.applied === true;
    if (applied) this.step_++;
    const acrossProcesses = this.context.plan.cluster !== null;
    return {
      loss: replyNumber(reply.header.loss),
      gradNorm: replyNumber(reply.header.norm),
      tokens: total,
      applied,
      ...(acrossProcesses ? { stopRequested: reply.header.stopRequested === true } : {}),
    };
  }

  async evaluate(batches: readonly Batch[], byPosition = false): Promise<EvalResult> {
    const { model } = this.context;
    let [lossNats, correct, tokens, bytes] = [0, 0, 0, 0];
    // Each batch's program sums into the buckets of its own length: the first ones of the longest's (evaluate.ts).
    const edges = positionBucketEdges(Math.max(1, ...batches.map((b) => b.seqLen)));
    const bucketNats = new Float64Array(edges.length - 1);
    const bucketTokens = new Float64Array(edges.length - 1);
    let buckets = byPosition;
    await this.sendChangedBuffers();
    for (const batch of batches) {
      bytes += batch.bytes;
      const given = evalInputs(model, batch);
      if (!given) continue;
      const entry = this.book.get('eval', given.key, () => ({ spec: recordEvalProgram(model, batch) }));
      const program = await this.load(entry);
      const reply = await this.runner.request(
        { op: 'eval', program, names: given.arrays.map(([n]) => n) },
        given.arrays.map(([, a]) => a),
      );
      const sums = reply.header.sums as Record<string, unknown>;
      lossNats += replyNumber(sums['sum:loss']);
      correct += replyNumber(sums['sum:correct']);
      tokens += given.count;
      const perBucket = sums['sum:byPosition'];
      // A validation program compiled ahead of time before it summed by position has no sum:byPosition.
      if (!Array.isArray(perBucket)) buckets = false;
      else if (buckets) {
        perBucket.forEach((nats, i) => (bucketNats[i] += replyNumber(nats)));
        positionBucketsOf(batch, edges, bucketTokens);
      }
    }
    const result = evalResult(lossNats, correct, tokens, bytes);
    return buckets ? { ...result, byPosition: positionLosses(edges, bucketNats, bucketTokens) } : result;
  }

  async pull(): Promise<void> {
    const { model, optimizer } = this.context;
    const params = [...model.parameters()];
    const reply = await this.runner.request({ op: 'get', names: [...params.map(([n]) => `param:${n}`), 'opt:m', 'opt:v'] });
    params.forEach(([, v], i) => tf.tidy(() => v.assign(tf.tensor(reply.arrays[i].data as Float32Array, v.shape))));
    optimizer.setFlatMoments(this.step_, reply.arrays[params.length].data as Float32Array, reply.arrays[params.length + 1].data as Float32Array);
  }

  async push(): Promise<void> {
    const { model, optimizer } = this.context;
    const { m, v } = optimizer.flatMoments();
    const tensors = modelTensors(model);
    await this.put([
      ...tensors.map(([n, t]) => [n, hostArray(t)] as [string, HostArray]),
      ['opt:m', { dtype: 'float32', shape: [m.length], data: m }],
      ['opt:v', { dtype: 'float32', shape: [v.length], data: v }],
    ]);
    for (const [n, b] of model.buffers()) this.sentBuffers.set(n, b.dataId);
    this.step_ = optimizer.stepCount;
  }

  describe(): string {
    const vias = [...new Set([...this.loaded.values()].map((l) => l.via))].join(', ');
    const devices = this.deviceCount > 1 ? `, data-parallel over ${this.deviceCount} devices (${this.hello.devices} per process)` : '';
    const remat = this.context.plan.remat ? ', blocks rematerialised (train.remat)' : '';
    return `train.executor xla: steps as XLA programs on jax ${this.hello.jax} ${this.hello.platform} (${this.hello.device})${devices}, matrix products in ${this.precision}${remat}; programs ${this.book.origin}, loaded as ${vias || 'nothing yet'}; compiling took ${this.compileSeconds.toFixed(1)} s`;
  }

  /**
   * Peak and current device memory in bytes (null where the device reports none, e.g. jax's CPU), and XLA's compiled
   * estimate of the largest loaded program's peak (every platform; absent from an older runner).
   */
  async memory(): Promise<{ peakBytes: number | null; bytesInUse: number | null; compiledPeakBytes?: number | null }> {
    const reply = await this.runner.request({ op: 'memory' });
    return reply.header as { peakBytes: number | null; bytesInUse: number | null; compiledPeakBytes?: number | null };
  }

  async close(): Promise<void> {
    await this.runner.close();
  }
}

/** The program book this run uses: $SLAYFORMER_XLA_PROGRAMS when set, else recording on the native backend. */
function bookFor(context: StepExecutorContext): ProgramBook {
  const dir = process.env[XLA_PROGRAMS_ENV];
  const { precision, attentionKernel, remat } = context.plan;
  const settings = { precision, attentionKernel, remat };
  return dir ? new CompiledBook(dir, context.model, settings) : new RecordingBook(settings);
}

export const xla: StepExecutorEntry = {
  name: 'xla',
  summary:
    "the step compiled by XLA (StableHLO through TensorFlow) and run by a jax process that keeps the state on its device (CPU here, GPU with jax's CUDA plugin)",
  create: async (context) => XlaExecutor.start(context, bookFor(context)),
};
