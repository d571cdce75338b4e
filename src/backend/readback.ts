// What JavaScript reads back from the native backend's tensors. Every dataSync()/data() of a
// tensorflow-backend tensor is one tensorDataSync call of the binding; on a GPU it is a device → host
// copy. A training step should read a handful of scalars (loss, gradient norm), whatever the model's
// size: this meter makes that observable (trainer log, bench:train --json, test/backend/readback.test.ts).
import * as tf from '@tensorflow/tfjs';
import { currentDevice } from './current.ts';

/** Reads since the meter was installed: calls, values (elements) and bytes. */
export interface Readback {
  reads: number;
  values: number;
  bytes: number;
}

const totals: Readback = { reads: 0, values: 0, bytes: 0 };
const metered = new WeakSet<object>();

interface MeteredBackend {
  binding: { tensorDataSync(id: number): ArrayBufferView & { length: number } };
}

/**
 * The reads so far on the native backend (zeros elsewhere: wasm and cpu tensors live in JavaScript's
 * memory). The first call installs the meter: the backend is given a counting view of its binding,
 * as tf-graph.ts's recorder does (the binding's own properties are read-only).
 */
export function readback(): Readback {
  if (currentDevice().native) {
    const backend = tf.backend() as unknown as MeteredBackend;
    if (!metered.has(backend.binding)) {
      const binding = backend.binding;
      const view = Object.create(binding) as MeteredBackend['binding'];
      Object.defineProperty(view, 'tensorDataSync', {
        value: (id: number) => {
          const data = binding.tensorDataSync(id);
          totals.reads += 1;
          totals.values += data.length;
          totals.bytes += data.byteLength;
          return data;
        },
      });
      metered.add(view);
      backend.binding = view;
    }
  }
  return { ...totals };
}

/** What was read between two readings of the meter. */
export function readSince(before: Readback): Readback {
  const now = readback();
  return { reads: now.reads - before.reads, values: now.values - before.values, bytes: now.bytes - before.bytes };
}
