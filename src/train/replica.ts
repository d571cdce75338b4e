// A data-parallel replica (see data-parallel.ts), run in a worker thread by replica-worker.mjs: builds
// the model from the main thread's config on its own backend instance, takes the weights it is sent
// and answers each step with the sum of its shards' gradients, packed in the order asked for.
import { parentPort, workerData } from 'node:worker_threads';
import * as tf from '@tensorflow/tfjs';
import { initBackend } from '../backend/start.ts';
import type { BackendName } from '../backend/device.ts';
import { createLanguageModel } from '../model/lm.ts';
import type { LanguageModelConfig } from '../model/lm.ts';
import { packTensors, unpackTensors } from './data-parallel.ts';
import type { ReplicaReply, ReplicaRequest } from './data-parallel.ts';
import { graphStatus } from './compiled-step.ts';
import { accumulateGradients } from './step.ts';

// The main thread's running backend (data-parallel.ts): every replica computes on the same one.
const { config, backend } = workerData as { config: LanguageModelConfig; backend: BackendName };
const port = parentPort!;
const reply = (message: ReplicaReply, transfer: ArrayBuffer[] = []) => port.postMessage(message, transfer);

try {
  await initBackend(backend, { quiet: true });
  const model = createLanguageModel(config);
  const tensors = new Map([...model.parameters(), ...model.buffers()]);

  const assign = (names: string[], values: Float32Array) => {
    const targets = names.map((n) => {
      const v = tensors.get(n);
      if (!v) throw new Error(`no tensor named '${n}' in the replica`);
      return v;
    });
    tf.tidy(() =>
      unpackTensors(
        values,
        targets.map((v) => v.shape),
      ).forEach((t, i) => targets[i].assign(t)),
    );
  };

  port.on('message', (message: ReplicaRequest) => {
    try {
      assign(message.names, message.values);
      if (message.type === 'weights') return;
      const variables = message.gradNames.map((n) => tensors.get(n)!);
      const { grads, loss } = accumulateGradients(model, message.batches, message.seeds, message.total, variables, message.graph, message.jit);
      let values: Float32Array;
      let lossValue: number;
      try {
        values = packTensors(message.gradNames.map((n) => grads.get(n)!));
        lossValue = loss.dataSync()[0];
      } finally {
        tf.dispose([...grads.values(), loss]);
      }
      const execution = graphStatus(model, message.batches[0], variables, message.seeds[0] !== null);
      reply({ type: 'grads', id: message.id, values, loss: lossValue, tensors: tf.memory().numTensors, execution }, [values.buffer as ArrayBuffer]);
    } catch (err) {
      reply({ type: 'error', message: err instanceof Error ? err.message : String(err) });
    }
  });
  reply({ type: 'ready' });
} catch (err) {
  reply({ type: 'error', message: `start failed: ${err instanceof Error ? err.message : String(err)}` });
}
