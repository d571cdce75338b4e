// The SLAY paper's small model for the synthetic tasks: token embedding + learned position
// embedding → numLayers residual blocks h ← h + Attn(h) (no MLP, no LayerNorm) → linear head with
// bias. The attention block is the GPT's and BERT's (src/model/layers.ts, multiHeadAttention), on
// activations kept 2-D [B·T, d] between blocks as there. It trains through the training step
// (src/train/step.ts) as a StepModel: a batch's labels are the task's targets where its mask scores.
//
// Initialisation follows PyTorch's defaults, which the reference model used: embeddings N(0, 1),
// linear layers (weight and bias) U(−1/√in, 1/√in).
import * as tf from '@tensorflow/tfjs';
import { createAttention } from '../model/attention/index.ts';
import type { AttentionModule } from '../model/attention/index.ts';
import { ATTENTION_PROJECTIONS, linear, multiHeadAttention } from '../model/layers.ts';
import { crossEntropySum, evalSumsOfLogits, IGNORE_LABEL } from '../model/lm.ts';
import type { EvalSums, LossInputs, ModelBatch, PositionBuckets, StepModel } from '../model/lm.ts';
import { deriveSeed, Rng } from '../core/rng.ts';

export interface TaskModelConfig {
  vocabSize: number;
  seqLen: number;
  /** Width E (paper: 64). */
  dModel: number;
  numHeads: number;
  numLayers: number;
  attention: string;
  attentionOptions: Record<string, unknown>;
  /** Seeds the initialisation (each tensor from its own name) and the attention mechanisms. */
  seed: number;
}

export const PAPER_TASK_MODEL = { dModel: 64, numHeads: 4, numLayers: 2 } as const;

type Init = { kind: 'normal'; std: number } | { kind: 'uniform'; bound: number };

function initialValues(shape: number[], init: Init, rng: Rng): Float32Array {
  const values = new Float32Array(shape.reduce((a, b) => a * b, 1));
  for (let i = 0; i < values.length; i++) {
    values[i] = init.kind === 'normal' ? rng.normal() * init.std : (2 * rng.uniform() - 1) * init.bound;
  }
  return values;
}

export class TaskModel implements StepModel {
  readonly config: TaskModelConfig;
  /** The paper's model has no dropout. */
  readonly dropout = 0;
  /** The model's own parameters by stable name (weights stored [in, out]). */
  readonly weights = new Map<string, tf.Variable>();
  readonly attention: AttentionModule[] = [];
  private readonly cleanups: Array<() => void> = [];

  constructor(config: TaskModelConfig) {
    const { vocabSize, seqLen, dModel: d, numHeads, numLayers } = config;
    for (const [key, value] of Object.entries({ vocabSize, seqLen, dModel: d, numHeads, numLayers })) {
      if (!Number.isInteger(value) || value < 1) throw new Error(`task model: ${key} must be an integer ≥ 1 (got ${value})`);
    }
    if (d % numHeads !== 0) throw new Error(`task model: dModel (${d}) must be divisible by numHeads (${numHeads})`);
    this.config = config;
    try {
      this.parameter('embed.tokens.weight', [vocabSize, d], { kind: 'normal', std: 1 });
      // Only rows < seqLen are ever read, so the table has seqLen rows (the reference's 4096-row
      // table differs only in rows that never receive a gradient).
      this.parameter('embed.positions.weight', [seqLen, d], { kind: 'normal', std: 1 });
      const linearLayer = (name: string, inDim: number, outDim: number) => {
        const bound = 1 / Math.sqrt(inDim);
        this.parameter(`${name}.weight`, [inDim, outDim], { kind: 'uniform', bound });
        this.parameter(`${name}.bias`, [outDim], { kind: 'uniform', bound });
      };
      for (let i = 0; i < numLayers; i++) {
        for (const projection of ATTENTION_PROJECTIONS) linearLayer(`blocks.${i}.attn.${projection}`, d, d);
        this.attention.push(
          createAttention(config.attention, {
            ...config.attentionOptions,
            numHeads,
            headDim: d / numHeads,
            causal: true,
            seed: deriveSeed(config.seed, `blocks.${i}.attn`),
            scope: `blocks.${i}.attn`,
          }),
        );
      }
      linearLayer('head', d, vocabSize);
    } catch (err) {
      this.dispose();
      throw err;
    }
  }

  private parameter(name: string, shape: number[], init: Init): void {
    const values = initialValues(shape, init, new Rng(deriveSeed(this.config.seed, name)));
    this.weights.set(
      name,
      tf.tidy(() => tf.variable(tf.tensor(values, shape, 'float32'), true, name)),
    );
  }

  private w(name: string): tf.Variable {
    return this.weights.get(name)!;
  }

  /** Every trained variable by name: the model's own and the attention mechanisms' trainable ones. */
  parameters(): Map<string, tf.Variable> {
    const all = new Map(this.weights);
    for (const module of this.attention) for (const v of module.trainableVariables) all.set(v.name, v);
    return all;
  }

  /** The attention mechanisms' fixed state (random projections, anchors), which a redraw changes. */
  buffers(): Map<string, tf.Variable> {
    return new Map(this.attention.flatMap((module) => module.buffers.map((v) => [v.name, v] as const)));
  }

  /** Number of trained scalars. */
  parameterCount(): number {
    let n = 0;
    for (const v of this.parameters().values()) n += v.size;
    return n;
  }

  /** inputs [B, T] int32 → logits [B·T, vocabSize]. */
  logits(inputs: tf.Tensor2D): tf.Tensor2D {
    const [b, t] = inputs.shape;
    const { dModel: d, numHeads, seqLen } = this.config;
    if (t !== seqLen) throw new Error(`task model: input length ${t} differs from the model's seqLen ${seqLen}`);
    const tokens = tf.gather(this.w('embed.tokens.weight'), tf.reshape(inputs, [-1]));
    const positions = this.w('embed.positions.weight');
    let h = tf.reshape(tf.add(tf.reshape(tokens, [b, t, d]), positions), [b * t, d]) as tf.Tensor2D;
    const param = (name: string) => this.w(name);
    for (let i = 0; i < this.config.numLayers; i++) {
      h = tf.add(
        h,
        multiHeadAttention(h, t, numHeads, `blocks.${i}.attn`, param, true, (q, k, v) => this.attention[i].apply(q, k, v)),
      );
    }
    return linear(h, this.w('head.weight') as tf.Tensor2D, this.w('head.bias') as tf.Tensor1D);
  }

  /**
   * The batch uploaded: ids [B, T], and for every position its target and weight (1 = scored, 0 = not;
   * an unscored position's target is 0 and counts for nothing). Every position keeps its row, so the
   * shapes are the task's whatever it scores (`rowBucket` has nothing to pad).
   */
  lossInputs(batch: ModelBatch): LossInputs | null {
    const { batchSize: b, seqLen: t, inputIds, labels } = batch;
    const { vocabSize } = this.config;
    const targets = new Int32Array(labels.length);
    const weights = new Float32Array(labels.length);
    let count = 0;
    for (let i = 0; i < labels.length; i++) {
      if (labels[i] === IGNORE_LABEL) continue;
      if (!(labels[i] >= 0 && labels[i] < vocabSize))
        throw new Error(`task batch: label ${labels[i]} at position ${i} is outside the vocabulary [0, ${vocabSize})`);
      targets[i] = labels[i];
      weights[i] = 1;
      count++;
    }
    if (count === 0) return null;
    return { ids: tf.tensor2d(inputIds, [b, t], 'int32'), targets: tf.tensor1d(targets, 'int32'), weights: tf.tensor1d(weights), count };
  }

  /** Σ of the cross-entropy over the scored positions (the model has no dropout). */
  lossOf(inputs: LossInputs): tf.Scalar {
    return crossEntropySum(this.logits(inputs.ids), inputs.targets, inputs.weights);
  }

  evalSums(batch: ModelBatch): { loss: tf.Scalar; correct: tf.Scalar; count: number } {
    const inputs = this.lossInputs(batch);
    if (!inputs) return { loss: tf.scalar(0), correct: tf.scalar(0), count: 0 };
    return { ...this.evalSumsOf(inputs), count: inputs.count };
  }

  /** Summed loss and correct top-1 count over the scored positions (and the loss by position bucket given `positions`). */
  evalSumsOf(inputs: LossInputs, positions?: PositionBuckets): EvalSums {
    return evalSumsOfLogits(this.logits(inputs.ids), inputs, positions);
  }

  onTrainStep(step: number): void {
    for (const module of this.attention) module.onTrainStep?.(step);
  }

  onDispose(cleanup: () => void): void {
    this.cleanups.push(cleanup);
  }

  dispose(): void {
    for (const cleanup of this.cleanups.splice(0)) cleanup();
    for (const v of this.weights.values()) v.dispose();
    this.weights.clear();
    for (const module of this.attention) module.dispose();
  }
}
