// Run-time choice of the TensorFlow.js backend.
//
//   tensorflow  @tensorflow/tfjs-node-gpu, else @tensorflow/tfjs-node (optional peers, absent on CPU hosts)
//   wasm        @tensorflow/tfjs-backend-wasm (SIMD, one thread under Node)
//   cpu         the pure-JS reference backend shipped with @tensorflow/tfjs
//   auto        the first of the above that loads
import * as tf from '@tensorflow/tfjs';

export const BACKENDS = ['auto', 'tensorflow', 'wasm', 'cpu'] as const;
export type BackendChoice = (typeof BACKENDS)[number];

export function parseBackend(value: string, source: string): BackendChoice {
  if ((BACKENDS as readonly string[]).includes(value)) return value as BackendChoice;
  throw new Error(`${source}: unknown backend '${value}'; allowed: ${BACKENDS.join(', ')}`);
}

/** Loads one concrete backend; returns false (with the reason) when it cannot be loaded here. */
async function tryLoad(name: Exclude<BackendChoice, 'auto'>): Promise<{ ok: boolean; reason?: string }> {
  try {
    if (name === 'tensorflow') {
      let loaded = false;
      const reasons: string[] = [];
      for (const pkg of ['@tensorflow/tfjs-node-gpu', '@tensorflow/tfjs-node']) {
        try {
          await import(pkg);
          loaded = true;
          break;
        } catch (err) {
          reasons.push(`${pkg}: ${(err as Error).message.split('\n')[0]}`);
        }
      }
      if (!loaded) return { ok: false, reason: reasons.join('; ') };
    } else if (name === 'wasm') {
      await import('@tensorflow/tfjs-backend-wasm');
    }
    if (!(await tf.setBackend(name))) return { ok: false, reason: `tf.setBackend('${name}') failed` };
    await tf.ready();
    if (name === 'wasm') registerWasmUnsortedSegmentSum();
    return { ok: true };
  } catch (err) {
    return { ok: false, reason: (err as Error).message.split('\n')[0] };
  }
}

/**
 * Selects and initialises the backend. `requested` defaults to $SLAYFORMER_BACKEND, then 'auto'.
 * Returns the name of the backend in use. With 'auto' it says on stderr which one it picked.
 */
export async function initBackend(
  requested: string = process.env.SLAYFORMER_BACKEND ?? 'auto',
  { quiet = false }: { quiet?: boolean } = {},
): Promise<string> {
  // PROD only silences tfjs's console warnings (among them a banner on every cpu-backend start).
  tf.env().set('PROD', true);
  const choice = parseBackend(requested, process.env.SLAYFORMER_BACKEND === requested ? 'SLAYFORMER_BACKEND' : '--backend');
  if (choice !== 'auto') {
    if (tf.getBackend() === choice) return choice;
    const { ok, reason } = await tryLoad(choice);
    if (!ok) throw new Error(`backend '${choice}' cannot be loaded: ${reason}`);
    return choice;
  }
  const skipped: string[] = [];
  for (const name of ['tensorflow', 'wasm', 'cpu'] as const) {
    const { ok, reason } = await tryLoad(name);
    if (ok) {
      if (!quiet) {
        const why = skipped.length ? ` (skipped ${skipped.join('; ')})` : '';
        process.stderr.write(`[slayformer] backend auto → ${name}${why}\n`);
      }
      return name;
    }
    skipped.push(`${name}: ${reason}`);
  }
  throw new Error(`no TensorFlow.js backend could be loaded: ${skipped.join('; ')}`);
}

let segmentSumRegistered = false;

/**
 * The wasm backend has no UnsortedSegmentSum kernel, which tf.gather's gradient (the embedding
 * backward pass) needs (tensorflow/tfjs#8082). Written by hand because no package provides it:
 * a plain scatter-add over the heap views, registered once for 'wasm'.
 */
function registerWasmUnsortedSegmentSum(): void {
  if (segmentSumRegistered || tf.getKernel('UnsortedSegmentSum', 'wasm')) return;
  segmentSumRegistered = true;
  tf.registerKernel({
    kernelName: 'UnsortedSegmentSum',
    backendName: 'wasm',
    kernelFunc: ({ inputs, backend, attrs }) => {
      const { x, segmentIds } = inputs as { x: tf.TensorInfo; segmentIds: tf.TensorInfo };
      const numSegments = (attrs as { numSegments: number }).numSegments;
      // The wasm backend's public surface is untyped here; these three methods are what a JS kernel needs.
      const be = backend as unknown as {
        readSync(id: object): ArrayLike<number>;
        makeOutput(shape: number[], dtype: string): tf.TensorInfo;
        typedArrayFromHeap(t: tf.TensorInfo): Float32Array | Int32Array;
      };
      const values = be.readSync(x.dataId);
      const ids = be.readSync(segmentIds.dataId);
      const inner = x.shape.slice(1).reduce((a, b) => a * b, 1);
      const out = be.makeOutput([numSegments, ...x.shape.slice(1)], x.dtype);
      const outValues = be.typedArrayFromHeap(out);
      outValues.fill(0);
      for (let i = 0; i < ids.length; i++) {
        const s = ids[i];
        if (s < 0 || s >= numSegments) continue;
        const o = s * inner;
        const xi = i * inner;
        for (let j = 0; j < inner; j++) outValues[o + j] += values[xi + j];
      }
      return out;
    },
  });
}
