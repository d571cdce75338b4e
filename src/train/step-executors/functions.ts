// The step recorded once and run as TensorFlow functions on the native backend's device
// (backend/tf-graph.ts, docs/graph-functions.md): gradients of each micro-batch shape, and AdamW's
// update, each one call. A shape whose recording cannot become a function runs op by op and the
// first step's log line says why.
import { graphDevice } from '../../backend/tf-graph.ts';
import type { ModelBatch } from '../../model/lm.ts';
import { graphStatus } from '../compiled-step.ts';
import type { StepExecutorEntry } from '../step-executor.ts';
import { InProcessExecutor } from './in-process.ts';

class FunctionsExecutor extends InProcessExecutor {
  readonly name = 'functions';

  describe(firstBatch: ModelBatch): string {
    const { model, trainable, plan } = this.context;
    const variables = [...(trainable ?? model.parameters()).values()];
    const status = graphStatus(model, firstBatch, variables, model.dropout > 0);
    if (!status.startsWith('graph')) return `train.graph: steps run op by op (${status.replace(/^eager: /, '')})`;
    return `train.graph: steps run as TensorFlow functions${plan.jit ? ' compiled by XLA' : ''} on ${graphDevice()}${status.slice('graph'.length)}`;
  }
}

export const functions: StepExecutorEntry = {
  name: 'functions',
  summary: 'the step recorded once and run as TensorFlow functions (tensorflow backend, CPU or GPU)',
  create: async (context) => new FunctionsExecutor(context),
};
