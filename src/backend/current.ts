// The device of the running backend, for the code that cannot be handed it as a value: the model's kernels
// (ops.ts, linear-attention.ts, the dropout check in transformer.ts) and readback metering, which run deep
// under every op. Everything else is handed the device its command started (docs/layout.md).
import * as tf from '@tensorflow/tfjs';
import { backendEntry, BACKENDS, type BackendName } from './device.ts';
import type { Device } from './entry.ts';

/** The devices started (start.ts), by backend name: each as its entry's load described it. */
const started = new Map<string, Device<string>>();

/** Keeps `device` as the description of its backend while that backend runs. */
export function rememberStarted<D extends Device<string>>(device: D): D {
  started.set(device.backend, device);
  return device;
}

/** The running backend's description (kept: kernels ask it for every product). */
export function currentDevice(): Device<BackendName> {
  const name = tf.getBackend();
  // A backend tfjs started by itself (no initBackend) is described from its entry.
  const device = started.get(name) ?? rememberStarted(describeUnstarted(name));
  return device as Device<BackendName>;
}

/** The same, or null before any backend started (where currentDevice() would start tfjs's default one), for records. */
export function runningDevice(): Device<BackendName> | null {
  return tf.engine().backendName ? currentDevice() : null;
}

function describeUnstarted(name: string): Device<BackendName> {
  if (!(BACKENDS as readonly string[]).includes(name) || name === 'auto')
    throw new Error(`the running TensorFlow.js backend '${name}' is none of ${BACKENDS.slice(1).join(', ')}`);
  return backendEntry(name as BackendName).describe();
}
