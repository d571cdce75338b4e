// AdamW (Loshchilov & Hutter, decoupled weight decay), written by hand on tf ops: tfjs ships Adam
// but no AdamW, and its optimizers keep their moments in unnamed internal variables that a
// checkpoint cannot address by parameter name. The update is PyTorch's torch.optim.AdamW:
//   t ← t + 1
//   m ← β1·m + (1 − β1)·g              v ← β2·v + (1 − β2)·g²
//   p ← p·(1 − lr·λ)                   (only parameters that decay)
//   p ← p − (lr / (1 − β1ᵗ)) · m / (√v / √(1 − β2ᵗ) + ε)
import * as tf from '@tensorflow/tfjs';

export interface AdamWOptions {
  beta1: number;
  beta2: number;
  eps: number;
  weightDecay: number;
  /** Also decay the token/position embeddings (off by default, as nanoGPT/HF). */
  decayEmbeddings?: boolean;
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

export interface AdamWState {
  step: number;
  /** First and second moments by parameter name. */
  m: Map<string, tf.Variable>;
  v: Map<string, tf.Variable>;
}

export class AdamW {
  readonly options: Required<AdamWOptions>;
  private readonly params: Map<string, tf.Variable>;
  private readonly decaySet: Set<string>;
  private readonly state: AdamWState;

  constructor(params: Map<string, tf.Variable>, options: AdamWOptions) {
    this.options = { decayEmbeddings: false, ...options };
    const { beta1, beta2, eps, weightDecay } = this.options;
    if (!(beta1 >= 0 && beta1 < 1)) throw new Error(`train.beta1 must be in [0, 1) (got ${beta1})`);
    if (!(beta2 >= 0 && beta2 < 1)) throw new Error(`train.beta2 must be in [0, 1) (got ${beta2})`);
    if (!(eps > 0)) throw new Error(`train.eps must be > 0 (got ${eps})`);
    if (!(weightDecay >= 0)) throw new Error(`train.weightDecay must be ≥ 0 (got ${weightDecay})`);
    this.params = new Map(params);
    this.decaySet = new Set([...params].filter(([n, v]) => decays(n, v, this.options.decayEmbeddings)).map(([n]) => n));
    this.state = { step: 0, m: new Map(), v: new Map() };
    for (const [name, p] of params) {
      // tf.variable copies its initial value, so the zeros are built and freed inside a tidy.
      tf.tidy(() => {
        this.state.m.set(name, tf.variable(tf.zerosLike(p), false, `adamw.m.${name}`));
        this.state.v.set(name, tf.variable(tf.zerosLike(p), false, `adamw.v.${name}`));
      });
    }
  }

  /** Names of the parameters that receive weight decay. */
  get decayed(): ReadonlySet<string> {
    return this.decaySet;
  }

  /** Live state (step count and moment variables) for checkpointing. */
  getState(): AdamWState {
    return this.state;
  }

  /** Restores the step count and moments (e.g. from a checkpoint); shapes must match. */
  setState(step: number, m: Map<string, tf.Tensor>, v: Map<string, tf.Tensor>): void {
    for (const [label, source, target] of [['m', m, this.state.m], ['v', v, this.state.v]] as const) {
      for (const [name, variable] of target) {
        const t = source.get(name);
        if (!t) throw new Error(`optimizer state: missing ${label} for parameter '${name}'`);
        if (!tf.util.arraysEqual(t.shape, variable.shape)) {
          throw new Error(`optimizer state: ${label} of '${name}' has shape [${t.shape}] but the parameter has [${variable.shape}]`);
        }
        variable.assign(t);
      }
    }
    this.state.step = step;
  }

  /** One update with learning rate `lr`; `grads` by parameter name (a missing gradient = skipped). */
  applyGradients(grads: Map<string, tf.Tensor> | Record<string, tf.Tensor>, lr: number): void {
    const byName = grads instanceof Map ? grads : new Map(Object.entries(grads));
    for (const name of byName.keys()) {
      if (!this.params.has(name)) throw new Error(`optimizer: gradient for unknown parameter '${name}'`);
    }
    this.state.step += 1;
    const { beta1, beta2, eps, weightDecay } = this.options;
    const t = this.state.step;
    const stepSize = lr / (1 - beta1 ** t);
    const sqrtBias2 = Math.sqrt(1 - beta2 ** t);
    tf.tidy(() => {
      for (const [name, g] of byName) {
        const p = this.params.get(name)!;
        const m = this.state.m.get(name)!;
        const v = this.state.v.get(name)!;
        const mNew = tf.add(tf.mul(m, beta1), tf.mul(g, 1 - beta1));
        const vNew = tf.add(tf.mul(v, beta2), tf.mul(tf.square(g), 1 - beta2));
        m.assign(mNew);
        v.assign(vNew);
        const decayed = this.decaySet.has(name) && weightDecay > 0 ? tf.mul(p, 1 - lr * weightDecay) : p;
        const update = tf.div(mNew, tf.add(tf.div(tf.sqrt(vNew), sqrtBias2), eps));
        p.assign(tf.sub(decayed, tf.mul(update, stepSize)));
      }
    });
  }

  dispose(): void {
    for (const x of [...this.state.m.values(), ...this.state.v.values()]) x.dispose();
    this.state.m.clear();
    this.state.v.clear();
  }
}

/**
 * Global-norm clipping as torch.nn.utils.clip_grad_norm_: scale every gradient by
 * min(1, maxNorm / (‖g‖ + 1e-6)) where ‖g‖ is the norm of all gradients together. Returns the
 * pre-clip norm (a scalar tensor, read it after the step to avoid a sync) and the scaled gradients.
 * maxNorm 0 = no clipping.
 */
export function clipByGlobalNorm(
  grads: Map<string, tf.Tensor>,
  maxNorm: number,
): { grads: Map<string, tf.Tensor>; norm: tf.Scalar } {
  const squares = [...grads.values()].map((g) => tf.sum(tf.square(g)));
  const norm = tf.sqrt(squares.length ? tf.addN(squares) : tf.scalar(0)) as tf.Scalar;
  if (!(maxNorm > 0)) return { grads, norm };
  const scale = tf.minimum(1, tf.div(maxNorm, tf.add(norm, 1e-6)));
  const clipped = new Map<string, tf.Tensor>();
  for (const [name, g] of grads) clipped.set(name, tf.mul(g, scale));
  return { grads: clipped, norm };
}
