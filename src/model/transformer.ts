// The transformer body shared by GPT and BERT: embeddings, blocks of multi-head attention (any
// registered mechanism) and a GELU MLP. By default as GPT-2 (pre-LayerNorm blocks, final LayerNorm,
// tanh GELU, ε 1e-5); the architecture options cover Hugging Face BERT too (post-LayerNorm blocks,
// LayerNorm on the embeddings, token-type embeddings, erf GELU, ε 1e-12).
//
// Layout choices for the CPU backends (docs/notes/tfjs-cpu-kernels.md): activations are kept as
// 2-D [B·L, d] between blocks so that every dense layer is one plain 2-D product (linear(), whose
// gradient transposes explicitly — the only fast matmul path on wasm); heads are split once per
// block by one transpose of the fused q|k|v product and merged once after attention.
import * as tf from '@tensorflow/tfjs';
import { currentDevice } from '../backend/current.ts';
import { createAttention } from './attention/index.ts';
import type { AttentionModule } from './attention/index.ts';
import { explicitTransposes, matMul2d, matMulTransposeB, weightGradient } from './ops.ts';
import { deriveSeed, Rng } from '../core/rng.ts';
import { hasFusedKernel, STATELESS_UNIFORM } from '../backend/fused-kernels.ts';
import { fusedGelu, fusedLayerNorm } from './fused.ts';

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
  /** Biases in the linear layers (LayerNorms always have theirs). */
  bias: boolean;
  causal: boolean;
  attention: { name: string; options: Record<string, unknown> };
  /** Seeds the initialisation (each tensor from its own name) and the attention mechanisms. */
  seed: number;
  // Architecture options; absent = ARCHITECTURE_DEFAULTS (GPT-2's choices, and every model saved before they existed).
  /** 'pre': x + f(LN(x)) and a final LayerNorm (GPT-2); 'post': LN(x + f(x)), no final LayerNorm (BERT). */
  normPosition?: 'pre' | 'post';
  /** A LayerNorm on the summed embeddings (BERT). */
  embeddingNorm?: boolean;
  /** Rows of the token-type (segment) embedding table, 0 = none. Every token is type 0 (one segment per sequence). */
  typeVocabSize?: number;
  /** Activation of the MLP and of BERT's MLM head: 'gelu-tanh' (GPT-2's gelu_new) or 'gelu-erf' (exact, BERT's gelu). */
  activation?: Activation;
  /** ε of every LayerNorm. */
  layerNormEps?: number;
}

export const ACTIVATIONS = ['gelu-tanh', 'gelu-erf'] as const;
export type Activation = (typeof ACTIVATIONS)[number];
export const NORM_POSITIONS = ['pre', 'post'] as const;

export type Architecture = Required<Pick<TransformerConfig, 'normPosition' | 'embeddingNorm' | 'typeVocabSize' | 'activation' | 'layerNormEps'>>;
export const ARCHITECTURE_DEFAULTS: Readonly<Architecture> = Object.freeze({
  normPosition: 'pre',
  embeddingNorm: false,
  typeVocabSize: 0,
  activation: 'gelu-tanh',
  layerNormEps: 1e-5,
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
  const specs: ParameterSpec[] = [
    { name: 'embed.tokens.weight', shape: [c.vocabSize, d], init: normal },
    { name: 'embed.positions.weight', shape: [c.maxSeqLen, d], init: normal },
  ];
  if (arch.typeVocabSize > 0) specs.push({ name: 'embed.types.weight', shape: [arch.typeVocabSize, d], init: normal });
  const linear = (name: string, inDim: number, outDim: number, init: ParameterSpec['init']) => {
    specs.push({ name: `${name}.weight`, shape: [inDim, outDim], init });
    if (c.bias) specs.push({ name: `${name}.bias`, shape: [outDim], init: { kind: 'zeros' } });
  };
  const norm = (name: string) => {
    specs.push({ name: `${name}.weight`, shape: [d], init: { kind: 'ones' } });
    specs.push({ name: `${name}.bias`, shape: [d], init: { kind: 'zeros' } });
  };
  if (arch.embeddingNorm) norm('embed.norm');
  for (let i = 0; i < c.numLayers; i++) {
    const p = `blocks.${i}`;
    norm(`${p}.ln1`);
    linear(`${p}.attn.q`, d, d, normal);
    linear(`${p}.attn.k`, d, d, normal);
    linear(`${p}.attn.v`, d, d, normal);
    linear(`${p}.attn.out`, d, d, residual);
    norm(`${p}.ln2`);
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
  if (!NORM_POSITIONS.includes(arch.normPosition)) throw new Error(`model.normPosition must be one of ${NORM_POSITIONS.join(', ')} (got ${String(arch.normPosition)})`);
  if (typeof arch.embeddingNorm !== 'boolean') throw new Error(`model.embeddingNorm must be true or false (got ${String(arch.embeddingNorm)})`);
  if (!(Number.isInteger(arch.typeVocabSize) && arch.typeVocabSize >= 0)) throw new Error(`model.typeVocabSize must be an integer ≥ 0 (got ${arch.typeVocabSize})`);
  if (!ACTIVATIONS.includes(arch.activation)) throw new Error(`model.activation must be one of ${ACTIVATIONS.join(', ')} (got ${String(arch.activation)})`);
  if (!(arch.layerNormEps > 0 && Number.isFinite(arch.layerNormEps))) throw new Error(`model.layerNormEps must be a number > 0 (got ${arch.layerNormEps})`);
}

/** How a model's parameters start: 'random' = their init (ParameterSpec.init); 'zeros' = for a model whose every tensor is then loaded. */
export type ParameterStart = 'random' | 'zeros';

/** The seed of layer `layer`'s attention mechanism (its random features), from the model's seed. */
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

/**
 * GELU, tanh approximation (GPT-2's "gelu_new", also what BERT's TF code used), rewritten with
 * ½(1 + tanh z) = σ(2z) because the wasm sigmoid kernel is ~6× faster than its tanh, and with a
 * hand-written gradient (one saved sigmoid instead of autodiff through the chain):
 *   y = x·s,  s = σ(2c(x + a x³)),  y' = s + x·s(1 − s)·2c(1 + 3a x²)
 */
const GELU_C = Math.sqrt(2 / Math.PI);
const GELU_A = 0.044715;
export const gelu = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [x, save] = args as [tf.Tensor, tf.GradSaveFunc];
  const s = tf.sigmoid(tf.mul(tf.mul(x, tf.add(tf.mul(tf.square(x), GELU_A), 1)), 2 * GELU_C));
  save([x, s]);
  return {
    value: tf.mul(x, s),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [sx, ss] = saved;
      const inner = tf.add(tf.mul(tf.square(sx), 6 * GELU_A * GELU_C), 2 * GELU_C);
      const slope = tf.add(ss, tf.mul(tf.mul(sx, tf.mul(ss, tf.sub(1, ss))), inner));
      return [tf.mul(dy, slope)];
    },
  };
}) as (x: tf.Tensor) => tf.Tensor;

/**
 * GELU, exact: x·Φ(x) = ½x(1 + erf(x/√2)) (BERT's "gelu", PyTorch's default), with the gradient
 * Φ(x) + x·φ(x) written out (one saved Φ instead of autodiff through erf).
 */
const SQRT_HALF = Math.SQRT1_2;
const INV_SQRT_2PI = 1 / Math.sqrt(2 * Math.PI);
export const geluErf = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [x, save] = args as [tf.Tensor, tf.GradSaveFunc];
  const cdf = tf.mul(tf.add(tf.erf(tf.mul(x, SQRT_HALF)), 1), 0.5);
  save([x, cdf]);
  return {
    value: tf.mul(x, cdf),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [sx, scdf] = saved;
      const pdf = tf.mul(tf.exp(tf.mul(tf.square(sx), -0.5)), INV_SQRT_2PI);
      return [tf.mul(dy, tf.add(scdf, tf.mul(sx, pdf)))];
    },
  };
}) as (x: tf.Tensor) => tf.Tensor;

export function activate(x: tf.Tensor2D, activation: Activation): tf.Tensor2D {
  const fused = fusedGelu(activation);
  if (fused) return fused(x) as tf.Tensor2D;
  return (activation === 'gelu-erf' ? geluErf(x) : gelu(x)) as tf.Tensor2D;
}

/**
 * LayerNorm over the last axis with a hand-written gradient (autodiff through tf.moments builds a
 * long chain of broadcasts and reductions). With x̂ = (x − μ)·r, r = 1/√(σ² + ε), y = x̂·g + b:
 *   dx = r · (ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)),  ĝ = dy·g;   dg = Σ dy·x̂;   db = Σ dy
 */
type LayerNormOp = (x: tf.Tensor2D, gain: tf.Tensor1D, shift: tf.Tensor1D) => tf.Tensor2D;
const layerNormOp = (eps: number): LayerNormOp => tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [x, gain, shift, save] = args as [tf.Tensor2D, tf.Tensor1D, tf.Tensor1D, tf.GradSaveFunc];
  const { mean, variance } = tf.moments(x, -1, true);
  const rstd = tf.rsqrt(tf.add(variance, eps));
  const normalized = tf.mul(tf.sub(x, mean), rstd);
  save([normalized, rstd, gain]);
  return {
    value: tf.add(tf.mul(normalized, gain), shift),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [xhat, r, g] = saved;
      const gHat = tf.mul(dy, g);
      const dx = tf.mul(
        tf.sub(tf.sub(gHat, tf.mean(gHat, -1, true)), tf.mul(xhat, tf.mean(tf.mul(gHat, xhat), -1, true))),
        r,
      );
      return [dx, columnSums(tf.mul(dy, xhat) as tf.Tensor2D), columnSums(dy as tf.Tensor2D)];
    },
  };
}) as LayerNormOp;

/** One op per ε (tf.customGrad takes tensors only, so ε is closed over). */
const layerNormOps = new Map<number, LayerNormOp>();

export function layerNorm(x: tf.Tensor2D, gain: tf.Tensor1D, shift: tf.Tensor1D, eps = ARCHITECTURE_DEFAULTS.layerNormEps): tf.Tensor2D {
  const fused = fusedLayerNorm(eps);
  if (fused) return fused(x, gain, shift);
  let op = layerNormOps.get(eps);
  if (!op) layerNormOps.set(eps, (op = layerNormOp(eps)));
  return op(x, gain, shift);
}

/**
 * Σ over rows of x [N, m] → [m]. On wasm as the 2-D product ones[1, N]·x: wasm reduces a non-last
 * axis by transposing first. (Not cached: N varies per batch for BERT's head.)
 */
export function columnSums(x: tf.Tensor2D): tf.Tensor1D {
  if (!explicitTransposes()) return tf.sum(x, 0);
  return tf.reshape(tf.matMul(tf.ones([1, x.shape[0]]), x), [x.shape[1]]);
}

/**
 * x [N, in]·W [in, out] + b [out] with a hand-written gradient: ops.ts's matMul2d plus the bias
 * gradient as a ones-row product.
 */
const linearWithBias = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [x, w, b, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.Tensor1D, tf.GradSaveFunc];
  save([x, w]);
  return {
    value: tf.add(tf.matMul(x, w), b),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [sx, sw] = saved as tf.Tensor2D[];
      const g = dy as tf.Tensor2D;
      return [matMulTransposeB(g, sw), weightGradient(sx, g), columnSums(g)];
    },
  };
}) as (x: tf.Tensor2D, w: tf.Tensor2D, b: tf.Tensor1D) => tf.Tensor2D;

/** A dense layer on rows: x [N, in]·W [in, out] (+ b). */
export function linear(x: tf.Tensor2D, w: tf.Tensor2D, b?: tf.Tensor1D): tf.Tensor2D {
  return b ? linearWithBias(x, w, b) : matMul2d(x, w);
}

/** x [N, in]·Wᵀ (+ b) for W [out, in] by MatMul's transpose flag (not for wasm: see ops.explicitTransposes). */
export function linearTransposed(x: tf.Tensor2D, w: tf.Tensor2D, b?: tf.Tensor1D): tf.Tensor2D {
  const y: tf.Tensor2D = tf.matMul(x, w, false, true);
  return b ? (tf.add(y, b) as tf.Tensor2D) : y;
}

/**
 * A step's dropout seed: a number, or (where the backend draws masks itself, STATELESS_UNIFORM) the
 * same seed as an int32 [2] tensor (dropoutSeedTensor), which a recorded graph takes as an input.
 */
export type DropoutSeed = number | tf.Tensor1D | null;

/** The dropout seed as the tensor the stateless mask kernel takes. */
export function dropoutSeedTensor(seed: number): tf.Tensor1D {
  return tf.tensor1d([seed | 0, 0], 'int32');
}

/**
 * Reproducible dropout: each call site draws its mask from its own seed, derived from the step's.
 * Where the backend has the stateless uniform kernel (tensorflow), site i uses the seed tensor
 * + [0, i + 1], so the masks are a function of a tensor a graph can be fed; elsewhere tf.dropout
 * with deriveSeed(seed, i). The two draw different (equally distributed) masks from the same seed.
 */
export class DropoutSource {
  private site = 0;
  constructor(
    private readonly rate: number,
    private readonly seed: DropoutSeed,
  ) {}

  apply<T extends tf.Tensor>(x: T): T {
    if (this.seed === null || this.rate === 0) return x;
    const site = this.site++;
    if (hasFusedKernel(STATELESS_UNIFORM)) {
      const seed = typeof this.seed === 'number' ? dropoutSeedTensor(this.seed) : this.seed;
      const uniform = tf.engine().runKernel(STATELESS_UNIFORM, { shape: tf.tensor1d(x.shape, 'int32'), seed: tf.add(seed, tf.tensor1d([0, site + 1], 'int32')) }) as tf.Tensor;
      // As tf.dropout: keep where u ≥ rate, kept values scaled by 1 / (1 − rate).
      return tf.mul(tf.mul(x, 1 / (1 - this.rate)), tf.floor(tf.add(uniform, 1 - this.rate))) as T;
    }
    if (typeof this.seed !== 'number') throw new Error(`a dropout seed tensor needs the ${STATELESS_UNIFORM} kernel, which the ${currentDevice().backend} backend lacks`);
    // tfjs treats seed 0 as "no seed", hence the | 1.
    return tf.dropout(x, this.rate, undefined, deriveSeed(this.seed, site) | 1) as T;
  }
}

export interface ForwardOptions {
  /** [B, L] 1 = real token, 0 = padding (BERT); padded keys get no attention. */
  keyMask?: tf.Tensor2D;
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
            seed: attentionSeed(config.seed, i),
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
    return layerNorm(x, this.w(`${name}.weight`) as tf.Tensor1D, this.w(`${name}.bias`) as tf.Tensor1D, this.architecture.layerNormEps);
  }

  /** inputIds [B, L] int32 → hidden states after the final LayerNorm, [B·L, d]. */
  forward(inputIds: tf.Tensor2D, opts: ForwardOptions = {}): tf.Tensor2D {
    const [, l] = inputIds.shape;
    const c = this.config;
    if (l > c.maxSeqLen) throw new Error(`sequence length ${l} exceeds model.maxSeqLen ${c.maxSeqLen}`);
    const dropout = new DropoutSource(c.dropout, opts.dropoutSeed ?? null);
    return this.run(inputIds, 0, dropout, (i, q, k, v) => {
      opts.onAttentionInputs?.(i, q, k);
      return this.attention[i].apply(q, k, v, { keyMask: opts.keyMask });
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

  /** Embeddings of positions start … start+L−1, the blocks with `attend` as attention, final LayerNorm (pre-LN). */
  private run(inputIds: tf.Tensor2D, start: number, dropout: DropoutSource, attend: AttendFn): tf.Tensor2D {
    const [b, l] = inputIds.shape;
    const c = this.config;
    let x = dropout.apply(this.embed(inputIds, start));
    for (let i = 0; i < c.numLayers; i++) {
      x = this.residual(x, `blocks.${i}.ln1`, dropout, (h) => this.attentionBlock(h, i, b, l, attend));
      x = this.residual(x, `blocks.${i}.ln2`, dropout, (h) => this.mlpBlock(h, i));
    }
    return this.architecture.normPosition === 'pre' ? this.norm(x, 'norm') : x;
  }

  /** Token + position (+ type 0) embeddings of positions start … start+L−1, [B·L, d], LayerNorm'd if embeddingNorm. */
  private embed(inputIds: tf.Tensor2D, start: number): tf.Tensor2D {
    const [b, l] = inputIds.shape;
    const d = this.config.dModel;
    const tokens = tf.gather(this.w('embed.tokens.weight'), tf.reshape(inputIds, [-1])); // [B·L, d]
    let positions: tf.Tensor = tf.slice(this.w('embed.positions.weight'), [start, 0], [l, d]);
    if (this.architecture.typeVocabSize > 0) positions = tf.add(positions, tf.slice(this.w('embed.types.weight'), [0, 0], [1, d]));
    const x = tf.reshape(tf.add(tf.reshape(tokens, [b, l, d]), positions), [b * l, d]) as tf.Tensor2D;
    return this.architecture.embeddingNorm ? this.norm(x, 'embed.norm') : x;
  }

  /** A residual branch f with its LayerNorm `norm`: x + f(LN(x)) (pre-LN) or LN(x + f(x)) (post-LN). */
  private residual(x: tf.Tensor2D, norm: string, dropout: DropoutSource, f: (h: tf.Tensor2D) => tf.Tensor2D): tf.Tensor2D {
    if (this.architecture.normPosition === 'pre') return tf.add(x, dropout.apply(f(this.norm(x, norm))));
    return this.norm(tf.add(x, dropout.apply(f(x))), norm);
  }

  /** Attention on the (normalised) block input [B·L, d], through the output projection. */
  private attentionBlock(input: tf.Tensor2D, i: number, b: number, l: number, attend: AttendFn): tf.Tensor2D {
    const { dModel: d, numHeads: h } = this.config;
    const p = `blocks.${i}.attn`;
    // q, k and v stay separate named variables (finetuning can train them alone) but run as one
    // [d, 3d] product and one head transpose: fewer, larger kernels than three of each.
    const weight = tf.concat([this.w(`${p}.q.weight`), this.w(`${p}.k.weight`), this.w(`${p}.v.weight`)], 1) as tf.Tensor2D;
    const bias = this.config.bias
      ? (tf.concat([this.w(`${p}.q.bias`), this.w(`${p}.k.bias`), this.w(`${p}.v.bias`)]) as tf.Tensor1D)
      : undefined;
    const qkv = linear(input, weight, bias);
    const heads = tf.transpose(tf.reshape(qkv, [b, l, 3 * h, this.headDim]), [0, 2, 1, 3]); // [B, 3H, L, Dh]
    const [q, k, v] = tf.split(heads, 3, 1) as tf.Tensor4D[];
    const attended = attend(i, q, k, v); // [B, H, L, Dh]
    const merged = tf.reshape(tf.transpose(attended, [0, 2, 1, 3]), [b * l, d]) as tf.Tensor2D;
    return this.linear(merged, `${p}.out`);
  }

  /** The MLP on the (normalised) block input [B·L, d]. */
  private mlpBlock(input: tf.Tensor2D, i: number): tf.Tensor2D {
    const p = `blocks.${i}.mlp`;
    return this.linear(activate(this.linear(input, `${p}.fc`), this.architecture.activation), `${p}.proj`);
  }

  dispose(): void {
    for (const v of this.weights.values()) v.dispose();
    this.weights.clear();
    for (const a of this.attention) a.dispose();
  }
}
