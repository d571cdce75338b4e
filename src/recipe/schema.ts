// THE recipe schema: plain YAML data validated against ONE declarative table (RECIPE_SCHEMA). Validation and defaults
// (load.ts), command-line overrides and docs/recipes.md (docs.ts) all derive from that table, so adding a key (e.g.
// the fine-tuning section) means adding one row to it and one field to `Recipe`.
import path from 'node:path';
import { ACTIVATIONS } from '../model/layers.ts';
import type { Activation } from '../model/layers.ts';
import { MLP_KINDS, NORM_KINDS, NORM_POSITIONS, POSITIONALS } from '../model/transformer.ts';
import type { MlpKind, NormKind, Positional } from '../model/transformer.ts';
import { BOUNDS, MAX_RANKS } from '../core/bounds.ts';
import { setPath } from '../core/json.ts';
import { DEFAULT_EVAL_TOKENS, EVAL_SAMPLES, SEQ_LEN_RULE, seqLenProblem } from '../data/batch.ts';
import type { EvalSampleKind } from '../data/batch.ts';
import { BACKENDS, type BackendChoice } from '../backend/device.ts';
import { freezeProblem } from './freeze.ts';
import type { FreezeSpec } from './freeze.ts';

export interface Recipe {
  name: string; // defaults to the recipe file's base name
  backend: BackendChoice;
  initFrom: string | null;
  model: {
    kind: 'gpt' | 'bert';
    dModel: number;
    numLayers: number;
    numHeads: number;
    mlpRatio: number;
    dropout: number;
    maxSeqLen: number;
    bias: boolean;
    normPosition: (typeof NORM_POSITIONS)[number];
    embeddingNorm: boolean;
    typeVocabSize: number;
    activation: Activation;
    layerNormEps: number;
    positional: Positional;
    ropeTheta: number;
    mlp: MlpKind;
    norm: NormKind;
    attention: { name: string; options: Record<string, unknown> };
    featureSeed: number | null;
    preset: ModelPreset | null;
  };
  data: {
    dataset: string;
    textColumn: string;
    tokenizer: string;
    seqLen: number;
    shuffleBuffer: number;
    readAhead: number;
    mlmProbability: number;
    documentMask: boolean;
  };
  train: {
    batchSize: number;
    gradAccum: number;
    dataParallel: number | 'auto';
    devices: number | 'all';
    processes: number;
    joinTimeout: number;
    shardOptimizer: boolean;
    graph: boolean;
    executor: 'auto' | 'op-by-op' | 'functions' | 'replicas' | 'collective' | 'xla';
    xla: 'auto' | 'on' | 'off';
    remat: boolean;
    precision: 'fp32' | 'bf16';
    attentionKernel: 'composed' | 'fused';
    optimizer: 'adamw';
    lr: number;
    minLr: number;
    schedule: 'cosine' | 'linear' | 'constant';
    warmupSteps: number;
    warmupFraction: number | null;
    weightDecay: number;
    beta1: number;
    beta2: number;
    eps: number;
    decayEmbeddings: boolean;
    clip: number;
    freeze: FreezeSpec;
    seed: number;
    maxTokens: number | null;
    evalInterval: number;
    evalTokens: number;
    evalSample: EvalSampleKind;
    estimatorHealth: boolean;
    logInterval: number;
    checkpointInterval: number;
    keepCheckpoints: number;
    nanPolicy: 'stop' | 'skip';
    nanSkipLimit: number;
    runDir: string;
  };
  wandb: { enabled: boolean | 'auto'; project: string; entity: string | null; runName: string | null };
  tensorboard: { enabled: boolean };
}

// The sections by name: a part that reads one or two sections takes those, not the recipe (docs/layout.md, "Recipe
// and store"); the whole `Recipe` is for the modules that handle it as a document.
export type ModelSection = Recipe['model'];
export type DataSection = Recipe['data'];
export type TrainSection = Recipe['train'];
export type WandbSection = Recipe['wandb'];
/** The sections a run's model, batches and steps come from: no name, backend, initFrom or telemetry. */
export type RunSections = Pick<Recipe, 'model' | 'data' | 'train'>;

/** Dotted paths of the leaves of T ("train.lr", "model.attention.options"); a string-indexed record is a leaf. */
type LeafPaths<T, Prefix extends string = ''> = {
  [K in keyof T & string]: T[K] extends Record<string, unknown>
    ? string extends keyof T[K]
      ? `${Prefix}${K}`
      : LeafPaths<T[K], `${Prefix}${K}.`>
    : `${Prefix}${K}`;
}[keyof T & string];

export type RecipeKey = LeafPaths<Recipe>;

export type FieldType =
  | { kind: 'int'; min?: number; max?: number }
  | { kind: 'number'; min?: number; exclusiveMin?: number; max?: number; exclusiveMax?: number }
  | { kind: 'string'; path?: boolean } // path: resolved against the current working directory
  | { kind: 'enum'; values: readonly (string | boolean)[] }
  | { kind: 'bool' }
  | { kind: 'attentionName' } // any name in the attention registry
  | { kind: 'attentionOptions' } // a mapping checked against the registry's specs for model.attention.name
  // check: null = valid, else what the value must be; `given` reads another key's value as given (undefined: not given)
  | { kind: 'custom'; text: string; check(value: unknown, given: (key: string) => unknown): string | null };

/** A default computed from the rest of the recipe (documented by `doc`). */
export interface DerivedDefault {
  derived: string;
  compute(recipe: Recipe, file: string): unknown;
}
export const REQUIRED = Symbol('required');

export interface FieldSpec {
  type: FieldType;
  nullable?: boolean;
  default: unknown;
  doc: string;
}

/**
 * `model.preset`: one name for a set of architecture keys, so that a baseline reads as it is cited. `transformer++`
 * is the "Transformer++" of the linear-attention literature (Llama's choices: rotary positions, SwiGLU, RMSNorm, no
 * biases); `gpt2` is GPT-2's (the defaults), to name it explicitly or sweep the two. Keys the recipe gives win; the
 * values a preset sets are checked like the recipe's own (load.ts).
 */
export const MODEL_PRESETS = {
  gpt2: { 'model.positional': 'learned', 'model.mlp': 'gelu', 'model.norm': 'layernorm', 'model.bias': true },
  'transformer++': { 'model.positional': 'rope', 'model.mlp': 'swiglu', 'model.norm': 'rmsnorm', 'model.bias': false },
} as const satisfies Record<string, Record<`model.${string}`, string | boolean>>;
export type ModelPreset = keyof typeof MODEL_PRESETS;
export const PRESET_NAMES = Object.keys(MODEL_PRESETS) as ModelPreset[];

/** `key: value, …` of a preset, for docs and messages. */
export const presetText = (name: ModelPreset): string =>
  Object.entries(MODEL_PRESETS[name])
    .map(([key, value]) => `\`${key}: ${String(value)}\``)
    .join(', ');

/** Longest sequence a recipe may ask for (the bounds table, src/core/bounds.ts). */
const MAX_SEQ_LEN = BOUNDS.positions.max;

const derived = (doc: string, compute: DerivedDefault['compute']): DerivedDefault => ({ derived: doc, compute });
const int = (min?: number, max?: number): FieldType => ({ kind: 'int', min, max });
const num = (bounds: Omit<Extract<FieldType, { kind: 'number' }>, 'kind'> = {}): FieldType => ({ kind: 'number', ...bounds });
const str: FieldType = { kind: 'string' };
const filePath: FieldType = { kind: 'string', path: true };
const bool: FieldType = { kind: 'bool' };
const oneOf = (...values: (string | boolean)[]): FieldType => ({ kind: 'enum', values });

/**
 * THE recipe schema: every key, its type, default and meaning. Order = order of docs/recipes.md and of the
 * resolved config. `satisfies` makes the compiler check that it names every leaf of `Recipe` and nothing else.
 */
export const RECIPE_SCHEMA = {
  name: {
    type: str,
    default: derived("the recipe file's base name", (_r, file) => path.basename(file, path.extname(file))),
    doc: 'Run name; run folders are `<train.runDir>/<name>-<timestamp>/`. Command-line overrides of `model.*` keys add themselves to it (`gpt-softmax+attention=performer`, [training.md](training.md#run-names)), unless `--name` is given too.',
  },
  backend: {
    type: oneOf(...BACKENDS),
    default: 'auto',
    doc: "TensorFlow.js backend. `auto` = `tensorflow` where `npm run setup:tensorflow` has built it (or a tfjs-node package is installed), else `wasm`. `--backend` and `$SLAYFORMER_BACKEND` take precedence; the run's config.json records the backend it ran on.",
  },
  initFrom: {
    type: str,
    nullable: true,
    default: null,
    doc: "Finetune: start from these weights instead of a random init. A model folder (a run's `final/` or a checkpoint, holding `model.safetensors` and `recipe.json`), a run folder (its `final/`, else its newest checkpoint), `auto:<recipe name>` = the newest finished run `<train.runDir>/<name>-<timestamp>/final` that trained its recipe's budget (a run shortened with `--train.maxTokens` is passed over; the log says which run was chosen and why), or a Hugging Face GPT-2/BERT folder `hf:<folder>` (a folder whose `config.json` has a `model_type` is recognised without the prefix): its `config.json` sets every `model.*` key but `attention` and `dropout` (a recipe value that contradicts it is an error) and its `tokenizer.json` is the default `data.tokenizer`; relative paths against the working directory. `model.attention` may differ from the checkpoint's (its q/k/v/out weights are reused, the new mechanism's own parameters start at their init, its random projections come from `model.featureSeed`, else `train.seed`); every other `model.*` shape must match, and any tensor that cannot be mapped is an error naming it.",
  },

  'model.kind': { type: oneOf('gpt', 'bert'), default: 'gpt', doc: '`gpt`: causal language model; `bert`: masked language model (bidirectional attention).' },
  'model.dModel': { type: int(1, BOUNDS.width.max), default: 128, doc: 'Width of the residual stream; must be divisible by `model.numHeads`.' },
  'model.numLayers': { type: int(1, BOUNDS.layers.max), default: 4, doc: 'Number of transformer blocks.' },
  'model.numHeads': { type: int(1, BOUNDS.heads.max), default: 4, doc: 'Attention heads per block (head size = dModel / numHeads).' },
  'model.mlpRatio': { type: num({ exclusiveMin: 0, max: BOUNDS.mlpRatio.max }), default: 4, doc: 'MLP hidden width = mlpRatio × dModel.' },
  'model.dropout': { type: num({ min: 0, exclusiveMax: 1 }), default: 0, doc: 'Dropout probability (0 for small CPU demos; GPU recipes use 0.1).' },
  'model.maxSeqLen': {
    type: int(1, MAX_SEQ_LEN),
    default: derived('`data.seqLen`', (r) => r.data.seqLen),
    doc: 'Size of the position-embedding table; must be ≥ `data.seqLen`.',
  },
  'model.bias': { type: bool, default: true, doc: 'Biases in the linear layers.' },
  'model.normPosition': {
    type: oneOf(...NORM_POSITIONS),
    default: 'pre',
    doc: "Where each block's LayerNorms sit: `pre` = x + f(LN(x)) and a final LayerNorm (GPT-2); `post` = LN(x + f(x)), no final LayerNorm (BERT).",
  },
  'model.embeddingNorm': { type: bool, default: false, doc: 'A LayerNorm on the summed embeddings (BERT).' },
  'model.typeVocabSize': {
    type: int(0, BOUNDS.embeddingRows.max),
    default: 0,
    doc: 'Rows of a token-type (segment) embedding table (BERT: 2); every token is type 0, one segment per sequence. 0 = none.',
  },
  'model.activation': {
    type: oneOf(...ACTIVATIONS),
    default: 'gelu-tanh',
    doc: "Activation of the MLP and of BERT's MLM head: `gelu-tanh` (the tanh approximation, GPT-2's `gelu_new`) or `gelu-erf` (exact, BERT's `gelu`).",
  },
  'model.layerNormEps': { type: num({ exclusiveMin: 0 }), default: 1e-5, doc: 'ε of every LayerNorm or RMSNorm (GPT-2: 1e-5, BERT: 1e-12, Llama: 1e-6).' },
  'model.positional': {
    type: oneOf(...POSITIONALS),
    default: 'learned',
    doc: "Positions: `learned` = a position-embedding table of `model.maxSeqLen` rows added to the tokens (GPT-2, BERT); `rope` = rotary position embedding of each layer's queries and keys (Llama's half-split layout), applied before the mechanism — before a kernel mechanism's feature map, as flash-linear-attention does — and no table; the head size must be even.",
  },
  'model.ropeTheta': {
    type: num({ exclusiveMin: 0 }),
    default: 10000,
    doc: "Base θ of the rotary angles position·θ^(−2i/head size) (`model.positional: rope`; Hugging Face's `rope_theta`).",
  },
  'model.mlp': {
    type: oneOf(...MLP_KINDS),
    default: 'gelu',
    doc: "The MLP: `gelu` = proj(act(fc·x)) with `model.activation`; `swiglu` = proj(SiLU(gate·x) ⊙ fc·x) (Llama's; a third matrix, so `model.mlpRatio` 8/3 keeps the parameter count of ratio 4).",
  },
  'model.norm': {
    type: oneOf(...NORM_KINDS),
    default: 'layernorm',
    doc: "The body's norms: `layernorm` (a gain and a bias) or `rmsnorm` (x/√(mean(x²) + ε) times a gain, no bias; Llama's). BERT's MLM head keeps its LayerNorm.",
  },
  'model.attention.name': {
    type: { kind: 'attentionName' },
    default: 'softmax',
    doc: 'Attention mechanism, one of the registered names (see the table below).',
  },
  'model.attention.options': {
    type: { kind: 'attentionOptions' },
    default: {},
    doc: "Options of that mechanism (see the table below); the resolved recipe holds every option with the mechanism's defaults filled in.",
  },
  'model.featureSeed': {
    type: int(0),
    nullable: true,
    default: null,
    doc: "Seed of the attention mechanisms' random features alone (projections, anchors, Maclaurin draws), so that they can vary while the weights' initialisation, the data order and dropout (`train.seed`) stay fixed, and the reverse. `null` = drawn from `train.seed` as before this key existed (the same draws: old runs and checkpoints are unchanged). `compare` splits the seed variance between the two when runs vary both ([experiments.md](experiments.md)).",
  },
  'model.preset': {
    type: oneOf(...PRESET_NAMES),
    nullable: true,
    default: null,
    doc: `Sets several architecture keys in one line, for any mechanism and model kind: ${PRESET_NAMES.map((name) => `\`${name}\` = ${presetText(name)}`).join('; ')}. A key the recipe (or the command line) gives wins over its preset; the run's config.json records the preset and every key's resolved value. \`transformer++\` leaves \`model.mlpRatio\` as it is (8/3 matches the parameters of ratio 4 with GELU). \`null\` = none.`,
  },

  'data.dataset': {
    type: filePath,
    default: REQUIRED,
    doc: 'Dataset: a `save_to_disk` folder, a split folder, a folder of `.arrow` shards, or a glob such as `cache/c4-train-*.arrow`.',
  },
  'data.textColumn': { type: str, default: 'text', doc: 'Name of the text column in the Arrow shards.' },
  'data.tokenizer': { type: filePath, default: REQUIRED, doc: 'Path to a `tokenizer.json` (Hugging Face tokenizers format).' },
  'data.seqLen': {
    type: { kind: 'custom', text: SEQ_LEN_RULE, check: (v, given) => seqLenProblem(v, given('model.kind') === 'bert' ? 'bert' : 'gpt') },
    default: 128,
    doc: 'Tokens per training sequence.',
  },
  'data.shuffleBuffer': { type: int(0, 1_000_000), default: 1024, doc: 'Sequences held for the bounded shuffle of the training stream (0 = no shuffle).' },
  'data.readAhead': { type: int(1, 64), default: 2, doc: 'Shards read and tokenized ahead of the trainer.' },
  'data.mlmProbability': {
    type: num({ exclusiveMin: 0, exclusiveMax: 1 }),
    default: 0.15,
    doc: 'BERT: fraction of tokens chosen for the masked-LM loss (80% mask, 10% random, 10% kept).',
  },
  'data.documentMask': {
    type: bool,
    default: false,
    doc: 'GPT: keep the documents packed into a sequence apart ("document masking", fla\'s `cu_seqlens`): attention, and linear attention\'s running state, stop at each end-of-text token, and position embeddings restart at each document (docs/data.md, "Documents kept apart"). BERT sequences already hold one document each (refused there).',
  },

  'train.batchSize': { type: int(1, 65536), default: 8, doc: 'Sequences per micro-batch.' },
  'train.gradAccum': { type: int(1, 65536), default: 1, doc: 'Micro-batches accumulated per optimizer step (effective batch = batchSize × gradAccum).' },
  'train.dataParallel': {
    type: {
      kind: 'custom',
      text: '`auto` \\| integer ≥ 1',
      check: (v) => (v === 'auto' || (Number.isInteger(v) && (v as number) >= 1) ? null : "'auto' or an integer ≥ 1"),
    },
    default: 1,
    doc: "Data-parallel replicas: each optimizer step's rows are split across this many model replicas, the main thread plus worker threads, each with its own backend instance; the update equals the single-replica one up to float summation order. For the CPU backends, whose wasm kernels run on one thread: `auto` = one replica per CPU core (at most `train.batchSize`), and 1 on the `tensorflow` backend. Dropout masks depend on the number of replicas.",
  },
  'train.devices': {
    type: {
      kind: 'custom',
      text: '`all` \\| integer ≥ 1',
      check: (v) => (v === 'all' || (Number.isInteger(v) && (v as number) >= 1 && (v as number) <= 4096) ? null : "'all' or an integer from 1 to 4096"),
    },
    default: 1,
    doc: "`train.executor: xla` only: devices of each process the jax runner trains on (GPUs; on jax's CPU, host devices), data-parallel: each device runs its share of the step's `train.gradAccum` micro-batches (which must be a multiple of the devices over all processes), the devices' gradient sums are added in device order by jax's collectives and every device applies the same update. The losses equal one device's up to float rounding (docs/xla.md). `all` = every device jax sees. Other executors refuse a value other than 1.",
  },
  'train.processes': {
    type: int(1, MAX_RANKS),
    default: 1,
    doc: "Ranks of one run across processes on this machine (`npm run train -- recipe.yaml --processes N` overrides it; under `srun` the ranks are Slurm's tasks): each rank computes its shard of every micro-batch and one all-reduce per step sums the gradients on TensorFlow's collective runtime (`tensorflow` backend; docs/distributed.md). Rank 0 alone logs, evaluates and checkpoints; a checkpoint resumes with any number of ranks. The update equals one process taking the shards as micro-batches; dropout masks depend on the number of ranks.",
  },
  'train.joinTimeout': {
    type: num({ exclusiveMin: 0, max: 86_400 }),
    default: 300,
    doc: "Seconds every rank of a run across processes waits for all ranks to join the cluster at start (TensorFlow's coordination service, `cluster_register_timeout_in_ms`); a rank that has not joined by then ends the run with an error naming it, before anything is written. Not part of the run: ranks may differ in it, and a resume may change it (docs/distributed.md).",
  },
  'train.shardOptimizer': {
    type: bool,
    default: false,
    doc: "In a run of several ranks (`train.processes`, `srun`): each rank keeps AdamW's two moments only for its 1/N slice of the raveled parameters (ZeRO-1), updates that slice and all-gathers the parameters after the step, instead of every rank keeping all of them (docs/distributed.md). Saves 2 × 4 bytes × P × (N − 1)/N per rank; the weights equal the unsharded run's. Checkpoints hold the whole moments (rank 0 gathers them) and resume with any number of ranks, sharded or not. Ignored with one rank.",
  },
  'train.graph': {
    type: bool,
    default: true,
    doc: "On the `tensorflow` backend (CPU or GPU device): run each micro-batch's forward and backward pass, and AdamW's update, as TensorFlow functions on the device instead of op by op, once two steps with the same batch shape recorded the same program (src/backend/tf-graph.ts); the same function, 1.5–3× faster on the bench GPT, and on a GPU the parameters and moments never leave the device. BERT's labelled rows are padded to a multiple of 64 so that its shapes repeat, and dropout masks come from TensorFlow's stateless generator fed the step's seed (a different draw from the wasm/cpu masks). `false` = always op by op. Other backends ignore it.",
  },
  'train.executor': {
    // The names of src/train/step-executors/index.ts (the recipe sits below train/ and cannot import them; a test keeps the two equal).
    type: oneOf('auto', 'op-by-op', 'functions', 'replicas', 'collective', 'xla'),
    default: 'auto',
    doc: 'How the training step runs (src/train/step-executor.ts, docs/training.md "Step executors"): `op-by-op` (every op dispatched from JavaScript; any backend), `functions` (recorded once and run as TensorFlow functions; `tensorflow` backend), `replicas` (`train.dataParallel` worker threads), `collective` (one rank of a run across processes, `train.processes`; `tensorflow` backend), `xla` (compiled by XLA and run by a jax process that keeps the state on its device, CPU or GPU; `npm run setup:xla`, docs/xla.md; never chosen by `auto`). `auto` = `collective` in a rank of such a run, else `replicas` when `train.dataParallel` resolves above 1, else `functions` when `train.graph` is on and the backend has them, else `op-by-op`. An executor the run cannot use is an error naming why.',
  },
  'train.xla': {
    type: oneOf('auto', 'on', 'off'),
    default: 'auto',
    doc: "With `train.graph` on the `tensorflow` backend: compile each step's graph function with XLA (`on`), not (`off`), or what was measured best on this kind of device (`auto`: off on CPU devices, where XLA gained 0–30% at the bench shape but its compilation outweighs that in short runs and ran out of memory at the GPT-2-small shape; off on GPUs until measured there). Where the TensorFlow library cannot compile for the device, steps run without XLA and the log says why. Other backends ignore it.",
  },
  'train.remat': {
    type: bool,
    default: false,
    doc: 'Rematerialisation, for a shape whose training step does not fit the device\'s memory: each transformer block keeps only its input for the backward pass, which computes the block\'s forward a second time (about a third more compute per step; the same losses and gradients). Needs `train.executor: xla`, whose programs it changes; docs/xla.md, "Rematerialisation", has what it saves.',
  },
  'train.precision': {
    type: oneOf('fp32', 'bf16'),
    default: 'fp32',
    doc: 'Precision of the training step\'s matrix products: `fp32`, or `bf16` (mixed precision: bfloat16 operands, float32 accumulation and results; float32 master weights, gradients, AdamW moments and update, loss, softmax and LayerNorm statistics, the division by attention denominators; checkpoints stay float32 and resume in either precision). `bf16` needs `train.executor: xla` (TensorFlow.js has no bfloat16); for GPUs with bf16 tensor cores (on jax\'s CPU about as fast as `fp32`). docs/xla.md, "Mixed precision".',
  },
  'train.attentionKernel': {
    type: oneOf('composed', 'fused'),
    default: 'composed',
    doc: "Softmax attention in the `xla` executor's programs: `composed` (scores, mask, softmax, product, as TensorFlow.js records them) or `fused` (recorded as a boundary the jax runner fills with `jax.nn.dot_product_attention` and its vjp: cuDNN's fused attention on NVIDIA GPUs with `train.precision: bf16`, XLA's composed form elsewhere; self-attention, causal or unmasked, without padding or document masks — other calls stay composed). Needs `train.executor: xla` and `model.attention.name: softmax`. docs/xla.md, \"Attention on the GPU\".",
  },
  'train.optimizer': { type: oneOf('adamw'), default: 'adamw', doc: 'Optimizer (AdamW with decoupled weight decay).' },
  'train.lr': { type: num({ exclusiveMin: 0 }), default: 6e-4, doc: 'Peak learning rate (reached at the end of warm-up).' },
  'train.minLr': {
    type: num({ min: 0 }),
    default: derived('`train.lr` / 10', (r) => r.train.lr / 10),
    doc: 'Final learning rate of the `cosine` and `linear` schedules; must be ≤ `train.lr`.',
  },
  'train.schedule': {
    type: oneOf('cosine', 'linear', 'constant'),
    default: 'cosine',
    doc: 'Learning-rate decay after warm-up, over the token budget (`train.maxTokens` or one epoch).',
  },
  'train.warmupSteps': {
    type: int(0),
    default: 100,
    doc: 'Optimizer steps of linear warm-up from 0 to `train.lr`. A warm-up longer than a fifth of the run (e.g. after shortening it with `train.maxTokens`) is warned about.',
  },
  'train.warmupFraction': {
    type: num({ min: 0, exclusiveMax: 1 }),
    nullable: true,
    default: null,
    doc: "Warm-up as a fraction of the run's optimizer steps (e.g. `0.05`), rounded to whole steps, instead of `train.warmupSteps` (set one of the two); it follows `train.maxTokens`. `null` = use `train.warmupSteps`.",
  },
  'train.weightDecay': {
    type: num({ min: 0 }),
    default: 0.1,
    doc: 'AdamW weight decay (not applied to norms, biases and embeddings unless `train.decayEmbeddings`).',
  },
  'train.beta1': { type: num({ min: 0, exclusiveMax: 1 }), default: 0.9, doc: 'AdamW β₁.' },
  'train.beta2': { type: num({ min: 0, exclusiveMax: 1 }), default: 0.95, doc: 'AdamW β₂.' },
  'train.eps': { type: num({ exclusiveMin: 0 }), default: 1e-8, doc: 'AdamW ε.' },
  'train.decayEmbeddings': { type: bool, default: false, doc: 'Apply weight decay to the embedding tables too.' },
  'train.clip': { type: num({ min: 0 }), default: 1, doc: 'Global gradient-norm clip (0 = off).' },
  'train.freeze': {
    type: { kind: 'custom', text: '`none` \\| `all-but-qkv` \\| list of globs', check: freezeProblem },
    default: 'none',
    doc: 'Parameters kept fixed (no gradient, no optimizer state): `none`; `all-but-qkv` = train only the attention q, k, v projections (weights and biases) and the mechanism\'s own parameters (DARKFormer\'s M, SchoenbAt\'s γ, β); or a list of name globs whose matches are frozen, e.g. `["embed.*", "blocks.0.*"]` (`*` = any characters; each glob must match a parameter). The log prints both counts.',
  },
  'train.seed': { type: int(0), default: 1337, doc: 'Seed of the initialisation, the data order and the random features.' },
  'train.maxTokens': { type: int(1), nullable: true, default: null, doc: 'Training budget in tokens; `null` = one full epoch of the training split.' },
  'train.evalInterval': {
    type: int(0),
    default: 200,
    doc: 'Optimizer steps between validation runs, and one at step 0 (the model before training), so that curves start there (0 = only at the end).',
  },
  'train.evalTokens': {
    type: int(1),
    default: DEFAULT_EVAL_TOKENS,
    doc: 'Validation tokens per evaluation (labelled tokens: BERT counts the masked ones), the same every time (`train.evalSample`).',
  },
  'train.evalSample': {
    type: oneOf(...EVAL_SAMPLES),
    default: 'spread',
    doc: "Which validation tokens are evaluated: `spread` = examples drawn across the whole validation split by a fixed seed (the same for every run on the same data, tokenizer and sequence length), `head` = the split's first `train.evalTokens` tokens (the protocol before spread sampling; a random sample only when the dataset's documents are in random order).",
  },
  'train.estimatorHealth': {
    type: bool,
    default: false,
    doc: "Kernel (linear) mechanisms that declare the kernel their features estimate (SLAY, Performer, DARKFormer, SchoenbAt): at every validation, each layer's kernel-approximation error, attention-output error and denominator quantiles on the first 64 positions of the first validation sequence, in the validation record's `estimator_health` ([training.md](training.md#estimator-health)). Other mechanisms: an error naming them.",
  },
  'train.logInterval': { type: int(1), default: 10, doc: 'Optimizer steps between training records in `metrics.jsonl`.' },
  'train.checkpointInterval': { type: int(0), default: 1000, doc: 'Optimizer steps between checkpoints (0 = only at the end).' },
  'train.keepCheckpoints': {
    type: int(1),
    default: 3,
    doc: 'Most recent checkpoints kept in `<run>/checkpoints/`, plus the one with the lowest validation loss (among checkpoints taken at a validation step).',
  },
  'train.nanPolicy': {
    type: oneOf('stop', 'skip'),
    default: 'stop',
    doc: 'A NaN or infinite loss or gradient norm: `stop` = end the run with an error naming the step (the weights are not updated, the last checkpoint stays intact); `skip` = drop that update and go on (up to `train.nanSkipLimit` in a row).',
  },
  'train.nanSkipLimit': {
    type: int(1),
    default: 10,
    doc: 'With `train.nanPolicy: skip`: this many dropped updates in a row end the run with an error (non-zero exit) naming the steps and the last good checkpoint, instead of skipping every remaining step of a diverged run.',
  },
  'train.runDir': { type: filePath, default: 'runs', doc: 'Folder that holds the run folders.' },

  'wandb.enabled': {
    type: oneOf(true, false, 'auto'),
    default: 'auto',
    doc: 'Send the metric records to Weights & Biases; `auto` = when `WANDB_API_KEY` is set.',
  },
  'wandb.project': { type: str, default: 'slayformer', doc: 'W&B project.' },
  'wandb.entity': { type: str, nullable: true, default: null, doc: "W&B entity (user or team); `null` = the API key's default entity." },
  'wandb.runName': { type: str, nullable: true, default: null, doc: 'W&B display name; `null` = the run folder name.' },

  'tensorboard.enabled': {
    type: bool,
    default: true,
    doc: 'Write the metric records as a TensorBoard event file in the run folder (`events.out.tfevents.*`), as they land: `tensorboard --logdir runs` shows every run.',
  },
} as const satisfies Record<RecipeKey, FieldSpec>;

export const SCHEMA: Record<string, FieldSpec> = RECIPE_SCHEMA;
export const KEYS = Object.keys(SCHEMA) as RecipeKey[];
/** Mapping keys (sections) implied by the dotted leaf paths: "model", "model.attention", "train", … */
export const SECTIONS = new Set(
  KEYS.flatMap((key) =>
    key
      .split('.')
      .slice(1)
      .map((_, i) =>
        key
          .split('.')
          .slice(0, i + 1)
          .join('.'),
      ),
  ),
);

type DeepPartial<T> = { [K in keyof T]?: T[K] extends Record<string, unknown> ? DeepPartial<T[K]> : T[K] };

/** The static defaults (keys that are required or derived from other keys are absent; see RECIPE_SCHEMA). */
export const RECIPE_DEFAULTS: DeepPartial<Recipe> = Object.freeze(
  unflatten(Object.fromEntries(KEYS.filter((k) => isStatic(SCHEMA[k].default)).map((k) => [k, SCHEMA[k].default]))),
) as DeepPartial<Recipe>;

export function isStatic(value: unknown): boolean {
  return value !== REQUIRED && !(typeof value === 'object' && value !== null && 'derived' in value);
}

/** The bounds of a numeric type as text, e.g. ["≥ 0", "< 1"]. */
export function boundsText(type: Extract<FieldType, { kind: 'int' | 'number' }>): string[] {
  const out: string[] = [];
  if (type.min !== undefined) out.push(`≥ ${type.min}`);
  if ('exclusiveMin' in type && type.exclusiveMin !== undefined) out.push(`> ${type.exclusiveMin}`);
  if (type.max !== undefined) out.push(`≤ ${type.max}`);
  if ('exclusiveMax' in type && type.exclusiveMax !== undefined) out.push(`< ${type.exclusiveMax}`);
  return out.length > 1 ? [out.join(', ')] : out;
}

export function unflatten(flat: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(flat)) setPath(out, key, value);
  return out;
}
