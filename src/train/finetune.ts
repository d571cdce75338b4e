// Finetuning: start a run from saved weights (`initFrom`), possibly with a different attention
// mechanism, and train only part of the parameters (`train.freeze`).
//
// Loading is by stable tensor name. Every parameter of the new model must come from the checkpoint
// with the same shape, except the attention mechanism's own parameters when the mechanism changed
// (they keep their documented initialisation: DARKFormer's M = identity, or with init 'whitening' an
// estimate from two training batches, the mechanism's dataInit; SchoenbAt's γ = 1, β = 0). Buffers
// (random projections) load only when the mechanism and its options are unchanged; otherwise they
// come from the new mechanism's own seed. A checkpoint tensor with no place in the model is an error, except the
// previous mechanism's own tensors, which are dropped when the mechanism changed.
// A Hugging Face folder (src/hf) is read into the same shape; the parameters it does not hold (a
// bare BertModel's MLM head) keep their initialisation and are reported.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { listSome } from '../core/bounds.ts';
import YAML from 'yaml';
import type { LanguageModel, LanguageModelConfig, ModelBatch } from '../model/lm.ts';
import { architectureOf } from '../model/transformer.ts';
import type { Architecture } from '../model/transformer.ts';
import { hfFolderOf, readHfInitFrom } from '../hf/folder.ts';
import { openBatchStream } from '../data/stream.ts';
import type { StreamOptions } from '../data/stream.ts';
import { readCheckedFiles } from '../core/atomic-folder.ts';
import { parseRecipe } from './recipe.ts';
import type { Recipe } from './recipe.ts';
import { CHECKPOINTS_DIR, COMPLETE_MARKER, listCheckpoints } from './checkpoint.ts';
import { checkSavedModel } from './model-check.ts';
import { decodeSafetensors } from './safetensors.ts';
import type { NamedArray } from './safetensors.ts';

export const FREEZE_PRESETS = ['none', 'all-but-qkv'] as const;
/** `none`, `all-but-qkv`, or globs over parameter names whose matches are frozen (`*` any run of characters, `?` one). */
export type FreezeSpec = (typeof FREEZE_PRESETS)[number] | string[];

export const MODEL_FILE = 'model.safetensors';
export const RECIPE_FILE = 'recipe.json';
/** A run's final/ also holds its tokenizer, so that the folder alone is a complete model (final-model.ts saveFinalModel). */
export const FINAL_TOKENIZER_FILE = 'tokenizer.json';
/** `initFrom: auto:<recipe name>` = the newest finished run of that recipe under train.runDir. */
export const AUTO_PREFIX = 'auto:';
/** Training batches whose queries and keys calibrate the mechanisms' data-dependent init (DARKFormer's whitening). */
export const CALIBRATION_BATCHES = 2;

/** Null when `value` is a valid train.freeze, else what it should be (for the recipe's error message). */
export function freezeProblem(value: unknown): string | null {
  if (typeof value === 'string' && (FREEZE_PRESETS as readonly string[]).includes(value)) return null;
  if (Array.isArray(value) && value.length > 0 && value.every((g) => typeof g === 'string' && g !== '')) return null;
  return `one of ${FREEZE_PRESETS.join(', ')} or a non-empty list of parameter-name globs (e.g. ["embed.*", "blocks.0.*"])`;
}

function globRegExp(glob: string): RegExp {
  const body = glob.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '.*').replace(/\?/g, '.');
  return new RegExp(`^${body}$`);
}

const QKV_PROJECTION = /^blocks\.\d+\.attn\.[qkv]\.(weight|bias)$/;
/** Tensors under blocks.<i>.attn. that are not the q/k/v/out projections belong to the mechanism. */
const MECHANISM_TENSOR = /^blocks\.\d+\.attn\.(?!(q|k|v|out)\.(weight|bias)$)/;

/** Splits the model's parameters into trained and frozen ones (errors name train.freeze). */
export function partitionParameters(model: LanguageModel, freeze: FreezeSpec): { trainable: Map<string, tf.Variable>; frozen: Map<string, tf.Variable> } {
  const problem = freezeProblem(freeze);
  if (problem) throw new Error(`train.freeze must be ${problem} (got ${JSON.stringify(freeze)})`);
  const all = model.parameters();
  let isFrozen: (name: string) => boolean;
  if (freeze === 'none') isFrozen = () => false;
  else if (freeze === 'all-but-qkv') {
    const mechanism = new Set(model.body.attention.flatMap((m) => m.trainableVariables.map((v) => v.name)));
    isFrozen = (name) => !QKV_PROJECTION.test(name) && !mechanism.has(name);
  } else {
    const patterns = freeze.map((glob) => ({ glob, re: globRegExp(glob) }));
    const unmatched = patterns.filter((p) => ![...all.keys()].some((n) => p.re.test(n))).map((p) => p.glob);
    if (unmatched.length > 0) {
      throw new Error(`train.freeze: ${unmatched.map((g) => JSON.stringify(g)).join(', ')} match no parameter (names look like ${[...all.keys()].slice(0, 3).join(', ')}, …)`);
    }
    isFrozen = (name) => patterns.some((p) => p.re.test(name));
  }
  const trainable = new Map<string, tf.Variable>();
  const frozen = new Map<string, tf.Variable>();
  for (const [name, v] of all) (isFrozen(name) ? frozen : trainable).set(name, v);
  if (trainable.size === 0) throw new Error(`train.freeze ${JSON.stringify(freeze)} freezes every parameter: nothing to train`);
  return { trainable, frozen };
}

const RUN_STAMP = /^-(\d{8}-\d{6})(?:-(\d+))?$/;

/** The folder initFrom names, and for `auto:` which run was chosen and why (null otherwise). */
export interface InitFromChoice {
  dir: string;
  reason: string | null;
}

/**
 * The folder `initFrom` names: a folder holding model.safetensors (a run's final/ or a complete
 * checkpoint folder), a run folder (its final/, else its newest complete checkpoint), or
 * `auto:<recipe name>` (chooseAutoRun). Relative paths resolve against the working directory.
 */
export function resolveInitFrom(spec: string, runDir: string): string {
  return chooseInitFrom(spec, runDir).dir;
}

export function chooseInitFrom(spec: string, runDir: string): InitFromChoice {
  if (spec.startsWith(AUTO_PREFIX)) return chooseAutoRun(spec.slice(AUTO_PREFIX.length), runDir);
  const dir = path.resolve(spec);
  if (existsSync(path.join(dir, MODEL_FILE))) {
    if (path.basename(path.dirname(dir)) === CHECKPOINTS_DIR && !existsSync(path.join(dir, COMPLETE_MARKER))) {
      throw new Error(`initFrom ${spec}: the checkpoint ${dir} is incomplete (no ${COMPLETE_MARKER} marker: its writer was interrupted)`);
    }
    return { dir, reason: null };
  }
  if (existsSync(path.join(dir, 'final', MODEL_FILE))) return { dir: path.join(dir, 'final'), reason: null };
  const checkpoints = listCheckpoints(dir);
  if (checkpoints.length > 0) return { dir: checkpoints[checkpoints.length - 1].dir, reason: null };
  throw new Error(`initFrom ${spec}: ${dir} holds no ${MODEL_FILE}, final/ or complete checkpoint; give a run's final/ folder, a checkpoint folder, a run folder or auto:<recipe name>`);
}

interface FinishedRun {
  entry: string;
  /** What the run was asked to train (its config.json's train.maxTokens; null = one epoch), when readable. */
  budget: number | null | undefined;
  /** What its recipe file asks for (train.maxTokens; null = one epoch), when the file named in env.json is readable. */
  recipeBudget: { file: string; maxTokens: number | null } | undefined;
  tokens: number | undefined;
  valLoss: number | undefined;
}

function readJsonOrUndefined(file: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(readFileSync(file, 'utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/** train.maxTokens of a recipe mapping: a number, null (one epoch, the default), or undefined when malformed. */
function maxTokensOf(recipe: Record<string, unknown> | undefined): number | null | undefined {
  const train = recipe?.train;
  if (train === undefined || train === null) return null;
  if (typeof train !== 'object') return undefined;
  const value = (train as Record<string, unknown>).maxTokens;
  return value === undefined || value === null ? null : typeof value === 'number' ? value : undefined;
}

/** The recipe file a run was started from (the .yaml argument recorded in its env.json) and its train.maxTokens. */
function recipeFileBudget(runFolder: string): FinishedRun['recipeBudget'] {
  const env = readJsonOrUndefined(path.join(runFolder, 'env.json'));
  const argv = Array.isArray(env?.argv) ? env.argv.filter((a): a is string => typeof a === 'string') : [];
  const recipeArg = argv.slice(1).find((a) => /\.ya?ml$/.test(a));
  if (!recipeArg || typeof env?.cwd !== 'string') return undefined;
  const file = path.resolve(env.cwd, recipeArg);
  let parsed: unknown;
  try {
    parsed = YAML.parse(readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
  const maxTokens = maxTokensOf(typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : undefined);
  const relative = path.relative(process.cwd(), file);
  return maxTokens === undefined ? undefined : { file: relative.startsWith('..') ? file : relative, maxTokens };
}

/** Whether a finished run trained at least its recipe file's budget (a run shortened with --train.maxTokens did not). */
function trainedFullBudget(run: FinishedRun): boolean | undefined {
  if (run.budget === undefined || run.recipeBudget === undefined) return undefined;
  const wanted = run.recipeBudget.maxTokens;
  if (wanted === null) return run.budget === null;
  return run.budget === null || run.budget >= wanted;
}

const tokensText = (n: number | null | undefined) => (n === null ? 'one epoch' : n === undefined ? '? tokens' : `${n.toLocaleString('en-US')} tokens`);

function describeRun(run: FinishedRun): string {
  const loss = run.valLoss === undefined ? '' : `, final val loss ${run.valLoss.toFixed(4)}`;
  return `${run.entry} (${tokensText(run.tokens)}${loss})`;
}

/**
 * `auto:<name>`: final/ of the newest finished run `<runDir>/<name>-<timestamp>` that trained its recipe's budget, i.e.
 * was not shortened with a train.maxTokens override below what its recipe file (recorded in env.json) asks for: a
 * short smoke run must not silently stand in for the real one. When none did (or it cannot be told), the newest
 * finished run, and the reason says so. The reason names the run, its tokens and loss, and the newer runs passed over.
 */
function chooseAutoRun(name: string, runDir: string): InitFromChoice {
  const spec = `${AUTO_PREFIX}${name}`;
  const finished: FinishedRun[] = (existsSync(runDir) ? readdirSync(runDir) : [])
    .filter((entry) => entry.startsWith(name) && RUN_STAMP.test(entry.slice(name.length)))
    .filter((entry) => existsSync(path.join(runDir, entry, 'final', MODEL_FILE)))
    .map((entry) => {
      const [, stamp, n] = RUN_STAMP.exec(entry.slice(name.length))!;
      return { entry, key: `${stamp}-${(n ?? '1').padStart(6, '0')}` };
    })
    .sort((a, b) => (a.key < b.key ? 1 : -1)) // newest first
    .map(({ entry }) => {
      const folder = path.join(runDir, entry);
      const summary = readJsonOrUndefined(path.join(folder, 'summary.json'));
      const number = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) ? v : undefined);
      const config = readJsonOrUndefined(path.join(folder, 'config.json'));
      return { entry, budget: config ? maxTokensOf(config) : undefined, recipeBudget: recipeFileBudget(folder), tokens: number(summary?.tokens), valLoss: number(summary?.val_loss) };
    });
  if (finished.length === 0) {
    throw new Error(`initFrom ${spec}: no finished run of '${name}' (a folder ${name}-<timestamp>/final/${MODEL_FILE}) under ${runDir}; train it first, e.g. npm run train -- recipes/demo/${name}.yaml`);
  }
  const full = finished.findIndex((run) => trainedFullBudget(run) !== false);
  const chosen = finished[full === -1 ? 0 : full];
  const dir = path.join(runDir, chosen.entry, 'final');
  const shortened = (run: FinishedRun) =>
    `${describeRun(run)}: trained ${tokensText(run.budget)}, less than the ${tokensText(run.recipeBudget?.maxTokens)} of ${run.recipeBudget?.file}`;
  let reason: string;
  if (full === -1) {
    reason = `initFrom ${spec}: none of the ${finished.length} finished runs of '${name}' trained its recipe's budget; using the newest, ${shortened(chosen)}`;
  } else {
    const known = trainedFullBudget(chosen) === true;
    reason = `initFrom ${spec}: using ${describeRun(chosen)}, the newest finished run of '${name}'` +
      (known ? ` that trained its recipe's budget (${tokensText(chosen.recipeBudget!.maxTokens)} in ${chosen.recipeBudget!.file})` : ' (its recipe file is not readable: budget not checked)');
    if (full > 0) reason += `; passed over the newer ${finished.slice(0, full).map(shortened).join('; ')}`;
  }
  return { dir, reason };
}

export interface ModelFolder {
  dir: string;
  tensors: Map<string, NamedArray>;
  metadata: Record<string, string>;
  /** The model config the weights were saved with. */
  config: Pick<LanguageModelConfig, 'attention' | 'numHeads'> & Partial<LanguageModelConfig>;
  /** Parameters the source does not hold that keep their initialisation (the MLM head of a bare Hugging Face BertModel). */
  fresh?: ReadonlySet<string>;
}

/**
 * Reads `<dir>/model.safetensors` and `<dir>/recipe.json` (the layout of final/ and of checkpoints), checked as eval
 * checks them: the checksums of COMPLETE, the recipe, the saved model config and every tensor (model-check.ts).
 */
export async function readModelFolder(dir: string): Promise<ModelFolder> {
  for (const file of [MODEL_FILE, RECIPE_FILE]) {
    if (!existsSync(path.join(dir, file))) throw new Error(`initFrom: ${path.join(dir, file)} does not exist (a model folder holds ${MODEL_FILE} and ${RECIPE_FILE})`);
  }
  const files = await readCheckedFiles(dir, [MODEL_FILE, RECIPE_FILE]);
  const recipe = parseRecipe(files.get(RECIPE_FILE)!.toString('utf8'), path.join(dir, RECIPE_FILE));
  const modelFile = path.join(dir, MODEL_FILE);
  const { tensors, metadata } = decodeSafetensors(files.get(MODEL_FILE)!, modelFile);
  return { dir, tensors, metadata, config: checkSavedModel({ tensors, metadata }, recipe, modelFile) };
}

function sameAttention(a: LanguageModelConfig['attention'], b: LanguageModelConfig['attention']): boolean {
  const sorted = (o: Record<string, unknown>) => JSON.stringify(Object.entries(o ?? {}).sort(([x], [y]) => (x < y ? -1 : 1)));
  return a.name === b.name && sorted(a.options) === sorted(b.options);
}

/** "blocks.0.attn.x, blocks.1.attn.x" → "blocks.*.attn.x ×2" (log lines stay short for deep models). */
export function groupNames(names: Iterable<string>): string {
  const counts = new Map<string, number>();
  for (const n of names) {
    const key = n.replace(/^blocks\.\d+\./, 'blocks.*.');
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([k, c]) => (c > 1 ? `${k} ×${c}` : k)).join(', ');
}

export interface LoadReport {
  loaded: string[];
  /** The new mechanism's parameters left at their initialisation (mechanism changed). */
  initialised: string[];
  /** Buffers drawn from the new mechanism's seed (mechanism or its options changed). */
  redrawn: string[];
  /** The previous mechanism's own tensors, not used. */
  dropped: string[];
  /** Parameters the source does not hold, left at their initialisation (ModelFolder.fresh). */
  fresh: string[];
  mechanismChanged: boolean;
}

/**
 * Copies a model folder's tensors into `model` by name (see the file comment for the rules).
 * Checks everything first and throws one error naming the tensors that cannot be mapped (a few of
 * each kind, and their count); the model is untouched then. `tokenizerSha256`: the run's
 * tokenizer, compared with the checkpoint's.
 */
export function loadWeights(model: LanguageModel, source: ModelFolder, opts: { tokenizerSha256?: string } = {}): LoadReport {
  const where = `initFrom ${source.dir}`;
  const target = model.config;
  if (source.config.numHeads !== undefined && source.config.numHeads !== target.numHeads) {
    throw new Error(`${where}: the checkpoint has ${source.config.numHeads} heads per block but model.numHeads is ${target.numHeads} (the q/k/v weights would be split differently)`);
  }
  // Settings that change the function without changing any tensor's shape (absent in older checkpoints: the defaults).
  const sourceArch = architectureOf(source.config);
  const targetArch = model.body.architecture;
  const archDiffers = (Object.keys(sourceArch) as (keyof Architecture)[]).filter((key) => sourceArch[key] !== targetArch[key]);
  if (archDiffers.length > 0) {
    throw new Error(`${where}: ${archDiffers.map((key) => `model.${key} is ${JSON.stringify(targetArch[key])} but the checkpoint's model has ${JSON.stringify(sourceArch[key])}`).join('; ')}`);
  }
  const sourceSha = source.metadata.tokenizer_sha256;
  if (opts.tokenizerSha256 && sourceSha && sourceSha !== opts.tokenizerSha256) {
    throw new Error(`${where}: the checkpoint was trained with another tokenizer (sha256 ${sourceSha.slice(0, 12)}…) than data.tokenizer (${opts.tokenizerSha256.slice(0, 12)}…): token ids would not match`);
  }
  const mechanismChanged = source.config.attention.name !== target.attention.name;
  const loadBuffers = sameAttention(source.config.attention, target.attention);
  const mechanismParams = new Set(model.body.attention.flatMap((m) => m.trainableVariables.map((v) => v.name)));
  const report: LoadReport = { loaded: [], initialised: [], redrawn: [], dropped: [], fresh: [], mechanismChanged };
  const missing: string[] = [];
  const mismatched: string[] = [];
  const reshaped = new Set<string>();
  const assignments: [tf.Variable, NamedArray][] = [];
  const place = (name: string, variable: tf.Variable) => {
    const saved = source.tensors.get(name);
    if (!saved && source.fresh?.has(name)) report.fresh.push(name);
    else if (!saved) missing.push(name);
    else if (!tf.util.arraysEqual(saved.shape, variable.shape)) {
      mismatched.push(`${name} checkpoint [${saved.shape.join(', ')}] vs model [${variable.shape.join(', ')}]`);
      reshaped.add(name);
    }
    else {
      assignments.push([variable, saved]);
      report.loaded.push(name);
    }
  };
  for (const [name, variable] of model.parameters()) {
    if (mechanismChanged && mechanismParams.has(name)) report.initialised.push(name);
    else place(name, variable);
  }
  for (const [name, variable] of model.buffers()) {
    if (loadBuffers) place(name, variable);
    else report.redrawn.push(name);
  }
  const used = new Set(report.loaded);
  const unexpected: string[] = [];
  for (const name of source.tensors.keys()) {
    if (used.has(name) || reshaped.has(name)) continue;
    // Same mechanism, other options: its redrawn buffers are replaced too.
    if (MECHANISM_TENSOR.test(name) && (mechanismChanged || (!loadBuffers && model.buffers().has(name)))) report.dropped.push(name);
    else unexpected.push(name);
  }
  const problems = [
    missing.length ? `missing in the checkpoint: ${listSome(missing)}` : '',
    mismatched.length ? `shape differs: ${listSome(mismatched, '; ')}` : '',
    unexpected.length ? `in the checkpoint but not in the model: ${listSome(unexpected)}` : '',
  ].filter(Boolean);
  if (problems.length > 0) {
    throw new Error(`${where}: the checkpoint does not fit the model of this recipe (same model.* settings needed, except model.attention and model.dropout):\n  ${problems.join('\n  ')}`);
  }
  for (const [variable, saved] of assignments) tf.tidy(() => variable.assign(tf.tensor(saved.data, saved.shape, 'float32')));
  return report;
}

/**
 * The mechanisms' data-dependent init (dataInit, model/attention/types.ts) for the given layers: one forward pass
 * over the batches (stacked), each listed layer initialised from its own queries and keys just before that layer's
 * attention runs, so later layers are calibrated on the already initialised earlier ones.
 */
export function initializeLayersFromData(model: LanguageModel, batches: readonly ModelBatch[], layers: ReadonlySet<number>): void {
  if (batches.length === 0) throw new Error('data-dependent init: no calibration batch');
  const seqLen = batches[0].seqLen;
  if (batches.some((b) => b.seqLen !== seqLen)) throw new Error('data-dependent init: calibration batches differ in sequence length');
  const rows = batches.reduce((n, b) => n + b.batchSize, 0);
  const ids = new Int32Array(rows * seqLen);
  const mask = new Float32Array(rows * seqLen);
  let at = 0;
  for (const b of batches) {
    ids.set(b.inputIds, at);
    mask.set(b.attentionMask ?? new Float32Array(b.inputIds.length).fill(1), at);
    at += b.inputIds.length;
  }
  tf.tidy(() => {
    model.body.forward(tf.tensor2d(ids, [rows, seqLen], 'int32'), {
      keyMask: model.kind === 'bert' ? tf.tensor2d(mask, [rows, seqLen]) : undefined,
      onAttentionInputs: (layer, q, k) => {
        if (layers.has(layer)) model.body.attention[layer].dataInit?.initializeFromData(q, k);
      },
    });
  });
}

async function readBatches(options: StreamOptions, count: number): Promise<ModelBatch[]> {
  const stream = await openBatchStream(options);
  try {
    const batches: ModelBatch[] = [];
    while (batches.length < count) {
      const batch = await stream.next();
      if (!batch) break;
      batches.push(batch);
    }
    return batches;
  } finally {
    await stream.close();
  }
}

export interface FinetuneSetup {
  /** Parameters the optimizer updates (all of them without train.freeze). */
  trainable: Map<string, tf.Variable>;
  frozen: Map<string, tf.Variable>;
  /** The model folder the weights came from; null = trained from scratch. */
  initFrom: string | null;
  /** Extra safetensors metadata for the saved model. */
  metadata: Record<string, string>;
}

/**
 * Applies `initFrom` and `train.freeze` to a freshly built model, and the mechanism's data-dependent init (DARKFormer's
 * init 'whitening') to every layer whose initialised tensor did not come from a checkpoint, on CALIBRATION_BATCHES
 * batches of `calibration` (the training split). Reports through `line`.
 */
export async function prepareFinetune(
  model: LanguageModel,
  recipe: Pick<Recipe, 'initFrom'> & { train: Pick<Recipe['train'], 'freeze' | 'runDir'> },
  opts: {
    tokenizerSha256?: string;
    calibration?: StreamOptions;
    line?: (text: string) => void;
    /** Resuming: the checkpoint restores every tensor, so neither initFrom nor the data-dependent init runs. */
    skipInit?: boolean;
  } = {},
): Promise<FinetuneSetup> {
  const line = opts.line ?? (() => {});
  const metadata: Record<string, string> = {};
  let initFrom: string | null = null;
  let loadedNames = new Set<string>();
  if (recipe.initFrom !== null && !opts.skipInit) {
    const hfDir = hfFolderOf(recipe.initFrom);
    const choice = hfDir ? null : chooseInitFrom(recipe.initFrom, recipe.train.runDir);
    if (choice?.reason) line(choice.reason);
    initFrom = hfDir ?? choice!.dir;
    let source: ModelFolder;
    if (hfDir) {
      const hf = await readHfInitFrom(hfDir, model.config.vocabSize);
      line(`initFrom Hugging Face ${hf.description}`);
      source = hf.source;
    } else source = await readModelFolder(initFrom);
    const report = loadWeights(model, source, { tokenizerSha256: opts.tokenizerSha256 });
    loadedNames = new Set(report.loaded);
    metadata.init_from = initFrom;
    const from = source.config.attention.name;
    const step = source.metadata.step ? ` (step ${source.metadata.step})` : '';
    const parts = [`loaded ${report.loaded.length} tensors`];
    if (report.initialised.length) parts.push(`new mechanism parameters ${groupNames(report.initialised)}`);
    if (report.fresh.length) parts.push(`initialised fresh ${groupNames(report.fresh)}`);
    if (report.redrawn.length) parts.push(`buffers from the new seed ${groupNames(report.redrawn)}`);
    if (report.dropped.length) parts.push(`dropped ${groupNames(report.dropped)}`);
    line(`initFrom ${initFrom}${step}, attention ${from} → ${model.config.attention.name}: ${parts.join('; ')}`);
  }
  const initLayers = new Set(
    model.body.attention
      .map((m, i) => ({ init: m.dataInit, i }))
      .filter(({ init }) => !opts.skipInit && init && !loadedNames.has(init.fills.variable.name))
      .map(({ i }) => i),
  );
  if (initLayers.size > 0) {
    const { trigger, fills } = model.body.attention[[...initLayers][0]].dataInit!;
    if (!opts.calibration) throw new Error(`model.attention.options.${trigger} needs calibration batches`);
    const batches = await readBatches(opts.calibration, CALIBRATION_BATCHES);
    initializeLayersFromData(model, batches, initLayers);
    line(`${model.config.attention.name} ${trigger}: ${fills.label} of ${initLayers.size} layers from the queries and keys of ${batches.length} training batches`);
  }
  const { trainable, frozen } = partitionParameters(model, recipe.train.freeze);
  const freezeText = typeof recipe.train.freeze === 'string' ? recipe.train.freeze : JSON.stringify(recipe.train.freeze);
  if (frozen.size > 0 || initFrom !== null) {
    const count = (m: Map<string, tf.Variable>) => [...m.values()].reduce((n, v) => n + v.size, 0).toLocaleString('en-US');
    line(`train.freeze ${freezeText}: training ${count(trainable)} parameters in ${trainable.size} tensors, ${count(frozen)} frozen in ${frozen.size} tensors`);
    metadata.freeze = freezeText;
  }
  return { trainable, frozen, initFrom, metadata };
}
