// @tensorflow/tfjs-backend-wasm: XNNPACK kernels with SIMD, one thread under Node, in a 4 GB heap;
// src/backend/wasm-kernels.ts adds the kernels it lacks.
import { selectTfBackend, type BackendEntry, type DeviceFacts } from '../entry.ts';

const PACKAGE = '@tensorflow/tfjs-backend-wasm';

export const wasmBackend: BackendEntry<'wasm'> = {
  name: 'wasm',
  package: PACKAGE,
  priority: 20,
  probe(machine) {
    return machine.installed(PACKAGE) ? this.describe() : undefined;
  },
  async load() {
    await import('@tensorflow/tfjs-backend-wasm');
    await selectTfBackend('wasm');
    const { patchWasmKernels } = await import('../wasm-kernels.ts');
    patchWasmKernels();
    return this.describe();
  },
  describe: (facts: DeviceFacts = {}) => ({
    backend: 'wasm',
    source: facts.source ?? PACKAGE,
    native: false,
    graphSteps: false,
    cpuBound: true,
    coresPerReplica: 1,
    kernels: { plainProductsOnly: true, wholeSequenceValues: 2 ** 22 },
  }),
};
