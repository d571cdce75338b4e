// The pure-JavaScript reference backend shipped with @tensorflow/tfjs: always there, the slowest.
import { selectTfBackend, type BackendEntry, type DeviceFacts } from '../entry.ts';

const PACKAGE = '@tensorflow/tfjs (pure JavaScript)';

export const cpuBackend: BackendEntry<'cpu'> = {
  name: 'cpu',
  package: PACKAGE,
  priority: 10,
  probe() {
    return this.describe();
  },
  async load() {
    await selectTfBackend('cpu');
    return this.describe();
  },
  describe: (facts: DeviceFacts = {}) => ({
    backend: 'cpu',
    source: facts.source ?? PACKAGE,
    native: false,
    graphSteps: false,
    cpuBound: true,
    coresPerReplica: 1,
    kernels: { plainProductsOnly: false, wholeSequenceValues: 2 ** 22 },
  }),
};
