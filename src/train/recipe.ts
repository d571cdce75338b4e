// Training recipes: plain YAML data validated against ONE declarative table (RECIPE_SCHEMA). Validation,
// defaults, command-line overrides and docs/recipes.md all derive from that table, so adding a key (e.g. the
// fine-tuning section) means adding one row to it and one field to `Recipe`.
import fs from 'node:fs';
import path from 'node:path';
import YAML, { LineCounter } from 'yaml';
import { attentionIsQuadratic, attentionNames, attentionOptionSpecs } from '../model/attention/index.ts';
// resolveOptions is the registry's own per-option checker; index.ts does not re-export it.
import { resolveOptions } from '../model/attention/registry.ts';
import { ACTIVATIONS, NORM_POSITIONS } from '../model/transformer.ts';
import type { Activation } from '../model/transformer.ts';
import type { LanguageModelConfig } from '../model/lm.ts';
import { BOUNDS, MAX_TENSOR_ELEMENTS } from '../core/bounds.ts';
import { SEQ_LEN_RULE, seqLenProblem } from '../data/batch.ts';
import { BACKENDS, type BackendChoice } from '../backend/device.ts';
import { hfRecipeSettings } from '../hf/folder.ts';
import { freezeProblem } from './finetune.ts';
import type { FreezeSpec } from './finetune.ts';

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
    attention: { name: string; options: Record<string, unknown> };
  };
  data: {
    dataset: string;
    textColumn: string;
    tokenizer: string;
    seqLen: number;
    shuffleBuffer: number;
    readAhead: number;
    mlmProbability: number;
  };
  train: {
    batchSize: number;
    gradAccum: number;
    dataParallel: number | 'auto';
    graph: boolean;
    xla: 'auto' | 'on' | 'off';
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
    logInterval: number;
    checkpointInterval: number;
    keepCheckpoints: number;
    nanPolicy: 'stop' | 'skip';
    nanSkipLimit: number;
    runDir: string;
  };
  wandb: { enabled: boolean | 'auto'; project: string; entity: string | null; runName: string | null };
}

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
  name: { type: str, default: derived("the recipe file's base name", (_r, file) => path.basename(file, path.extname(file))), doc: 'Run name; run folders are `<train.runDir>/<name>-<timestamp>/`.' },
  backend: {
    type: oneOf(...BACKENDS), default: 'auto',
    doc: 'TensorFlow.js backend. `auto` = `tensorflow` where `npm run setup:tensorflow` has built it (or a tfjs-node package is installed), else `wasm`. `--backend` and `$SLAYFORMER_BACKEND` take precedence; the run\'s config.json records the backend it ran on.',
  },
  initFrom: {
    type: str,
    nullable: true,
    default: null,
    doc: "Finetune: start from these weights instead of a random init. A model folder (a run's `final/` or a checkpoint, holding `model.safetensors` and `recipe.json`), a run folder (its `final/`, else its newest checkpoint), `auto:<recipe name>` = the newest finished run `<train.runDir>/<name>-<timestamp>/final` that trained its recipe's budget (a run shortened with `--train.maxTokens` is passed over; the log says which run was chosen and why), or a Hugging Face GPT-2/BERT folder `hf:<folder>` (a folder whose `config.json` has a `model_type` is recognised without the prefix): its `config.json` sets every `model.*` key but `attention` and `dropout` (a recipe value that contradicts it is an error) and its `tokenizer.json` is the default `data.tokenizer`; relative paths against the working directory. `model.attention` may differ from the checkpoint's (its q/k/v/out weights are reused, the new mechanism's own parameters start at their init, its random projections come from `train.seed`); every other `model.*` shape must match, and any tensor that cannot be mapped is an error naming it.",
  },

  'model.kind': { type: oneOf('gpt', 'bert'), default: 'gpt', doc: '`gpt`: causal language model; `bert`: masked language model (bidirectional attention).' },
  'model.dModel': { type: int(1, BOUNDS.width.max), default: 128, doc: 'Width of the residual stream; must be divisible by `model.numHeads`.' },
  'model.numLayers': { type: int(1, BOUNDS.layers.max), default: 4, doc: 'Number of transformer blocks.' },
  'model.numHeads': { type: int(1, BOUNDS.heads.max), default: 4, doc: 'Attention heads per block (head size = dModel / numHeads).' },
  'model.mlpRatio': { type: num({ exclusiveMin: 0, max: BOUNDS.mlpRatio.max }), default: 4, doc: 'MLP hidden width = mlpRatio × dModel.' },
  'model.dropout': { type: num({ min: 0, exclusiveMax: 1 }), default: 0, doc: 'Dropout probability (0 for small CPU demos; GPU recipes use 0.1).' },
  'model.maxSeqLen': { type: int(1, MAX_SEQ_LEN), default: derived('`data.seqLen`', (r) => r.data.seqLen), doc: 'Size of the position-embedding table; must be ≥ `data.seqLen`.' },
  'model.bias': { type: bool, default: true, doc: 'Biases in the linear layers.' },
  'model.normPosition': { type: oneOf(...NORM_POSITIONS), default: 'pre', doc: "Where each block's LayerNorms sit: `pre` = x + f(LN(x)) and a final LayerNorm (GPT-2); `post` = LN(x + f(x)), no final LayerNorm (BERT)." },
  'model.embeddingNorm': { type: bool, default: false, doc: 'A LayerNorm on the summed embeddings (BERT).' },
  'model.typeVocabSize': { type: int(0, BOUNDS.embeddingRows.max), default: 0, doc: 'Rows of a token-type (segment) embedding table (BERT: 2); every token is type 0, one segment per sequence. 0 = none.' },
  'model.activation': { type: oneOf(...ACTIVATIONS), default: 'gelu-tanh', doc: "Activation of the MLP and of BERT's MLM head: `gelu-tanh` (the tanh approximation, GPT-2's `gelu_new`) or `gelu-erf` (exact, BERT's `gelu`)." },
  'model.layerNormEps': { type: num({ exclusiveMin: 0 }), default: 1e-5, doc: 'ε of every LayerNorm (GPT-2: 1e-5, BERT: 1e-12).' },
  'model.attention.name': { type: { kind: 'attentionName' }, default: 'softmax', doc: 'Attention mechanism, one of the registered names (see the table below).' },
  'model.attention.options': { type: { kind: 'attentionOptions' }, default: {}, doc: "Options of that mechanism (see the table below); the resolved recipe holds every option with the mechanism's defaults filled in." },

  'data.dataset': { type: filePath, default: REQUIRED, doc: 'Dataset: a `save_to_disk` folder, a split folder, a folder of `.arrow` shards, or a glob such as `cache/c4-train-*.arrow`.' },
  'data.textColumn': { type: str, default: 'text', doc: 'Name of the text column in the Arrow shards.' },
  'data.tokenizer': { type: filePath, default: REQUIRED, doc: 'Path to a `tokenizer.json` (Hugging Face tokenizers format).' },
  'data.seqLen': { type: { kind: 'custom', text: SEQ_LEN_RULE, check: (v, given) => seqLenProblem(v, given('model.kind') === 'bert' ? 'bert' : 'gpt') }, default: 128, doc: 'Tokens per training sequence.' },
  'data.shuffleBuffer': { type: int(0, 1_000_000), default: 1024, doc: 'Sequences held for the bounded shuffle of the training stream (0 = no shuffle).' },
  'data.readAhead': { type: int(1, 64), default: 2, doc: 'Shards read and tokenized ahead of the trainer.' },
  'data.mlmProbability': { type: num({ exclusiveMin: 0, exclusiveMax: 1 }), default: 0.15, doc: 'BERT: fraction of tokens chosen for the masked-LM loss (80% mask, 10% random, 10% kept).' },

  'train.batchSize': { type: int(1, 65536), default: 8, doc: 'Sequences per micro-batch.' },
  'train.gradAccum': { type: int(1, 65536), default: 1, doc: 'Micro-batches accumulated per optimizer step (effective batch = batchSize × gradAccum).' },
  'train.dataParallel': {
    type: { kind: 'custom', text: '`auto` \\| integer ≥ 1', check: (v) => (v === 'auto' || (Number.isInteger(v) && (v as number) >= 1) ? null : "'auto' or an integer ≥ 1") },
    default: 1,
    doc: 'Data-parallel replicas: each optimizer step\'s rows are split across this many model replicas, the main thread plus worker threads, each with its own backend instance; the update equals the single-replica one up to float summation order. For the CPU backends, whose wasm kernels run on one thread: `auto` = one replica per CPU core (at most `train.batchSize`), and 1 on the `tensorflow` backend. Dropout masks depend on the number of replicas.',
  },
  'train.graph': {
    type: bool,
    default: true,
    doc: 'On the `tensorflow` backend (CPU or GPU device): run each micro-batch\'s forward and backward pass, and AdamW\'s update, as TensorFlow functions on the device instead of op by op, once two steps with the same batch shape recorded the same program (src/backend/tf-graph.ts); the same function, 1.5–3× faster on the bench GPT, and on a GPU the parameters and moments never leave the device. BERT\'s labelled rows are padded to a multiple of 64 so that its shapes repeat, and dropout masks come from TensorFlow\'s stateless generator fed the step\'s seed (a different draw from the wasm/cpu masks). `false` = always op by op. Other backends ignore it.',
  },
  'train.xla': {
    type: oneOf('auto', 'on', 'off'),
    default: 'auto',
    doc: 'With `train.graph` on the `tensorflow` backend: compile each step\'s graph function with XLA (`on`), not (`off`), or what was measured best on this kind of device (`auto`: off on CPU devices, where XLA gained 0–30% at the bench shape but its compilation outweighs that in short runs and ran out of memory at the GPT-2-small shape; off on GPUs until measured there). Where the TensorFlow library cannot compile for the device, steps run without XLA and the log says why. Other backends ignore it.',
  },
  'train.optimizer': { type: oneOf('adamw'), default: 'adamw', doc: 'Optimizer (AdamW with decoupled weight decay).' },
  'train.lr': { type: num({ exclusiveMin: 0 }), default: 6e-4, doc: 'Peak learning rate (reached at the end of warm-up).' },
  'train.minLr': { type: num({ min: 0 }), default: derived('`train.lr` / 10', (r) => r.train.lr / 10), doc: 'Final learning rate of the `cosine` and `linear` schedules; must be ≤ `train.lr`.' },
  'train.schedule': { type: oneOf('cosine', 'linear', 'constant'), default: 'cosine', doc: 'Learning-rate decay after warm-up, over the token budget (`train.maxTokens` or one epoch).' },
  'train.warmupSteps': { type: int(0), default: 100, doc: 'Optimizer steps of linear warm-up from 0 to `train.lr`. A warm-up longer than a fifth of the run (e.g. after shortening it with `train.maxTokens`) is warned about.' },
  'train.warmupFraction': { type: num({ min: 0, exclusiveMax: 1 }), nullable: true, default: null, doc: 'Warm-up as a fraction of the run\'s optimizer steps (e.g. `0.05`), rounded to whole steps, instead of `train.warmupSteps` (set one of the two); it follows `train.maxTokens`. `null` = use `train.warmupSteps`.' },
  'train.weightDecay': { type: num({ min: 0 }), default: 0.1, doc: 'AdamW weight decay (not applied to norms, biases and embeddings unless `train.decayEmbeddings`).' },
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
  'train.evalInterval': { type: int(0), default: 200, doc: 'Optimizer steps between validation runs (0 = only at the end).' },
  'train.evalTokens': { type: int(1), default: 32768, doc: 'Validation tokens per evaluation (read from the start of the validation split, same every time).' },
  'train.logInterval': { type: int(1), default: 10, doc: 'Optimizer steps between training records in `metrics.jsonl`.' },
  'train.checkpointInterval': { type: int(0), default: 1000, doc: 'Optimizer steps between checkpoints (0 = only at the end).' },
  'train.keepCheckpoints': { type: int(1), default: 3, doc: 'Most recent checkpoints kept in `<run>/checkpoints/`, plus the one with the lowest validation loss (among checkpoints taken at a validation step).' },
  'train.nanPolicy': { type: oneOf('stop', 'skip'), default: 'stop', doc: 'A NaN or infinite loss or gradient norm: `stop` = end the run with an error naming the step (the weights are not updated, the last checkpoint stays intact); `skip` = drop that update and go on (up to `train.nanSkipLimit` in a row).' },
  'train.nanSkipLimit': { type: int(1), default: 10, doc: 'With `train.nanPolicy: skip`: this many dropped updates in a row end the run with an error (non-zero exit) naming the steps and the last good checkpoint, instead of skipping every remaining step of a diverged run.' },
  'train.runDir': { type: filePath, default: 'runs', doc: 'Folder that holds the run folders.' },

  'wandb.enabled': { type: oneOf(true, false, 'auto'), default: 'auto', doc: 'Send the metric records to Weights & Biases; `auto` = when `WANDB_API_KEY` is set.' },
  'wandb.project': { type: str, default: 'slayformer', doc: 'W&B project.' },
  'wandb.entity': { type: str, nullable: true, default: null, doc: "W&B entity (user or team); `null` = the API key's default entity." },
  'wandb.runName': { type: str, nullable: true, default: null, doc: 'W&B display name; `null` = the run folder name.' },
} as const satisfies Record<RecipeKey, FieldSpec>;

const SCHEMA: Record<string, FieldSpec> = RECIPE_SCHEMA;
const KEYS = Object.keys(SCHEMA) as RecipeKey[];
/** Mapping keys (sections) implied by the dotted leaf paths: "model", "model.attention", "train", … */
const SECTIONS = new Set(KEYS.flatMap((key) => key.split('.').slice(1).map((_, i) => key.split('.').slice(0, i + 1).join('.'))));

type DeepPartial<T> = { [K in keyof T]?: T[K] extends Record<string, unknown> ? DeepPartial<T[K]> : T[K] };

/** The static defaults (keys that are required or derived from other keys are absent; see RECIPE_SCHEMA). */
export const RECIPE_DEFAULTS: DeepPartial<Recipe> = Object.freeze(
  unflatten(Object.fromEntries(KEYS.filter((k) => isStatic(SCHEMA[k].default)).map((k) => [k, SCHEMA[k].default]))),
) as DeepPartial<Recipe>;

function isStatic(value: unknown): boolean {
  return value !== REQUIRED && !(typeof value === 'object' && value !== null && 'derived' in value);
}

export class RecipeError extends Error {
  constructor(
    readonly file: string,
    readonly problems: string[],
  ) {
    super(problems.map((p) => `${file}: ${p}`).join('\n'));
    this.name = 'RecipeError';
  }
}

interface Given {
  value: unknown;
  /** Where the value came from, for error messages: '' for the file, the override argument otherwise. */
  origin: string;
}

/**
 * Reads, validates and resolves a recipe. `overrides` are command-line arguments of the form
 * `--train.lr=1e-3` / `--model.attention.options.prfFeatures=32`; each value is parsed as a YAML scalar
 * (`1e-3` → number, `true` → boolean, `null` → null, anything else → string) and then checked exactly like
 * the file. Relative paths (data.dataset, data.tokenizer, train.runDir) resolve against the current
 * working directory and come back absolute. Every error starts with the recipe file path.
 */
export function loadRecipe(file: string, overrides: string[] = []): Recipe {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new RecipeError(file, [`cannot read the recipe (${(err as NodeJS.ErrnoException).code ?? String(err)})`]);
  }
  return parseRecipe(text, file, overrides);
}

/** loadRecipe on a string (the file name is used for messages and the default `name`). */
export function parseRecipe(text: string, file: string, overrides: string[] = []): Recipe {
  const problems: string[] = [];
  const { value, errors } = parseYaml(text);
  if (errors.length > 0) throw new RecipeError(file, errors);
  const root: unknown = value ?? {};
  const given = new Map<string, Given>();
  if (!isMapping(root)) throw new RecipeError(file, [`the recipe must be a mapping of sections (got ${describe(root)})`]);
  collect(root, '', '', given, problems);
  for (const arg of overrides) applyOverride(arg, given, problems);
  if (problems.length > 0) throw new RecipeError(file, problems);
  return resolve(given, file);
}

/** A YAML document's value, or its syntax errors as `invalid YAML at line L, column C: …` (recipes and sweep files). */
export function parseYaml(text: string): { value: unknown; errors: string[] } {
  const lines = new LineCounter();
  const doc = YAML.parseDocument(text, { prettyErrors: false, lineCounter: lines });
  const errors = doc.errors.map((e) => {
    const { line, col } = lines.linePos(e.pos[0]);
    return `invalid YAML at line ${line}, column ${col}: ${e.message}`;
  });
  return { value: errors.length > 0 ? undefined : doc.toJS(), errors };
}

function collect(node: Record<string, unknown>, prefix: string, origin: string, out: Map<string, Given>, problems: string[]): void {
  for (const [key, value] of Object.entries(node)) {
    const full = prefix + key;
    if (full in SCHEMA) {
      out.set(full, { value, origin });
    } else if (SECTIONS.has(full)) {
      if (value === null) continue; // an empty section ("train:" with nothing under it)
      if (!isMapping(value)) problems.push(`${at(origin)}${full} must be a mapping of keys (got ${describe(value)})`);
      else collect(value, `${full}.`, origin, out, problems);
    } else {
      problems.push(`${at(origin)}unknown key ${full}${suggest(full)}`);
    }
  }
}

function applyOverride(arg: string, given: Map<string, Given>, problems: string[]): void {
  const match = /^--([A-Za-z0-9_.-]+)=(.*)$/s.exec(arg);
  if (!match) {
    problems.push(`override ${JSON.stringify(arg)} must look like --section.key=value (e.g. --train.lr=1e-3)`);
    return;
  }
  const [, key, raw] = match;
  let value: unknown;
  try {
    value = raw === '' ? '' : YAML.parse(raw);
  } catch (err) {
    problems.push(`override ${arg}: the value is not valid YAML (${(err as Error).message})`);
    return;
  }
  const optionsKey = KEYS.find((k) => SCHEMA[k].type.kind === 'attentionOptions' && key.startsWith(`${k}.`));
  if (optionsKey) {
    // One attention option: merged into the file's options mapping, checked with them against the registry.
    const previous = given.get(optionsKey);
    const options = isMapping(previous?.value) ? { ...previous.value } : {};
    options[key.slice(optionsKey.length + 1)] = value;
    given.set(optionsKey, { value: options, origin: arg });
  } else if (key in SCHEMA) {
    given.set(key, { value, origin: arg });
  } else if (SECTIONS.has(key)) {
    problems.push(`override ${arg}: ${key} is a section; set its keys one by one (e.g. --${KEYS.find((k) => k.startsWith(`${key}.`))}=…)`);
  } else {
    problems.push(`override ${arg}: unknown key ${key}${suggest(key, '--')}`);
  }
}

/** Keys whose values may name environment variables: the paths, and initFrom. */
const EXPANDED_KEYS = new Set<string>(['initFrom', ...Object.keys(RECIPE_SCHEMA).filter((k) => (SCHEMA[k].type as { path?: boolean }).path)]);
const ENV_REFERENCE = /\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}/g;

/**
 * `${NAME}` and `${NAME:-default}` in path values and initFrom become the environment variable's value (or the
 * default when it is unset or empty), as in a shell, so that a recipe can point into a folder each checkout keeps
 * elsewhere (recipes/hf/tiny-gpt2-darkformer.yaml: `${SLAYFORMER_SHARED:-../shared}`). An unset variable without a
 * default is an error naming it.
 */
function expandEnvironment(given: Map<string, Given>, problems: string[]): void {
  for (const key of EXPANDED_KEYS) {
    const entry = given.get(key);
    if (typeof entry?.value !== 'string') continue;
    const value = entry.value.replace(ENV_REFERENCE, (whole, name: string, fallback: string | undefined) => {
      const set = process.env[name];
      if (set !== undefined && set !== '') return set;
      if (fallback !== undefined) return fallback;
      problems.push(`${at(entry.origin)}${key}: the environment variable ${name} in ${JSON.stringify(entry.value)} is not set (or write \${${name}:-default})`);
      return whole;
    });
    given.set(key, { ...entry, value });
  }
}

function resolve(given: Map<string, Given>, file: string): Recipe {
  const problems: string[] = [];
  expandEnvironment(given, problems);
  if (problems.length === 0) applyHfInitFrom(given, problems);
  // An initFrom folder that cannot be read is the one error: the keys it was to supply (data.tokenizer, the model's
  // shape) would otherwise be reported missing or contradicted as well.
  if (problems.length > 0) throw new RecipeError(file, problems);
  const flat: Record<string, unknown> = {};
  const derivedKeys: RecipeKey[] = [];
  for (const key of KEYS) {
    const spec = SCHEMA[key];
    const entry = given.get(key);
    if (entry === undefined) {
      if (spec.default === REQUIRED) problems.push(`missing required key ${key} (${spec.doc})`);
      else if (isStatic(spec.default)) flat[key] = structuredClone(spec.default);
      else derivedKeys.push(key);
      continue;
    }
    const problem = checkType(key, spec, entry.value, (other) => given.get(other)?.value);
    if (problem) problems.push(at(entry.origin) + problem);
    else flat[key] = entry.value;
  }
  for (const key of KEYS) {
    const type = SCHEMA[key].type;
    if (type.kind === 'string' && type.path && typeof flat[key] === 'string') flat[key] = path.resolve(flat[key]);
  }
  // Attention options are checked against the specs of the mechanism named (when that name is valid).
  const optionsEntry = given.get('model.attention.options');
  const name = flat['model.attention.name'];
  if (typeof name === 'string') {
    const result = checkAttentionOptions(name, (flat['model.attention.options'] ?? {}) as Record<string, unknown>);
    if (typeof result === 'string') problems.push(at(optionsEntry?.origin ?? '') + result);
    else flat['model.attention.options'] = result;
  }
  if (problems.length > 0) throw new RecipeError(file, problems);

  const partial = unflatten(flat) as unknown as Recipe;
  for (const key of derivedKeys) flat[key] = (SCHEMA[key].default as DerivedDefault).compute(partial, file);
  // Rebuilt in schema order so config.json reads like docs/recipes.md.
  const recipe = unflatten(Object.fromEntries(KEYS.map((key) => [key, flat[key]]))) as unknown as Recipe;
  const crossProblems = crossChecks(recipe, (key) => given.get(key)?.origin ?? '', (key) => given.has(key));
  if (crossProblems.length > 0) throw new RecipeError(file, crossProblems);
  return recipe;
}

/**
 * A Hugging Face `initFrom` folder fixes the model: its config.json's settings fill the model keys the
 * recipe leaves out, a recipe value that contradicts one is an error naming both; its tokenizer.json
 * is the default data.tokenizer.
 */
function applyHfInitFrom(given: Map<string, Given>, problems: string[]): void {
  const initFrom = given.get('initFrom');
  if (typeof initFrom?.value !== 'string') return;
  let hf: ReturnType<typeof hfRecipeSettings>;
  try {
    hf = hfRecipeSettings(initFrom.value);
  } catch (err) {
    problems.push(`${at(initFrom.origin)}initFrom ${initFrom.value}: ${(err as Error).message}`);
    return;
  }
  if (!hf) return;
  for (const { key, value, field } of hf.settings) {
    const entry = given.get(key);
    if (entry === undefined) given.set(key, { value, origin: '' });
    else if (entry.value !== value) {
      problems.push(`${at(entry.origin)}${key} is ${describe(entry.value)} but ${hf.configFile} (initFrom) makes it ${JSON.stringify(value)} (from ${field}): leave ${key} out or set it to that`);
    }
  }
  if (!given.has('data.tokenizer') && hf.tokenizer) given.set('data.tokenizer', { value: hf.tokenizer, origin: '' });
}

/** Constraints between keys (each message names the keys involved). */
function crossChecks(r: Recipe, origin: (key: string) => string, isGiven: (key: string) => boolean): string[] {
  const problems: string[] = [];
  if (r.train.warmupFraction !== null && isGiven('train.warmupSteps')) {
    problems.push(`${at(origin('train.warmupFraction'))}train.warmupFraction and train.warmupSteps are both set; set one of them`);
  }
  if (r.model.dModel % r.model.numHeads !== 0) {
    problems.push(`${at(origin('model.numHeads'))}model.dModel (${r.model.dModel}) must be divisible by model.numHeads (${r.model.numHeads})`);
  }
  if (r.model.maxSeqLen < r.data.seqLen) {
    problems.push(`${at(origin('model.maxSeqLen'))}model.maxSeqLen (${r.model.maxSeqLen}) must be ≥ data.seqLen (${r.data.seqLen})`);
  }
  if (r.train.minLr > r.train.lr) {
    problems.push(`${at(origin('train.minLr'))}train.minLr (${r.train.minLr}) must be ≤ train.lr (${r.train.lr})`);
  }
  problems.push(...tensorSizeProblems(r.model, { batchSize: r.train.batchSize, seqLen: r.data.seqLen }));
  return problems;
}

/**
 * Problems of a saved model config (a checkpoint's, untrusted) checked like a recipe's model section: every model.*
 * key with its type and bounds, the attention options against the registry, divisibility and tensor sizes. Each
 * problem names the key.
 */
export function modelSectionProblems(config: Record<string, unknown>): string[] {
  const problems: string[] = [];
  const attention = isMapping(config.attention) ? config.attention : {};
  const value = (key: string) => (key.startsWith('model.attention.') ? attention[key.slice('model.attention.'.length)] : config[key.slice('model.'.length)]);
  for (const key of KEYS.filter((k) => k.startsWith('model.'))) {
    const problem = checkType(key, SCHEMA[key], value(key), value);
    if (problem) problems.push(problem);
  }
  if (problems.length > 0) return problems;
  const options = checkAttentionOptions(attention.name as string, (attention.options ?? {}) as Record<string, unknown>);
  if (typeof options === 'string') problems.push(options);
  const m = config as unknown as Recipe['model'] & { vocabSize: number };
  if (m.dModel % m.numHeads !== 0) problems.push(`model.dModel (${m.dModel}) must be divisible by model.numHeads (${m.numHeads})`);
  problems.push(...tensorSizeProblems(m, undefined, Number.isSafeInteger(m.vocabSize) ? m.vocabSize : undefined));
  return problems;
}

/**
 * Sizes that cannot fit: the model's largest tensors and one micro-batch's largest activations, each against the
 * most one TensorFlow.js tensor can hold, named by the keys that set them (the vocabulary once it is known).
 */
export function tensorSizeProblems(
  m: Pick<Recipe['model'], 'dModel' | 'mlpRatio' | 'maxSeqLen' | 'numHeads' | 'attention'>,
  batch?: { batchSize: number; seqLen: number },
  vocabSize?: number,
): string[] {
  const d = m.dModel;
  const hidden = Math.round(m.mlpRatio * d);
  const sizes: [string, number][] = [
    ['model.dModel × model.mlpRatio·model.dModel (an MLP weight)', d * hidden],
    ['model.maxSeqLen × model.dModel (the position table)', m.maxSeqLen * d],
  ];
  if (vocabSize !== undefined) sizes.push([`the vocabulary (${vocabSize}) × model.dModel (the token embedding)`, vocabSize * d]);
  if (batch) {
    const { batchSize: b, seqLen: l } = batch;
    sizes.push(['train.batchSize × data.seqLen × model.mlpRatio·model.dModel (the MLP activations of a micro-batch)', b * l * hidden]);
    if (attentionIsQuadratic(m.attention.name)) sizes.push(['train.batchSize × model.numHeads × data.seqLen² (the attention scores of a micro-batch)', b * m.numHeads * l * l]);
    if (vocabSize !== undefined) sizes.push([`train.batchSize × data.seqLen × the vocabulary (${vocabSize}) (the logits of a micro-batch)`, b * l * vocabSize]);
  }
  return sizes
    .filter(([, elements]) => elements > MAX_TENSOR_ELEMENTS)
    .map(([what, elements]) => `${what} = ${elements.toLocaleString('en-US')} elements: more than one TensorFlow.js tensor can hold (2^31 − 1); lower those keys`);
}

/** The model config a recipe builds for a vocabulary of `vocabSize`; sizes that cannot fit are an error naming the keys. */
export function modelConfigFromRecipe(recipe: Recipe, vocabSize: number): LanguageModelConfig {
  const m = recipe.model;
  if (m.maxSeqLen < recipe.data.seqLen) {
    throw new Error(`model.maxSeqLen (${m.maxSeqLen}) must be ≥ data.seqLen (${recipe.data.seqLen})`);
  }
  const tooLarge = tensorSizeProblems(m, { batchSize: recipe.train.batchSize, seqLen: recipe.data.seqLen }, vocabSize);
  if (tooLarge.length > 0) throw new Error(tooLarge.join('; '));
  return {
    kind: m.kind,
    vocabSize,
    maxSeqLen: m.maxSeqLen,
    dModel: m.dModel,
    numLayers: m.numLayers,
    numHeads: m.numHeads,
    mlpRatio: m.mlpRatio,
    dropout: m.dropout,
    bias: m.bias,
    normPosition: m.normPosition,
    embeddingNorm: m.embeddingNorm,
    typeVocabSize: m.typeVocabSize,
    activation: m.activation,
    layerNormEps: m.layerNormEps,
    attention: m.attention,
    seed: recipe.train.seed,
  };
}

function checkType(key: string, spec: FieldSpec, value: unknown, given: (key: string) => unknown): string | null {
  const type = spec.type;
  if (value === null && spec.nullable) return null;
  const fail = (expected: string) => `${key} must be ${expected}${spec.nullable ? ' or null' : ''} (got ${describe(value)})`;
  switch (type.kind) {
    case 'int':
    case 'number': {
      const noun = type.kind === 'int' ? 'an integer' : 'a number';
      // The bounds are named only when the value is a number of the right kind but out of range.
      if (typeof value !== 'number' || !Number.isFinite(value)) return fail(noun);
      if (type.kind === 'int' && !Number.isInteger(value)) return fail(noun);
      return violates(type, value) ? fail([noun, ...bounds(type)].join(' ')) : null;
    }
    case 'string':
      return typeof value === 'string' && value !== '' ? null : fail('a non-empty string');
    case 'bool':
      return typeof value === 'boolean' ? null : fail('true or false');
    case 'enum':
      return type.values.includes(value as string | boolean) ? null : fail(`one of ${type.values.join(', ')}`);
    case 'attentionName':
      return typeof value === 'string' && attentionNames().includes(value) ? null : fail(`one of ${attentionNames().join(', ')}`);
    case 'attentionOptions': // "options:" with nothing under it is null in YAML: no options
      return value === null || isMapping(value) ? null : fail('a mapping of attention options');
    case 'custom': {
      const expected = type.check(value, given);
      return expected === null ? null : fail(expected);
    }
  }
}

/** The bounds of a numeric type as text, e.g. ["≥ 0", "< 1"]. */
function bounds(type: Extract<FieldType, { kind: 'int' | 'number' }>): string[] {
  const out: string[] = [];
  if (type.min !== undefined) out.push(`≥ ${type.min}`);
  if ('exclusiveMin' in type && type.exclusiveMin !== undefined) out.push(`> ${type.exclusiveMin}`);
  if (type.max !== undefined) out.push(`≤ ${type.max}`);
  if ('exclusiveMax' in type && type.exclusiveMax !== undefined) out.push(`< ${type.exclusiveMax}`);
  return out.length > 1 ? [out.join(', ')] : out;
}

function violates(type: Extract<FieldType, { kind: 'int' | 'number' }>, value: number): boolean {
  return (
    (type.min !== undefined && value < type.min) ||
    (type.max !== undefined && value > type.max) ||
    ('exclusiveMin' in type && type.exclusiveMin !== undefined && value <= type.exclusiveMin) ||
    ('exclusiveMax' in type && type.exclusiveMax !== undefined && value >= type.exclusiveMax)
  );
}

/** Resolved options (registry defaults filled in), or a problem naming the full key path. */
function checkAttentionOptions(name: string, options: Record<string, unknown>): Record<string, unknown> | string {
  const specs = attentionOptionSpecs(name);
  const allowed = Object.keys(specs);
  for (const [option, value] of Object.entries(options)) {
    const key = `model.attention.options.${option}`;
    if (!(option in specs)) {
      const hint = closest(option, allowed);
      const list = allowed.length > 0 ? `allowed: ${allowed.join(', ')}` : `'${name}' takes no options`;
      return `unknown key ${key} for attention '${name}'${hint ? ` (did you mean model.attention.options.${hint}?)` : ''}; ${list}`;
    }
    try {
      resolveOptions(name, { [option]: specs[option] }, { [option]: value });
    } catch (err) {
      return `${key}: ${(err as Error).message}`;
    }
  }
  return resolveOptions(name, specs, options);
}

/**
 * " (did you mean …?)" for the closest known key or section path, or "". A key that is close to no full path is
 * matched by its last part, so that a bare `lr` or `prfFeatures` finds `train.lr` or
 * `model.attention.options.prfFeatures`. `flag` phrases the hint as a command-line override (`--train.lr`).
 */
function suggest(key: string, flag = ''): string {
  const hint = closest(key, [...KEYS, ...SECTIONS]) ?? closestByLastPart(key);
  return hint ? ` (did you mean ${flag}${hint}?)` : '';
}

/** The key (or attention option of any mechanism) whose last part is closest to the last part of `key`. */
function closestByLastPart(key: string): string | null {
  const optionKeys = attentionNames().flatMap((name) => Object.keys(attentionOptionSpecs(name)).map((option) => `model.attention.options.${option}`));
  const candidates = [...new Set([...KEYS.filter((k) => SCHEMA[k].type.kind !== 'attentionOptions'), ...optionKeys])];
  const lastPart = (k: string) => k.slice(k.lastIndexOf('.') + 1);
  const byLastPart = new Map(candidates.map((k) => [lastPart(k), k]));
  const hint = closest(lastPart(key), [...byLastPart.keys()]);
  return hint === null ? null : byLastPart.get(hint)!;
}

/** The candidate within a small edit distance of `word`, if any (hand-written: a 10-line Levenshtein beats a dependency). */
function closest(word: string, candidates: string[]): string | null {
  let best: string | null = null;
  let bestDistance = Math.max(2, Math.floor(word.length / 3)) + 1;
  for (const candidate of candidates) {
    const d = editDistance(word.toLowerCase(), candidate.toLowerCase());
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return best;
}

function editDistance(a: string, b: string): number {
  let row = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const next = [i];
    for (let j = 1; j <= b.length; j++) next[j] = Math.min(row[j] + 1, next[j - 1] + 1, row[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    row = next;
  }
  return row[b.length];
}

function isMapping(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return `a list ${JSON.stringify(value)}`;
  if (isMapping(value)) return `a mapping ${JSON.stringify(value)}`;
  return typeof value === 'number' && !Number.isFinite(value) ? String(value) : JSON.stringify(value);
}

function at(origin: string): string {
  return origin ? `override ${origin}: ` : '';
}

function unflatten(flat: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(flat)) setPath(out, key, value);
  return out;
}

function setPath(target: object, key: string, value: unknown): void {
  const parts = key.split('.');
  let node = target as Record<string, unknown>;
  for (const part of parts.slice(0, -1)) node = (node[part] ??= {}) as Record<string, unknown>;
  node[parts[parts.length - 1]] = value;
}

/**
 * Markdown tables of every recipe key and every attention option, generated from RECIPE_SCHEMA and the
 * attention registry; docs/recipes.md embeds this between its GENERATED markers (a test keeps them equal).
 */
export function renderRecipeDocs(): string {
  const lines: string[] = [];
  let section = '';
  for (const key of KEYS) {
    const top = key.includes('.') ? key.slice(0, key.indexOf('.')) : '(top level)';
    if (top !== section) {
      section = top;
      lines.push('', `### ${section}`, '', '| key | type | default | meaning |', '| --- | --- | --- | --- |');
    }
    const spec = SCHEMA[key];
    lines.push(`| \`${key}\` | ${typeText(spec)} | ${defaultText(spec.default)} | ${spec.doc} |`);
  }
  lines.push('', '### Attention options (`model.attention.options`, per `model.attention.name`)', '');
  lines.push('| attention | option | type | default | meaning |', '| --- | --- | --- | --- | --- |');
  for (const name of attentionNames()) {
    const specs = Object.entries(attentionOptionSpecs(name));
    if (specs.length === 0) lines.push(`| \`${name}\` | — | | | no options |`);
    for (const [option, spec] of specs) {
      const type = spec.kind === 'enum' ? spec.values.map((v) => `\`${v}\``).join(' \\| ') : optionTypeText(spec);
      lines.push(`| \`${name}\` | \`${option}\` | ${type} | \`${String(spec.default)}\` | ${spec.doc} |`);
    }
  }
  return lines.join('\n').trimStart() + '\n';
}

function typeText(spec: FieldSpec): string {
  const t = spec.type;
  let text: string;
  switch (t.kind) {
    case 'int':
    case 'number':
      text = [t.kind === 'int' ? 'integer' : 'number', ...bounds(t)].join(' ');
      break;
    case 'string':
      text = t.path ? 'path' : 'string';
      break;
    case 'bool':
      text = 'boolean';
      break;
    case 'enum':
      text = t.values.map((v) => `\`${v}\``).join(' \\| ');
      break;
    case 'attentionName':
      text = 'attention name';
      break;
    case 'attentionOptions':
      text = 'mapping';
      break;
    case 'custom':
      text = t.text;
      break;
  }
  return spec.nullable ? `${text} or \`null\`` : text;
}

function optionTypeText(spec: { kind: string; min?: number; max?: number | null; exclusiveMin?: number }): string {
  const noun = spec.kind === 'int' ? 'integer' : spec.kind === 'bool' ? 'boolean' : 'number';
  const bounds = [
    spec.min !== undefined ? `≥ ${spec.min}` : '',
    spec.exclusiveMin !== undefined ? `> ${spec.exclusiveMin}` : '',
    spec.max !== undefined && spec.max !== null ? `≤ ${spec.max}` : '',
  ].filter(Boolean);
  return bounds.length ? `${noun} ${bounds.join(', ')}` : noun;
}

function defaultText(value: unknown): string {
  if (value === REQUIRED) return '**required**';
  if (!isStatic(value)) return (value as DerivedDefault).derived;
  return `\`${JSON.stringify(value)}\``;
}
