// Language models on the shared transformer body:
//   GPT   causal attention, LM head tied to the token embedding (logits = h·Eᵀ)
//   BERT  bidirectional attention with a padding key mask, MLM head as BERT's
//         (dense + GELU + LayerNorm, then the tied decoder h·Eᵀ plus an output bias)
// The architecture options (transformer.ts) apply to both: BERT as Hugging Face's takes post-LN
// blocks, the embedding LayerNorm, token types, erf GELU and ε 1e-12.
import * as tf from '@tensorflow/tfjs';
import { attentionSeed, createParameter, featureSeedOf, transformerParameterSpecs, validateTransformerConfig, Transformer, INIT_STD } from './transformer.ts';
import type { AttendFn, ParameterSpec, ParameterStart, TransformerConfig } from './transformer.ts';
import { activate, layerNorm, linear, linearTransposed } from './layers.ts';
import type { DropoutSeed } from './layers.ts';
import { attentionTensors } from './attention/index.ts';
import { explicitTransposes } from './ops.ts';
import { tiedHeadCrossEntropySum } from './tied-head-loss.ts';
import { fusedFormsEnabled } from '../backend/fused-kernels.ts';

export type ModelKind = 'gpt' | 'bert';

export interface LanguageModelConfig extends Omit<TransformerConfig, 'causal'> {
  kind: ModelKind;
}

/** The host-side shape of one batch the model needs (a subset of the data stream's Batch). */
export interface ModelBatch {
  batchSize: number;
  seqLen: number;
  inputIds: Int32Array;
  /** -100 where no loss. */
  labels: Int32Array;
  attentionMask?: Float32Array;
  /**
   * Document masking (data.documentMask): each position's document [B·L], equal along a document, different at a
   * boundary; attention stays within documents and positions restart at each (docs/attention.md).
   */
  documentIds?: Int32Array;
}

export const IGNORE_LABEL = -100;

/**
 * A batch's document ids [B·L] as the model takes them: per row, the number of boundaries before each position (so
 * ids are ≥ 0 and non-decreasing whatever the ids given) and each position's index within its document.
 */
export function documentLayout(documentIds: Int32Array, batchSize: number, seqLen: number): { ids: Float32Array; positions: Float32Array } {
  if (documentIds.length !== batchSize * seqLen) {
    throw new Error(`batch documentIds has ${documentIds.length} entries, expected batchSize × seqLen = ${batchSize * seqLen}`);
  }
  const ids = new Float32Array(documentIds.length);
  const positions = new Float32Array(documentIds.length);
  for (let r = 0; r < batchSize; r++) {
    let document = 0;
    let position = 0;
    for (let t = 0; t < seqLen; t++) {
      const i = r * seqLen + t;
      if (t > 0 && documentIds[i] !== documentIds[i - 1]) {
        document++;
        position = 0;
      }
      ids[i] = document;
      positions[i] = position++;
    }
  }
  return { ids, positions };
}

/**
 * A batch as tensors (LanguageModel.lossInputs): token ids [B, L], targets of the labelled rows,
 * their row indices (absent when every row is labelled), BERT's key mask [B, L], and when the rows
 * are padded to a bucket, weights [rows] (1 = labelled, 0 = padding).
 */
export interface LossInputs {
  ids: tf.Tensor2D;
  targets: tf.Tensor1D;
  rows?: tf.Tensor1D;
  weights?: tf.Tensor1D;
  mask?: tf.Tensor2D;
  /** Document masking: each position's document and its index within it, [B, L] float32 (documentLayout). */
  documents?: tf.Tensor2D;
  documentPositions?: tf.Tensor2D;
  /** Labelled rows (padding not counted). */
  count: number;
}

/** Position buckets of a [B, L] batch: `bucketOf` [B·L] int32, the bucket (0 … count−1) of each flat position. */
export interface PositionBuckets {
  bucketOf: tf.Tensor1D;
  count: number;
}

/** Validation's sums of a batch's labelled rows; `byPosition` [buckets] when PositionBuckets were given. */
export interface EvalSums {
  loss: tf.Scalar;
  correct: tf.Scalar;
  byPosition?: tf.Tensor1D;
}

/**
 * What a training step and validation need from a model (src/train/step.ts, compiled-step.ts, evaluate.ts), so
 * that the step is written once for the language models and the synthetic tasks' model (src/paper/task-model.ts):
 * its tensors by name, a batch uploaded as LossInputs, the summed loss and validation's sums of those inputs.
 */
export interface StepModel {
  /** Rate of the dropout a step's seed drives (0 = none: the step then passes no seed). */
  readonly dropout: number;
  /** Every trained parameter by stable name. */
  parameters(): Map<string, tf.Variable>;
  /** Fixed, non-trained state a redraw may change (random projections): inputs of a recorded step. */
  buffers(): Map<string, tf.Variable>;
  /** The batch checked and uploaded (null when no position is labelled); `rowBucket` as LanguageModel.lossInputs. */
  lossInputs(batch: ModelBatch, rowBucket?: number): LossInputs | null;
  /** Σ of the cross-entropy over the labelled rows of `inputs`. */
  lossOf(inputs: LossInputs, dropoutSeed?: DropoutSeed): tf.Scalar;
  /** Validation's sums of a batch, no dropout: Σ cross-entropy, Σ correct top-1, labelled count. */
  evalSums(batch: ModelBatch): { loss: tf.Scalar; correct: tf.Scalar; count: number };
  /** evalSums over the rows of `inputs`; with `positions`, also Σ cross-entropy per position bucket. */
  evalSumsOf(inputs: LossInputs, positions?: PositionBuckets): EvalSums;
  /** Lets mechanisms with a redraw schedule redraw (once per optimizer step). */
  onTrainStep(step: number): void;
  /** Runs `cleanup` when the model is disposed (e.g. to free the functions recorded for it). */
  onDispose(cleanup: () => void): void;
}

export function headParameterSpecs(c: LanguageModelConfig): ParameterSpec[] {
  if (c.kind === 'gpt') return [];
  const d = c.dModel;
  return [
    { name: 'mlm.dense.weight', shape: [d, d], init: { kind: 'normal', std: INIT_STD } },
    { name: 'mlm.dense.bias', shape: [d], init: { kind: 'zeros' } },
    { name: 'mlm.norm.weight', shape: [d], init: { kind: 'ones' } },
    { name: 'mlm.norm.bias', shape: [d], init: { kind: 'zeros' } },
    { name: 'mlm.decoder.bias', shape: [c.vocabSize], init: { kind: 'zeros' } },
  ];
}

/** Every parameter the model creates (body and head; the attention mechanisms add theirs). */
export function languageModelParameterSpecs(c: LanguageModelConfig): ParameterSpec[] {
  return [...transformerParameterSpecs(bodyConfig(c)), ...headParameterSpecs(c)];
}

/**
 * Name → shape of the attention mechanisms' own tensors (trainable and buffers) in every layer, as the registry
 * declares them for that layer's seed — nothing allocated or drawn. Some shapes are drawn (SchoenbAt's Maclaurin
 * degrees), so one layer's do not stand for another's.
 */
export function attentionTensorShapes(c: LanguageModelConfig): Map<string, number[]> {
  const body = bodyConfig(c);
  const out = new Map<string, number[]>();
  for (let i = 0; i < c.numLayers; i++) {
    const declared = attentionTensors(c.attention.name, {
      ...c.attention.options,
      numHeads: c.numHeads,
      headDim: c.dModel / c.numHeads,
      causal: body.causal,
      seed: attentionSeed(featureSeedOf(c), i),
    });
    for (const { name, shape } of declared) out.set(`blocks.${i}.attn.${name}`, shape);
  }
  return out;
}

function bodyConfig(c: LanguageModelConfig): TransformerConfig {
  if (c.kind !== 'gpt' && c.kind !== 'bert') throw new Error(`model.kind must be 'gpt' or 'bert' (got ${String(c.kind)})`);
  return { ...c, causal: c.kind === 'gpt' };
}

/**
 * Parameter count without allocating the model (for --dry-run of large recipes): the body and head
 * specs plus the attention mechanisms' trainable tensors as their registry entries declare them.
 */
export function countParameters(c: LanguageModelConfig): { total: number; byGroup: Record<string, number> } {
  const body = bodyConfig(c);
  validateTransformerConfig(body);
  const size = (shape: number[]) => shape.reduce((a, b) => a * b, 1);
  const byGroup: Record<string, number> = { embeddings: 0, blocks: 0, head: 0, attentionMechanism: 0 };
  for (const s of languageModelParameterSpecs(c)) {
    const group = s.name.startsWith('embed.') ? 'embeddings' : s.name.startsWith('blocks.') ? 'blocks' : 'head';
    byGroup[group] += size(s.shape);
  }
  // Trainable shapes do not depend on the seed (only SchoenbAt's buffer does): one layer stands for all.
  const mechanism = attentionTensors(c.attention.name, { ...c.attention.options, numHeads: c.numHeads, headDim: c.dModel / c.numHeads, causal: body.causal });
  byGroup.attentionMechanism = c.numLayers * mechanism.filter((t) => t.trainable).reduce((n, t) => n + size(t.shape), 0);
  return { total: Object.values(byGroup).reduce((a, b) => a + b, 0), byGroup };
}

/** Per row −log softmax(logits)[target] [N], and what the gradient reuses: exp(x − max), their sums, the (row, target) pairs. */
function crossEntropyRows(logits: tf.Tensor2D, targets: tf.Tensor1D): { losses: tf.Tensor1D; exps: tf.Tensor2D; sums: tf.Tensor1D; at: tf.Tensor2D } {
  const n = logits.shape[0];
  const max = tf.max(logits, -1, true); // [N, 1]
  const exps = tf.exp(tf.sub(logits, max)) as tf.Tensor2D;
  const sums = tf.sum(exps, -1) as tf.Tensor1D; // [N]
  const at = tf.stack([tf.range(0, n, 1, 'int32'), targets], 1) as tf.Tensor2D; // [N, 2]: (row, target)
  const losses = tf.sub(tf.add(tf.log(sums), tf.reshape(max, [-1])), tf.gatherND(logits, at)) as tf.Tensor1D;
  return { losses, exps, sums, at };
}

/**
 * Σ_rows weight·(−log softmax(logits)[target]), with a hand-written gradient (weight·dy)·(softmax − onehot).
 * Forward, stably: m = max, e = exp(x − m), s = Σe, loss = log s + m − x[target]. Backward: one broadcast multiply
 * e·(weight·dy / s) over [N, V] and the N target entries corrected in place (tensorScatterUpdate), so no [N, V]
 * one-hot and no autodiff chain through logSoftmax. Written with tf ops on every backend: on the native one this
 * composition ran at half the time of TensorFlow's own SparseSoftmaxCrossEntropyWithLogits in a training step
 * (docs/graph-functions.md, "Where the step's time goes").
 */
const weightedCrossEntropySum = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [logits, targets, weights, save] = args as [tf.Tensor2D, tf.Tensor1D, tf.Tensor1D, tf.GradSaveFunc];
  const n = logits.shape[0];
  const { losses, exps, sums, at } = crossEntropyRows(logits, targets);
  save([exps, sums, at, weights]);
  return {
    value: tf.sum(tf.mul(losses, weights)),
    gradFunc: (dy: tf.Tensor, [savedExps, savedSums, savedAt, savedWeights]: tf.Tensor[]) => {
      const scale = tf.mul(savedWeights, dy); // [N]
      const scaled = tf.mul(savedExps, tf.reshape(tf.div(scale, savedSums), [-1, 1]));
      const corrected = tf.sub(tf.gatherND(scaled, savedAt), scale);
      return [tf.tensorScatterUpdate(scaled, savedAt, corrected), tf.zeros([n], 'int32'), tf.zerosLike(savedWeights)];
    },
  };
}) as (logits: tf.Tensor2D, targets: tf.Tensor1D, weights: tf.Tensor1D) => tf.Scalar;

/** Σ over rows of −log softmax(logits)[target], × weights when given (rows of weight 0 are padding: LanguageModel.lossInputs' row buckets). */
export function crossEntropySum(logits: tf.Tensor2D, targets: tf.Tensor1D, weights?: tf.Tensor1D): tf.Scalar {
  return weightedCrossEntropySum(logits, targets, weights ?? tf.ones([logits.shape[0]]));
}

/**
 * Validation's sums from the logits of the labelled rows of `inputs`: Σ cross-entropy, Σ correct top-1 and, given
 * `positions`, Σ cross-entropy per position bucket. The loss is the same ops as crossEntropySum's forward, so its value
 * does not depend on whether the buckets are asked for.
 */
export function evalSumsOfLogits(logits: tf.Tensor2D, inputs: LossInputs, positions?: PositionBuckets): EvalSums {
  const hits = tf.cast(tf.equal(tf.argMax(logits, -1), inputs.targets), 'float32');
  const correct = tf.sum(inputs.weights ? tf.mul(hits, inputs.weights) : hits) as tf.Scalar;
  if (!positions) return { loss: crossEntropySum(logits, inputs.targets, inputs.weights), correct };
  const weighted = tf.mul(crossEntropyRows(logits, inputs.targets).losses, inputs.weights ?? tf.ones([logits.shape[0]]));
  // Row j is the flat position rows[j] of the [B, L] batch, or j itself when every position is a row (lossInputs).
  const flat = inputs.rows ?? tf.range(0, logits.shape[0], 1, 'int32');
  const byPosition = tf.unsortedSegmentSum(weighted, tf.gather(positions.bucketOf, flat), positions.count) as tf.Tensor1D;
  return { loss: tf.sum(weighted) as tf.Scalar, correct, byPosition };
}

export class LanguageModel implements StepModel {
  readonly kind: ModelKind;
  readonly config: LanguageModelConfig;
  readonly body: Transformer;
  private readonly head: Map<string, tf.Variable>;
  private readonly cleanups: Array<() => void> = [];

  /** `start: 'zeros'` for a model whose parameters are then all loaded (the attention mechanisms' own still start at their init). */
  constructor(config: LanguageModelConfig, start: ParameterStart = 'random') {
    this.kind = config.kind;
    this.config = config;
    this.body = new Transformer(bodyConfig(config), start);
    this.head = new Map();
    for (const spec of headParameterSpecs(config)) this.head.set(spec.name, createParameter(spec, config.seed, start));
  }

  get dropout(): number {
    return this.config.dropout;
  }

  /** Every trained parameter by stable name (the safetensors tensor names), mechanisms' included. */
  parameters(): Map<string, tf.Variable> {
    const all = new Map<string, tf.Variable>(this.body.weights);
    for (const [name, v] of this.head) all.set(name, v);
    for (const mech of this.body.attention) for (const v of mech.trainableVariables) all.set(v.name, v);
    return all;
  }

  /** The attention mechanisms' fixed, non-trained state (random projections), saved with the model. */
  buffers(): Map<string, tf.Variable> {
    const all = new Map<string, tf.Variable>();
    for (const mech of this.body.attention) for (const v of mech.buffers) all.set(v.name, v);
    return all;
  }

  /** Lets mechanisms with a redraw schedule redraw (once per optimizer step). */
  onTrainStep(step: number): void {
    for (const mech of this.body.attention) mech.onTrainStep?.(step);
  }

  private hidden(inputs: Pick<LossInputs, 'ids' | 'mask' | 'documents' | 'documentPositions'>, dropoutSeed: DropoutSeed): tf.Tensor2D {
    const { ids, mask, documents, documentPositions } = inputs;
    return this.body.forward(ids, {
      keyMask: this.kind === 'bert' ? mask : undefined,
      documents: documents && documentPositions && { ids: documents, positions: documentPositions },
      dropoutSeed,
    });
  }

  /** Output head on rows of hidden states [N, d] → logits [N, V]. */
  private headLogits(h: tf.Tensor2D): tf.Tensor2D {
    const { input, embedding, bias } = this.decoderInputs(h);
    // The tied decoder x·Eᵀ: on wasm E is transposed once so that linear() runs the plain 2-D product
    // (XNNPACK); elsewhere MatMul's transpose flag does it, forward and backward, without a copy.
    return explicitTransposes() ? linear(input, tf.transpose(embedding), bias) : linearTransposed(input, embedding, bias);
  }

  /** What the tied decoder multiplies: the rows (BERT: after its dense + GELU + LayerNorm transform), E, and BERT's output bias. */
  private decoderInputs(h: tf.Tensor2D): { input: tf.Tensor2D; embedding: tf.Tensor2D; bias?: tf.Tensor1D } {
    const embedding = this.body.w('embed.tokens.weight') as tf.Tensor2D;
    if (this.kind === 'gpt') return { input: h, embedding };
    const get = (n: string) => this.head.get(n)!;
    const { activation, layerNormEps } = this.body.architecture;
    let t = linear(h, get('mlm.dense.weight') as tf.Tensor2D, get('mlm.dense.bias') as tf.Tensor1D);
    t = layerNorm(activate(t, activation), get('mlm.norm.weight') as tf.Tensor1D, get('mlm.norm.bias') as tf.Tensor1D, layerNormEps);
    return { input: t, embedding, bias: get('mlm.decoder.bias') as tf.Tensor1D };
  }

  /** Logits at every position, no dropout: inputIds [B, L] → [B, L, V]. */
  logits(inputIds: tf.Tensor2D, attentionMask?: tf.Tensor2D): tf.Tensor3D {
    return tf.tidy(() => {
      const [b, l] = inputIds.shape;
      return tf.reshape(this.headLogits(this.hidden({ ids: inputIds, mask: attentionMask }, null)), [b, l, this.config.vocabSize]) as tf.Tensor3D;
    });
  }

  /**
   * GPT decoding: next-token logits [B, V] after tokens inputIds [B, n] at positions position …
   * position+n−1 (the head runs on the last one only), each layer's attention given by `attend` (the
   * mechanisms' step; see decode.ts).
   */
  stepLogits(inputIds: tf.Tensor2D, position: number, attend: AttendFn): tf.Tensor2D {
    if (this.kind !== 'gpt') throw new Error(`incremental decoding needs a GPT (causal) model; this one is '${this.kind}'`);
    return tf.tidy(() => {
      const [b, n] = inputIds.shape;
      const hidden = this.body.forwardAt(inputIds, position, attend);
      const last = n === 1 ? hidden : (tf.reshape(tf.slice(tf.reshape(hidden, [b, n, -1]), [0, n - 1, 0], [b, 1, -1]), [b, -1]) as tf.Tensor2D);
      return this.headLogits(last);
    });
  }

  /**
   * Σ over labelled positions of the cross-entropy in nats (a scalar tensor) and the number of labelled
   * positions. The head runs only on labelled rows (BERT: ~15% of them). Call inside tf.tidy or
   * tf.variableGrads; `dropoutSeed` null = no dropout.
   */
  lossSum(batch: ModelBatch, dropoutSeed: DropoutSeed = null): { loss: tf.Scalar; count: number } {
    const inputs = this.lossInputs(batch);
    return { loss: inputs ? this.lossOf(inputs, dropoutSeed) : tf.scalar(0), count: inputs?.count ?? 0 };
  }

  /**
   * Validation's sums over the labelled positions, no dropout: Σ cross-entropy in nats and the number
   * of positions whose highest logit is the target (top-1 accuracy's numerator: next-token for GPT,
   * masked-token for BERT), both from the same logits of the same rows. Call inside tf.tidy.
   */
  evalSums(batch: ModelBatch): { loss: tf.Scalar; correct: tf.Scalar; count: number } {
    const inputs = this.lossInputs(batch);
    if (!inputs) return { loss: tf.scalar(0), correct: tf.scalar(0), count: 0 };
    return { ...this.evalSumsOf(inputs), count: inputs.count };
  }

  /** evalSums over the rows of `inputs` (see lossInputs; weight-0 padding rows count for nothing), by position bucket given `positions`. */
  evalSumsOf(inputs: LossInputs, positions?: PositionBuckets): EvalSums {
    let h = this.hidden(inputs, null);
    if (inputs.rows) h = tf.gather(h, inputs.rows);
    return evalSumsOfLogits(this.headLogits(h), inputs, positions);
  }

  /**
   * The batch checked against the vocabulary and uploaded: what lossOf reads (null when no position
   * is labelled). Kept apart from lossOf so that a compiled step can take these tensors as its
   * inputs. `rowBucket` > 1 pads a partial set of labelled rows (BERT's masked positions) with
   * weight-0 rows to a multiple of it, so that the tensor shapes repeat from batch to batch.
   */
  lossInputs(batch: ModelBatch, rowBucket = 1): LossInputs | null {
    const { batchSize: b, seqLen: l } = batch;
    const rows: number[] = [];
    const targets: number[] = [];
    for (let i = 0; i < batch.labels.length; i++) {
      const label = batch.labels[i];
      if (label === IGNORE_LABEL) continue;
      if (label < 0 || label >= this.config.vocabSize) {
        throw new Error(`batch label ${label} at position ${i} is outside the vocabulary [0, ${this.config.vocabSize})`);
      }
      rows.push(i);
      targets.push(label);
    }
    for (let i = 0; i < batch.inputIds.length; i++) {
      const id = batch.inputIds[i];
      if (!(id >= 0 && id < this.config.vocabSize)) {
        throw new Error(`batch input id ${id} at position ${i} is outside the vocabulary [0, ${this.config.vocabSize})`);
      }
    }
    const count = rows.length;
    if (count === 0) return null;
    const documents = batch.documentIds && documentLayout(batch.documentIds, b, l);
    const padded = count < b * l && rowBucket > 1 ? Math.min(b * l, Math.ceil(count / rowBucket) * rowBucket) : count;
    const weights = padded > count ? Array.from({ length: padded }, (_, i) => (i < count ? 1 : 0)) : null;
    while (rows.length < padded) {
      rows.push(0);
      targets.push(0);
    }
    return {
      ids: tf.tensor2d(batch.inputIds, [b, l], 'int32'),
      targets: tf.tensor1d(targets, 'int32'),
      ...(count < b * l ? { rows: tf.tensor1d(rows, 'int32') } : {}),
      ...(weights ? { weights: tf.tensor1d(weights) } : {}),
      ...(batch.attentionMask ? { mask: tf.tensor2d(batch.attentionMask, [b, l]) } : {}),
      ...(documents ? { documents: tf.tensor2d(documents.ids, [b, l]), documentPositions: tf.tensor2d(documents.positions, [b, l]) } : {}),
      count,
    };
  }

  /** Σ of the cross-entropy over the labelled rows of `inputs` (see lossInputs). */
  lossOf(inputs: LossInputs, dropoutSeed: DropoutSeed = null): tf.Scalar {
    let h = this.hidden(inputs, dropoutSeed);
    if (inputs.rows) h = tf.gather(h, inputs.rows);
    if (!fusedFormsEnabled()) return crossEntropySum(this.headLogits(h), inputs.targets, inputs.weights);
    // The decoder and its loss as one function with one gradient: fewer [N, V] ops (tied-head-loss.ts).
    const { input, embedding, bias } = this.decoderInputs(h);
    return tiedHeadCrossEntropySum(input, embedding, inputs.targets, inputs.weights, bias);
  }

  /** Runs `cleanup` when the model is disposed (e.g. to free graphs built for it). */
  onDispose(cleanup: () => void): void {
    this.cleanups.push(cleanup);
  }

  dispose(): void {
    for (const cleanup of this.cleanups.splice(0)) cleanup();
    this.body.dispose();
    for (const v of this.head.values()) v.dispose();
    this.head.clear();
  }
}

export function createLanguageModel(config: LanguageModelConfig, start: ParameterStart = 'random'): LanguageModel {
  return new LanguageModel(config, start);
}
