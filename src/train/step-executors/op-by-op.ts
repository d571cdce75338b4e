// Every op of the step dispatched from JavaScript as it runs, AdamW's update included (its plan's update is
// op-by-op): what tfjs does on every backend, and the only way wasm and cpu run. Also the reference the other
// executors are tested against, so it records nothing.
import type { StepExecutorEntry } from '../step-executor.ts';
import { InProcessExecutor } from './in-process.ts';

class OpByOpExecutor extends InProcessExecutor {
  readonly name = 'op-by-op';

  // The run's first lines already say the backend; op by op is what every backend does without more.
  describe(): null {
    return null;
  }
}

export const opByOp: StepExecutorEntry = {
  name: 'op-by-op',
  summary: 'every op dispatched from JavaScript (any backend; the reference)',
  create: async (context) => new OpByOpExecutor(context),
};
