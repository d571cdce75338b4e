// The model's kernels, shared by GPT, BERT (transformer.ts, lm.ts) and the synthetic tasks' model
// (src/paper/task-model.ts): GELU, LayerNorm and dense layers with hand-written gradients, reproducible
// dropout, and the multi-head attention block. Written for the CPU backends' fast paths
// (docs/notes/tfjs-cpu-kernels.md): activations are 2-D [B·L, d] rows, so that every dense layer is one
// plain 2-D product whose gradient transposes explicitly (the only fast matmul path on wasm).
import * as tf from '@tensorflow/tfjs';
import { currentDevice } from '../backend/current.ts';
import { hasFusedKernel, STATELESS_UNIFORM } from '../backend/fused-kernels.ts';
import { deriveSeed } from '../core/rng.ts';
import { fusedGelu, fusedLayerNorm, fusedLinearWithBias } from './fused.ts';
import { explicitTransposes, matMul2d, matMulTransposeB, weightGradient } from './ops.ts';

export const ACTIVATIONS = ['gelu-tanh', 'gelu-erf'] as const;
export type Activation = (typeof ACTIVATIONS)[number];

/** GPT-2's LayerNorm ε (ARCHITECTURE_DEFAULTS.layerNormEps in transformer.ts). */
export const DEFAULT_LAYER_NORM_EPS = 1e-5;

/**
 * GELU, tanh approximation (GPT-2's "gelu_new", also what BERT's TF code used), rewritten with
 * ½(1 + tanh z) = σ(2z) because the wasm sigmoid kernel is ~6× faster than its tanh, and with a
 * hand-written gradient that reuses the forward's x², s and y (6 ops forward, 7 backward, where
 * autodiff through the chain takes about twice that):
 *   y = x·s,  s = σ(x·(2c + 2ca·x²)),  y' = s + y·(1 − s)·(2c + 6ca·x²)
 */
const GELU_C = Math.sqrt(2 / Math.PI);
const GELU_A = 0.044715;
export const gelu = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [x, save] = args as [tf.Tensor, tf.GradSaveFunc];
  const x2 = tf.square(x);
  const s = tf.sigmoid(tf.mul(x, tf.add(tf.mul(x2, 2 * GELU_C * GELU_A), 2 * GELU_C)));
  const y = tf.mul(x, s);
  save([x2, s, y]);
  return {
    value: y,
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [sx2, ss, sy] = saved;
      const inner = tf.add(tf.mul(sx2, 6 * GELU_A * GELU_C), 2 * GELU_C);
      return [tf.mul(dy, tf.add(ss, tf.mul(tf.mul(sy, tf.sub(1, ss)), inner)))];
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
const layerNormOp = (eps: number): LayerNormOp =>
  tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
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
        const dx = tf.mul(tf.sub(tf.sub(gHat, tf.mean(gHat, -1, true)), tf.mul(xhat, tf.mean(tf.mul(gHat, xhat), -1, true))), r);
        return [dx, columnSums(tf.mul(dy, xhat) as tf.Tensor2D), columnSums(dy as tf.Tensor2D)];
      },
    };
  }) as LayerNormOp;

/** One op per ε (tf.customGrad takes tensors only, so ε is closed over). */
const layerNormOps = new Map<number, LayerNormOp>();

export function layerNorm(x: tf.Tensor2D, gain: tf.Tensor1D, shift: tf.Tensor1D, eps = DEFAULT_LAYER_NORM_EPS): tf.Tensor2D {
  const fused = fusedLayerNorm(eps);
  if (fused) return fused(x, gain, shift);
  let op = layerNormOps.get(eps);
  if (!op) layerNormOps.set(eps, (op = layerNormOp(eps)));
  return op(x, gain, shift);
}

/**
 * RMSNorm over the last axis (Zhang & Sennrich 2019; Llama's): y = x·r·g, r = 1/√(mean(x²) + ε), composed (the
 * native backend's fused kernel is LayerNorm's), with the gradient written out as LayerNorm's above, less the mean:
 *   dx = r · (ĝ − x̂·mean(ĝ·x̂)),  ĝ = dy·g,  x̂ = x·r;   dg = Σ dy·x̂
 */
type RmsNormOp = (x: tf.Tensor2D, gain: tf.Tensor1D) => tf.Tensor2D;
const rmsNormOp = (eps: number): RmsNormOp =>
  tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const [x, gain, save] = args as [tf.Tensor2D, tf.Tensor1D, tf.GradSaveFunc];
    const rms = tf.rsqrt(tf.add(tf.mean(tf.square(x), -1, true), eps));
    const normalized = tf.mul(x, rms);
    save([normalized, rms, gain]);
    return {
      value: tf.mul(normalized, gain),
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [xhat, r, g] = saved;
        const gHat = tf.mul(dy, g);
        const dx = tf.mul(tf.sub(gHat, tf.mul(xhat, tf.mean(tf.mul(gHat, xhat), -1, true))), r);
        return [dx, columnSums(tf.mul(dy, xhat) as tf.Tensor2D)];
      },
    };
  }) as RmsNormOp;

const rmsNormOps = new Map<number, RmsNormOp>();

export function rmsNorm(x: tf.Tensor2D, gain: tf.Tensor1D, eps = DEFAULT_LAYER_NORM_EPS): tf.Tensor2D {
  let op = rmsNormOps.get(eps);
  if (!op) rmsNormOps.set(eps, (op = rmsNormOp(eps)));
  return op(x, gain);
}

/** SiLU (swish): x·σ(x), the gate's activation in SwiGLU. */
export function silu<T extends tf.Tensor>(x: T): T {
  return tf.mul(x, tf.sigmoid(x)) as T;
}

/**
 * Rotary position embedding (RoPE; Su et al. 2021) of x [B, H, L, Dh] holding positions start … start+L−1, in the
 * half-split layout of GPT-NeoX, Llama and flash-linear-attention: channel i < Dh/2 pairs with i + Dh/2, rotated by
 * the angle position·θ^(−2i/Dh). With a number, the angles are computed on the host in float64, one table per call
 * (constant under a recorded graph); with each row's positions [B, L] (documents kept apart), as tensors in float32.
 */
export function rotary(x: tf.Tensor4D, start: number | tf.Tensor2D, theta: number): tf.Tensor4D {
  const [, , l, d] = x.shape;
  const half = d / 2;
  const frequencies = Array.from({ length: half }, (_, i) => theta ** ((-2 * i) / d));
  const rotate = (c: tf.Tensor, s: tf.Tensor) => {
    const [x1, x2] = tf.split(x, 2, 3);
    return tf.concat([tf.sub(tf.mul(x1, c), tf.mul(x2, s)), tf.add(tf.mul(x2, c), tf.mul(x1, s))], 3) as tf.Tensor4D;
  };
  if (typeof start !== 'number') {
    // Each row's own positions [B, L] (documents restart them): angles [B, 1, L, d/2], computed in float32.
    return tf.tidy(() => {
      const angles = tf.expandDims(tf.mul(tf.expandDims(tf.cast(start, 'float32'), -1), tf.tensor1d(frequencies)), 1);
      return rotate(tf.cos(angles), tf.sin(angles));
    });
  }
  const cos = new Float32Array(l * half);
  const sin = new Float32Array(l * half);
  for (let t = 0; t < l; t++) {
    for (let i = 0; i < half; i++) {
      const angle = (start + t) * frequencies[i];
      cos[t * half + i] = Math.cos(angle);
      sin[t * half + i] = Math.sin(angle);
    }
  }
  return tf.tidy(() => rotate(tf.tensor2d(cos, [l, half]), tf.tensor2d(sin, [l, half])));
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
 * gradient as a ones-row product. The forward is one fused op pair where the backend has it (fused.ts).
 */
const linearWithBias = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [x, w, b, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.Tensor1D, tf.GradSaveFunc];
  save([x, w]);
  const fused = fusedLinearWithBias();
  return {
    value: fused ? fused(x, w, b) : tf.add(tf.matMul(x, w), b),
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

  /** A source that draws from here on the masks this one draws next (a rematerialised block's forward, run again). */
  fork(): DropoutSource {
    const copy = new DropoutSource(this.rate, this.seed);
    copy.site = this.site;
    return copy;
  }

  apply<T extends tf.Tensor>(x: T): T {
    if (this.seed === null || this.rate === 0) return x;
    const site = this.site++;
    if (hasFusedKernel(STATELESS_UNIFORM)) {
      const seed = typeof this.seed === 'number' ? dropoutSeedTensor(this.seed) : this.seed;
      const uniform = tf
        .engine()
        .runKernel(STATELESS_UNIFORM, { shape: tf.tensor1d(x.shape, 'int32'), seed: tf.add(seed, tf.tensor1d([0, site + 1], 'int32')) }) as tf.Tensor;
      // As tf.dropout: keep where u ≥ rate, kept values scaled by 1 / (1 − rate).
      return tf.mul(tf.mul(x, 1 / (1 - this.rate)), tf.floor(tf.add(uniform, 1 - this.rate))) as T;
    }
    if (typeof this.seed !== 'number')
      throw new Error(`a dropout seed tensor needs the ${STATELESS_UNIFORM} kernel, which the ${currentDevice().backend} backend lacks`);
    // tfjs treats seed 0 as "no seed", hence the | 1.
    return tf.dropout(x, this.rate, undefined, deriveSeed(this.seed, site) | 1) as T;
  }
}

/** The projections of a multi-head attention block: `<prefix>.q`, `.k`, `.v` and `.out`, each `.weight` [d, d] (and `.bias` [d]). */
export const ATTENTION_PROJECTIONS = ['q', 'k', 'v', 'out'] as const;

/** One layer's attention on q, k, v [B, H, L, Dh] → [B, H, L, Dh] (the mechanism, or its decoding step). */
export type HeadsAttention = (q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D) => tf.Tensor4D;

/**
 * The multi-head attention block of GPT, BERT and the task model: rows x [B·L, d] (L = `length`) →
 * [B·L, d]. q, k and v stay separate named variables (finetuning can train them alone) but run as one
 * [d, 3d] product and one head transpose: fewer, larger kernels than three of each. `param(name)` gives
 * the block's tensors by name (ATTENTION_PROJECTIONS under `prefix`), with their biases when `bias`.
 */
export function multiHeadAttention(
  x: tf.Tensor2D,
  length: number,
  numHeads: number,
  prefix: string,
  param: (name: string) => tf.Tensor,
  bias: boolean,
  attend: HeadsAttention,
): tf.Tensor2D {
  const [rows, d] = x.shape;
  const b = rows / length;
  const weight = tf.concat([param(`${prefix}.q.weight`), param(`${prefix}.k.weight`), param(`${prefix}.v.weight`)], 1) as tf.Tensor2D;
  const qkvBias = bias ? (tf.concat([param(`${prefix}.q.bias`), param(`${prefix}.k.bias`), param(`${prefix}.v.bias`)]) as tf.Tensor1D) : undefined;
  const qkv = linear(x, weight, qkvBias);
  const heads = tf.transpose(tf.reshape(qkv, [b, length, 3 * numHeads, d / numHeads]), [0, 2, 1, 3]); // [B, 3H, L, Dh]
  const [q, k, v] = tf.split(heads, 3, 1) as tf.Tensor4D[];
  const attended = attend(q, k, v); // [B, H, L, Dh]
  const merged = tf.reshape(tf.transpose(attended, [0, 2, 1, 3]), [rows, d]) as tf.Tensor2D;
  const outBias = bias ? (param(`${prefix}.out.bias`) as tf.Tensor1D) : undefined;
  return linear(merged, param(`${prefix}.out.weight`) as tf.Tensor2D, outBias);
}
