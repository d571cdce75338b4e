// AdamW (Loshchilov & Hutter, decoupled weight decay), written by hand on tf ops: tfjs ships Adam
// but no AdamW, and its optimizers keep their moments in unnamed internal variables that a
// checkpoint cannot address by parameter name. The update is PyTorch's torch.optim.AdamW:
//   t ← t + 1
//   m ← β1·m + (1 − β1)·g              v ← β2·v + (1 − β2)·g²
//   p ← p·(1 − lr·λ)                   (only parameters that decay)
//   p ← p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + ε)
import * as tf from '@tensorflow/tfjs';
import { GraphCache } from '../backend/tf-graph.ts';

export interface AdamWOptions {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** Also decay the token/position embeddings (off by default, as nanoGPT/HF). */
  decayEmbeddings?: boolean;
  /**
   * How the update runs, as the run's ExecutionPlan says (execution-plan.ts): 'recorded' = one TensorFlow function
   * (backend/tf-graph.ts; only where the backend has them), 'op-by-op' = every op from JavaScript (the default).
   */
  update?: 'op-by-op' | 'recorded';
  /** Compile the recorded update with TensorFlow's XLA JIT (train.xla resolved; default false). */
  jit?: boolean;
  /**
   * ZeRO-1 (train.shardOptimizer; docs/distributed.md): this process is rank `rank` of `worldSize` and keeps the
   * moments only for its slice of the raveled parameters; every update then runs across ranks (AcrossRanks.gather).
   */
  shard?: ShardOf;
}

/** This rank's place among the ranks that share the optimizer state. */
export interface ShardOf {
  rank: number;
  worldSize: number;
}

/**
 * Rank r's slice of the raveled [P] parameters: S = ⌈P / N⌉ values from r·S, the vector padded with zeros to N·S
 * so that every slice has the same length (an all-gather concatenates equal pieces).
 */
export function shardSlice(total: number, { rank, worldSize }: ShardOf): { start: number; size: number; inside: number } {
  const size = Math.ceil(total / worldSize);
  const start = rank * size;
  return { start, size, inside: Math.max(0, Math.min(size, total - start)) };
}

/**
 * Which parameters get weight decay: the weight matrices of linear layers (names ending in
 * ".weight" with rank ≥ 2), plus the embeddings when asked. Never LayerNorm gains, biases, or the
 * attention mechanisms' own kernel parameters (e.g. DARKFormer's covariance factor).
 */
export function decays(name: string, variable: tf.Variable, decayEmbeddings = false): boolean {
  if (name.startsWith('embed.')) return decayEmbeddings;
  return name.endsWith('.weight') && variable.rank >= 2;
}

/** What one optimizer step did (AdamW.update). */
export interface StepResult {
  /** Mean cross-entropy per labelled token over all micro-batches, nats. */
  loss: number;
  /** Global gradient norm before clipping. */
  gradNorm: number;
  /** Labelled tokens in the step. */
  tokens: number;
  /** False when the loss or gradient norm was NaN/Inf: then nothing was updated (not even AdamW's step count). */
  applied: boolean;
  /** Across ranks: whether some rank asked the run to stop after this step (every rank gets the same answer). */
  stopRequested?: boolean;
}

/**
 * An update computed but not applied (AdamW.prepare): the gradients' global norm before clipping, to be read before
 * deciding, and the new parameters and moments, written by commit() or dropped by discard(). One of the two must be
 * called; either frees the tensors (norm included).
 */
export interface PendingUpdate {
  norm: tf.Scalar;
  /** The step's loss summed over the ranks, when the update was computed across ranks (AcrossRanks). */
  loss?: tf.Scalar;
  /** How many ranks asked to stop after this step (AcrossRanks.stop summed), when computed across ranks. */
  stop?: tf.Scalar;
  commit(): void;
  discard(): void;
}

/**
 * An update computed by several processes at once (step-executors/collective.ts): each holds its part of the
 * gradients and of the loss; `sum` adds a [P + 2] float32 vector over the processes (one all-reduce), so every
 * process clips, decides and applies the same update from the same sums.
 */
export interface AcrossRanks {
  loss: tf.Scalar;
  /**
   * 1 when this rank asks the run to stop after this step (a signal reached it), else 0. It travels in the same
   * all-reduce, so that every rank learns of a stop in the same step: a sharded optimizer's checkpoint needs every
   * rank (gatherMoments).
   */
  stop: tf.Scalar;
  sum: (packed: tf.Tensor1D) => tf.Tensor1D;
  /** Every rank's equal-length piece concatenated in rank order (an all-gather): required by a sharded optimizer. */
  gather?: (piece: tf.Tensor1D) => tf.Tensor1D;
}

/**
 * AdamW over all parameters at once. The moments live in two flat [P] variables and every step is
 * one chain of element-wise ops over the raveled gradients (PyTorch's "foreach"/fused AdamW idea):
 * per-parameter updates cost ~14 small ops × parameters — ~1,000 kernel calls a step for the bench
 * GPT, half of all its kernels, each with its dispatch and allocation — where this costs ~3 per
 * parameter (ravel, unravel, apply) plus ~15 over the whole vector. Raveling, the global norm,
 * clipping and the update are one program, run as one TensorFlow function where the backend can:
 * a step's only other work is uploading four scalars and reading the norm.
 */
export class AdamW {
  readonly options: Required<Omit<AdamWOptions, 'shard'>>;
  /** Set when this rank keeps only its slice of the moments (ZeRO-1). */
  readonly shard: (ShardOf & ReturnType<typeof shardSlice>) | null;
  private readonly names: string[];
  private readonly params: Map<string, tf.Variable>;
  private readonly sizes: number[];
  private readonly decaySet: Set<string>;
  private readonly m: tf.Variable<tf.Rank.R1>;
  private readonly v: tf.Variable<tf.Rank.R1>;
  private step = 0;
  private graphs: GraphCache | null = null;
  private lastKey = '';
  /** Per set of skipped parameters: the [P] bool mask of the others (null when none is skipped). */
  private readonly presentMasks = new Map<string, tf.Tensor1D | null>();
  /** Sharded: this rank's slice of the [P] bool mask of the decayed parameters (made on first use). */
  private decayMask: tf.Tensor1D | null = null;
  /** Sharded: every rank's moments, gathered for a checkpoint at optimizer step `step` (gatherMoments). */
  private gathered: { step: number; m: tf.Tensor1D; v: tf.Tensor1D } | null = null;

  constructor(params: Map<string, tf.Variable>, options: AdamWOptions) {
    const { shard, ...rest } = options;
    this.options = { decayEmbeddings: false, update: 'op-by-op', jit: false, ...rest };
    const { beta1, beta2, eps, weightDecay } = this.options;
    if (!(beta1 >= 0 && beta1 < 1)) throw new Error(`train.beta1 must be in [0, 1) (got ${beta1})`);
    if (!(beta2 >= 0 && beta2 < 1)) throw new Error(`train.beta2 must be in [0, 1) (got ${beta2})`);
    if (!(eps > 0)) throw new Error(`train.eps must be > 0 (got ${eps})`);
    if (!(weightDecay >= 0)) throw new Error(`train.weightDecay must be ≥ 0 (got ${weightDecay})`);
    this.params = new Map(params);
    this.names = [...params.keys()];
    this.sizes = this.names.map((n) => params.get(n)!.size);
    this.decaySet = new Set([...params].filter(([n, v]) => decays(n, v, this.options.decayEmbeddings)).map(([n]) => n));
    const total = this.sizes.reduce((a, b) => a + b, 0);
    if (
      shard &&
      !(Number.isInteger(shard.worldSize) && shard.worldSize >= 1 && Number.isInteger(shard.rank) && shard.rank >= 0 && shard.rank < shard.worldSize)
    )
      throw new Error(`optimizer: rank ${shard.rank} of ${shard.worldSize} is not a rank of the run`);
    this.shard = shard ? { ...shard, ...shardSlice(total, shard) } : null;
    const kept = this.shard ? this.shard.size : total;
    // tf.variable copies its initial value, so the zeros are built and freed inside a tidy.
    [this.m, this.v] = tf.tidy(() => [tf.variable(tf.zeros([kept]), false), tf.variable(tf.zeros([kept]), false)]) as [
      tf.Variable<tf.Rank.R1>,
      tf.Variable<tf.Rank.R1>,
    ];
  }

  /** How the last update ran: 'graph', 'not recorded' or 'eager…' (GraphCache.status), for logs and tests. */
  graphStatus(): string {
    return this.graphs ? this.graphs.status(this.lastKey) : 'eager';
  }

  /** Names of the parameters that receive weight decay. */
  get decayed(): ReadonlySet<string> {
    return this.decaySet;
  }

  get stepCount(): number {
    return this.step;
  }

  /** Values of the two moments this process keeps: 2P, or 2S of its slice when sharded. */
  get momentValues(): number {
    return this.m.size + this.v.size;
  }

  /**
   * Step count and moments by parameter name, for checkpoints: new tensors, which the caller disposes. A sharded
   * optimizer returns the moments gathered at this step (gatherMoments, called on every rank first) and lets go of them.
   */
  getState(): { step: number; m: Map<string, tf.Tensor>; v: Map<string, tf.Tensor> } {
    const byName = (flat: tf.Tensor1D) => {
      const pieces = tf.tidy(() => (this.sizes.length ? tf.split(flat, this.sizes) : []).map((x, i) => tf.reshape(x, this.params.get(this.names[i])!.shape)));
      return new Map(this.names.map((n, i) => [n, pieces[i]] as const));
    };
    if (!this.shard) return { step: this.step, m: byName(this.m), v: byName(this.v) };
    const gathered = this.gathered;
    if (gathered?.step !== this.step)
      throw new Error(`optimizer: rank ${this.shard.rank} keeps only its slice of the moments; gather them at step ${this.step} first (gatherMoments)`);
    this.gathered = null;
    try {
      return { step: this.step, m: byName(gathered.m), v: byName(gathered.v) };
    } finally {
      tf.dispose([gathered.m, gathered.v]);
    }
  }

  /**
   * Sharded: every rank's slice of the moments, as one all-gather of [m slice, v slice] (`gather`, which every rank
   * calls at the same point); `keep` (rank 0, which writes checkpoints) holds the whole moments for getState, the
   * others drop them at once.
   */
  gatherMoments(gather: (piece: tf.Tensor1D) => tf.Tensor1D, keep: boolean): void {
    const shard = this.shard;
    if (!shard) throw new Error('optimizer: gatherMoments is for an optimizer that keeps a slice of the moments (shard)');
    const total = this.sizes.reduce((a, b) => a + b, 0);
    const [m, v] = tf.tidy(() => {
      // Rank-major pieces of 2S values: [m_0, v_0, m_1, v_1, …].
      const all = tf.reshape(gather(tf.concat([this.m, this.v]) as tf.Tensor1D), [shard.worldSize, 2, shard.size]);
      const moment = (i: number) => tf.slice(tf.reshape(tf.slice(all, [0, i, 0], [-1, 1, -1]), [-1]), 0, total) as tf.Tensor1D;
      return [moment(0), moment(1)];
    });
    if (this.gathered) tf.dispose([this.gathered.m, this.gathered.v]);
    this.gathered = null;
    if (keep) this.gathered = { step: this.step, m, v };
    else tf.dispose([m, v]);
  }

  /** Restores the step count and moments (e.g. from a checkpoint); names and shapes must match. A sharded optimizer keeps its slice. */
  setState(step: number, m: Map<string, tf.Tensor>, v: Map<string, tf.Tensor>): void {
    for (const [label, source, target] of [
      ['m', m, this.m],
      ['v', v, this.v],
    ] as const) {
      const pieces = this.names.map((name) => {
        const t = source.get(name);
        if (!t) throw new Error(`optimizer state: missing ${label} for parameter '${name}'`);
        const shape = this.params.get(name)!.shape;
        if (!tf.util.arraysEqual(t.shape, shape)) {
          throw new Error(`optimizer state: ${label} of '${name}' has shape [${t.shape}] but the parameter has [${shape}]`);
        }
        return t;
      });
      tf.tidy(() => target.assign(this.ownSlice(this.ravel(pieces))));
    }
    this.step = step;
  }

  /**
   * The step's update from its accumulated gradients (their loss = mean over the step's `tokens` labelled tokens):
   * computed first (prepare) and only written once the loss and the gradient norm read back finite, so that a NaN/Inf
   * step leaves weights, moments and the step count as they were. Disposes `grads` and `loss`. `acrossRanks`: `grads`
   * and `loss` are this process's part, summed over the ranks inside the update (AcrossRanks), and the rule decides on
   * the sums, so that every rank applies or skips together.
   */
  async update(
    grads: Map<string, tf.Tensor>,
    loss: tf.Scalar,
    tokens: number,
    opts: { lr: number; clip: number },
    acrossRanks?: Omit<AcrossRanks, 'loss' | 'stop'> & { stopRequested: boolean },
  ): Promise<StepResult> {
    let pending: PendingUpdate | null = null;
    const stop = acrossRanks ? tf.scalar(acrossRanks.stopRequested ? 1 : 0) : null;
    try {
      pending = this.prepare(grads, opts.lr, opts.clip, acrossRanks ? { ...acrossRanks, loss, stop: stop! } : undefined);
      const [norm, value, stops] = await Promise.all([pending.norm.data(), (pending.loss ?? loss).data(), pending.stop?.data()]);
      const applied = Number.isFinite(norm[0]) && Number.isFinite(value[0]);
      if (applied) pending.commit();
      else pending.discard();
      pending = null;
      return { loss: value[0], gradNorm: norm[0], tokens, applied, ...(stops ? { stopRequested: stops[0] > 0 } : {}) };
    } finally {
      pending?.discard();
      tf.dispose([...grads.values(), loss, ...(stop ? [stop] : [])]);
    }
  }

  /** One update with learning rate `lr` (gradients clipped to global norm `clip`; 0 = no clipping), applied at once. */
  applyGradients(grads: Map<string, tf.Tensor> | Record<string, tf.Tensor>, lr: number, clip = 0): void {
    this.prepare(grads, lr, clip).commit();
  }

  /**
   * The update of `grads` with learning rate `lr`, clipped to global norm `clip` (0 = no clipping), computed but not
   * applied. A parameter without a gradient is left as it is, moments included. Element for element the formulas of
   * torch.optim.AdamW (module comment), in the same float32 order as a per-parameter loop; the values that change
   * from step to step are inputs of the program, so that it runs as one recorded graph (GraphCache). `across`: the
   * raveled gradients and the loss are summed over the ranks first, as one packed vector, inside the same program.
   */
  prepare(grads: Map<string, tf.Tensor> | Record<string, tf.Tensor>, lr: number, clip: number, across?: AcrossRanks): PendingUpdate {
    const byName = grads instanceof Map ? grads : new Map(Object.entries(grads));
    for (const name of byName.keys()) {
      if (!this.params.has(name)) throw new Error(`optimizer: gradient for unknown parameter '${name}'`);
    }
    if (!(clip >= 0)) throw new Error(`train.clip must be ≥ 0 (got ${clip})`);
    const t = this.step + 1;
    const skipped = this.names.filter((n) => !byName.has(n));
    const updated = this.names.filter((n) => byName.has(n));
    const outputs = tf.tidy(() => {
      const program = this.updateProgram(byName, clip, this.stepScalars(lr, clip, t), across);
      const graphs = this.options.update === 'recorded' ? (this.graphs ??= new GraphCache()) : null;
      this.lastKey = `${skipped.join(',')}|${this.options.weightDecay > 0}|${clip > 0}|${across ? 'across ranks' : ''}`;
      const inputs = program.inputs.map(([, x]) => x);
      return graphs ? graphs.call(this.lastKey, inputs, program.run, this.options.jit) : program.run();
    });
    const [norm, ...rest] = outputs;
    const [reducedLoss, stops] = across ? rest.splice(0, 2) : [];
    const [mNew, vNew, ...next] = rest;
    return {
      norm: norm as tf.Scalar,
      ...(reducedLoss ? { loss: reducedLoss as tf.Scalar, stop: stops as tf.Scalar } : {}),
      commit: () => {
        this.m.assign(mNew as tf.Tensor1D);
        this.v.assign(vNew as tf.Tensor1D);
        updated.forEach((name, i) => this.params.get(name)!.assign(next[i]));
        this.step = t;
        tf.dispose(outputs);
      },
      discard: () => tf.dispose(outputs),
    };
  }

  /** The step's scalar inputs for step count `t`: lr / (1 − β1ᵗ), √(1 − β2ᵗ), 1 − lr·λ and the clip norm. */
  stepScalars(lr: number, clip: number, t: number): number[] {
    const { beta1, beta2, weightDecay } = this.options;
    return [lr / (1 - beta1 ** t), Math.sqrt(1 - beta2 ** t), 1 - lr * weightDecay, clip];
  }

  /**
   * The update of `grads` as one program with named inputs (grad:<name> of each parameter given a gradient,
   * opt:m, opt:v, the four step scalars, opt:present where some parameter has none, opt:decayed (sharded, with
   * weight decay: which values of this rank's slice decay), param:<name> of all, and ranks:loss, ranks:stop when the
   * update is computed across ranks) and named outputs (norm, ranks:loss and ranks:stop across ranks, opt:m, opt:v,
   * param:<name> of the updated): prepare runs it, the xla executor records it (src/train/xla-recording.ts). A sharded
   * optimizer updates its slice and gathers the parameters (updateSlice). Call inside tf.tidy.
   */
  updateProgram(
    grads: ReadonlyMap<string, tf.Tensor>,
    clip: number,
    scalarValues: number[],
    across?: AcrossRanks,
  ): { inputs: Array<[string, tf.Tensor]>; outputs: string[]; run: () => tf.Tensor[] } {
    const skipped = this.names.filter((n) => !grads.has(n));
    const updated = this.names.filter((n) => grads.has(n));
    if (this.shard && !across?.gather)
      throw new Error(`optimizer: rank ${this.shard.rank} keeps only its slice of the moments: its updates run across ranks, with an all-gather`);
    const present = this.presentMask(skipped);
    // An input, as the present mask: a tensor made while a program records would be frozen into it differently each time.
    const decaysHere = this.shard && this.options.weightDecay > 0 ? this.decayMaskSlice() : null;
    const params = this.names.map((n) => this.params.get(n)!);
    const scalars = scalarValues.map((x) => tf.scalar(x));
    const inputs: Array<[string, tf.Tensor]> = [
      ...updated.map((n) => [`grad:${n}`, grads.get(n)!] as [string, tf.Tensor]),
      ['opt:m', this.m],
      ['opt:v', this.v],
      ...STEP_SCALARS.map((name, i) => [name, scalars[i]] as [string, tf.Tensor]),
      ...(present ? [['opt:present', present] as [string, tf.Tensor]] : []),
      ...(decaysHere ? [['opt:decayed', decaysHere] as [string, tf.Tensor]] : []),
      ...this.names.map((n, i) => [`param:${n}`, params[i]] as [string, tf.Tensor]),
      ...(across ? [['ranks:loss', across.loss] as [string, tf.Tensor], ['ranks:stop', across.stop] as [string, tf.Tensor]] : []),
    ];
    const run = () => {
      let g = this.ravel(this.names.map((n, i) => grads.get(n) ?? tf.zerosLike(params[i])));
      let sums: tf.Tensor[] = [];
      if (across) {
        // One collective for all three: the gradients, the loss and the stop requests travel as one [P + 2] vector.
        const summed = across.sum(tf.concat([g, tf.reshape(across.loss, [1]), tf.reshape(across.stop, [1])]) as tf.Tensor1D);
        [g, sums] = [tf.slice(summed, 0, g.size), [0, 1].map((i) => tf.reshape(tf.slice(summed, g.size + i, 1), []))];
      }
      // The norm and the clipping see the whole summed gradient on every rank, sharded or not: the same decision everywhere.
      const { grad, norm } = clipByGlobalNorm(g, clip, scalars[3]);
      const next = this.shard
        ? this.updateSlice(grad, scalars, present, decaysHere, updated, across!.gather!)
        : this.newValues(grad, scalars, present, updated);
      return [norm, ...sums, ...next];
    };
    const outputs = ['norm', ...(across ? ['ranks:loss', 'ranks:stop'] : []), 'opt:m', 'opt:v', ...updated.map((n) => `param:${n}`)];
    return { inputs, outputs, run };
  }

  /** The moments as kept, flat [P] in parameter order, for an executor that keeps them elsewhere (pull/push). */
  flatMoments(): { m: Float32Array; v: Float32Array } {
    this.refuseSharded('flatMoments');
    return { m: this.m.dataSync() as Float32Array, v: this.v.dataSync() as Float32Array };
  }

  /** Sets the step count and the flat moments (as flatMoments gives them). */
  setFlatMoments(step: number, m: Float32Array, v: Float32Array): void {
    this.refuseSharded('setFlatMoments');
    for (const [label, values, target] of [
      ['m', m, this.m],
      ['v', v, this.v],
    ] as const) {
      if (values.length !== target.size) throw new Error(`optimizer state: flat ${label} has ${values.length} values, the parameters ${target.size}`);
      tf.tidy(() => target.assign(tf.tensor1d(values)));
    }
    this.step = step;
  }

  /** The [P] bool mask of the parameters that are not skipped, made once per set; null when none is. */
  private presentMask(skipped: string[]): tf.Tensor1D | null {
    const key = skipped.join(',');
    if (!this.presentMasks.has(key)) {
      // Kept: the cache outlives any tidy the caller runs the step in.
      const mask =
        skipped.length === 0
          ? null
          : tf.keep(
              tf.tidy(
                () => tf.cast(this.ravel(this.names.map((n) => (skipped.includes(n) ? tf.zeros : tf.ones)(this.params.get(n)!.shape))), 'bool') as tf.Tensor1D,
              ),
            );
      this.presentMasks.set(key, mask);
    }
    return this.presentMasks.get(key)!;
  }

  private refuseSharded(what: string): void {
    if (this.shard) throw new Error(`optimizer: ${what} needs the whole moments, and rank ${this.shard.rank} keeps only its slice`);
  }

  /** This rank's [S] slice of a raveled [P] vector (padded with zeros, or false, past P); the vector itself when not sharded. */
  private ownSlice<T extends tf.Tensor1D>(flat: T): T {
    if (!this.shard) return flat;
    const { start, size, inside } = this.shard;
    const piece = tf.slice(flat, start, inside);
    return (inside === size ? piece : tf.concat([piece, tf.zeros([size - inside], flat.dtype)])) as T;
  }

  /**
   * ZeRO-1's update (docs/distributed.md): the moments of this rank's slice, the new values of the parameters in it,
   * and every rank's new slice gathered back into the whole parameters. Element for element the operations of
   * update() (decay where the parameter decays, kept where it is skipped), so the weights equal the unsharded ones.
   */
  private updateSlice(
    grad: tf.Tensor1D,
    [stepSize, sqrtBias2, decay]: tf.Scalar[],
    present: tf.Tensor1D | null,
    decaysHere: tf.Tensor1D | null,
    updated: string[],
    gather: (piece: tf.Tensor1D) => tf.Tensor1D,
  ): tf.Tensor[] {
    const { beta1, beta2, eps } = this.options;
    const total = this.sizes.reduce((a, b) => a + b, 0);
    const g = this.ownSlice(grad);
    const own = this.ownSlice(this.ravel(this.names.map((n) => this.params.get(n)!)));
    const presentHere = present ? this.ownSlice(present) : null;
    const keepSkipped = (next: tf.Tensor, old: tf.Tensor) => (presentHere ? tf.where(presentHere, next, old) : next);
    const mNew = keepSkipped(tf.add(tf.mul(this.m, beta1), tf.mul(g, 1 - beta1)), this.m);
    const vNew = keepSkipped(tf.add(tf.mul(this.v, beta2), tf.mul(tf.square(g), 1 - beta2)), this.v);
    const step = tf.mul(tf.div(mNew, tf.add(tf.div(tf.sqrt(vNew), sqrtBias2), eps)), stepSize);
    const decayed = decaysHere ? tf.where(decaysHere, tf.mul(own, decay), own) : own;
    const mine = keepSkipped(tf.sub(decayed, step), own) as tf.Tensor1D;
    const whole = tf.slice(gather(mine), 0, total);
    const pieces = new Map(tf.split(whole, this.sizes).map((piece, i) => [this.names[i], piece] as const));
    const next = updated.map((name) => {
      const shape = this.params.get(name)!.shape;
      const piece = pieces.get(name)!;
      return shape.length === 1 ? piece : tf.reshape(piece, shape);
    });
    return [mNew, vNew, ...next];
  }

  /** This rank's slice of the [P] bool mask of the decayed parameters, made once; null when none decays. */
  private decayMaskSlice(): tf.Tensor1D | null {
    if (this.decaySet.size === 0) return null;
    // Kept: it outlives the tidy of the step that first asks for it.
    this.decayMask ??= tf.keep(
      tf.tidy(() =>
        this.ownSlice(
          tf.cast(this.ravel(this.names.map((n) => (this.decaySet.has(n) ? tf.ones : tf.zeros)(this.params.get(n)!.shape))), 'bool') as tf.Tensor1D,
        ),
      ),
    );
    return this.decayMask;
  }

  /** The new m, v and the new value of each parameter in `updated` (stepSize, √(1 − β2ᵗ), 1 − lr·λ given as scalars). */
  private newValues(g: tf.Tensor1D, [stepSize, sqrtBias2, decay]: tf.Scalar[], present: tf.Tensor1D | null, updated: string[]): tf.Tensor[] {
    const { beta1, beta2, eps, weightDecay } = this.options;
    const keepSkipped = (next: tf.Tensor, old: tf.Tensor) => (present ? tf.where(present, next, old) : next);
    const mNew = keepSkipped(tf.add(tf.mul(this.m, beta1), tf.mul(g, 1 - beta1)), this.m);
    const vNew = keepSkipped(tf.add(tf.mul(this.v, beta2), tf.mul(tf.square(g), 1 - beta2)), this.v);
    const step = tf.mul(tf.div(mNew, tf.add(tf.div(tf.sqrt(vNew), sqrtBias2), eps)), stepSize);
    const pieces = new Map(tf.split(step, this.sizes).map((piece, i) => [this.names[i], piece] as const));
    const next = updated.map((name) => {
      const p = this.params.get(name)!;
      const decayed = this.decaySet.has(name) && weightDecay > 0 ? tf.mul(p, decay) : p;
      const piece = pieces.get(name)!;
      return tf.sub(decayed, p.rank === 1 ? piece : tf.reshape(piece, p.shape));
    });
    return [mNew, vNew, ...next];
  }

  private ravel(tensors: tf.Tensor[]): tf.Tensor1D {
    // A reshape is a kernel call on the native backend even when nothing changes: vectors go in as they are.
    return tensors.length ? (tf.concat(tensors.map((x) => (x.rank === 1 ? x : tf.reshape(x, [-1])))) as tf.Tensor1D) : tf.zeros([0]);
  }

  dispose(): void {
    this.graphs?.dispose();
    for (const mask of this.presentMasks.values()) mask?.dispose();
    this.decayMask?.dispose();
    if (this.gathered) tf.dispose([this.gathered.m, this.gathered.v]);
    this.m.dispose();
    this.v.dispose();
  }
}

/** Names of the step scalars in updateProgram's inputs, in stepScalars' order. */
export const STEP_SCALARS = ['step:stepSize', 'step:sqrtBias2', 'step:decay', 'step:clip'] as const;

/**
 * Global-norm clipping as torch.nn.utils.clip_grad_norm_: scale the gradient by
 * min(1, maxNorm / (‖g‖ + 1e-6)). Returns the pre-clip norm (a scalar tensor, read it after the step
 * to avoid a sync) and the scaled gradient. maxNorm 0 = no clipping. `maxNormTensor`: the same value
 * as a tensor, so that a recorded program takes it as an input.
 */
export function clipByGlobalNorm(grad: tf.Tensor1D, maxNorm: number, maxNormTensor?: tf.Scalar): { grad: tf.Tensor1D; norm: tf.Scalar } {
  const norm = tf.sqrt(tf.sum(tf.square(grad))) as tf.Scalar;
  if (!(maxNorm > 0)) return { grad, norm };
  return { grad: tf.mul(grad, tf.minimum(1, tf.div(maxNormTensor ?? maxNorm, tf.add(norm, 1e-6)))), norm };
}
