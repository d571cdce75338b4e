// One micro-batch's loss and gradients, run as a TensorFlow graph where the backend can
// (backend/tf-graph.ts) and eagerly everywhere else. The graph's inputs are the batch tensors, the
// loss divisor and every model tensor (parameters and buffers, so that updates, redraws and
// finetune freezing reach it); anything else it reads is checked to be constant by recording two
// steps before the graph is built.
import * as tf from '@tensorflow/tfjs';
import { GraphCache, graphsAvailable } from '../backend/tf-graph.ts';
import type { LanguageModel, LossInputs, ModelBatch } from '../model/lm.ts';

interface ModelGraphs {
  cache: GraphCache;
  /** Names of the gradients each key's program returns, in output order. */
  gradNames: Map<string, string[]>;
}

const graphsByModel = new WeakMap<LanguageModel, ModelGraphs>();

function graphsOf(model: LanguageModel): ModelGraphs {
  let graphs = graphsByModel.get(model);
  if (!graphs) {
    const created: ModelGraphs = { cache: new GraphCache(), gradNames: new Map() };
    model.onDispose(() => created.cache.dispose());
    graphsByModel.set(model, (graphs = created));
  }
  return graphs;
}

/**
 * ∇(lossSum(batch) / total) with respect to `variables`, and that loss. `graph`: run it as a graph
 * when the backend supports it and the step draws no dropout mask (masks are drawn in JavaScript,
 * so a recorded program would freeze one). Call inside tf.tidy.
 */
export function microBatchGradients(
  model: LanguageModel,
  batch: ModelBatch,
  dropoutSeed: number | null,
  total: number,
  variables: tf.Variable[],
  graph: boolean,
): { value: tf.Scalar; grads: Record<string, tf.Tensor> } {
  const asGraph = graph && (dropoutSeed === null || model.config.dropout === 0) && graphsAvailable();
  const inputs = model.lossInputs(batch, asGraph ? ROW_BUCKET : 1);
  const divisor = tf.scalar(total);
  const eager = () => tf.variableGrads(() => tf.div(inputs ? model.lossOf(inputs, dropoutSeed) : tf.scalar(0), divisor) as tf.Scalar, variables);
  if (!asGraph || !inputs) return eager();
  const graphs = graphsOf(model);
  const batchTensors = batchTensorsOf(inputs);
  const modelTensors = [...model.parameters().values(), ...model.buffers().values()];
  const key = stepKey(inputs, variables);
  const outputs = graphs.cache.call(key, [...batchTensors, divisor, ...modelTensors], () => {
    const { value, grads } = eager();
    const names = Object.keys(grads);
    graphs.gradNames.set(key, names);
    return [value, ...names.map((n) => grads[n])];
  });
  const names = graphs.gradNames.get(key)!;
  return { value: outputs[0] as tf.Scalar, grads: Object.fromEntries(names.map((n, i) => [n, outputs[i + 1]])) };
}

/**
 * Labelled rows are padded to a multiple of this in graph steps (LanguageModel.lossInputs), so that
 * BERT batches, whose count of masked positions varies (~15% ± a few of B·L), share a few shapes.
 */
const ROW_BUCKET = 64;

const batchTensorsOf = (inputs: LossInputs) => [inputs.ids, inputs.targets, inputs.rows, inputs.weights, inputs.mask].filter((t) => t !== undefined);

/** What a recorded program depends on besides tensor values: the batch shapes and which parameters train. */
function stepKey(inputs: LossInputs, variables: tf.Variable[]): string {
  const shapes = [inputs.ids, inputs.targets, inputs.rows, inputs.weights, inputs.mask].map((t) => (t ? t.shape.join('x') : '-'));
  return `${shapes.join(',')}|${variables.map((v) => v.name).join(',')}`;
}

/** How the step with this batch would run now ('graph', 'recording', 'eager: …'), for logs and tests. */
export function graphStatus(model: LanguageModel, batch: ModelBatch, variables: tf.Variable[]): string {
  if (!graphsAvailable()) return 'eager: backend';
  const key = tf.tidy(() => {
    const inputs = model.lossInputs(batch, ROW_BUCKET);
    return inputs ? stepKey(inputs, variables) : '';
  });
  return key ? graphsOf(model).cache.status(key) : 'eager: no labelled position';
}
