// The native backend: @tensorflow/tfjs-node built from the TensorFlow wheel by `npm run setup:tensorflow`
// (src/backend/tensorflow.ts), else an installed @tensorflow/tfjs-node-gpu / tfjs-node. The library's
// thread pool takes every core; a GPU build computes on the GPU where the host has one.
import { selectTfBackend, type BackendEntry, type DeviceFacts } from '../entry.ts';

const PACKAGE = '@tensorflow/tfjs-node';

export const tensorflowBackend: BackendEntry<'tensorflow'> = {
  name: 'tensorflow',
  package: PACKAGE,
  priority: 30,
  probe(machine) {
    const build = machine.nativeBuild();
    if (build)
      return this.describe({
        source: `.cache/tensorflow (TensorFlow ${build.tensorflow}, ${build.gpu ? 'GPU' : 'CPU'} build)`,
        graphSteps: true,
        gpu: build.gpu,
      });
    const pkg = machine.nativePackage();
    // A stock tfjs-node binding has no TensorFlow functions (tf-graph.ts).
    return pkg ? this.describe({ source: pkg.name, graphSteps: false, gpu: pkg.gpu }) : undefined;
  },
  async load() {
    const [{ loadTensorflowPackage, tensorflowInfo }, { graphsAvailable }] = await Promise.all([import('../tensorflow.ts'), import('../tf-graph.ts')]);
    const failure = loadTensorflowPackage();
    if (failure) throw new Error(failure);
    await selectTfBackend('tensorflow');
    // What loaded, as the binding reports it: a GPU build on a host without a GPU computes on the CPU.
    const info = tensorflowInfo();
    return this.describe({
      source: `${info.package} (TensorFlow ${info.tensorflow}, ${info.gpu ? 'GPU' : 'CPU'})`,
      graphSteps: graphsAvailable(),
      gpu: info.gpu,
    });
  },
  describe: (facts: DeviceFacts = {}) => ({
    backend: 'tensorflow',
    source: facts.source ?? PACKAGE,
    native: true,
    graphSteps: facts.graphSteps ?? false,
    cpuBound: facts.gpu !== true,
    coresPerReplica: 'all',
    kernels: { plainProductsOnly: false, wholeSequenceValues: 2 ** 26 },
  }),
};
