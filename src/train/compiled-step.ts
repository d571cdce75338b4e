// What trains and validates, run as TensorFlow functions where the backend can (backend/tf-graph.ts,
// docs/graph-functions.md) and eagerly everywhere else: a micro-batch's loss and gradients, and
// validation's sums. The functions' inputs are the batch tensors (and the loss divisor and dropout
// seed) and every model tensor (parameters and buffers, so that updates, redraws and finetune
// freezing reach them); anything else they read is checked to be constant by recording twice.
import * as tf from '@tensorflow/tfjs';
import { composedFormsKey, hasFusedKernel, STATELESS_UNIFORM } from '../backend/fused-kernels.ts';
import { currentDevice } from '../backend/current.ts';
import { GraphCache } from '../backend/tf-graph.ts';
import { dropoutSeedTensor } from '../model/layers.ts';
import type { EvalSums, StepModel, LossInputs, ModelBatch, PositionBuckets } from '../model/lm.ts';

/** A model's training-step functions, and its validation functions (a BERT validation set brings row counts of its own). */
const stepGraphs = new WeakMap<StepModel, GraphCache>();
const evalGraphs = new WeakMap<StepModel, GraphCache>();

/** The model's cache in `caches`, made on first use and freed with the model. */
function graphsOf(model: StepModel, caches = stepGraphs): GraphCache {
  let graphs = caches.get(model);
  if (!graphs) {
    const created = new GraphCache();
    model.onDispose(() => created.dispose());
    caches.set(model, (graphs = created));
  }
  return graphs;
}

/**
 * The value of `loss` and its gradients with respect to `variables` (in their order), as a graph
 * function under `key` of `cache` where the backend can (null = eagerly). Feeds: `batch`, then `state`,
 * every tensor the computation reads whose value may change between calls (parameters, buffers), so
 * that updates, redraws and freezing reach the graph; the key must name whatever else changes the
 * program (shapes, which variables train). Call inside tf.tidy.
 */
export function gradientsThroughGraph(
  cache: GraphCache | null,
  key: string,
  batch: readonly tf.Tensor[],
  state: readonly tf.Tensor[],
  variables: tf.Variable[],
  loss: () => tf.Scalar,
  jit = false,
): { value: tf.Scalar; grads: Record<string, tf.Tensor> } {
  const eager = () => tf.variableGrads(loss, variables);
  if (!cache) return eager();
  let names: string[] = [];
  const [value, ...grads] = cache.call(
    key,
    [...batch, ...state],
    () => {
      const out = eager();
      names = Object.keys(out.grads);
      gradNames.set(cache, { ...gradNames.get(cache), [key]: names });
      return [out.value, ...names.map((n) => out.grads[n])];
    },
    jit,
  );
  names = gradNames.get(cache)![key];
  return { value: value as tf.Scalar, grads: Object.fromEntries(names.map((n, i) => [n, grads[i]])) };
}

/** Names of the gradients each key's program returns, in output order (a variable no path reaches has none). */
const gradNames = new WeakMap<GraphCache, Record<string, string[]>>();

/**
 * ∇(lossSum(batch) / total) with respect to `variables`, and that loss. `graph`: run it as a graph
 * function where the backend supports it (`jit`: compiled by TensorFlow's XLA JIT); the dropout seed is then a tensor
 * input of the graph (the backend draws the masks from it: DropoutSource). Call inside tf.tidy.
 */
export function microBatchGradients(
  model: StepModel,
  batch: ModelBatch,
  dropoutSeed: number | null,
  total: number,
  variables: tf.Variable[],
  graph: boolean,
  jit = false,
): { value: tf.Scalar; grads: Record<string, tf.Tensor> } {
  const dropout = dropoutSeed !== null && model.dropout > 0;
  const asGraph = graph && currentDevice().graphSteps && (!dropout || hasFusedKernel(STATELESS_UNIFORM));
  const inputs = model.lossInputs(batch, asGraph ? ROW_BUCKET : 1);
  const divisor = tf.scalar(total);
  const seedTensor = asGraph && dropout ? dropoutSeedTensor(dropoutSeed!) : null;
  const loss = () => tf.div(inputs ? model.lossOf(inputs, seedTensor ?? dropoutSeed) : tf.scalar(0), divisor) as tf.Scalar;
  if (!asGraph || !inputs) return tf.variableGrads(loss, variables);
  const batchTensors = [...LOSS_INPUT_FIELDS.flatMap((f) => inputs[f] ?? []), ...(seedTensor ? [seedTensor] : []), divisor];
  const modelTensors = [...model.parameters().values(), ...model.buffers().values()];
  return gradientsThroughGraph(graphsOf(model), stepKey(inputs, variables, seedTensor !== null), batchTensors, modelTensors, variables, loss, jit);
}

/**
 * Validation's sums of one batch (Σ cross-entropy, Σ correct top-1, labelled count; see
 * StepModel.evalSums; with `positions`, also Σ cross-entropy per position bucket) as a forward-only TensorFlow
 * function where the backend can (`graph`: train.graph), eagerly elsewhere. Call inside tf.tidy.
 */
export function evalSumsThroughGraph(model: StepModel, batch: ModelBatch, graph: boolean, positions?: PositionBuckets): EvalSums & { count: number } {
  if (!positions && (!graph || !currentDevice().graphSteps)) return model.evalSums(batch);
  const asGraph = graph && currentDevice().graphSteps;
  const inputs = model.lossInputs(batch, asGraph ? ROW_BUCKET : 1);
  if (!inputs) return { loss: tf.scalar(0), correct: tf.scalar(0), ...(positions ? { byPosition: tf.zeros([positions.count]) } : {}), count: 0 };
  if (!asGraph) return { ...model.evalSumsOf(inputs, positions), count: inputs.count };
  const batchTensors = [...LOSS_INPUT_FIELDS.flatMap((f) => inputs[f] ?? []), ...(positions ? [positions.bucketOf] : [])];
  const modelTensors = [...model.parameters().values(), ...model.buffers().values()];
  const key = `${shapesKey(inputs)}${positions ? `|positions ${positions.bucketOf.shape[0]}→${positions.count}` : ''}`;
  const [loss, correct, byPosition] = graphsOf(model, evalGraphs).call(key, [...batchTensors, ...modelTensors], () => {
    const sums = model.evalSumsOf(inputs, positions);
    return [sums.loss, sums.correct, ...(sums.byPosition ? [sums.byPosition] : [])];
  });
  return { loss: loss as tf.Scalar, correct: correct as tf.Scalar, ...(byPosition ? { byPosition: byPosition as tf.Tensor1D } : {}), count: inputs.count };
}

/**
 * Labelled rows are padded to a multiple of this in graph steps (LanguageModel.lossInputs), so that
 * BERT batches, whose count of masked positions varies (~15% ± a few of B·L), share a few shapes.
 */
export const ROW_BUCKET = 64;

/** The tensors of LossInputs, in the order the graph takes them. */
export const LOSS_INPUT_FIELDS = ['ids', 'targets', 'rows', 'weights', 'mask', 'documents', 'documentPositions'] as const;

/** What a recorded program depends on besides tensor values: the batch shapes, which parameters train, dropout or not. */
export function stepKey(inputs: LossInputs, variables: tf.Variable[], dropout: boolean): string {
  return `${shapesKey(inputs)}|${variables.map((v) => v.name).join(',')}|${dropout ? 'dropout' : ''}`;
}

/** The shapes of the loss inputs, and whether the model runs its fused or composed forms (bench/paired.ts alternates them): what decides the recorded program. */
export function shapesKey(inputs: LossInputs): string {
  const named = LOSS_INPUT_FIELDS.filter((f) => inputs[f] || !NAMED_WHEN_PRESENT.has(f));
  return named.map((f) => inputs[f]?.shape.join('x') ?? '-').join(',') + composedFormsKey();
}

/** Fields a key names only when the batch has them (data.documentMask's): other keys stay those of compiled program folders written before. */
const NAMED_WHEN_PRESENT: ReadonlySet<string> = new Set(['documents', 'documentPositions']);

/** How the step with this batch would run now ('graph', 'not recorded', 'eager: …'), for logs and tests. */
export function graphStatus(model: StepModel, batch: ModelBatch, variables: tf.Variable[], dropout = false): string {
  if (!currentDevice().graphSteps) return 'eager: backend';
  const key = tf.tidy(() => {
    const inputs = model.lossInputs(batch, ROW_BUCKET);
    return inputs ? stepKey(inputs, variables, dropout && model.dropout > 0) : '';
  });
  return key ? graphsOf(model).status(key) : 'eager: no labelled position';
}
