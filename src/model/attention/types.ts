// The one interface every attention mechanism implements.
import type * as tf from '@tensorflow/tfjs';

/** What every mechanism receives; mechanism-specific options come alongside (see each file). */
export interface AttentionConfig {
  numHeads: number;
  headDim: number;
  causal: boolean;
  /** Seed of the mechanism's random projections (fixed unless a redraw is asked for). */
  seed: number;
  /** Prefix of the variable names the mechanism creates, e.g. "blocks.0.attn". */
  scope: string;
}

export interface ApplyOptions {
  /** [batch, length] with 1 for real tokens and 0 for padding; padded keys get no attention. */
  keyMask?: tf.Tensor2D;
  /** Document masking: each query sees only keys of its own document (docs/attention.md, "Documents kept apart"). */
  documents?: DocumentLayout;
}

/** The documents packed in a batch's rows (document masking). */
export interface DocumentLayout {
  /** [batch, length] float32: each position's document id, ≥ 0 and non-decreasing along a row (a new document: a larger id). */
  ids: tf.Tensor2D;
  /** [batch, length] float32: each position's index within its document (0 at its first token). */
  positions: tf.Tensor2D;
}

/** What a decoding step may carry besides q, k, v. */
export interface StepOptions {
  /** The documents of the step's n positions ([batch, n] each): a position of a new document starts from an empty state. */
  documents?: DocumentLayout;
}

export interface AttentionModule {
  readonly name: string;
  /** Resolved options, defaults filled in (what a run log or a table should print). */
  readonly options: Readonly<Record<string, unknown>>;
  /** q, k, v and the result: [batch, heads, length, headDim]. */
  apply(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, opts?: ApplyOptions): tf.Tensor4D;
  /** Parameters the mechanism owns and trains (may be empty). */
  readonly trainableVariables: tf.Variable[];
  /** Fixed random projections and other non-trained state, saved with the model. */
  readonly buffers: tf.Variable[];
  /**
   * Facts of the random draw that the buffers' values do not show and another implementation needs
   * to use them (SchoenbAt: the degree of each Maclaurin feature); the Hugging Face export records them.
   */
  readonly drawLayout?: Readonly<Record<string, readonly number[]>>;
  /** Called by the trainer once per optimizer step; mechanisms with a redraw interval redraw here. */
  onTrainStep?(step: number): void;
  /** Present when the options ask for a data-dependent initialisation (DARKFormer's init 'whitening'). */
  readonly dataInit?: DataInitialization;
  /** Kernel (linear) mechanisms whose features estimate a kernel: what they estimate (estimator health, src/train/estimator-health.ts). */
  readonly kernel?: KernelEstimate;
  /**
   * Incremental (decoding) form, causal mechanisms only: the state before position 0 of `batch`
   * sequences of at most `maxLength` positions (cosFormer with reweightLength 0 uses it as M).
   */
  initState(batch: number, maxLength: number): AttentionState;
  /**
   * n ≥ 1 positions: q, k, v [batch, heads, n, headDim] at positions position … position+n−1 (steps
   * come in order). Returns the outputs there — equal to the causal apply's at those positions — and
   * the next state (linear mechanisms run the n positions as the whole-sequence form does, from the
   * state: a long prompt is one call). The given state is left intact: the caller disposes it
   * (tf.dispose(state.tensors)) once done with it.
   */
  step(
    q: tf.Tensor4D,
    k: tf.Tensor4D,
    v: tf.Tensor4D,
    state: AttentionState,
    position: number,
    opts?: StepOptions,
  ): { out: tf.Tensor4D; state: AttentionState };
  dispose(): void;
}

/**
 * What a kernel mechanism's features φ estimate: φ(q)ᵀφ(k) ≈ κ(q, k), the exact kernel (in expectation over the
 * random draw), so estimator health can compare the two on live queries and keys (docs/training.md#estimator-health).
 */
export interface KernelEstimate {
  /** κ as a formula, for the run log and the report ("exp(x̃_qᵀx̃_k), x̃ = d^(−1/4)x"). */
  readonly formula: string;
  /** x [B, H, L, d] → φ(x) [B, H, L, F], with an optional log scale removed per row (shift [B, H, L, 1]: φ = features·e^shift). */
  features(x: tf.Tensor4D): { features: tf.Tensor4D; shift?: tf.Tensor4D };
  /** x [B, H, L, d] → the rows x̃ [B, H, L, r] that logKernel reads (Performer: d^(−1/4)x). */
  kernelInputs(x: tf.Tensor4D): tf.Tensor4D;
  /** log κ (κ > 0; −∞ where κ = 0) of one head's rows x̃_q, x̃_k, in float64. */
  logKernel(q: Float64Array, k: Float64Array): number;
}

/**
 * A data-dependent initialisation of a mechanism's own parameter. A new run (not a resumed one) passes a few training
 * batches through the model and calls initializeFromData with each layer's queries and keys just before that
 * layer's attention runs, so later layers see the earlier ones initialised (src/train/finetune.ts); a layer whose
 * variable came from initFrom's checkpoint keeps it.
 */
export interface DataInitialization {
  /** The option setting that asks for it, as the run log says it: "init 'whitening'". */
  readonly trigger: string;
  /** The variable it sets, and its name in the run log ("M"). */
  readonly fills: { readonly variable: tf.Variable; readonly label: string };
  /** q, k: [batch, heads, length, headDim], this layer's calibration queries and keys. */
  initializeFromData(q: tf.Tensor4D, k: tf.Tensor4D): void;
}

/**
 * What an attention layer carries between decoding steps: for linear mechanisms the running sums
 * Σ φ(k)[v, 1]ᵀ (size independent of position), for softmax and exact Yat a key/value cache.
 */
export interface AttentionState {
  /** Positions this state may see: 0 … maxLength − 1. */
  readonly maxLength: number;
  /** Positions consumed so far. */
  readonly length: number;
  readonly tensors: Readonly<Record<string, tf.Tensor>>;
}

/**
 * Declarative description of one option: type, default, bounds. An integer option always declares its maximum —
 * from the bounds table (src/core/bounds.ts) when it sets a size, null when it does not (a number of steps) — since
 * options come from checkpoints too, and are checked before anything is built from them.
 */
export type OptionSpec =
  | { kind: 'int'; default: number; min?: number; max: number | null; doc: string }
  | { kind: 'number'; default: number; min?: number; exclusiveMin?: number; max?: number; doc: string }
  | { kind: 'enum'; default: string; values: readonly string[]; doc: string }
  | { kind: 'bool'; default: boolean; doc: string };

export type OptionSpecs = Record<string, OptionSpec>;

/** One tensor a mechanism creates: its name after the scope, its shape, and whether it is trained (else a buffer). */
export interface TensorDeclaration {
  name: string;
  shape: number[];
  trainable: boolean;
}
