// Data parallelism over worker threads (train.dataParallel = R): R replicas of the model, the main
// thread being replica 0, each computing the gradient of its share of every optimizer step's rows.
//
// Why threads: the wasm backend runs on one thread in Node (emscripten's pthreads need blob-URL
// workers, which Node refuses), so a multi-core CPU is used by giving each core its own backend
// instance — what PyTorch's DDP does with processes. Worker threads start faster than processes and
// hand Float32Arrays over without copying (transfer lists).
//
// One step: each micro-batch's rows are cut into R contiguous shards, shard r of every micro-batch
// goes to replica r. Every shard's summed loss is divided by the labelled tokens of the whole step,
// so the replicas' gradient sums add up to exactly the single-thread accumulated gradient (up to
// float summation order); replica 0 adds them, clips and applies AdamW, and the new weights go out
// with the next step's batches. Shard (i, r) uses dropout seed deriveSeed(dropoutSeed, i·R + r), so
// R = 1 is trainStep itself, and a run is reproducible for a given R (dropout masks depend on R).
//
// Only the main thread holds optimizer state, evaluates and checkpoints; replicas hold weights.
import { Worker } from 'node:worker_threads';
import * as tf from '@tensorflow/tfjs';
import { currentDevice } from '../backend/current.ts';
import type { BackendName } from '../backend/device.ts';
import type { LanguageModel, LanguageModelConfig, ModelBatch } from '../model/lm.ts';
import type { AdamW, StepResult } from './optimizer.ts';
import { accumulateGradients, microBatchSeed, stepTokens } from './step.ts';
import type { StepOptions } from './step.ts';

/** Rows [start, start + count) of a batch, as a batch that owns its arrays (they are posted to a worker). */
export function sliceRows(batch: ModelBatch, start: number, count: number): ModelBatch {
  const l = batch.seqLen;
  const rows = (a: Int32Array | Float32Array) => a.slice(start * l, (start + count) * l);
  return {
    batchSize: count,
    seqLen: l,
    inputIds: rows(batch.inputIds) as Int32Array,
    labels: rows(batch.labels) as Int32Array,
    ...(batch.attentionMask ? { attentionMask: rows(batch.attentionMask) as Float32Array } : {}),
    ...(batch.documentIds ? { documentIds: rows(batch.documentIds) as Int32Array } : {}),
  };
}

/** Shard r of every micro-batch, with its dropout seed: what replica r computes. Empty shards are left out. */
export function shardMicroBatches(microBatches: readonly ModelBatch[], replicas: number, dropoutSeed: number | null) {
  const shards = Array.from({ length: replicas }, () => ({ batches: [] as ModelBatch[], seeds: [] as (number | null)[] }));
  microBatches.forEach((batch, i) => {
    let start = 0;
    for (let r = 0; r < replicas; r++) {
      const count = Math.floor(batch.batchSize / replicas) + (r < batch.batchSize % replicas ? 1 : 0);
      if (count > 0) {
        shards[r].batches.push(sliceRows(batch, start, count));
        shards[r].seeds.push(microBatchSeed(dropoutSeed, i * replicas + r));
      }
      start += count;
    }
  });
  return shards;
}

/** The values of several tensors, concatenated in order (one transferable buffer). */
export function packTensors(tensors: readonly tf.Tensor[]): Float32Array {
  const packed = new Float32Array(tensors.reduce((n, t) => n + t.size, 0));
  let offset = 0;
  for (const t of tensors) {
    packed.set(t.dataSync() as Float32Array, offset);
    offset += t.size;
  }
  return packed;
}

/** Splits a packed buffer back into tensors of the given shapes (caller owns them). */
export function unpackTensors(packed: Float32Array, shapes: readonly number[][]): tf.Tensor[] {
  let offset = 0;
  const out = shapes.map((shape) => {
    const size = shape.reduce((a, b) => a * b, 1);
    const t = tf.tensor(packed.subarray(offset, offset + size), shape, 'float32');
    offset += size;
    return t;
  });
  if (offset !== packed.length) throw new Error(`unpackTensors: ${packed.length} values for shapes holding ${offset}`);
  return out;
}

/** main → replica messages. */
export type ReplicaRequest =
  | { type: 'weights'; names: string[]; values: Float32Array }
  | {
      type: 'step';
      id: number;
      names: string[];
      values: Float32Array;
      batches: ModelBatch[];
      seeds: (number | null)[];
      total: number;
      gradNames: string[];
      graph: boolean;
      jit: boolean;
    };
/** replica → main messages. */
export type ReplicaReply =
  | { type: 'ready' }
  | {
      type: 'grads';
      id: number;
      values: Float32Array;
      loss: number;
      /** tf.memory().numTensors in the replica after the step. */ tensors: number;
      /** How the replica's step ran (compiled-step.ts graphStatus: 'graph', 'not recorded', 'eager: …'). */ execution: string;
    }
  | { type: 'error'; message: string };

interface Pending {
  id: number;
  resolve: (reply: Extract<ReplicaReply, { type: 'grads' }>) => void;
  reject: (err: Error) => void;
}

/** One worker thread holding a model replica. */
class Replica {
  private readonly worker: Worker;
  private pending: Pending | null = null;
  private failure: Error | null = null;
  private readonly ready: Promise<void>;

  constructor(
    readonly rank: number,
    config: LanguageModelConfig,
    backend: string,
  ) {
    this.worker = new Worker(new URL('./replica-worker.mjs', import.meta.url), { workerData: { config, backend } });
    let markReady: () => void = () => {};
    let failReady: (err: Error) => void = () => {};
    this.ready = new Promise((resolve, reject) => {
      markReady = resolve;
      failReady = reject;
    });
    this.ready.catch(() => {}); // observed through step(); a failed start must not be an unhandled rejection
    const fail = (err: Error) => {
      this.failure ??= err;
      failReady(this.failure);
      this.pending?.reject(this.failure);
      this.pending = null;
    };
    this.worker.on('message', (reply: ReplicaReply) => {
      if (reply.type === 'ready') markReady();
      else if (reply.type === 'error') fail(new Error(`data-parallel replica ${rank}: ${reply.message}`));
      // Gradients answer the pending request with their id; a late answer to an abandoned one is dropped.
      else if (reply.id === this.pending?.id) {
        this.pending.resolve(reply);
        this.pending = null;
      }
    });
    this.worker.on('error', (err) => fail(new Error(`data-parallel replica ${rank} crashed: ${err.message}`)));
    this.worker.on('exit', (code) => fail(new Error(`data-parallel replica ${rank} exited (code ${code})`)));
  }

  post(message: ReplicaRequest, transfer: ArrayBuffer[] = []): void {
    if (this.failure) throw this.failure;
    this.worker.postMessage(message, transfer);
  }

  async started(): Promise<void> {
    await this.ready;
  }

  /** Sends one step's work; resolves with the replica's gradient sum and loss. */
  request(message: Extract<ReplicaRequest, { type: 'step' }>): Promise<Extract<ReplicaReply, { type: 'grads' }>> {
    const transfer = [
      message.values.buffer as ArrayBuffer,
      ...message.batches.flatMap(
        (b) =>
          [
            b.inputIds.buffer,
            b.labels.buffer,
            ...(b.attentionMask ? [b.attentionMask.buffer] : []),
            ...(b.documentIds ? [b.documentIds.buffer] : []),
          ] as ArrayBuffer[],
      ),
    ];
    return new Promise((resolve, reject) => {
      if (this.failure) return reject(this.failure);
      this.pending = { id: message.id, resolve, reject };
      this.worker.postMessage(message, transfer);
    });
  }

  async close(): Promise<void> {
    this.worker.removeAllListeners('exit');
    await this.worker.terminate();
  }
}

/**
 * Replicas 1 … R−1 of `model` in worker threads; `step` replaces trainStep. The replicas are built
 * from the model's config (same seed, so the same initial values) and then receive every parameter
 * and buffer, so finetuning inits and restored checkpoints are what they compute with.
 */
export class DataParallelGroup {
  private nextId = 0;
  /** Live tensors in each worker replica after its last step (for leak checks). */
  readonly replicaTensors: number[] = [];
  /** How each worker replica's last step ran ('graph', 'not recorded', 'eager: …'). */
  readonly replicaExecution: string[] = [];

  private constructor(
    private readonly model: LanguageModel,
    private readonly replicas: Replica[],
  ) {}

  /** Starts R − 1 worker replicas on `backend` (R = `replicas`, the main thread counting as one): the trainer's device, else the one running. */
  static async start(model: LanguageModel, replicas: number, backend: BackendName = currentDevice().backend): Promise<DataParallelGroup> {
    if (!Number.isInteger(replicas) || replicas < 1) throw new Error(`train.dataParallel must be an integer ≥ 1 (got ${replicas})`);
    const workers = Array.from({ length: replicas - 1 }, (_, i) => new Replica(i + 1, model.config, backend));
    const group = new DataParallelGroup(model, workers);
    try {
      await Promise.all(workers.map((w) => w.started()));
      group.sendAllWeights();
    } catch (err) {
      await group.close();
      throw err;
    }
    return group;
  }

  /** Sends every weight and buffer as the main thread's model holds them now (after a restore or an initialisation). */
  sendAllWeights(): void {
    this.sendAll([...this.model.parameters(), ...this.model.buffers()]);
  }

  get size(): number {
    return this.replicas.length + 1;
  }

  /** Replica i's copy of packed values: a transferred buffer is detached from the sender, so all but the last get a copy. */
  private copyFor(packed: Float32Array, i: number): Float32Array {
    return i === this.replicas.length - 1 ? packed : packed.slice();
  }

  private sendAll(tensors: [string, tf.Variable][]): void {
    const names = tensors.map(([n]) => n);
    const packed = packTensors(tensors.map(([, v]) => v));
    this.replicas.forEach((replica, i) => {
      const values = this.copyFor(packed, i);
      replica.post({ type: 'weights', names, values }, [values.buffer as ArrayBuffer]);
    });
  }

  /**
   * One optimizer step over the micro-batches, split across the replicas; the same update as
   * trainStep over the shards in the order (micro-batch, replica).
   */
  async step(optimizer: AdamW, microBatches: readonly ModelBatch[], opts: StepOptions): Promise<StepResult> {
    const total = stepTokens(microBatches);
    const trainable = [...(opts.trainable ?? this.model.parameters())];
    const shards = shardMicroBatches(microBatches, this.size, opts.dropoutSeed);
    // Trainable weights change every step and buffers on a redraw; frozen weights were sent at start.
    const synced = [...trainable, ...this.model.buffers()];
    const names = synced.map(([n]) => n);
    const gradNames = trainable.map(([n]) => n);
    const id = this.nextId++;
    const packed = packTensors(synced.map(([, v]) => v)); // read from the backend once, copied per replica
    const remote = this.replicas.map((replica, i) => {
      const { batches, seeds } = shards[replica.rank];
      if (batches.length === 0) return Promise.resolve(null);
      return replica.request({
        type: 'step',
        id,
        names,
        values: this.copyFor(packed, i),
        batches,
        seeds,
        total,
        gradNames,
        graph: opts.graph ?? true,
        jit: opts.jit ?? false,
      });
    });
    let local: ReturnType<typeof accumulateGradients> | null = null;
    try {
      if (shards[0].batches.length)
        local = accumulateGradients(
          this.model,
          shards[0].batches,
          shards[0].seeds,
          total,
          trainable.map(([, v]) => v),
          opts.graph ?? true,
          opts.jit ?? false,
        );
    } catch (err) {
      await Promise.allSettled(remote); // the replicas' answers (or errors) are not left unhandled
      throw err;
    }
    let replies: (Extract<ReplicaReply, { type: 'grads' }> | null)[];
    try {
      replies = await Promise.all(remote);
    } catch (err) {
      if (local) tf.dispose([...local.grads.values(), local.loss]);
      throw err;
    }
    replies.forEach((reply, i) => {
      if (!reply) return;
      this.replicaTensors[i] = reply.tensors;
      this.replicaExecution[i] = reply.execution;
    });
    const summed = tf.tidy(() => {
      // Cloned (a shared buffer, no copy) so that the local tensors can be freed whatever arrived.
      let sums = trainable.map(([name, v]) => (local ? tf.clone(local.grads.get(name)!) : tf.zeros(v.shape)));
      let lossSum: tf.Scalar = local ? tf.clone(local.loss) : tf.scalar(0);
      for (const reply of replies) {
        if (!reply) continue;
        const parts = unpackTensors(
          reply.values,
          trainable.map(([, v]) => v.shape),
        );
        sums = sums.map((s, i) => tf.add(s, parts[i]));
        lossSum = tf.add(lossSum, reply.loss);
      }
      return { sums, lossSum };
    });
    if (local) tf.dispose([...local.grads.values(), local.loss]);
    const grads = new Map(gradNames.map((n, i) => [n, summed.sums[i]]));
    const loss = summed.lossSum;
    return optimizer.update(grads, loss, total, opts);
  }

  async close(): Promise<void> {
    await Promise.all(this.replicas.map((r) => r.close()));
  }
}
