// The device of the running backend: the one place that asks tfjs which backend runs. Code that cannot
// be handed the device as a value (kernels deep in the model, a worker's set-up) asks currentDevice().
import * as tf from '@tensorflow/tfjs';
import { BACKENDS, describeDevice, type BackendName, type Device } from './device.ts';
import { tensorflowInfo } from './tensorflow.ts';
import { graphsAvailable } from './tf-graph.ts';

let described: Device | undefined;

/** The running backend's description (cached: kernels ask it for every product). */
export function currentDevice(): Device {
  const name = tf.getBackend();
  if (described?.backend !== name) described = describeRunning(name);
  return described;
}

/** The same, or null before any backend started (where currentDevice() would start tfjs's default one), for records. */
export function runningDevice(): Device | null {
  return tf.engine().backendName ? currentDevice() : null;
}

function describeRunning(name: string): Device {
  if (!(BACKENDS as readonly string[]).includes(name) || name === 'auto') throw new Error(`the running TensorFlow.js backend '${name}' is none of ${BACKENDS.slice(1).join(', ')}`);
  if (name !== 'tensorflow') return describeDevice(name as BackendName);
  // What loaded, as the binding reports it: a GPU build on a host without a GPU computes on the CPU.
  const info = tensorflowInfo();
  return describeDevice('tensorflow', { source: `${info.package} (TensorFlow ${info.tensorflow}, ${info.gpu ? 'GPU' : 'CPU'})`, graphSteps: graphsAvailable(), gpu: info.gpu });
}
