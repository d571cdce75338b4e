// One micro-batch's loss and gradients, run as a TensorFlow graph where the backend can
// (backend/tf-graph.ts) and eagerly everywhere else. The graph's inputs are the batch tensors, the
// loss divisor, the dropout seed and every model tensor (parameters and buffers, so that updates,
// redraws and finetune freezing reach it); anything else it reads is checked to be constant by
// recording two steps before the graph is built.
import * as tf from '@tensorflow/tfjs';
import { hasFusedKernel, STATELESS_UNIFORM } from '../backend/fused-kernels.ts';
import { GraphCache, graphsAvailable } from '../backend/tf-graph.ts';
import { dropoutSeedTensor } from '../model/transformer.ts';
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
 * function where the backend supports it (`xla`: compiled by XLA); the dropout seed is then a tensor
 * input of the graph (the backend draws the masks from it: DropoutSource). Call inside tf.tidy.
 */
export function microBatchGradients(
  model: LanguageModel,
  batch: ModelBatch,
  dropoutSeed: number | null,
  total: number,
  variables: tf.Variable[],
  graph: boolean,
  xla = false,
): { value: tf.Scalar; grads: Record<string, tf.Tensor> } {
  const dropout = dropoutSeed !== null && model.config.dropout > 0;
  const asGraph = graph && graphsAvailable() && (!dropout || hasFusedKernel(STATELESS_UNIFORM));
  const inputs = model.lossInputs(batch, asGraph ? ROW_BUCKET : 1);
  const divisor = tf.scalar(total);
  const seedTensor = asGraph && dropout ? dropoutSeedTensor(dropoutSeed!) : null;
  const eager = () => tf.variableGrads(() => tf.div(inputs ? model.lossOf(inputs, seedTensor ?? dropoutSeed) : tf.scalar(0), divisor) as tf.Scalar, variables);
  if (!asGraph || !inputs) return eager();
  const graphs = graphsOf(model);
  const batchTensors = [...LOSS_INPUT_FIELDS.flatMap((f) => inputs[f] ?? []), ...(seedTensor ? [seedTensor] : [])];
  const modelTensors = [...model.parameters().values(), ...model.buffers().values()];
  const key = stepKey(inputs, variables, seedTensor !== null);
  const outputs = graphs.cache.call(key, [...batchTensors, divisor, ...modelTensors], () => {
    const { value, grads } = eager();
    const names = Object.keys(grads);
    graphs.gradNames.set(key, names);
    return [value, ...names.map((n) => grads[n])];
  }, xla);
  const names = graphs.gradNames.get(key)!;
  return { value: outputs[0] as tf.Scalar, grads: Object.fromEntries(names.map((n, i) => [n, outputs[i + 1]])) };
}

/**
 * Labelled rows are padded to a multiple of this in graph steps (LanguageModel.lossInputs), so that
 * BERT batches, whose count of masked positions varies (~15% ± a few of B·L), share a few shapes.
 */
const ROW_BUCKET = 64;

/** The tensors of LossInputs, in the order the graph takes them. */
const LOSS_INPUT_FIELDS = ['ids', 'targets', 'rows', 'weights', 'mask'] as const;

/** What a recorded program depends on besides tensor values: the batch shapes, which parameters train, dropout or not. */
function stepKey(inputs: LossInputs, variables: tf.Variable[], dropout: boolean): string {
  const shapes = LOSS_INPUT_FIELDS.map((f) => inputs[f]?.shape.join('x') ?? '-');
  return `${shapes.join(',')}|${variables.map((v) => v.name).join(',')}|${dropout ? 'dropout' : ''}`;
}

/** How the step with this batch would run now ('graph', 'recording', 'eager: …'), for logs and tests. */
export function graphStatus(model: LanguageModel, batch: ModelBatch, variables: tf.Variable[], dropout = false): string {
  if (!graphsAvailable()) return 'eager: backend';
  const key = tf.tidy(() => {
    const inputs = model.lossInputs(batch, ROW_BUCKET);
    return inputs ? stepKey(inputs, variables, dropout && model.config.dropout > 0) : '';
  });
  return key ? graphsOf(model).cache.status(key) : 'eager: no labelled position';
}
