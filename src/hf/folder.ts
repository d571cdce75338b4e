// Reading a Hugging Face model folder — config.json, model.safetensors (or shards listed in
// model.safetensors.index.json), tokenizer.json — into this project's parameter names and layouts.
//
// Everything is checked before any tensor is read: the config's fields and sizes (config.ts; sizes
// within the bounds table of src/core/bounds.ts, before any tensor name is listed from them), every header
// entry against the file size, the name, dtype and shape of every tensor against what the config
// implies, and the tokenizer's vocabulary against the embedding. Only then are the tensors read, one
// by one (a NaN or infinite value refused), so nothing is allocated from what an unchecked file says;
// this project's featureLogWeights are then held to the range a fit gives them (performer.ts).
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { listSome } from '../core/bounds.ts';
import { TextTokenizer } from '../data/tokenizer.ts';
import { unfittedImportanceWeights } from '../model/attention/index.ts';
import { attentionTensorShapes, languageModelParameterSpecs } from '../model/lm.ts';
import { parseHfConfig, type HfConfig, type HfLayout, type HfModelConfig } from './config.ts';
import { FLOAT_DTYPES, readSafetensorsHeader, readTensor, type NamedArray, type TensorEntry } from './safetensors.ts';
import { canonicalName, decodeTensor, hfShape, IGNORED, isHeadTensor, TIED, tensorRules, type TensorRule } from './weights.ts';

export const CONFIG_FILE = 'config.json';
export const WEIGHTS_FILE = 'model.safetensors';
const WEIGHTS_INDEX_FILE = 'model.safetensors.index.json';
export const TOKENIZER_FILE = 'tokenizer.json';

/** Whether `dir` holds a config.json with a model_type, as every Hugging Face model folder does. */
export function isHfFolder(dir: string): boolean {
  const file = path.join(dir, CONFIG_FILE);
  if (!existsSync(file)) return false;
  try {
    const json = JSON.parse(readFileSync(file, 'utf8')) as { model_type?: unknown } | null;
    return typeof json?.model_type === 'string';
  } catch {
    return false;
  }
}

/** The folder's config.json, parsed and checked (sync: recipes read it while they are validated). */
export function readHfConfig(dir: string): HfConfig {
  if (!statSync(dir, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`Hugging Face folder ${dir} does not exist`);
  const file = path.join(dir, CONFIG_FILE);
  if (!existsSync(file)) throw new Error(`${file} does not exist (a Hugging Face model folder holds ${CONFIG_FILE}, ${WEIGHTS_FILE} and ${TOKENIZER_FILE})`);
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`${file} is not valid JSON (${(err as Error).message})`);
  }
  return parseHfConfig(json, file);
}

/** The folder's tokenizer.json, or null when it has none. */
function hfTokenizerFile(dir: string): string | null {
  const file = path.join(dir, TOKENIZER_FILE);
  return existsSync(file) ? file : null;
}

export interface HfFolder {
  dir: string;
  config: HfConfig;
  /** Our parameter name → values in our layout (mechanism tensors of this project's exports included). */
  tensors: Map<string, NamedArray>;
  /** Parameters the checkpoint does not hold, left at their initialisation (the MLM head of a bare BertModel). */
  fresh: string[];
  /** Checkpoint tensors the model does not use, with the reason. */
  ignored: { name: string; why: string }[];
  /** <dir>/tokenizer.json and its sha256, or null when the folder has none. */
  tokenizer: { path: string; sha256: string } | null;
}

/**
 * Checks a folder's config.json and the headers of its weights against each other without reading any
 * tensor (synchronous: recipes check an initFrom folder this way before a model is built from it).
 */
function checkHfFolder(dir: string): { config: HfConfig; plan: TensorPlan } {
  const config = readHfConfig(dir);
  return { config, plan: planTensors(dir, config, readWeightHeaders(dir, config.layout)) };
}

/** Reads and checks a Hugging Face folder (see the file comment); errors name the folder, the file and the field. */
export async function readHfFolder(dir: string): Promise<HfFolder> {
  const { config, plan } = checkHfFolder(dir);
  const tokenizer = await checkTokenizer(dir, config, plan.rules);
  const tensors = new Map<string, NamedArray>();
  for (const { rule, entry, shape } of plan.matched) {
    const parts = decodeTensor(rule, await readTensor(entry), shape);
    rule.ours.forEach((name, i) => tensors.set(name, { shape, data: parts[i] }));
  }
  const unfitted = unfittedImportanceWeights(tensors);
  if (unfitted.length > 0) {
    const { tensor, problem } = unfitted[0];
    const { entry } = plan.matched.find(({ rule }) => rule.ours.includes(tensor))!;
    throw new Error(`${entry.file}: tensor '${entry.name}' ${problem}`);
  }
  for (const [copy, target] of plan.tied) {
    const a = await readTensor(copy);
    const b = await readTensor(target);
    if (a.length !== b.length || a.some((v, i) => !Object.is(v, b[i]))) {
      throw new Error(
        `${copy.file}: ${copy.name} differs from ${target.name}: untied output weights (tie_word_embeddings false) are not supported; this project ties them`,
      );
    }
  }
  return { dir, config, tensors, fresh: plan.fresh, ignored: plan.ignored, tokenizer };
}

/** Header entries by canonical name, from model.safetensors or the shards of its index. */
function readWeightHeaders(dir: string, layout: HfLayout): Map<string, TensorEntry> {
  const files = weightFiles(dir);
  const entries = new Map<string, TensorEntry>();
  for (const file of files) {
    for (const entry of readSafetensorsHeader(file).entries.values()) {
      const name = canonicalName(layout, entry.name);
      const previous = entries.get(name);
      if (previous) throw new Error(`${file}: tensor '${entry.name}' is also in ${previous.file} as '${previous.name}'`);
      entries.set(name, entry);
    }
  }
  return entries;
}

function weightFiles(dir: string): string[] {
  const single = path.join(dir, WEIGHTS_FILE);
  if (existsSync(single)) return [single];
  const indexFile = path.join(dir, WEIGHTS_INDEX_FILE);
  if (!existsSync(indexFile)) {
    const other = ['pytorch_model.bin', 'tf_model.h5', 'flax_model.msgpack'].find((f) => existsSync(path.join(dir, f)));
    const hint = other
      ? ` (it holds ${other}: convert it with transformers, AutoModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True))`
      : '';
    throw new Error(`${single} does not exist, nor ${WEIGHTS_INDEX_FILE}${hint}`);
  }
  let weightMap: unknown;
  try {
    weightMap = (JSON.parse(readFileSync(indexFile, 'utf8')) as { weight_map?: unknown }).weight_map;
  } catch (err) {
    throw new Error(`${indexFile} is not valid JSON (${(err as Error).message})`);
  }
  if (typeof weightMap !== 'object' || weightMap === null) throw new Error(`${indexFile}: weight_map must be an object of tensor name → shard file`);
  const shards = [...new Set(Object.values(weightMap))];
  for (const shard of shards) {
    if (typeof shard !== 'string' || path.basename(shard) !== shard || !shard.endsWith('.safetensors')) {
      throw new Error(`${indexFile}: weight_map names ${JSON.stringify(shard)}; shards must be .safetensors files in the same folder`);
    }
    if (!existsSync(path.join(dir, shard))) throw new Error(`${indexFile}: the shard ${path.join(dir, shard)} does not exist`);
  }
  return shards.map((s) => path.join(dir, s as string));
}

interface TensorPlan {
  rules: TensorRule[];
  matched: { rule: TensorRule; entry: TensorEntry; shape: number[] }[];
  /** [stored copy, the tensor it is tied to]. */
  tied: [TensorEntry, TensorEntry][];
  fresh: string[];
  ignored: { name: string; why: string }[];
}

/** Matches the header entries with the tensors the config implies; one error of a few lines lists the mismatches (a few names of each kind and their count). */
function planTensors(dir: string, config: HfConfig, entries: Map<string, TensorEntry>): TensorPlan {
  const layout = config.layout;
  // The attention mechanism's own tensors (this project's exports) as the registry declares them: none is drawn.
  const model = { ...config.model, dropout: 0, seed: config.seed };
  const shapes = new Map([...languageModelParameterSpecs(model).map((s): [string, number[]] => [s.name, s.shape]), ...attentionTensorShapes(model)]);
  const rules = tensorRules(layout, shapes.keys());
  const aliases = new Map(Object.entries(TIED[layout]).map(([copy, target]) => [target, copy]));
  const hasHead = [...entries.keys()].some((n) => isHeadTensor(layout, n));
  const plan: TensorPlan = { rules, matched: [], tied: [], fresh: [], ignored: [] };
  const used = new Set<string>();
  const missing: string[] = [];
  const problems: string[] = [];
  for (const rule of rules) {
    const entry = entries.get(rule.hf) ?? entries.get(aliases.get(rule.hf) ?? '');
    if (!entry) {
      if (isHeadTensor(layout, rule.hf) && !hasHead) plan.fresh.push(...rule.ours);
      else missing.push(rule.hf);
      continue;
    }
    used.add(canonicalName(layout, entry.name));
    const shape = shapes.get(rule.ours[0])!;
    const expected = hfShape(rule, shape);
    if (!sameShape(entry.shape, expected))
      problems.push(`${entry.file}: ${entry.name} is [${entry.shape.join(', ')}] but ${path.basename(config.file)} implies [${expected.join(', ')}]`);
    else if (!isFloat(entry)) problems.push(`${entry.file}: ${entry.name} has dtype ${entry.dtype} (weights must be ${FLOAT_DTYPES.join(', ')})`);
    else plan.matched.push({ rule, entry, shape });
  }
  const unexpected: string[] = [];
  for (const [name, entry] of entries) {
    if (used.has(name)) continue;
    const ignored = IGNORED[layout].find(([re]) => re.test(name));
    const tiedTo = TIED[layout][name];
    if (ignored) plan.ignored.push({ name, why: ignored[1] });
    else if (tiedTo && entries.has(tiedTo)) plan.tied.push([entry, entries.get(tiedTo)!]);
    else unexpected.push(`${entry.name} (${path.basename(entry.file)})`);
  }
  const lines = [
    ...(missing.length ? [`missing: ${listSome(missing)}`] : []),
    ...(problems.length ? [listSome(problems, '\n  ')] : []),
    ...(unexpected.length ? [`not part of a ${config.architecture ?? config.modelType} this project can load: ${listSome(unexpected)}`] : []),
  ];
  if (lines.length > 0) throw new Error(`Hugging Face folder ${dir}: the weights do not fit ${config.file}:\n  ${lines.join('\n  ')}`);
  return plan;
}

const sameShape = (a: number[], b: number[]) => a.length === b.length && a.every((n, i) => n === b[i]);
const isFloat = (entry: TensorEntry) => (FLOAT_DTYPES as readonly string[]).includes(entry.dtype);

/** The folder's tokenizer, whose vocabulary must be the embedding's rows. */
async function checkTokenizer(dir: string, config: HfConfig, rules: TensorRule[]): Promise<HfFolder['tokenizer']> {
  const file = hfTokenizerFile(dir);
  if (!file) return null;
  const tokenizer = await TextTokenizer.load(file);
  if (tokenizer.vocabSize !== config.model.vocabSize) {
    const embedding = rules.find((r) => r.ours.includes('embed.tokens.weight'))!.hf;
    throw new Error(
      `${file} has ${tokenizer.vocabSize} tokens but ${config.file} has ${config.fields['model.vocabSize']} ${config.model.vocabSize} ` +
        `(the rows of ${embedding}): the tokenizer does not belong to these weights`,
    );
  }
  return { path: file, sha256: tokenizer.sha256 };
}

/** One line on what an import read: the architecture, what it initialised fresh and what it ignored. */
export function describeImport(hf: HfFolder): string {
  const parts = [`${hf.config.architecture ?? hf.config.modelType} from ${hf.dir}`];
  if (hf.fresh.length) parts.push(`initialised fresh (not in the checkpoint): ${hf.fresh.join(', ')}`);
  const reasons = new Map<string, number>();
  for (const { why } of hf.ignored) reasons.set(why, (reasons.get(why) ?? 0) + 1);
  if (reasons.size) parts.push(`ignored: ${[...reasons].map(([why, n]) => `${n} × ${why}`).join(', ')}`);
  return parts.join('; ');
}

export interface HfRecipeSettings {
  configFile: string;
  /** Recipe key, value and the config.json field it comes from. */
  settings: { key: string; value: unknown; field: string }[];
  /** The folder's tokenizer.json, the default data.tokenizer (null: the folder has none). */
  tokenizer: string | null;
}

/**
 * What a Hugging Face folder fixes in a recipe that starts from it (initFrom), after checking its weights against its
 * config.json: the run builds its model from these settings.
 */
export function hfRecipeSettings(dir: string): HfRecipeSettings {
  const { config } = checkHfFolder(dir);
  // The vocabulary comes from data.tokenizer (checked against the weights).
  const settings = Object.entries(config.fields)
    .filter(([key]) => key !== 'model.vocabSize')
    .map(([key, field]) => ({ key, value: config.model[key.slice('model.'.length) as keyof HfModelConfig], field }));
  return { configFile: config.file, settings, tokenizer: hfTokenizerFile(dir) };
}
