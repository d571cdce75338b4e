// The SLAY paper's small model for the synthetic tasks: token embedding + learned position
// embedding → numLayers residual blocks h ← h + Attn(h) (no MLP, no LayerNorm) → linear head with
// bias. Activations stay 2-D [B·T, d] between blocks so every projection is one plain 2-D product
// (matMul2d: the fast path on wasm), as in src/model/transformer.ts.
//
// Initialisation follows PyTorch's defaults, which the reference model used: embeddings N(0, 1),
// linear layers (weight and bias) U(−1/√in, 1/√in).
import * as tf from '@tensorflow/tfjs';
import { createAttention } from '../model/attention/index.ts';
import type { AttentionModule } from '../model/attention/index.ts';
import { matMul2d } from '../model/ops.ts';
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

export class TaskModel {
  readonly config: TaskModelConfig;
  /** The model's own parameters by stable name (weights stored [in, out]). */
  readonly weights = new Map<string, tf.Variable>();
  readonly attention: AttentionModule[] = [];
  private readonly headDim: number;

  constructor(config: TaskModelConfig) {
    const { vocabSize, seqLen, dModel: d, numHeads, numLayers } = config;
    for (const [key, value] of Object.entries({ vocabSize, seqLen, dModel: d, numHeads, numLayers })) {
      if (!Number.isInteger(value) || value < 1) throw new Error(`task model: ${key} must be an integer ≥ 1 (got ${value})`);
    }
    if (d % numHeads !== 0) throw new Error(`task model: dModel (${d}) must be divisible by numHeads (${numHeads})`);
    this.config = config;
    this.headDim = d / numHeads;
    try {
      this.parameter('embed.tokens.weight', [vocabSize, d], { kind: 'normal', std: 1 });
      // Only rows < seqLen are ever read, so the table has seqLen rows (the reference's 4096-row
      // table differs only in rows that never receive a gradient).
      this.parameter('embed.positions.weight', [seqLen, d], { kind: 'normal', std: 1 });
      const linear = (name: string, inDim: number, outDim: number) => {
        const bound = 1 / Math.sqrt(inDim);
        this.parameter(`${name}.weight`, [inDim, outDim], { kind: 'uniform', bound });
        this.parameter(`${name}.bias`, [outDim], { kind: 'uniform', bound });
      };
      for (let i = 0; i < numLayers; i++) {
        for (const part of ['q', 'k', 'v', 'out']) linear(`blocks.${i}.attn.${part}`, d, d);
        this.attention.push(
          createAttention(config.attention, {
            ...config.attentionOptions,
            numHeads,
            headDim: this.headDim,
            causal: true,
            seed: deriveSeed(config.seed, `blocks.${i}.attn`),
            scope: `blocks.${i}.attn`,
          }),
        );
      }
      linear('head', d, vocabSize);
    } catch (err) {
      this.dispose();
      throw err;
    }
  }

  private parameter(name: string, shape: number[], init: Init): void {
    const values = initialValues(shape, init, new Rng(deriveSeed(this.config.seed, name)));
    this.weights.set(name, tf.tidy(() => tf.variable(tf.tensor(values, shape, 'float32'), true, name)));
  }

  private w(name: string): tf.Variable {
    return this.weights.get(name)!;
  }

  /** Every trained variable by name: the model's own and the attention mechanisms' trainable ones. */
  trainableVariables(): Map<string, tf.Variable> {
    const all = new Map(this.weights);
    for (const module of this.attention) for (const v of module.trainableVariables) all.set(v.name, v);
    return all;
  }

  /** The attention mechanisms' fixed state (random projections, anchors), which a redraw changes. */
  buffers(): tf.Variable[] {
    return this.attention.flatMap((module) => module.buffers);
  }

  /** Number of trained scalars. */
  parameterCount(): number {
    let n = 0;
    for (const v of this.trainableVariables().values()) n += v.size;
    return n;
  }

  /** inputs [B, T] int32 → logits [B·T, vocabSize]. */
  logits(inputs: tf.Tensor2D): tf.Tensor2D {
    const [b, t] = inputs.shape;
    const { dModel: d, seqLen } = this.config;
    if (t !== seqLen) throw new Error(`task model: input length ${t} differs from the model's seqLen ${seqLen}`);
    const tokens = tf.gather(this.w('embed.tokens.weight'), tf.reshape(inputs, [-1]));
    const positions = this.w('embed.positions.weight');
    let h = tf.reshape(tf.add(tf.reshape(tokens, [b, t, d]), positions), [b * t, d]) as tf.Tensor2D;
    for (let i = 0; i < this.config.numLayers; i++) h = tf.add(h, this.attentionBlock(h, i, b, t));
    return tf.add(matMul2d(h, this.w('head.weight') as tf.Tensor2D), this.w('head.bias'));
  }

  private attentionBlock(x: tf.Tensor2D, i: number, b: number, t: number): tf.Tensor2D {
    const { dModel: d, numHeads: heads } = this.config;
    const p = `blocks.${i}.attn`;
    // q, k and v as one [d, 3d] product and one head transpose (fewer, larger kernels).
    const weight = tf.concat([this.w(`${p}.q.weight`), this.w(`${p}.k.weight`), this.w(`${p}.v.weight`)], 1) as tf.Tensor2D;
    const bias = tf.concat([this.w(`${p}.q.bias`), this.w(`${p}.k.bias`), this.w(`${p}.v.bias`)]);
    const qkv = tf.add(matMul2d(x, weight), bias);
    const split = tf.transpose(tf.reshape(qkv, [b, t, 3 * heads, this.headDim]), [0, 2, 1, 3]); // [B, 3H, T, Dh]
    const [q, k, v] = tf.split(split, 3, 1) as tf.Tensor4D[];
    const attended = this.attention[i].apply(q, k, v); // [B, H, T, Dh]
    const merged = tf.reshape(tf.transpose(attended, [0, 2, 1, 3]), [b * t, d]) as tf.Tensor2D;
    return tf.add(matMul2d(merged, this.w(`${p}.out.weight`) as tf.Tensor2D), this.w(`${p}.out.bias`));
  }

  dispose(): void {
    for (const v of this.weights.values()) v.dispose();
    this.weights.clear();
    for (const module of this.attention) module.dispose();
  }
}
