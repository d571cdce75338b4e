// Hugging Face config.json ⇄ this project's model config, for GPT-2 (GPT2LMHeadModel, GPT2Model) and
// BERT (BertForMaskedLM, BertModel). Field names and defaults are transformers' (GPT2Config and
// BertConfig, transformers 5.x): a field the file leaves out has transformers' default. Every field
// that changes what the model computes is mapped, or — when this project cannot compute it — reported,
// all such fields in one error. Fields that matter only to PyTorch training (the dropouts,
// initializer_range) or to other heads (GPT-2's summary_*) are not read: dropout is the recipe's
// model.dropout.
//
// This project's own exports of models transformers cannot compute (another attention, pre-LN BERT, no
// biases, …) have model_type `slayformer-gpt2` / `slayformer-bert` and a `slayformer` section with the
// settings the standard fields cannot express. transformers loads them only through the PyTorch
// implementation shipped beside them (src/hf/python/, named by `auto_map`, with trust_remote_code);
// their `layer_types` name the attention, which transformers ≥ 5 refuses for its own GPT2Config and
// BertConfig, so that GPT2LMHeadModel / BertForMaskedLM fail instead of silently computing softmax
// attention. Both kinds write the section; it also marks the folder as written by this project
// (export --overwrite replaces only such folders).
import { BOUNDS, showValue, type Bound } from '../core/bounds.ts';
import { attentionNames, attentionOptionSpecs } from '../model/attention/index.ts';
import { resolveOptions } from '../model/attention/registry.ts';
import type { LanguageModelConfig } from '../model/lm.ts';
import type { Activation } from '../model/layers.ts';
import {
  ARCHITECTURE_DEFAULTS,
  architectureOf,
  featureSeedOf,
  MLP_KINDS,
  NORM_KINDS,
  NORM_POSITIONS,
  POSITIONALS,
  type Architecture,
} from '../model/transformer.ts';

export type HfLayout = 'gpt2' | 'bert';

/** What a config.json fixes: the model config less the run's choices (seed, dropout), architecture filled in. */
export type HfModelConfig = Omit<LanguageModelConfig, 'seed' | 'featureSeed' | 'dropout'> & Architecture;

export interface HfConfig {
  file: string;
  layout: HfLayout;
  modelType: string;
  /** config.json's architectures[0], if any. */
  architecture: string | null;
  model: HfModelConfig;
  /**
   * The seed the mechanisms' random draws are rebuilt from (this project's exports record their model's:
   * SchoenbAt's feature degrees are not in its tensors); 0 for other folders, whose tensors hold everything.
   */
  seed: number;
  /** The config.json field each model key but the attention comes from (for messages), e.g. 'model.dModel' → 'n_embd'. */
  fields: Record<`model.${Exclude<keyof HfModelConfig, 'attention'>}`, string>;
}

const CUSTOM_PREFIX = 'slayformer-';
export const SECTION = 'slayformer';
const LAYOUT_OF: Record<string, HfLayout> = { gpt2: 'gpt2', bert: 'bert', [`${CUSTOM_PREFIX}gpt2`]: 'gpt2', [`${CUSTOM_PREFIX}bert`]: 'bert' };
const SUPPORTED_ARCHITECTURES: Record<HfLayout, readonly string[]> = {
  gpt2: ['GPT2LMHeadModel', 'GPT2Model'],
  bert: ['BertForMaskedLM', 'BertModel'],
};
/** The PyTorch classes of custom exports (src/hf/python/) and the Auto class that loads each. */
const CUSTOM_CLASSES: Record<HfLayout, { config: string; model: string; auto: string }> = {
  gpt2: { config: 'SlayformerGPT2Config', model: 'SlayformerForCausalLM', auto: 'AutoModelForCausalLM' },
  bert: { config: 'SlayformerBertConfig', model: 'SlayformerForMaskedLM', auto: 'AutoModelForMaskedLM' },
};
export const PYTHON_CONFIG_MODULE = 'configuration_slayformer';
export const PYTHON_MODEL_MODULE = 'modeling_slayformer';
/** transformers' ACT2FN names this project computes. */
const ACTIVATION_OF: Record<string, Activation> = {
  gelu_new: 'gelu-tanh',
  gelu_pytorch_tanh: 'gelu-tanh',
  gelu_fast: 'gelu-tanh',
  gelu: 'gelu-erf',
  gelu_python: 'gelu-erf',
};
const HF_ACTIVATION: Record<Activation, string> = { 'gelu-tanh': 'gelu_new', 'gelu-erf': 'gelu' };

/** Reads typed fields of a config object, collecting problems instead of throwing at the first. */
class FieldReader {
  readonly problems: string[] = [];
  readonly unsupported: string[] = [];
  constructor(readonly json: Record<string, unknown>) {}

  private raw(key: string): unknown {
    const v = this.json[key];
    return v === null ? undefined : v;
  }

  /** An integer ≥ min and, for a size, within its bound (src/core/bounds.ts): checked before anything is listed or built from it. */
  int(key: string, fallback: number, min: number, bound?: Bound): number {
    const v = this.raw(key) ?? fallback;
    const max = bound?.max ?? Number.MAX_SAFE_INTEGER;
    if (typeof v === 'number' && Number.isSafeInteger(v) && v >= min && v <= max) return v;
    const range = bound ? `an integer ≥ ${min}, ≤ ${max}` : `an integer ≥ ${min}`;
    const why = bound && typeof v === 'number' && v > max ? `; the bound: ${bound.why}` : '';
    this.problems.push(`${key} must be ${range} (got ${showValue(v)}${why})`);
    return fallback;
  }

  /** An intermediate size as the ratio to the width, within model.mlpRatio's bound. */
  ratio(key: string, inner: number, width: number, widthKey: string): number {
    if (inner <= BOUNDS.mlpRatio.max * width) return inner / width;
    this.problems.push(`${key} (${inner}) must be ≤ ${BOUNDS.mlpRatio.max} × ${widthKey} (${width}) (the bound: ${BOUNDS.mlpRatio.why})`);
    return 4;
  }

  positive(key: string, fallback: number): number {
    const v = this.raw(key) ?? fallback;
    if (typeof v === 'number' && Number.isFinite(v) && v > 0) return v;
    this.problems.push(`${key} must be a number > 0 (got ${JSON.stringify(v)})`);
    return fallback;
  }

  bool(key: string, fallback: boolean): boolean {
    const v = this.raw(key) ?? fallback;
    if (typeof v === 'boolean') return v;
    this.problems.push(`${key} must be true or false (got ${JSON.stringify(v)})`);
    return fallback;
  }

  activation(key: string, fallback: string): Activation {
    const v = this.raw(key) ?? fallback;
    const mapped = typeof v === 'string' ? ACTIVATION_OF[v] : undefined;
    if (mapped) return mapped;
    this.unsupported.push(`${key}: ${JSON.stringify(v)} (supported: ${Object.keys(ACTIVATION_OF).join(', ')})`);
    return 'gelu-tanh';
  }

  /** Records `key: value` as unsupported when the file's value (or transformers' default) is not `computed`. */
  expect(key: string, fallback: unknown, computed: unknown, why: string): void {
    const v = this.raw(key) ?? fallback;
    if (v !== computed) this.unsupported.push(`${key}: ${JSON.stringify(v)} (${why})`);
  }
}

/**
 * Parses a config.json (already JSON-decoded); `file` names it in errors. Throws one error listing every
 * bad or unsupported field.
 */
export function parseHfConfig(json: unknown, file: string): HfConfig {
  if (typeof json !== 'object' || json === null || Array.isArray(json)) throw new Error(`${file}: not a JSON object`);
  const obj = json as Record<string, unknown>;
  const modelType = obj.model_type;
  const layout = typeof modelType === 'string' ? LAYOUT_OF[modelType] : undefined;
  if (!layout) {
    throw new Error(`${file}: model_type ${JSON.stringify(modelType)} is not supported (supported: ${Object.keys(LAYOUT_OF).join(', ')})`);
  }
  const custom = (modelType as string).startsWith(CUSTOM_PREFIX);
  const fields = new FieldReader(obj);
  const architecture = readArchitecture(obj, layout, custom, fields);
  const { model, fieldNames } = layout === 'gpt2' ? gpt2Model(fields) : bertModel(fields, custom);
  const seed = custom ? applySection(obj[SECTION], model, fields) : 0;
  if (!custom && model.dModel % model.numHeads !== 0)
    fields.problems.push(`${fieldNames['model.dModel']} (${model.dModel}) must be divisible by ${fieldNames['model.numHeads']} (${model.numHeads})`);
  const lines = [...fields.problems, ...(fields.unsupported.length ? [`settings this project does not compute: ${fields.unsupported.join('; ')}`] : [])];
  if (lines.length > 0) throw new Error(`${file}: ${lines.join('\n  ')}`);
  return { file, layout, modelType: modelType as string, architecture, model, seed, fields: fieldNames };
}

function readArchitecture(obj: Record<string, unknown>, layout: HfLayout, custom: boolean, fields: FieldReader): string | null {
  const list = obj.architectures;
  if (list === undefined || list === null) return null;
  if (!Array.isArray(list) || list.length !== 1 || typeof list[0] !== 'string') {
    fields.problems.push(`architectures must be a list of one class name (got ${JSON.stringify(list)})`);
    return null;
  }
  // Custom exports name their PyTorch class (earlier ones named transformers' class).
  const supported = custom ? [CUSTOM_CLASSES[layout].model, ...SUPPORTED_ARCHITECTURES[layout]] : SUPPORTED_ARCHITECTURES[layout];
  if (!supported.includes(list[0])) {
    fields.unsupported.push(`architectures: ${JSON.stringify(list)} (supported: ${supported.join(', ')})`);
  }
  return list[0];
}

type ModelFields = { model: HfModelConfig; fieldNames: HfConfig['fields'] };

/** What transformers' GPT-2 and BERT compute: learned positions, a GELU MLP, LayerNorm (this project's exports say otherwise in their section). */
const TRANSFORMER_PP_OFF = {
  positional: ARCHITECTURE_DEFAULTS.positional,
  ropeTheta: ARCHITECTURE_DEFAULTS.ropeTheta,
  mlp: ARCHITECTURE_DEFAULTS.mlp,
  norm: ARCHITECTURE_DEFAULTS.norm,
};
const TRANSFORMER_PP_FIELDS = { 'model.positional': 'model_type', 'model.ropeTheta': 'model_type', 'model.mlp': 'model_type', 'model.norm': 'model_type' };

function gpt2Model(f: FieldReader): ModelFields {
  const dModel = f.int('n_embd', 768, 1, BOUNDS.width);
  const inner = f.json.n_inner === null || f.json.n_inner === undefined ? 4 * dModel : f.int('n_inner', 4 * dModel, 1);
  f.expect('scale_attn_weights', true, true, 'attention scores not divided by √head_dim');
  f.expect('scale_attn_by_inverse_layer_idx', false, false, 'scores divided by the layer index');
  f.expect('add_cross_attention', false, false, 'encoder–decoder cross-attention');
  f.expect('tie_word_embeddings', true, true, 'an output matrix of its own; this project ties it to the token embedding');
  // reorder_and_upcast_attn only changes the precision of half-precision runs: float32 computes the same.
  const model: HfModelConfig = {
    kind: 'gpt',
    vocabSize: f.int('vocab_size', 50257, 1, BOUNDS.embeddingRows),
    maxSeqLen: f.int('n_positions', 1024, 1, BOUNDS.positions),
    dModel,
    numLayers: f.int('n_layer', 12, 1, BOUNDS.layers),
    numHeads: f.int('n_head', 12, 1, BOUNDS.heads),
    mlpRatio: f.ratio('n_inner', inner, dModel, 'n_embd'),
    bias: true,
    attention: { name: 'softmax', options: {} },
    normPosition: 'pre',
    embeddingNorm: false,
    typeVocabSize: 0,
    activation: f.activation('activation_function', 'gelu_new'),
    layerNormEps: f.positive('layer_norm_epsilon', 1e-5),
    ...TRANSFORMER_PP_OFF,
  };
  const fieldNames = {
    'model.kind': 'model_type',
    'model.vocabSize': 'vocab_size',
    'model.maxSeqLen': 'n_positions',
    'model.dModel': 'n_embd',
    'model.numLayers': 'n_layer',
    'model.numHeads': 'n_head',
    'model.mlpRatio': 'n_inner / n_embd',
    'model.bias': 'model_type',
    'model.normPosition': 'model_type',
    'model.embeddingNorm': 'model_type',
    'model.typeVocabSize': 'model_type',
    'model.activation': 'activation_function',
    'model.layerNormEps': 'layer_norm_epsilon',
    ...TRANSFORMER_PP_FIELDS,
  };
  return { model, fieldNames };
}

function bertModel(f: FieldReader, custom: boolean): ModelFields {
  const dModel = f.int('hidden_size', 768, 1, BOUNDS.width);
  f.expect('is_decoder', false, false, 'causal BERT');
  f.expect('add_cross_attention', false, false, 'encoder–decoder cross-attention');
  f.expect('position_embedding_type', 'absolute', 'absolute', 'only learned absolute positions are computed');
  f.expect('tie_word_embeddings', true, true, 'an MLM decoder matrix of its own; this project ties it to the token embedding');
  const model: HfModelConfig = {
    kind: 'bert',
    vocabSize: f.int('vocab_size', 30522, 1, BOUNDS.embeddingRows),
    maxSeqLen: f.int('max_position_embeddings', 512, 1, BOUNDS.positions),
    dModel,
    numLayers: f.int('num_hidden_layers', 12, 1, BOUNDS.layers),
    numHeads: f.int('num_attention_heads', 12, 1, BOUNDS.heads),
    mlpRatio: f.ratio('intermediate_size', f.int('intermediate_size', 3072, 1), dModel, 'hidden_size'),
    bias: true,
    attention: { name: 'softmax', options: {} },
    normPosition: 'post',
    embeddingNorm: true,
    // transformers' BERT always adds a token-type row; this project's exports may have none.
    typeVocabSize: f.int('type_vocab_size', 2, custom ? 0 : 1, BOUNDS.embeddingRows),
    activation: f.activation('hidden_act', 'gelu'),
    layerNormEps: f.positive('layer_norm_eps', 1e-12),
    ...TRANSFORMER_PP_OFF,
  };
  const fieldNames = {
    'model.kind': 'model_type',
    'model.vocabSize': 'vocab_size',
    'model.maxSeqLen': 'max_position_embeddings',
    'model.dModel': 'hidden_size',
    'model.numLayers': 'num_hidden_layers',
    'model.numHeads': 'num_attention_heads',
    'model.mlpRatio': 'intermediate_size / hidden_size',
    'model.bias': 'model_type',
    'model.normPosition': 'model_type',
    'model.embeddingNorm': 'model_type',
    'model.typeVocabSize': 'type_vocab_size',
    'model.activation': 'hidden_act',
    'model.layerNormEps': 'layer_norm_eps',
    ...TRANSFORMER_PP_FIELDS,
  };
  return { model, fieldNames };
}

/** The `slayformer` section of a custom export: the settings the standard fields cannot express. */
export interface Section {
  exported_by: string;
  attention: { name: string; options: Record<string, unknown> };
  bias: boolean;
  normPosition: Architecture['normPosition'];
  embeddingNorm: boolean;
  typeVocabSize: number;
  /** The Transformer++ options (absent in exports written before them: learned positions, a GELU MLP, LayerNorm). */
  positional?: Architecture['positional'];
  ropeTheta?: number;
  mlp?: Architecture['mlp'];
  norm?: Architecture['norm'];
  /** The model's seed (HfConfig.seed); absent in exports written before it was recorded. */
  seed?: number;
  /** Per layer, what the mechanism's random draw fixes beyond its tensors (AttentionModule.drawLayout; SchoenbAt only). */
  layers?: Readonly<Record<string, readonly number[]>>[];
  /** Where the weights came from (informational; a run-relative name, never an absolute path: store/model-card.ts). */
  source?: string;
}

/** Applies the section's settings to `model`; returns the recorded seed (0 when absent). */
function applySection(value: unknown, model: HfModelConfig, f: FieldReader): number {
  if (typeof value !== 'object' || value === null) {
    f.problems.push(`${SECTION} must be an object with the settings of this project's export (got ${JSON.stringify(value)})`);
    return 0;
  }
  const s = new FieldReader(value as Record<string, unknown>);
  const section = value as Partial<Section>;
  const attention = section.attention;
  if (typeof attention?.name !== 'string' || !attentionNames().includes(attention.name)) {
    f.problems.push(`${SECTION}.attention.name must be one of ${attentionNames().join(', ')} (got ${JSON.stringify(attention?.name)})`);
  } else {
    try {
      model.attention = { name: attention.name, options: resolveOptions(attention.name, attentionOptionSpecs(attention.name), attention.options ?? {}) };
    } catch (err) {
      f.problems.push(`${SECTION}.attention.options: ${(err as Error).message}`);
    }
  }
  model.bias = s.bool('bias', true);
  model.embeddingNorm = s.bool('embeddingNorm', model.embeddingNorm);
  model.typeVocabSize = s.int('typeVocabSize', model.typeVocabSize, 0, BOUNDS.embeddingRows);
  const seed = s.int('seed', 0, 0);
  const position = section.normPosition ?? model.normPosition;
  if (NORM_POSITIONS.includes(position)) model.normPosition = position;
  else s.problems.push(`normPosition must be one of ${NORM_POSITIONS.join(', ')} (got ${JSON.stringify(position)})`);
  const oneOf = (key: 'positional' | 'mlp' | 'norm', values: readonly string[]) => {
    const v: unknown = section[key] ?? model[key];
    if (typeof v === 'string' && values.includes(v)) Object.assign(model, { [key]: v });
    else s.problems.push(`${key} must be one of ${values.join(', ')} (got ${JSON.stringify(v)})`);
  };
  oneOf('positional', POSITIONALS);
  oneOf('mlp', MLP_KINDS);
  oneOf('norm', NORM_KINDS);
  model.ropeTheta = s.positive('ropeTheta', model.ropeTheta);
  if (model.positional === 'rope' && (model.dModel / model.numHeads) % 2 !== 0)
    f.problems.push(`${SECTION}.positional 'rope' needs an even head size (got ${model.dModel} / ${model.numHeads})`);
  f.problems.push(...s.problems.map((p) => `${SECTION}.${p}`));
  if (model.dModel % model.numHeads !== 0) f.problems.push(`the model width (${model.dModel}) must be divisible by the number of heads (${model.numHeads})`);
  return seed;
}

/** Why transformers' own GPT-2/BERT class would compute another function than this model (empty: it computes the same). */
export function nonStandardSettings(c: LanguageModelConfig): string[] {
  const arch = architectureOf(c);
  const out: string[] = [];
  if (c.attention.name !== 'softmax') out.push(`attention ${c.attention.name}`);
  if (!c.bias) out.push('no biases (model.bias false)');
  const expected: Partial<Architecture> =
    c.kind === 'gpt'
      ? { normPosition: 'pre', embeddingNorm: false, typeVocabSize: 0, ...TRANSFORMER_PP_OFF }
      : { normPosition: 'post', embeddingNorm: true, ...TRANSFORMER_PP_OFF };
  for (const [key, value] of Object.entries(expected)) {
    if (arch[key as keyof Architecture] !== value) out.push(`model.${key} ${JSON.stringify(arch[key as keyof Architecture])}`);
  }
  if (c.kind === 'bert' && arch.typeVocabSize === 0) out.push('no token-type embeddings (model.typeVocabSize 0)');
  return out;
}

export interface ExportConfigOptions {
  /** Special token ids of the exported tokenizer. */
  specialIds: { eos?: number; pad?: number };
  /** Where the weights came from, recorded in the `slayformer` section. */
  source: string;
  /** Each layer's AttentionModule.drawLayout, recorded in the section when any layer has one. */
  drawLayouts?: (Readonly<Record<string, readonly number[]>> | undefined)[];
}

/** config.json for `c`: the standard model_type when transformers computes the same function, else the custom one. */
export function hfConfigJson(c: LanguageModelConfig, opts: ExportConfigOptions): Record<string, unknown> {
  const arch = architectureOf(c);
  const custom = nonStandardSettings(c).length > 0;
  const layout: HfLayout = c.kind === 'gpt' ? 'gpt2' : 'bert';
  const hidden = Math.round(c.mlpRatio * c.dModel);
  const layouts = opts.drawLayouts ?? [];
  const section: Section = {
    exported_by: 'slayformer npm run export',
    // Every option written out, defaults included: the PyTorch implementation reads them as they are.
    attention: { name: c.attention.name, options: resolveOptions(c.attention.name, attentionOptionSpecs(c.attention.name), c.attention.options) },
    bias: c.bias,
    normPosition: arch.normPosition,
    embeddingNorm: arch.embeddingNorm,
    typeVocabSize: arch.typeVocabSize,
    positional: arch.positional,
    ropeTheta: arch.ropeTheta,
    mlp: arch.mlp,
    norm: arch.norm,
    // The seed the draws are rebuilt from (the weights are in the tensors): the feature seed.
    seed: featureSeedOf(c),
    ...(layouts.some((l) => l !== undefined) ? { layers: layouts.map((l) => l ?? {}) } : {}),
    source: opts.source,
  };
  const classes = CUSTOM_CLASSES[layout];
  const remoteCode = {
    auto_map: { AutoConfig: `${PYTHON_CONFIG_MODULE}.${classes.config}`, [classes.auto]: `${PYTHON_MODEL_MODULE}.${classes.model}` },
    layer_types: Array.from(
      { length: c.numLayers },
      () => `slayformer ${c.attention.name} attention (load with ${classes.auto}.from_pretrained(folder, trust_remote_code=True))`,
    ),
  };
  const common = {
    architectures: [custom ? classes.model : SUPPORTED_ARCHITECTURES[layout][0]],
    model_type: custom ? `${CUSTOM_PREFIX}${layout}` : layout,
    vocab_size: c.vocabSize,
    tie_word_embeddings: true,
    add_cross_attention: false,
    initializer_range: 0.02,
    dtype: 'float32',
  };
  const body =
    layout === 'gpt2'
      ? {
          n_positions: c.maxSeqLen,
          n_embd: c.dModel,
          n_layer: c.numLayers,
          n_head: c.numHeads,
          n_inner: hidden,
          activation_function: HF_ACTIVATION[arch.activation],
          layer_norm_epsilon: arch.layerNormEps,
          // This project drops out the embeddings, attention outputs and MLP outputs, never the attention weights.
          embd_pdrop: c.dropout,
          resid_pdrop: c.dropout,
          attn_pdrop: 0,
          scale_attn_weights: true,
          scale_attn_by_inverse_layer_idx: false,
          reorder_and_upcast_attn: false,
          bos_token_id: opts.specialIds.eos ?? null,
          eos_token_id: opts.specialIds.eos ?? null,
          pad_token_id: opts.specialIds.pad ?? null,
        }
      : {
          max_position_embeddings: c.maxSeqLen,
          hidden_size: c.dModel,
          num_hidden_layers: c.numLayers,
          num_attention_heads: c.numHeads,
          intermediate_size: hidden,
          hidden_act: HF_ACTIVATION[arch.activation],
          layer_norm_eps: arch.layerNormEps,
          type_vocab_size: arch.typeVocabSize,
          hidden_dropout_prob: c.dropout,
          attention_probs_dropout_prob: 0,
          is_decoder: false,
          pad_token_id: opts.specialIds.pad ?? null,
        };
  return { ...common, ...body, ...(custom ? remoteCode : {}), [SECTION]: section };
}
