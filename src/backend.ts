// Run-time start of the TensorFlow.js backend (which one: src/backend/device.ts).
//
//   tensorflow  @tensorflow/tfjs-node built from the TensorFlow wheel by `npm run setup:tensorflow`
//               (src/backend/tensorflow.ts), else an installed @tensorflow/tfjs-node-gpu / tfjs-node
//   wasm        @tensorflow/tfjs-backend-wasm (SIMD, one thread under Node)
//   cpu         the pure-JS reference backend shipped with @tensorflow/tfjs
//   auto        the first of the above that loads (resolveBackend predicts it without loading)
import * as tf from '@tensorflow/tfjs';
import { loadTensorflowPackage } from './backend/tensorflow.ts';
import { patchWasmKernels } from './backend/wasm-kernels.ts';
import { currentDevice } from './backend/current.ts';
import { AUTO_ORDER, chooseBackend, parseBackend, type BackendName, type Device } from './backend/device.ts';

/** Loads one concrete backend; returns false (with the reason) when it cannot be loaded here. */
async function tryLoad(name: BackendName): Promise<{ ok: boolean; reason?: string }> {
  try {
    if (name === 'tensorflow') {
      const failure = loadTensorflowPackage();
      if (failure) return { ok: false, reason: failure };
    } else if (name === 'wasm') {
      await import('@tensorflow/tfjs-backend-wasm');
    }
    if (!(await tf.setBackend(name))) return { ok: false, reason: `tf.setBackend('${name}') failed` };
    await tf.ready();
    if (name === 'wasm') patchWasmKernels();
    return { ok: true };
  } catch (err) {
    return { ok: false, reason: (err as Error).message.split('\n')[0] };
  }
}

/**
 * Selects and initialises the backend and returns its device. `requested` defaults to $SLAYFORMER_BACKEND,
 * then 'auto' (commands decide it with chooseBackend: --backend > $SLAYFORMER_BACKEND > recipe > auto).
 * With 'auto' it says on stderr which one it picked, unless `quiet`.
 */
export async function initBackend(requested: string = chooseBackend().choice, { quiet = false }: { quiet?: boolean } = {}): Promise<Device> {
  // PROD only silences tfjs's console warnings (among them a banner on every cpu-backend start).
  tf.env().set('PROD', true);
  const choice = parseBackend(requested, 'backend');
  if (choice !== 'auto') {
    if (tf.getBackend() === choice) return currentDevice();
    const { ok, reason } = await tryLoad(choice);
    if (!ok) throw new Error(`backend '${choice}' cannot be loaded: ${reason}`);
    return currentDevice();
  }
  const skipped: string[] = [];
  for (const name of AUTO_ORDER) {
    const { ok, reason } = await tryLoad(name);
    if (ok) {
      if (!quiet) {
        const why = skipped.length ? ` (skipped ${skipped.join('; ')})` : '';
        process.stderr.write(`[slayformer] backend auto → ${name}${why}\n`);
      }
      return currentDevice();
    }
    skipped.push(`${name}: ${reason}`);
  }
  throw new Error(`no TensorFlow.js backend could be loaded: ${skipped.join('; ')}`);
}
