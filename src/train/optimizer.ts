// AdamW (Loshchilov & Hutter, decoupled weight decay), written by hand on tf ops: tfjs ships Adam
// but no AdamW, and its optimizers keep their moments in unnamed internal variables that a
// checkpoint cannot address by parameter name. The update is PyTorch's torch.optim.AdamW:
//   t ← t + 1
//   m ← β1·m + (1 − β1)·g              v ← β2·v + (1 − β2)·g²
//   p ← p·(1 − lr·λ)                   (only parameters that decay)
//   p ← p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + ε)
import * as tf from '@tensorflow/tfjs';
import { currentDevice } from '../backend/current.ts';
import { GraphCache } from '../backend/tf-graph.ts';

export interface AdamWOptions {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** Also decay the token/position embeddings (off by default, as nanoGPT/HF). */
  decayEmbeddings?: boolean;
  /** Run the update as one TensorFlow graph where the backend can (train.graph, backend/tf-graph.ts; default true). */
  graph?: boolean;
  /** Compile that graph with XLA (train.xla resolved for the device; default false). */
  xla?: boolean;
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

/**
 * An update computed but not applied (AdamW.prepare): the gradients' global norm before clipping, to be read before
 * deciding, and the new parameters and moments, written by commit() or dropped by discard(). One of the two must be
 * called; either frees the tensors (norm included).
 */
export interface PendingUpdate {
  norm: tf.Scalar;
  /** The step's loss summed over the ranks, when the update was computed across ranks (AcrossRanks). */
  loss?: tf.Scalar;
  commit(): void;
  discard(): void;
}

/**
 * An update computed by several processes at once (step-executors/collective.ts): each holds its part of the
 * gradients and of the loss; `sum` adds a [P + 1] float32 vector over the processes (one all-reduce), so every
 * process clips, decides and applies the same update from the same sums.
 */
export interface AcrossRanks {
  loss: tf.Scalar;
  sum: (packed: tf.Tensor1D) => tf.Tensor1D;
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
  readonly options: Required<AdamWOptions>;
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

  constructor(params: Map<string, tf.Variable>, options: AdamWOptions) {
    this.options = { decayEmbeddings: false, graph: true, xla: false, ...options };
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
    // tf.variable copies its initial value, so the zeros are built and freed inside a tidy.
    [this.m, this.v] = tf.tidy(() => [tf.variable(tf.zeros([total]), false), tf.variable(tf.zeros([total]), false)]) as [
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

  /** Step count and moments by parameter name, for checkpoints: new tensors, which the caller disposes. */
  getState(): { step: number; m: Map<string, tf.Tensor>; v: Map<string, tf.Tensor> } {
    const byName = (flat: tf.Tensor1D) => {
      const pieces = tf.tidy(() => (this.sizes.length ? tf.split(flat, this.sizes) : []).map((x, i) => tf.reshape(x, this.params.get(this.names[i])!.shape)));
      return new Map(this.names.map((n, i) => [n, pieces[i]] as const));
    };
    return { step: this.step, m: byName(this.m), v: byName(this.v) };
  }

  /** Restores the step count and moments (e.g. from a checkpoint); names and shapes must match. */
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
      tf.tidy(() => target.assign(this.ravel(pieces)));
    }
    this.step = step;
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
      const graphs = this.options.graph && currentDevice().graphSteps ? (this.graphs ??= new GraphCache()) : null;
      this.lastKey = `${skipped.join(',')}|${this.options.weightDecay > 0}|${clip > 0}|${across ? 'across ranks' : ''}`;
      const inputs = program.inputs.map(([, x]) => x);
      return graphs ? graphs.call(this.lastKey, inputs, program.run, this.options.xla) : program.run();
    });
    const [norm, ...rest] = outputs;
    const reducedLoss = across ? rest.shift() : undefined;
    const [mNew, vNew, ...next] = rest;
    return {
      norm: norm as tf.Scalar,
      ...(reducedLoss ? { loss: reducedLoss as tf.Scalar } : {}),
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
   * opt:m, opt:v, the four step scalars, opt:present where some parameter has none, param:<name> of all, and
   * ranks:loss when the update is computed across ranks) and named outputs (norm, loss across ranks, opt:m,
   * opt:v, param:<name> of the updated): prepare runs it, the xla executor records it (src/train/xla-programs.ts).
   * Call inside tf.tidy.
   */
  updateProgram(
    grads: ReadonlyMap<string, tf.Tensor>,
    clip: number,
    scalarValues: number[],
    across?: AcrossRanks,
  ): { inputs: Array<[string, tf.Tensor]>; outputs: string[]; run: () => tf.Tensor[] } {
    const skipped = this.names.filter((n) => !grads.has(n));
    const updated = this.names.filter((n) => grads.has(n));
    const present = this.presentMask(skipped);
    const params = this.names.map((n) => this.params.get(n)!);
    const scalars = scalarValues.map((x) => tf.scalar(x));
    const inputs: Array<[string, tf.Tensor]> = [
      ...updated.map((n) => [`grad:${n}`, grads.get(n)!] as [string, tf.Tensor]),
      ['opt:m', this.m],
      ['opt:v', this.v],
      ...STEP_SCALARS.map((name, i) => [name, scalars[i]] as [string, tf.Tensor]),
      ...(present ? [['opt:present', present] as [string, tf.Tensor]] : []),
      ...this.names.map((n, i) => [`param:${n}`, params[i]] as [string, tf.Tensor]),
      ...(across ? [['ranks:loss', across.loss] as [string, tf.Tensor]] : []),
    ];
    const run = () => {
      let g = this.ravel(this.names.map((n, i) => grads.get(n) ?? tf.zerosLike(params[i])));
      let loss: tf.Tensor[] = [];
      if (across) {
        // One collective for both: the gradients and the loss travel as one [P + 1] vector.
        const summed = across.sum(tf.concat([g, tf.reshape(across.loss, [1])]) as tf.Tensor1D);
        [g, loss] = [tf.slice(summed, 0, g.size), [tf.reshape(tf.slice(summed, g.size, 1), [])]];
      }
      const { grad, norm } = clipByGlobalNorm(g, clip, scalars[3]);
      return [norm, ...loss, ...this.update(grad, scalars, present, updated)];
    };
    return { inputs, outputs: ['norm', ...(across ? ['ranks:loss'] : []), 'opt:m', 'opt:v', ...updated.map((n) => `param:${n}`)], run };
  }

  /** The moments as kept, flat [P] in parameter order, for an executor that keeps them elsewhere (pull/push). */
  flatMoments(): { m: Float32Array; v: Float32Array } {
    return { m: this.m.dataSync() as Float32Array, v: this.v.dataSync() as Float32Array };
  }

  /** Sets the step count and the flat moments (as flatMoments gives them). */
  setFlatMoments(step: number, m: Float32Array, v: Float32Array): void {
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

  /** The new m, v and the new value of each parameter in `updated` (stepSize, √(1 − β2ᵗ), 1 − lr·λ given as scalars). */
  private update(g: tf.Tensor1D, [stepSize, sqrtBias2, decay]: tf.Scalar[], present: tf.Tensor1D | null, updated: string[]): tf.Tensor[] {
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
