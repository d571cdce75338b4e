// Tensor helpers shared by the attention library and the models.
import * as tf from '@tensorflow/tfjs';
import { currentDevice } from '../backend/current.ts';

/**
 * Whether 2-D products get explicit transposes instead of transposeA/B flags: where the device runs
 * fast only the plain, non-transposed 2-D product (wasm's XNNPACK; its transposed products fall to a
 * ~25× slower loop, docs/notes/tfjs-cpu-kernels.md). Elsewhere (tensorflow: MatMul's adjoint flags)
 * the flags are free and a transpose is a copy.
 */
export function explicitTransposes(): boolean {
  return currentDevice().kernels.plainProductsOnly;
}

/** a·bᵀ for 2-D operands, the transpose explicit where explicitTransposes() says so. */
export function matMulTransposeB(a: tf.Tensor2D, b: tf.Tensor2D): tf.Tensor2D {
  return explicitTransposes() ? tf.matMul(a, tf.transpose(b)) : tf.matMul(a, b, false, true);
}

/**
 * ∂(x·W)/∂W = xᵀ·dy. With explicit transposes, whichever of x [N, in] and dy [N, out] is smaller is
 * transposed: (dyᵀ·x)ᵀ moves N·out + in·out values instead of N·in.
 */
export function weightGradient(x: tf.Tensor2D, dy: tf.Tensor2D): tf.Tensor2D {
  if (!explicitTransposes()) return tf.matMul(x, dy, true, false);
  const [n, inDim] = x.shape;
  const outDim = dy.shape[1];
  if (n * inDim <= n * outDim + inDim * outDim) return tf.matMul(tf.transpose(x), dy);
  return tf.transpose(tf.matMul(tf.transpose(dy), x)) as tf.Tensor2D;
}

/**
 * 2-D matrix product whose gradient takes its transposes as explicitTransposes() says (tf.matMul's
 * own gradient always uses the flags, the slow path on wasm).
 */
export const matMul2d = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [a, b, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
  save([a, b]);
  return {
    value: tf.matMul(a, b),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [sa, sb] = saved as tf.Tensor2D[];
      return [matMulTransposeB(dy as tf.Tensor2D, sb), weightGradient(sa, dy as tf.Tensor2D)];
    },
  };
}) as (a: tf.Tensor2D, b: tf.Tensor2D) => tf.Tensor2D;

/** x [..., in] · w [in, out] (+ b) as one 2-D product. */
export function dense(x: tf.Tensor, w: tf.Tensor2D, b?: tf.Tensor1D): tf.Tensor {
  const inDim = x.shape[x.shape.length - 1];
  const lead = x.shape.slice(0, -1);
  let y: tf.Tensor = matMul2d(tf.reshape(x, [-1, inDim]) as tf.Tensor2D, w);
  if (b) y = tf.add(y, b);
  return tf.reshape(y, [...lead, w.shape[1]]);
}

/** Unit-normalises the last axis: x / max(‖x‖, 1e-12), as torch.nn.functional.normalize. */
export function l2Normalize<T extends tf.Tensor>(x: T): T {
  return tf.mul(x, tf.rsqrt(tf.maximum(tf.sum(tf.square(x), -1, true), 1e-24))) as T;
}

/** Reshapes [B, H, L, D] to [B·H, L, D] (batched matmuls are only reliable at rank 3 in tfjs). */
export function flattenHeads(x: tf.Tensor): tf.Tensor3D {
  const [b, h, l, d] = x.shape;
  return tf.reshape(x, [b * h, l, d]);
}

/** Lower-triangular [n, n] matrix of ones (diagonal included): the causal 0/1 mask. */
export function causalMask01(n: number): tf.Tensor2D {
  const values = new Float32Array(n * n);
  for (let i = 0; i < n; i++) for (let j = 0; j <= i; j++) values[i * n + j] = 1;
  return tf.tensor2d(values, [n, n]);
}

/**
 * A cache of constant tensors keyed by a string, kept outside any tf.tidy. Masks are built once
 * per shape rather than inside differentiated code (bandPart inside gradients fails in tfjs).
 */
export class ConstantCache {
  private readonly items = new Map<string, tf.Tensor>();

  get<T extends tf.Tensor>(key: string, make: () => T): T {
    let t = this.items.get(key);
    if (!t) {
      t = tf.tidy(make);
      tf.keep(t);
      this.items.set(key, t);
    }
    return t as T;
  }

  dispose(): void {
    for (const t of this.items.values()) t.dispose();
    this.items.clear();
  }
}

/**
 * A named variable "<scope>.<name>"; fixed buffers are created non-trainable. It takes `initial` over: the variable
 * shares its data, and `initial` itself is disposed, so a mechanism built outside tf.tidy leaves no tensor behind.
 */
export function namedVariable(scope: string, name: string, initial: tf.Tensor, trainable: boolean): tf.Variable {
  const variable = tf.variable(initial, trainable, `${scope}.${name}`);
  initial.dispose();
  return variable;
}

/**
 * tf.clipByValue with the same gradient (dy where lo ≤ x ≤ hi, else 0), written with cheap ops:
 * tfjs's gradient runs two scalar-broadcast comparisons, a logical and and a select, which cost
 * ~4 ms per 131k values on wasm (a tenth of a SLAY layer, a quarter of a spherical-Yat one); here
 * the mask is 1 − step(|x − m| − r), m and r the interval's centre and half-width (~0.3 ms).
 */
export const clamp = (x: tf.Tensor, lo: number, hi: number): tf.Tensor =>
  tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const [input, save] = args as [tf.Tensor, tf.GradSaveFunc];
    save([input]);
    return {
      value: tf.clipByValue(input, lo, hi),
      gradFunc: (dy: tf.Tensor, [saved]: tf.Tensor[]) => {
        const outside = tf.step(tf.sub(tf.abs(tf.sub(saved, (lo + hi) / 2)), (hi - lo) / 2));
        return tf.mul(dy, tf.sub(1, outside));
      },
    };
  })(x);

/**
 * Runs `fn` off the autodiff tape: what it computes is a constant to any surrounding tf.grads (a
 * stop-gradient; tfjs has no such op). Stabiliser maxima use it: tf.max's own gradient (a broadcast
 * x == max mask) is slow on wasm — 70 ms for a [8, 4, 256, 64] input, more than the whole Performer
 * layer it stabilises — and a zero-gradient customGrad would still cost a zeros tensor and the
 * gradients of every op between it and the output. The engine records no tape inside a kernel
 * (kernelDepth > 0), which is the state set here.
 */
export function untaped<T>(fn: () => T): T {
  const state = tf.engine().state;
  state.kernelDepth++;
  try {
    return fn();
  } finally {
    state.kernelDepth--;
  }
}

/**
 * The gradients of the scalar f(...xs) with respect to each of xs (zeros where f does not depend on
 * one), callable inside a customGrad's gradFunc, i.e. while an outer backward pass runs: the engine
 * keeps one active tape, which an inner tf.grads would replace and, when done, clear, so it is put
 * back afterwards. This is what lets a custom gradient recompute part of the forward pass and
 * differentiate it (gradient checkpointing), which tfjs has no API for.
 */
export function vjp(f: (...xs: tf.Tensor[]) => tf.Scalar, xs: tf.Tensor[]): tf.Tensor[] {
  const engine = tf.engine();
  const outerTape = engine.state.activeTape;
  try {
    const { value, grads } = engine.gradients(() => f(...xs), xs, undefined, true);
    value.dispose();
    return grads.map((g, i) => g ?? tf.zerosLike(xs[i]));
  } finally {
    engine.state.activeTape = outerTape;
  }
}

/**
 * x [B, H, L, d] projected by one matrix per head w [H, d, m] → [B, H, L, m], or by a matrix shared
 * by all heads w [d, m] (one 2-D product).
 */
export function projectPerHead(x: tf.Tensor4D, w: tf.Tensor): tf.Tensor4D {
  const [b, h, l, d] = x.shape;
  if (w.rank === 2) return dense(x, w as tf.Tensor2D) as tf.Tensor4D;
  const m = w.shape[2]!;
  const byHead = tf.reshape(tf.transpose(x, [1, 0, 2, 3]), [h, b * l, d]);
  const projected = batchMatMul(byHead, w); // [H, B·L, m]
  return tf.transpose(tf.reshape(projected, [h, b, l, m]), [1, 0, 2, 3]) as tf.Tensor4D;
}

/**
 * Row-wise outer products a [N, k], b [N, m] → [N, k·m] (row n is vec(a_n b_nᵀ), a's index major).
 * A broadcast multiply forward; the gradient is written out, (Σ_j dy_ij b_j, Σ_i dy_ij a_i), because
 * tfjs's broadcast-multiply gradient and the batched [k×1]·[1×m] matmul are both ~2× slower on wasm
 * (measured: N = 8192, k = 8, m = 16, forward + backward 6.7 vs 11.4 / 13.4 ms).
 */
export const rowOuterProduct = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [a, b, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
  const [n, k] = a.shape;
  const m = b.shape[1];
  save([a, b]);
  return {
    value: tf.reshape(tf.mul(tf.reshape(a, [n, k, 1]), tf.reshape(b, [n, 1, m])), [n, k * m]),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [sa, sb] = saved;
      const grid = tf.reshape(dy, [n, k, m]);
      return [tf.sum(tf.mul(grid, tf.reshape(sb, [n, 1, m])), 2), tf.sum(tf.mul(grid, tf.reshape(sa, [n, k, 1])), 1)];
    },
  };
}) as (a: tf.Tensor2D, b: tf.Tensor2D) => tf.Tensor2D;

/** [N, m, k] · [N, k, n] as N plain 2-D products (XNNPACK on wasm). */
function unstackedMatMul(a: tf.Tensor3D, b: tf.Tensor3D): tf.Tensor3D {
  const [n, m, k] = a.shape;
  const cols = b.shape[2];
  // Own tidy: inside a customGrad nothing else frees the pieces before the whole step ends, and
  // they would double the peak memory. tf.slice, not tf.unstack: wasm's Unpack copies the whole
  // input once per piece.
  return tf.tidy(() => {
    const products = Array.from({ length: n }, (_, i) =>
      tf.matMul(
        tf.reshape(tf.slice(a, [i, 0, 0], [1, m, k]), [m, k]) as tf.Tensor2D,
        tf.reshape(tf.slice(b, [i, 0, 0], [1, k, cols]), [k, cols]) as tf.Tensor2D,
      ),
    );
    return tf.reshape(tf.concat(products), [n, m, cols]);
  });
}

const swapLast = (x: tf.Tensor3D) => tf.transpose(x, [0, 2, 1]) as tf.Tensor3D;

const unstackedMatMulWithGrad = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [a, b, save] = args as [tf.Tensor3D, tf.Tensor3D, tf.GradSaveFunc];
  save([a, b]);
  return {
    value: unstackedMatMul(a, b),
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [sa, sb] = saved as tf.Tensor3D[];
      return tf.tidy(() => [unstackedMatMul(dy as tf.Tensor3D, swapLast(sb)), unstackedMatMul(swapLast(sa), dy as tf.Tensor3D)]);
    },
  };
}) as (a: tf.Tensor3D, b: tf.Tensor3D) => tf.Tensor3D;

/** Products smaller than this many multiply-adds stay on tf.matMul (per-op overhead dominates). */
const UNSTACK_MIN_WORK = 1 << 15;
const UNSTACK_MAX_BATCH = 2048;

/**
 * Batched matMul [N, m, k] · [N, k, n] (transposes as tf.matMul). On wasm the batched kernel and
 * every transposed product run a naive loop at ~1–2 GFLOP/s, while the plain 2-D product runs
 * XNNPACK at ~25 GFLOP/s (docs/notes/tfjs-cpu-kernels.md), so there the batch is split into 2-D
 * products with explicit transposes, forward and backward (the device's kernels.plainProductsOnly).
 * Elsewhere it is tf.matMul.
 */
export function batchMatMul(a: tf.Tensor, b: tf.Tensor, transposeA = false, transposeB = false): tf.Tensor3D {
  if (a.rank !== 3 || b.rank !== 3) throw new Error(`batchMatMul expects rank-3 operands (got [${a.shape}] and [${b.shape}])`);
  const [n, m, k] = (transposeA ? [a.shape[0], a.shape[2], a.shape[1]] : a.shape) as number[];
  const cols = (transposeB ? b.shape[1] : b.shape[2]) as number;
  if (!explicitTransposes() || m * k * cols < UNSTACK_MIN_WORK || n > UNSTACK_MAX_BATCH) {
    return tf.matMul(a as tf.Tensor3D, b as tf.Tensor3D, transposeA, transposeB);
  }
  const [a3, b3] = [a as tf.Tensor3D, b as tf.Tensor3D];
  return unstackedMatMulWithGrad(transposeA ? swapLast(a3) : a3, transposeB ? swapLast(b3) : b3);
}

/**
 * a / b with the gradient written as (∂a, ∂b) = (dy/b, −dy·(a/b)/b). tf.div's own gradient forms
 * a·dy/b², and b² underflows to 0 in float32 once b < ~1e−19 (a kernel-normalised row whose whole
 * denominator is δ-sized), turning the gradient into 0/0 = NaN. b broadcasts over a's last axis.
 */
export const safeDivide = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [a, b, save] = args as [tf.Tensor, tf.Tensor, tf.GradSaveFunc];
  const quotient = tf.div(a, b);
  save([b, quotient]);
  return {
    value: quotient,
    gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
      const [sb, sq] = saved;
      const db = tf.neg(tf.div(tf.mul(dy, sq), sb));
      return [tf.div(dy, sb), tf.sum(db, -1, true)];
    },
  };
}) as (a: tf.Tensor, b: tf.Tensor) => tf.Tensor;
