// The model's pieces that run as one fused op where the backend has the kernel (the native
// backend's CPU build: backend/fused-kernels.ts, native/kernels/), with the gradient as the
// kernel's twin op. Elsewhere — wasm, cpu, a GPU device, a graph being exported for XLA — the
// composed form in layers.ts runs; test/backend/fused-ops.test.ts holds the two equal.
import * as tf from '@tensorflow/tfjs';
import { hasFusedKernel, LINEAR_WITH_BIAS, type FusedKernel } from '../backend/fused-kernels.ts';

const run = (name: FusedKernel, inputs: tf.NamedTensorMap, attrs: Record<string, number> = {}) =>
  tf.engine().runKernel(name, inputs, attrs as unknown as tf.NamedAttrMap);

type Unary = (x: tf.Tensor) => tf.Tensor;

function fusedElementwise(forward: FusedKernel, backward: FusedKernel): Unary {
  return tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const [x, save] = args as [tf.Tensor, tf.GradSaveFunc];
    save([x]);
    return { value: run(forward, { x }) as tf.Tensor, gradFunc: (dy: tf.Tensor, [sx]: tf.Tensor[]) => [run(backward, { dy, x: sx }) as tf.Tensor] };
  }) as Unary;
}

const geluTanh = fusedElementwise('SlayformerGeluTanh', 'SlayformerGeluTanhGrad');
const geluErf = fusedElementwise('SlayformerGeluErf', 'SlayformerGeluErfGrad');

/** The fused GELU of this form, or null where the backend has no such kernel. */
export function fusedGelu(form: 'gelu-tanh' | 'gelu-erf'): Unary | null {
  const name = form === 'gelu-erf' ? 'SlayformerGeluErf' : 'SlayformerGeluTanh';
  if (!hasFusedKernel(name)) return null;
  return form === 'gelu-erf' ? geluErf : geluTanh;
}

/** An op per value of its float attribute (the customGrad closes over it), built on first use and kept. */
function perAttribute<Op>(build: (value: number) => Op): (value: number) => Op {
  const ops = new Map<number, Op>();
  return (value) => {
    if (!ops.has(value)) ops.set(value, build(value));
    return ops.get(value)!;
  };
}

type LayerNormOp = (x: tf.Tensor2D, gain: tf.Tensor1D, shift: tf.Tensor1D) => tf.Tensor2D;
const layerNorm = perAttribute(
  (eps) =>
    tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
      const [x, gain, shift, save] = args as [tf.Tensor2D, tf.Tensor1D, tf.Tensor1D, tf.GradSaveFunc];
      const [y, xhat, rstd] = run('SlayformerLayerNorm', { x, gain, shift }, { eps }) as tf.Tensor[];
      save([xhat, rstd, gain]);
      return {
        value: y,
        gradFunc: (dy: tf.Tensor, [sx, sr, sg]: tf.Tensor[]) => run('SlayformerLayerNormGrad', { dy, xhat: sx, rstd: sr, gain: sg }) as tf.Tensor[],
      };
    }) as LayerNormOp,
);

/** The fused LayerNorm with this ε, or null where the backend has no such kernel. */
export function fusedLayerNorm(eps: number): LayerNormOp | null {
  return hasFusedKernel('SlayformerLayerNorm') ? layerNorm(eps) : null;
}

/**
 * Attention's softmax backward p⊙(dp − rowsum(dout⊙out)) for p, dp [.., Lq, Lk] and dout, out [.., Lq, D]
 * (attention/softmax.ts), or null where the backend has no such kernel.
 */
export function fusedAttentionSoftmaxGrad(): ((probs: tf.Tensor, dprobs: tf.Tensor, dout: tf.Tensor, out: tf.Tensor) => tf.Tensor) | null {
  if (!hasFusedKernel('SlayformerAttentionSoftmaxGrad')) return null;
  return (probs, dprobs, dout, out) => run('SlayformerAttentionSoftmaxGrad', { probs, dprobs, dout, out }) as tf.Tensor;
}

type CausalAttention = (q: tf.Tensor3D, k: tf.Tensor3D, v: tf.Tensor3D) => tf.Tensor3D;
const causalAttention: CausalAttention = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [q, k, v, save] = args as [tf.Tensor3D, tf.Tensor3D, tf.Tensor3D, tf.GradSaveFunc];
  const [out, probs] = run('SlayformerCausalAttention', { q, k, v }) as tf.Tensor3D[];
  save([q, k, v, probs, out]);
  return {
    value: out,
    gradFunc: (dout: tf.Tensor, [sq, sk, sv, sp, so]: tf.Tensor[]) =>
      run('SlayformerCausalAttentionGrad', { dout, q: sq, k: sk, v: sv, probs: sp, out: so }) as tf.Tensor[],
  };
}) as CausalAttention;

/**
 * softmax(q·kᵀ, causal)·v for q (scaled), k, v [N, L, D] as one op whose products skip the key tiles a
 * query strip cannot see (attention/softmax.ts), or null where the backend has no such kernel.
 */
export function fusedCausalAttention(): CausalAttention | null {
  return hasFusedKernel('SlayformerCausalAttention') ? causalAttention : null;
}

type CausalFactorAttention = (aq: tf.Tensor3D, ak: tf.Tensor3D, bq: tf.Tensor3D, bk: tf.Tensor3D, values: tf.Tensor3D) => tf.Tensor3D;
const causalFactorAttention: CausalFactorAttention = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [aq, ak, bq, bk, values, save] = args as [tf.Tensor3D, tf.Tensor3D, tf.Tensor3D, tf.Tensor3D, tf.Tensor3D, tf.GradSaveFunc];
  const [out, xa, xb] = run('SlayformerCausalFactorAttention', { aq, ak, bq, bk, values }) as tf.Tensor3D[];
  save([aq, ak, bq, bk, values, xa, xb]);
  return {
    value: out,
    gradFunc: (dout: tf.Tensor, [saq, sak, sbq, sbk, sv, sxa, sxb]: tf.Tensor[]) =>
      run('SlayformerCausalFactorAttentionGrad', { dout, aq: saq, ak: sak, bq: sbq, bk: sbk, values: sv, xa: sxa, xb: sxb }) as tf.Tensor[],
  };
}) as CausalFactorAttention;

/**
 * ((aq·akᵀ)⊙(bq·bkᵀ) under the causal mask)·[values, 1] [N, C, D + 1] for blocks [N, C, ·], values [N, C, D], as one op
 * whose products skip the key tiles a query strip cannot see (attention/chunked.ts, tensor-product features), or null
 * where the backend has no such kernel.
 */
export function fusedCausalFactorAttention(): CausalFactorAttention | null {
  return hasFusedKernel('SlayformerCausalFactorAttention') ? causalFactorAttention : null;
}

type LinearNormalize = (raw: tf.Tensor) => tf.Tensor;
const linearNormalize = perAttribute(
  (delta) =>
    tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
      const [raw, save] = args as [tf.Tensor, tf.GradSaveFunc];
      save([raw]);
      return {
        value: run('SlayformerLinearNormalize', { raw }, { delta }) as tf.Tensor,
        gradFunc: (dy: tf.Tensor, [saved]: tf.Tensor[]) => [run('SlayformerLinearNormalizeGrad', { dy, raw: saved }, { delta }) as tf.Tensor],
      };
    }) as LinearNormalize,
);

/**
 * raw [.., D + 1] (numerators, then the denominator) → raw[.., :D]/(raw[.., D] + δ) with safeDivide's gradient (ops.ts),
 * as one op each way (attention/chunked.ts), or null where the backend has no such kernel.
 */
export function fusedLinearNormalize(delta: number): LinearNormalize | null {
  return hasFusedKernel('SlayformerLinearNormalize') ? linearNormalize(delta) : null;
}

/**
 * SLAY's factors of x [B, H, L, d] ('anchor' polynomial; attention/slay.ts): a = (u·anchors)²/√P and
 * b = concat_r √w_r·M^(−½)·exp(clamp(k_r u·ω_r − k_r²‖u‖²/2, ±20)) for u = x/‖x‖, given anchors [d, P], omegas
 * [R, H, d, M] and nodes [R, 2] = (k_r, √w_r), fixed tensors without a gradient; or null where the backend has no such kernel.
 */
export function fusedSlayFactors(): ((x: tf.Tensor4D, anchors: tf.Tensor2D, omegas: tf.Tensor4D, nodes: tf.Tensor2D) => [tf.Tensor4D, tf.Tensor4D]) | null {
  if (!hasFusedKernel('SlayformerSlayFactors')) return null;
  return (x, anchors, omegas, nodes) => run('SlayformerSlayFactors', { x, anchors, omegas, nodes }) as [tf.Tensor4D, tf.Tensor4D];
}

// The kernel's gradient by name (customGrad takes one output; this kernel has two). Only x receives one: anchors,
// omegas and nodes are fixed tensors, never on a path the tape differentiates.
tf.registerGradient({
  kernelName: 'SlayformerSlayFactors',
  inputsToSave: ['x', 'anchors', 'omegas', 'nodes'],
  gradFunc: (dys: tf.Tensor | tf.Tensor[], [x, anchors, omegas, nodes]: tf.Tensor[]) => {
    const [da, db] = dys as tf.Tensor[];
    return { x: () => run('SlayformerSlayFactorsGrad', { da, db, x, anchors, omegas, nodes }) as tf.Tensor };
  },
});

/** x [N, in]·W [in, out] + b as one op pair the backend fuses (fused-kernels.ts), or null where it has none. */
export function fusedLinearWithBias(): ((x: tf.Tensor2D, w: tf.Tensor2D, b: tf.Tensor1D) => tf.Tensor2D) | null {
  if (!hasFusedKernel(LINEAR_WITH_BIAS)) return null;
  return (x, w, b) => run(LINEAR_WITH_BIAS, { x, w, b }) as tf.Tensor2D;
}
