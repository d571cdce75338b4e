// Checks that the native backend loads and computes what the reference cpu backend computes: used
// by `npm run setup:tensorflow` after a build and by `npm run check:gpu`.
import * as tf from '@tensorflow/tfjs';
import { initBackend } from './start.ts';
import { Rng } from '../core/rng.ts';
import { fusedCpuKernelsStatus } from './fused-kernels.ts';
import { readBuildStamp } from './native-build.ts';
import { tensorflowInfo } from './tensorflow.ts';
import { CompiledGraph, graphDevice, graphsAvailable, recordTrace } from './tf-graph.ts';

export interface Check {
  name: string;
  ok: boolean;
  detail: string;
}

/** Largest |a − b| over max(1, max|b|): float32 products of this size agree to ~1e-6 across backends. */
function relativeError(a: Float32Array | Int32Array | Uint8Array, b: Float32Array | Int32Array | Uint8Array): number {
  let diff = 0;
  let scale = 1;
  for (let i = 0; i < b.length; i++) {
    diff = Math.max(diff, Math.abs(a[i] - b[i]));
    scale = Math.max(scale, Math.abs(b[i]));
  }
  return diff / scale;
}

/** The probe's inputs: a [96, 64], w [64, 48] and labels [96] (the same numbers on every backend). */
function probeInputs(): { a: tf.Tensor2D; w: tf.Tensor2D; labels: tf.Tensor1D } {
  const rng = new Rng(20261124);
  const normal = (n: number) => Float32Array.from({ length: n }, () => rng.normal());
  return {
    a: tf.tensor2d(normal(96 * 64), [96, 64]),
    w: tf.tensor2d(normal(64 * 48), [64, 48]),
    labels: tf.tensor1d(
      Array.from({ length: 96 }, (_, i) => (i * 7) % 48),
      'int32',
    ),
  };
}

/** ∂/∂w of a small network's cross-entropy. */
function probeGradient(a: tf.Tensor2D, w: tf.Tensor2D, labels: tf.Tensor1D): tf.Tensor {
  const loss = (weights: tf.Tensor) => tf.losses.softmaxCrossEntropy(tf.oneHot(labels, 48), tf.tanh(tf.matMul(a, weights as tf.Tensor2D)).mul(3)) as tf.Scalar;
  return tf.grad(loss)(w);
}

/** A matmul and the gradient of a small network, whose outputs each backend computes. */
function probe(): { product: Float32Array; gradient: Float32Array } {
  return tf.tidy(() => {
    const { a, w, labels } = probeInputs();
    return { product: tf.matMul(a, w).dataSync() as Float32Array, gradient: probeGradient(a, w, labels).dataSync() as Float32Array };
  });
}

/** The probe's gradient recorded, registered as a TensorFlow function (train.graph's route) and called, without and with XLA. */
function graphProbe(): { gradient: Float32Array; xla: Float32Array | string } {
  return tf.tidy(() => {
    const { a, w, labels } = probeInputs();
    const { trace } = recordTrace([w], () => [probeGradient(a, w, labels)]);
    const graph = CompiledGraph.load(trace);
    try {
      const gradient = graph.run([w])[0].dataSync() as Float32Array;
      let xla: Float32Array | string;
      try {
        xla = graph.run([w], true)[0].dataSync() as Float32Array;
      } catch (err) {
        xla = (err as Error).message.split('\n').find((l) => l.trim()) ?? 'failed';
      }
      return { gradient, xla };
    } finally {
      graph.dispose();
    }
  });
}

/** Runs the checks; leaves the tensorflow backend selected. */
export async function verifyTensorflow(): Promise<Check[]> {
  await initBackend('cpu', { quiet: true });
  const reference = probe();
  const device = await initBackend('tensorflow', { quiet: true });
  const checks: Check[] = [{ name: 'backend', ok: device.backend === 'tensorflow', detail: `${device.backend}: ${device.source}` }];
  const info = tensorflowInfo();
  const built = readBuildStamp()?.tensorflow;
  checks.push({
    name: 'TensorFlow version',
    ok: !built || info.tensorflow === built,
    detail: `${info.tensorflow}${built ? ` (built from ${built})` : ''}${info.gpu ? ', on the GPU' : ', on the CPU'}`,
  });
  const native = probe();
  // On Ampere and later GPUs TensorFlow multiplies in TF32 (10-bit mantissa) unless
  // NVIDIA_TF32_OVERRIDE=0: ~1e-3 relative instead of float32's ~1e-6.
  const tf32 = info.gpu && process.env.NVIDIA_TF32_OVERRIDE !== '0';
  const [productTolerance, gradientTolerance] = tf32 ? [3e-3, 1e-2] : [1e-5, 1e-4];
  const note = tf32 ? ' (TF32 tolerance)' : '';
  const productError = relativeError(native.product, reference.product);
  checks.push({ name: 'matmul vs cpu', ok: productError < productTolerance, detail: `relative error ${productError.toExponential(1)}${note}` });
  const gradientError = relativeError(native.gradient, reference.gradient);
  checks.push({ name: 'gradient vs cpu', ok: gradientError < gradientTolerance, detail: `relative error ${gradientError.toExponential(1)}${note}` });
  const [rounded, joined] = tf.tidy(() => [tf.round(tf.tensor1d([3, -2], 'int32')).dataSync(), tf.concat([tf.scalar(1), tf.scalar(2)]).dataSync()]);
  if (graphsAvailable()) {
    const { gradient, xla } = graphProbe();
    const graphError = relativeError(gradient, reference.gradient);
    checks.push({
      name: 'graph execution (train.graph) vs cpu',
      ok: graphError < gradientTolerance,
      detail: `gradient relative error ${graphError.toExponential(1)}, as a TensorFlow function on ${graphDevice()}`,
    });
    const xlaError = typeof xla === 'string' ? null : relativeError(xla, reference.gradient);
    // XLA is optional (train.xla auto decides per device): its absence is reported, not a failure.
    checks.push({
      name: 'XLA (train.xla) vs cpu',
      ok: xlaError === null || xlaError < gradientTolerance,
      detail: xlaError === null ? `not available on this device: ${xla}` : `gradient relative error ${xlaError.toExponential(1)}`,
    });
  } else {
    checks.push({
      name: 'graph execution (train.graph)',
      ok: true,
      detail: 'this binding has no TensorFlow functions (a stock tfjs-node): training steps run op by op',
    });
  }
  // The fused kernels are optional too (the composed ops run without them); their state is reported.
  if (!info.gpu) checks.push({ name: 'fused CPU kernels', ok: true, detail: fusedCpuKernelsStatus() });
  checks.push({
    name: 'TF 2.21 fixes',
    ok: rounded.join() === '3,-2' && joined.join() === '1,2',
    detail: `round(int32) ${rounded.join()}, concat(scalars) ${joined.join()}`,
  });
  return checks;
}

export function formatChecks(checks: Check[]): string[] {
  return checks.map((c) => `    ${c.ok ? 'ok  ' : 'FAIL'} ${c.name}: ${c.detail}`);
}
