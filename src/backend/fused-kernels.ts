// Kernels a backend may run as one native op. They are looked up by name at run time: the model
// calls the fused kernel where the active backend registered one (tensorflow.ts) and its composed
// tf-op form everywhere else, so every backend computes the same function.
import * as tf from '@tensorflow/tfjs';
import { FUSED_CPU_KERNELS, type FusedCpuKernel } from './native/kernels.ts';

/**
 * shape [rank] int32, seed [2] int32 → float32 uniform on [0, 1) of that shape from a counter-based
 * generator (TensorFlow's StatelessRandomUniform): the numbers are a function of the seed tensor, so
 * a recorded graph draws new ones when it is fed a new seed (dropout in graph steps).
 */
export const STATELESS_UNIFORM = 'SlayformerStatelessRandomUniform';

/** Fused CPU kernels of the native backend: the table in native/kernels.ts (docs/backends.md, "Fused CPU kernels"). */
export { FUSED_CPU_KERNELS, type FusedCpuKernel } from './native/kernels.ts';

/**
 * x [N, in]·W [in, out] + b as TensorFlow's MatMul and BiasAdd on the native backend (tensorflow.ts):
 * tfjs emits BatchMatMulV2 and Add, which Grappler's remapper leaves apart; this pair it fuses into
 * one _FusedMatMul in a recorded step.
 */
export const LINEAR_WITH_BIAS = 'SlayformerLinearWithBias';

/** The pieces withComposedKernels can turn back into their composed twins one by one. */
export type FusedKernel = FusedCpuKernel | typeof LINEAR_WITH_BIAS;
export const FUSED_KERNEL_NAMES: readonly FusedKernel[] = [...FUSED_CPU_KERNELS.map((k) => k.name), LINEAR_WITH_BIAS];

/** Why the fused CPU kernels are not in use (null = they are; undefined = the native backend did not try). */
let fusedCpuKernelsAbsent: string | null | undefined;

export function noteFusedCpuKernels(why: string | null): void {
  fusedCpuKernelsAbsent = why;
}

/** 'in use', or why not, for the run's start line and env.json. */
export function fusedCpuKernelsStatus(): string {
  return fusedCpuKernelsAbsent === null ? 'in use' : (fusedCpuKernelsAbsent ?? 'not on this backend');
}

/**
 * The fused pieces running as their composed twins now. `all`: while > 0, every one of them — no fused
 * CPU kernel, and the tied head's loss and softmax attention's backward as plain autodiff chains
 * (model/tied-head-loss.ts, attention/softmax.ts). `kernels`: the named kernels alone. For programs
 * that must compile elsewhere (XLA cannot run our ops) and for paired A/B measurements (bench/paired.ts):
 * the composed forms are the reference twins of the fused ones.
 */
const composed = { all: 0, kernels: [] as FusedKernel[] };

/** Runs `fn` with the composed form of every fused piece, or of the named kernels alone. */
export function withComposedKernels<T>(fn: () => T, kernels?: readonly FusedKernel[]): T {
  const saved = composed.kernels;
  if (kernels) composed.kernels = [...saved, ...kernels];
  else composed.all++;
  try {
    return fn();
  } finally {
    if (kernels) composed.kernels = saved;
    else composed.all--;
  }
}

/** Whether the model's fused forms (one custom gradient where a chain of ops would do) are in use now: see withComposedKernels. */
export function fusedFormsEnabled(): boolean {
  return composed.all === 0;
}

/** Which composed forms are in use, for keys of recorded programs: '' when none. */
export function composedFormsKey(): string {
  if (composed.all > 0) return '|composed';
  return composed.kernels.length > 0 ? `|composed:${[...new Set(composed.kernels)].sort().join(',')}` : '';
}

export function hasFusedKernel(name: string): boolean {
  const fused = (FUSED_KERNEL_NAMES as readonly string[]).includes(name);
  if (fused && (composed.all > 0 || composed.kernels.includes(name as FusedKernel))) return false;
  return tf.getKernel(name, tf.getBackend()) !== undefined;
}
