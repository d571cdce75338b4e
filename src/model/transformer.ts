// The transformer body shared by GPT and BERT: embeddings, blocks of multi-head attention (any
// registered mechanism) and a GELU MLP. By default as GPT-2 (pre-LayerNorm blocks, final LayerNorm,
// tanh GELU, ε 1e-5); the architecture options cover Hugging Face BERT too (post-LayerNorm blocks,
// LayerNorm on the embeddings, token-type embeddings, erf GELU, ε 1e-12), and "Transformer++" (Llama's
// choices: rotary positions on q and k, a SwiGLU MLP, RMSNorm; with model.bias false).
//
// The kernels and the multi-head attention block are layers.ts's; activations stay 2-D [B·L, d]
// between blocks for them (docs/notes/tfjs-cpu-kernels.md).
import * as tf from '@tensorflow/tfjs';
import { createAttention } from './attention/index.ts';
import type { AttentionModule, DocumentLayout } from './attention/index.ts';
import {
  ACTIVATIONS,
  activate,
  ATTENTION_PROJECTIONS,
  DEFAULT_LAYER_NORM_EPS,
  DropoutSource,
  layerNorm,
  linear,
  multiHeadAttention,
  rmsNorm,
  rotary,
  silu,
} from './layers.ts';
import type { Activation, DropoutSeed } from './layers.ts';
import { optimizationBarrier } from '../backend/tf-graph.ts';
import { deriveSeed, Rng } from '../core/rng.ts';
import { Scope } from '../core/scope.ts';

export interface TransformerConfig {
  vocabSize: number;
  /** Rows of the position-embedding table: the longest sequence the model accepts. */
  maxSeqLen: number;
  dModel: number;
  numLayers: number;
  numHeads: number;
  /** MLP hidden width = mlpRatio · dModel. */
  mlpRatio: number;
  dropout: number;
  /** Biases in the linear layers (LayerNorms always have theirs; RMSNorms have none). */
  bias: boolean;
  causal: boolean;
  attention: { name: string; options: Record<string, unknown> };
  /** Seeds the initialisation (each tensor from its own name), and the attention mechanisms unless featureSeed is given. */
  seed: number;
  /** Seeds the attention mechanisms' random features alone (recipe model.featureSeed); absent = seed, as before it existed. */
  featureSeed?: number;
  // Architecture options; absent = ARCHITECTURE_DEFAULTS (GPT-2's choices, and every model saved before they existed).
  /** 'pre': x + f(LN(x)) and a final LayerNorm (GPT-2); 'post': LN(x + f(x)), no final LayerNorm (BERT). */
  normPosition?: 'pre' | 'post';
  /** A LayerNorm on the summed embeddings (BERT). */
  embeddingNorm?: boolean;
  /** Rows of the token-type (segment) embedding table, 0 = none. Every token is type 0 (one segment per sequence). */
  typeVocabSize?: number;
  /** Activation of the MLP and of BERT's MLM head: 'gelu-tanh' (GPT-2's gelu_new) or 'gelu-erf' (exact, BERT's gelu). */
  activation?: Activation;
  /** ε of every LayerNorm (or RMSNorm). */
  layerNormEps?: number;
  /** 'learned': a position-embedding table added to the tokens (GPT-2, BERT); 'rope': rotary positions on each layer's q and k, no table. */
  positional?: Positional;
  /** θ of the rotary angles position·θ^(−2i/Dh) (positional 'rope'). */
  ropeTheta?: number;
  /** 'gelu': proj(act(fc x)) with `activation`; 'swiglu': proj(silu(gate x) ⊙ fc x) (Llama's; `activation` then only sets BERT's head). */
  mlp?: MlpKind;
  /** 'layernorm' (weight and bias) or 'rmsnorm' (weight only) for every norm of the body (BERT's MLM head keeps its LayerNorm). */
  norm?: NormKind;
}

export const NORM_POSITIONS = ['pre', 'post'] as const;
export const POSITIONALS = ['learned', 'rope'] as const;
export const MLP_KINDS = ['gelu', 'swiglu'] as const;
export const NORM_KINDS = ['layernorm', 'rmsnorm'] as const;
export type Positional = (typeof POSITIONALS)[number];
export type MlpKind = (typeof MLP_KINDS)[number];
export type NormKind = (typeof NORM_KINDS)[number];

export type Architecture = Required<
  Pick<TransformerConfig, 'normPosition' | 'embeddingNorm' | 'typeVocabSize' | 'activation' | 'layerNormEps' | 'positional' | 'ropeTheta' | 'mlp' | 'norm'>
>;
export const ARCHITECTURE_DEFAULTS: Readonly<Architecture> = Object.freeze({
  normPosition: 'pre',
  embeddingNorm: false,
  typeVocabSize: 0,
  activation: 'gelu-tanh',
  layerNormEps: DEFAULT_LAYER_NORM_EPS,
  positional: 'learned',
  ropeTheta: 10000,
  mlp: 'gelu',
  norm: 'layernorm',
});

/** The architecture options of a config with the defaults filled in. */
export function architectureOf(c: Partial<Architecture>): Architecture {
  const d = ARCHITECTURE_DEFAULTS;
  return {
    normPosition: c.normPosition ?? d.normPosition,
    embeddingNorm: c.embeddingNorm ?? d.embeddingNorm,
    typeVocabSize: c.typeVocabSize ?? d.typeVocabSize,
    activation: c.activation ?? d.activation,
    layerNormEps: c.layerNormEps ?? d.layerNormEps,
    positional: c.positional ?? d.positional,
    ropeTheta: c.ropeTheta ?? d.ropeTheta,
    mlp: c.mlp ?? d.mlp,
    norm: c.norm ?? d.norm,
  };
}

export const INIT_STD = 0.02;

/** One parameter the model will create: its stable name, shape and initialisation. */
export interface ParameterSpec {
  name: string;
  shape: number[];
  init: { kind: 'normal'; std: number } | { kind: 'zeros' } | { kind: 'ones' };
}

/**
 * The body's own parameters (attention mechanisms add theirs). Init as GPT-2: N(0, 0.02), residual
 * projections (attn.out, mlp.proj) N(0, 0.02/√(2·numLayers)) so the residual stream's variance does
 * not grow with depth; LayerNorm 1/0; biases 0. Weights are stored [in, out] (x·W), the transpose of
 * PyTorch's nn.Linear layout.
 */
export function transformerParameterSpecs(c: TransformerConfig): ParameterSpec[] {
  const d = c.dModel;
  const hidden = mlpHidden(c);
  const arch = architectureOf(c);
  const normal = { kind: 'normal', std: INIT_STD } as const;
  const residual = { kind: 'normal', std: INIT_STD / Math.sqrt(2 * c.numLayers) } as const;
  const specs: ParameterSpec[] = [{ name: 'embed.tokens.weight', shape: [c.vocabSize, d], init: normal }];
  if (arch.positional === 'learned') specs.push({ name: 'embed.positions.weight', shape: [c.maxSeqLen, d], init: normal });
  if (arch.typeVocabSize > 0) specs.push({ name: 'embed.types.weight', shape: [arch.typeVocabSize, d], init: normal });
  const linear = (name: string, inDim: number, outDim: number, init: ParameterSpec['init']) => {
    specs.push({ name: `${name}.weight`, shape: [inDim, outDim], init });
    if (c.bias) specs.push({ name: `${name}.bias`, shape: [outDim], init: { kind: 'zeros' } });
  };
  const norm = (name: string) => {
    specs.push({ name: `${name}.weight`, shape: [d], init: { kind: 'ones' } });
    if (arch.norm === 'layernorm') specs.push({ name: `${name}.bias`, shape: [d], init: { kind: 'zeros' } });
  };
  if (arch.embeddingNorm) norm('embed.norm');
  for (let i = 0; i < c.numLayers; i++) {
    const p = `blocks.${i}`;
    norm(`${p}.ln1`);
    for (const projection of ATTENTION_PROJECTIONS) linear(`${p}.attn.${projection}`, d, d, projection === 'out' ? residual : normal);
    norm(`${p}.ln2`);
    if (arch.mlp === 'swiglu') linear(`${p}.mlp.gate`, d, hidden, normal);
    linear(`${p}.mlp.fc`, d, hidden, normal);
    linear(`${p}.mlp.proj`, hidden, d, residual);
  }
  if (arch.normPosition === 'pre') norm('norm');
  return specs;
}

export function mlpHidden(c: Pick<TransformerConfig, 'dModel' | 'mlpRatio'>): number {
  return Math.round(c.mlpRatio * c.dModel);
}

export function validateTransformerConfig(c: TransformerConfig): void {
  const positive = (key: keyof TransformerConfig) => {
    const v = c[key];
    if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw new Error(`model.${key} must be an integer ≥ 1 (got ${String(v)})`);
  };
  for (const key of ['vocabSize', 'maxSeqLen', 'dModel', 'numLayers', 'numHeads'] as const) positive(key);
  if (c.dModel % c.numHeads !== 0) {
    throw new Error(`model.dModel (${c.dModel}) must be divisible by model.numHeads (${c.numHeads})`);
  }
  if (!(c.mlpRatio > 0) || mlpHidden(c) < 1) throw new Error(`model.mlpRatio must be > 0 (got ${c.mlpRatio})`);
  if (!(c.dropout >= 0 && c.dropout < 1)) throw new Error(`model.dropout must be in [0, 1) (got ${c.dropout})`);
  const arch = architectureOf(c);
  if (!NORM_POSITIONS.includes(arch.normPosition))
    throw new Error(`model.normPosition must be one of ${NORM_POSITIONS.join(', ')} (got ${String(arch.normPosition)})`);
  if (typeof arch.embeddingNorm !== 'boolean') throw new Error(`model.embeddingNorm must be true or false (got ${String(arch.embeddingNorm)})`);
  if (!(Number.isInteger(arch.typeVocabSize) && arch.typeVocabSize >= 0))
    throw new Error(`model.typeVocabSize must be an integer ≥ 0 (got ${arch.typeVocabSize})`);
  if (!ACTIVATIONS.includes(arch.activation)) throw new Error(`model.activation must be one of ${ACTIVATIONS.join(', ')} (got ${String(arch.activation)})`);
  if (!(arch.layerNormEps > 0 && Number.isFinite(arch.layerNormEps))) throw new Error(`model.layerNormEps must be a number > 0 (got ${arch.layerNormEps})`);
  const oneOf = (key: keyof Architecture, values: readonly string[]) => {
    if (!values.includes(arch[key] as string)) throw new Error(`model.${key} must be one of ${values.join(', ')} (got ${String(arch[key])})`);
  };
  oneOf('positional', POSITIONALS);
  oneOf('mlp', MLP_KINDS);
  oneOf('norm', NORM_KINDS);
  if (!(arch.ropeTheta > 0 && Number.isFinite(arch.ropeTheta))) throw new Error(`model.ropeTheta must be a number > 0 (got ${arch.ropeTheta})`);
  if (arch.positional === 'rope' && (c.dModel / c.numHeads) % 2 !== 0)
    throw new Error(`model.positional 'rope' rotates channel pairs: the head size model.dModel / model.numHeads (${c.dModel / c.numHeads}) must be even`);
}

/** How a model's parameters start: 'random' = their init (ParameterSpec.init); 'zeros' = for a model whose every tensor is then loaded. */
export type ParameterStart = 'random' | 'zeros';

/** The seed the attention mechanisms' random features are drawn from: featureSeed, or the model's seed without one. */
export const featureSeedOf = (c: Pick<TransformerConfig, 'seed' | 'featureSeed'>): number => c.featureSeed ?? c.seed;

/** The seed of layer `layer`'s attention mechanism (its random features), from the model's feature seed (featureSeedOf). */
export function attentionSeed(seed: number, layer: number): number {
  return deriveSeed(seed, `blocks.${layer}.attn`);
}

/**
 * Creates a variable from its spec, seeded by (seed, name) so init does not depend on creation order.
 * `start: 'zeros'` skips the init (drawing GPT-2 small's 124M normals takes tens of seconds).
 */
export function createParameter(spec: ParameterSpec, seed: number, start: ParameterStart = 'random'): tf.Variable {
  const size = spec.shape.reduce((a, b) => a * b, 1);
  let values: Float32Array;
  if (start === 'zeros') {
    values = new Float32Array(size);
  } else if (spec.init.kind === 'normal') {
    const rng = new Rng(deriveSeed(seed, spec.name));
    values = new Float32Array(size);
    for (let i = 0; i < size; i++) values[i] = rng.normal() * spec.init.std;
  } else {
    values = new Float32Array(size).fill(spec.init.kind === 'ones' ? 1 : 0);
  }
  return tf.tidy(() => tf.variable(tf.tensor(values, spec.shape, 'float32'), true, spec.name));
}

/** While active, every block is rematerialised (Transformer.rematerialised). */
const rematerialising = new Scope();

/**
 * Runs `fn` with every transformer block rematerialised (train.remat, docs/xla.md "Rematerialisation"): a gradient
 * keeps each block's input instead of its activations and computes the block's forward a second time. The values are
 * those without; recorded for XLA, the program's peak memory is lower.
 */
export function withRematerialisedBlocks<T>(fn: () => T): T {
  return rematerialising.within(fn);
}

/**
 * Gradients of f() with respect to `xs` given its gradient `dy`, inside another gradient's backward pass (none missing:
 * zeros for a tensor f does not read). tfjs keeps one tape: a gradient taken while another's backward pass runs
 * replaces that tape and clears it at its end, so the outer tape is put back.
 */
function nestedGradients(f: () => tf.Tensor, xs: tf.Tensor[], dy: tf.Tensor): tf.Tensor[] {
  const engine = tf.engine() as unknown as { state: { activeTape: unknown } };
  const outer = engine.state.activeTape;
  try {
    const { value, grads } = tf.engine().gradients(f, xs, dy, true);
    value.dispose();
    return grads.map((g, k) => g ?? tf.zerosLike(xs[k]));
  } finally {
    engine.state.activeTape = outer;
  }
}

export interface ForwardOptions {
  /** [B, L] 1 = real token, 0 = padding (BERT); padded keys get no attention. */
  keyMask?: tf.Tensor2D;
  /**
   * Document masking (docs/attention.md, "Documents kept apart"): attention stays within each position's document and
   * position embeddings restart at each document's first token.
   */
  documents?: DocumentLayout;
  /** Seed of this forward pass's dropout masks; null or absent = no dropout (evaluation). */
  dropoutSeed?: DropoutSeed;
  /** Sees each layer's attention inputs q, k [B, H, L, Dh] just before its mechanism runs (finetuning's whitening init). */
  onAttentionInputs?: (layer: number, q: tf.Tensor4D, k: tf.Tensor4D) => void;
}

/** Layer i's attention on q, k, v [B, H, L, Dh] → [B, H, L, Dh]. */
export type AttendFn = (layer: number, q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D) => tf.Tensor4D;

export class Transformer {
  readonly config: TransformerConfig;
  readonly architecture: Architecture;
  /** The body's own parameters by stable name. */
  readonly weights: Map<string, tf.Variable>;
  readonly attention: AttentionModule[];
  private readonly headDim: number;

  constructor(config: TransformerConfig, start: ParameterStart = 'random') {
    validateTransformerConfig(config);
    this.config = config;
    this.architecture = architectureOf(config);
    this.headDim = config.dModel / config.numHeads;
    this.weights = new Map();
    this.attention = [];
    try {
      for (const spec of transformerParameterSpecs(config)) this.weights.set(spec.name, createParameter(spec, config.seed, start));
      for (let i = 0; i < config.numLayers; i++) {
        this.attention.push(
          createAttention(config.attention.name, {
            ...config.attention.options,
            numHeads: config.numHeads,
            headDim: this.headDim,
            causal: config.causal,
            seed: attentionSeed(featureSeedOf(config), i),
            scope: `blocks.${i}.attn`,
          }),
        );
      }
    } catch (err) {
      this.dispose();
      throw err;
    }
  }

  w(name: string): tf.Variable {
    const v = this.weights.get(name);
    if (!v) throw new Error(`internal: no parameter '${name}'`);
    return v;
  }

  private linear(x: tf.Tensor2D, name: string): tf.Tensor2D {
    const bias = this.config.bias ? (this.w(`${name}.bias`) as tf.Tensor1D) : undefined;
    return linear(x, this.w(`${name}.weight`) as tf.Tensor2D, bias);
  }

  norm(x: tf.Tensor2D, name: string): tf.Tensor2D {
    const { norm, layerNormEps } = this.architecture;
    const weight = this.w(`${name}.weight`) as tf.Tensor1D;
    if (norm === 'rmsnorm') return rmsNorm(x, weight, layerNormEps);
    return layerNorm(x, weight, this.w(`${name}.bias`) as tf.Tensor1D, layerNormEps);
  }

  /** inputIds [B, L] int32 → hidden states after the final LayerNorm, [B·L, d]. */
  forward(inputIds: tf.Tensor2D, opts: ForwardOptions = {}): tf.Tensor2D {
    const [, l] = inputIds.shape;
    const c = this.config;
    if (l > c.maxSeqLen) throw new Error(`sequence length ${l} exceeds model.maxSeqLen ${c.maxSeqLen}`);
    const dropout = new DropoutSource(c.dropout, opts.dropoutSeed ?? null);
    const { keyMask, documents } = opts;
    return this.run(inputIds, documents?.positions ?? 0, dropout, (i, q, k, v) => {
      opts.onAttentionInputs?.(i, q, k);
      return this.attention[i].apply(q, k, v, { keyMask, documents });
    });
  }

  /**
   * Decoding positions position … position+n−1, no dropout: inputIds [B, n], with `attend(layer, q, k, v)`
   * (q, k, v [B, H, n, Dh]; normally the mechanism's step) as each layer's attention → hidden [B·n, d].
   */
  forwardAt(inputIds: tf.Tensor2D, position: number, attend: AttendFn): tf.Tensor2D {
    const c = this.config;
    const n = inputIds.shape[1];
    if (!(Number.isInteger(position) && position >= 0 && position + n <= c.maxSeqLen)) {
      throw new Error(`forwardAt: positions ${position} … ${position + n - 1} are outside 0 … model.maxSeqLen − 1 = ${c.maxSeqLen - 1}`);
    }
    return this.run(inputIds, position, new DropoutSource(c.dropout, null), attend);
  }

  /**
   * Embeddings of positions start … start+L−1 (or each row's given positions [B, L]), the blocks with `attend` as
   * attention, final LayerNorm (pre-LN).
   */
  private run(inputIds: tf.Tensor2D, start: number | tf.Tensor2D, dropout: DropoutSource, attend: AttendFn): tf.Tensor2D {
    const l = inputIds.shape[1];
    const c = this.config;
    const param = (name: string) => this.w(name);
    let x = dropout.apply(this.embed(inputIds, start));
    const { positional, ropeTheta } = this.architecture;
    // Rotary positions go on q and k before the mechanism (before a kernel mechanism's feature map, as flash-linear-attention's layers do).
    const rotate = (x: tf.Tensor4D) => (positional === 'rope' ? rotary(x, start, ropeTheta) : x);
    for (let i = 0; i < c.numLayers; i++) {
      const attention = (h: tf.Tensor2D) =>
        multiHeadAttention(h, l, c.numHeads, `blocks.${i}.attn`, param, c.bias, (q, k, v) => attend(i, rotate(q), rotate(k), v));
      const block = (input: tf.Tensor2D, masks: DropoutSource) =>
        this.residual(this.residual(input, `blocks.${i}.ln1`, masks, attention), `blocks.${i}.ln2`, masks, (h) => this.mlpBlock(h, i));
      x = rematerialising.active ? this.rematerialised(i, x, dropout, block) : block(x, dropout);
    }
    return this.architecture.normPosition === 'pre' ? this.norm(x, 'norm') : x;
  }

  /**
   * Token + learned position (+ type 0) embeddings of positions start … start+L−1 (or each row's given positions
   * [B, L]), [B·L, d], normalised if embeddingNorm.
   */
  private embed(inputIds: tf.Tensor2D, start: number | tf.Tensor2D): tf.Tensor2D {
    const [b, l] = inputIds.shape;
    const d = this.config.dModel;
    const tokens = tf.gather(this.w('embed.tokens.weight'), tf.reshape(inputIds, [-1])) as tf.Tensor2D; // [B·L, d]
    const added: tf.Tensor[] = [];
    if (this.architecture.positional === 'learned') {
      const table = this.w('embed.positions.weight');
      added.push(
        typeof start === 'number' ? tf.slice(table, [start, 0], [l, d]) : tf.reshape(tf.gather(table, tf.cast(tf.reshape(start, [-1]), 'int32')), [b, l, d]),
      );
    }
    if (this.architecture.typeVocabSize > 0) added.push(tf.slice(this.w('embed.types.weight'), [0, 0], [1, d]));
    const x =
      added.length === 0
        ? tokens
        : (tf.reshape(
            tf.add(
              tf.reshape(tokens, [b, l, d]),
              added.reduce((a, e) => tf.add(a, e)),
            ),
            [b * l, d],
          ) as tf.Tensor2D);
    return this.architecture.embeddingNorm ? this.norm(x, 'embed.norm') : x;
  }

  /** A residual branch f with its LayerNorm `norm`: x + f(LN(x)) (pre-LN) or LN(x + f(x)) (post-LN). */
  private residual(x: tf.Tensor2D, norm: string, dropout: DropoutSource, f: (h: tf.Tensor2D) => tf.Tensor2D): tf.Tensor2D {
    if (this.architecture.normPosition === 'pre') return tf.add(x, dropout.apply(f(this.norm(x, norm))));
    return this.norm(tf.add(x, dropout.apply(f(x))), norm);
  }

  /**
   * Block i as one custom-gradient op that keeps only its input for the backward pass (withRematerialisedBlocks): the
   * gradient runs the block's forward again from that input, with the same dropout masks, and takes that forward's
   * gradient. The input and the incoming gradient first pass one optimization barrier together, so XLA neither merges
   * the second forward with the first nor starts it before the backward pass reaches the block (docs/xla.md).
   */
  private rematerialised(i: number, x: tf.Tensor2D, dropout: DropoutSource, block: (input: tf.Tensor2D, masks: DropoutSource) => tf.Tensor2D): tf.Tensor2D {
    const trained = [...[...this.weights].filter(([name]) => name.startsWith(`blocks.${i}.`)).map(([, v]) => v), ...this.attention[i].trainableVariables];
    const masks = dropout.fork();
    const step = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
      const input = args[0] as tf.Tensor2D;
      (args[args.length - 1] as tf.GradSaveFunc)([input]);
      return {
        value: block(input, dropout),
        gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
          const [barred, upstream] = optimizationBarrier([saved[0], dy]);
          // XLA's CPU compiler drops barriers before it schedules: the second forward also reads an element of the incoming
          // gradient (times 0, a float product XLA does not fold), so that no compiler can run it before that exists.
          const again = tf.add(barred, tf.mul(tf.slice(upstream, [0, 0], [1, 1]), 0)) as tf.Tensor2D;
          return nestedGradients(() => block(again, masks.fork()), [again, ...trained], upstream);
        },
      };
    });
    return step(x, ...trained) as tf.Tensor2D;
  }

  /** The MLP on the (normalised) block input [B·L, d]. */
  private mlpBlock(input: tf.Tensor2D, i: number): tf.Tensor2D {
    const p = `blocks.${i}.mlp`;
    if (this.architecture.mlp === 'swiglu') return this.linear(tf.mul(silu(this.linear(input, `${p}.gate`)), this.linear(input, `${p}.fc`)), `${p}.proj`);
    return this.linear(activate(this.linear(input, `${p}.fc`), this.architecture.activation), `${p}.proj`);
  }

  dispose(): void {
    for (const v of this.weights.values()) v.dispose();
    this.weights.clear();
    for (const a of this.attention) a.dispose();
  }
}
