// Checks that the native backend loads and computes what the reference cpu backend computes: used
// by `npm run setup:tensorflow` after a build and by `npm run check:gpu`.
import * as tf from '@tensorflow/tfjs';
import { initBackend } from '../backend.ts';
import { Rng } from '../model/rng.ts';
import { readBuildStamp } from './native-build.ts';
import { tensorflowInfo } from './tensorflow.ts';

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

/** A matmul and the gradient of a small network, whose outputs each backend computes. */
function probe(): { product: Float32Array; gradient: Float32Array } {
  const rng = new Rng(20261124);
  const normal = (n: number) => Float32Array.from({ length: n }, () => rng.normal());
  return tf.tidy(() => {
    const a = tf.tensor2d(normal(96 * 64), [96, 64]);
    const w = tf.tensor2d(normal(64 * 48), [64, 48]);
    const labels = tf.tensor1d(Array.from({ length: 96 }, (_, i) => (i * 7) % 48), 'int32');
    const loss = (weights: tf.Tensor) =>
      tf.losses.softmaxCrossEntropy(tf.oneHot(labels, 48), tf.tanh(tf.matMul(a, weights as tf.Tensor2D)).mul(3)) as tf.Scalar;
    return { product: tf.matMul(a, w).dataSync() as Float32Array, gradient: tf.grad(loss)(w).dataSync() as Float32Array };
  });
}

/** Runs the checks; leaves the tensorflow backend selected. */
export async function verifyTensorflow(): Promise<Check[]> {
  await initBackend('cpu', { quiet: true });
  const reference = probe();
  const backend = await initBackend('tensorflow', { quiet: true });
  const checks: Check[] = [{ name: 'backend', ok: backend === 'tensorflow' && tf.getBackend() === 'tensorflow', detail: tf.getBackend() }];
  const info = tensorflowInfo();
  const built = readBuildStamp()?.tensorflow;
  checks.push({ name: 'TensorFlow version', ok: !built || info.tensorflow === built, detail: `${info.tensorflow}${built ? ` (built from ${built})` : ''}${info.gpu ? ', on the GPU' : ', on the CPU'}` });
  const native = probe();
  const productError = relativeError(native.product, reference.product);
  checks.push({ name: 'matmul vs cpu', ok: productError < 1e-5, detail: `relative error ${productError.toExponential(1)}` });
  const gradientError = relativeError(native.gradient, reference.gradient);
  checks.push({ name: 'gradient vs cpu', ok: gradientError < 1e-4, detail: `relative error ${gradientError.toExponential(1)}` });
  const [rounded, joined] = tf.tidy(() => [
    tf.round(tf.tensor1d([3, -2], 'int32')).dataSync(),
    tf.concat([tf.scalar(1), tf.scalar(2)]).dataSync(),
  ]);
  checks.push({ name: 'TF 2.21 fixes', ok: rounded.join() === '3,-2' && joined.join() === '1,2', detail: `round(int32) ${rounded.join()}, concat(scalars) ${joined.join()}` });
  return checks;
}

export function formatChecks(checks: Check[]): string[] {
  return checks.map((c) => `    ${c.ok ? 'ok  ' : 'FAIL'} ${c.name}: ${c.detail}`);
}
