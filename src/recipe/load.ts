// Reading a recipe: YAML checked against the schema (schema.ts), command-line overrides, environment variables in
// paths, defaults, and the constraints between keys; every error names the file and the key. An initFrom that names a
// folder whose own config fixes the model (a Hugging Face folder) supplies the model keys through RecipeHooks: this
// module reads no such folder itself (store/recipes.ts passes the hook).
import fs from 'node:fs';
import path from 'node:path';
import YAML, { LineCounter } from 'yaml';
import { isRecord } from '../core/json.ts';
import { attentionKindProblem, attentionNames, attentionOptionSpecs } from '../model/attention/index.ts';
// resolveOptions is the registry's own per-option checker; index.ts does not re-export it.
import { resolveOptions } from '../model/attention/registry.ts';
import { tensorSizeProblems } from './model-config.ts';
import { nameWithModelOverrides } from './run-name.ts';
import { boundsText, isStatic, KEYS, MODEL_PRESETS, RECIPE_SCHEMA, REQUIRED, SCHEMA, SECTIONS, unflatten } from './schema.ts';
import type { DerivedDefault, FieldSpec, FieldType, ModelPreset, Recipe, RecipeKey } from './schema.ts';

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
  /** The model.preset that set it, when the recipe did not. */
  preset?: ModelPreset;
}

/** What a folder named by `initFrom` fixes in a recipe: model keys with the config field each comes from, and the default data.tokenizer. */
export interface InitFromSettings {
  /** The file the settings come from, for messages. */
  configFile: string;
  settings: { key: string; value: unknown; field: string }[];
  tokenizer: string | null;
}

/**
 * What a recipe reads from outside the recipe module: `initFromSettings` = the settings of the folder `initFrom`
 * names, or null when that folder fixes nothing (store/recipes.ts supplies Hugging Face folders', src/hf/folder.ts).
 */
export interface RecipeHooks {
  initFromSettings?: (initFrom: string) => InitFromSettings | null;
}

/**
 * Reads, validates and resolves a recipe. `overrides` are command-line arguments of the form
 * `--train.lr=1e-3` / `--model.attention.options.prfFeatures=32`; each value is parsed as a YAML scalar
 * (`1e-3` → number, `true` → boolean, `null` → null, anything else → string) and then checked exactly like
 * the file. Relative paths (data.dataset, data.tokenizer, train.runDir) resolve against the current
 * working directory and come back absolute. Every error starts with the recipe file path.
 */
export function loadRecipeWith(hooks: RecipeHooks, file: string, overrides: string[] = []): Recipe {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new RecipeError(file, [`cannot read the recipe (${(err as NodeJS.ErrnoException).code ?? String(err)})`]);
  }
  return parseRecipeWith(hooks, text, file, overrides);
}

/** loadRecipeWith on a string (the file name is used for messages and the default `name`). */
export function parseRecipeWith(hooks: RecipeHooks, text: string, file: string, overrides: string[] = []): Recipe {
  const problems: string[] = [];
  const { value, errors } = parseYaml(text);
  if (errors.length > 0) throw new RecipeError(file, errors);
  const root: unknown = value ?? {};
  const given = new Map<string, Given>();
  if (!isRecord(root)) throw new RecipeError(file, [`the recipe must be a mapping of sections (got ${describe(root)})`]);
  collect(root, '', '', given, problems);
  for (const arg of overrides) applyOverride(arg, given, problems);
  if (problems.length > 0) throw new RecipeError(file, problems);
  const recipe = resolve(given, file, hooks);
  // The run's name says which model keys the command line changed (run-name.ts), unless the command line names it.
  return overrides.some((arg) => arg.startsWith('--name=')) ? recipe : { ...recipe, name: nameWithModelOverrides(recipe.name, overrides) };
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
      if (!isRecord(value)) problems.push(`${at(origin)}${full} must be a mapping of keys (got ${describe(value)})`);
      else collect(value, `${full}.`, origin, out, problems);
    } else {
      problems.push(`${at(origin)}unknown key ${full}${suggest(full)}`);
    }
  }
}

/**
 * One `key=value` setting of a recipe key, as a command line gives it (`--train.lr=1e-3` after its dashes, a sweep's
 * `--set train.lr=1e-3`): the value parsed as a YAML scalar (`1e-3` → number, `true` → boolean, `null` → null, anything
 * else → string). Not of that shape, or a value that is not YAML, is a problem the caller words for its flag.
 */
export function parseAssignment(text: string): { key: string; value: unknown } | { problem: 'not key=value' } | { problem: 'not YAML'; message: string } {
  const match = /^([A-Za-z0-9_.-]+)=(.*)$/s.exec(text);
  if (!match) return { problem: 'not key=value' };
  const [, key, raw] = match;
  try {
    return { key, value: raw === '' ? '' : YAML.parse(raw) };
  } catch (err) {
    return { problem: 'not YAML', message: (err as Error).message };
  }
}

function applyOverride(arg: string, given: Map<string, Given>, problems: string[]): void {
  const parsed = arg.startsWith('--') ? parseAssignment(arg.slice(2)) : { problem: 'not key=value' as const };
  if ('problem' in parsed) {
    problems.push(
      parsed.problem === 'not YAML'
        ? `override ${arg}: the value is not valid YAML (${parsed.message})`
        : `override ${JSON.stringify(arg)} must look like --section.key=value (e.g. --train.lr=1e-3)`,
    );
    return;
  }
  const { key, value } = parsed;
  const optionsKey = KEYS.find((k) => SCHEMA[k].type.kind === 'attentionOptions' && key.startsWith(`${k}.`));
  if (optionsKey) {
    // One attention option: merged into the file's options mapping, checked with them against the registry.
    const previous = given.get(optionsKey);
    const options = isRecord(previous?.value) ? { ...previous.value } : {};
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

function resolve(given: Map<string, Given>, file: string, hooks: RecipeHooks): Recipe {
  const problems: string[] = [];
  expandEnvironment(given, problems);
  expandPreset(given);
  if (problems.length === 0 && hooks.initFromSettings) applyInitFromSettings(given, problems, hooks.initFromSettings);
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
  const crossProblems = crossChecks(
    recipe,
    (key) => given.get(key)?.origin ?? '',
    (key) => given.has(key) && !given.get(key)!.preset,
    (key) => presetNote(given.get(key)),
  );
  if (crossProblems.length > 0) throw new RecipeError(file, crossProblems);
  return recipe;
}

/**
 * model.preset's keys, each where the recipe leaves it out (docs/attention.md, "Transformer++"); marked, so that messages name
 * the preset. An unknown name sets nothing: the type check reports it with the list of presets.
 */
function expandPreset(given: Map<string, Given>): void {
  const entry = given.get('model.preset');
  const name = entry?.value;
  if (typeof name !== 'string' || !Object.hasOwn(MODEL_PRESETS, name)) return;
  const preset = name as ModelPreset;
  for (const [key, value] of Object.entries(MODEL_PRESETS[preset])) {
    if (!given.has(key)) given.set(key, { value, origin: entry!.origin, preset });
  }
}

/** " (set by model.preset <name>)" for a key a preset set, else "". */
function presetNote(entry: Given | undefined): string {
  return entry?.preset ? ` (set by model.preset ${entry.preset})` : '';
}

/**
 * A folder `initFrom` names that fixes the model (a Hugging Face folder: its config.json): its settings fill the model
 * keys the recipe leaves out, a recipe value that contradicts one is an error naming both; its tokenizer is the
 * default data.tokenizer.
 */
function applyInitFromSettings(given: Map<string, Given>, problems: string[], settingsOf: NonNullable<RecipeHooks['initFromSettings']>): void {
  const initFrom = given.get('initFrom');
  if (typeof initFrom?.value !== 'string') return;
  let source: InitFromSettings | null;
  try {
    source = settingsOf(initFrom.value);
  } catch (err) {
    problems.push(`${at(initFrom.origin)}initFrom ${initFrom.value}: ${(err as Error).message}`);
    return;
  }
  if (!source) return;
  for (const { key, value, field } of source.settings) {
    const entry = given.get(key);
    if (entry === undefined) given.set(key, { value, origin: '' });
    else if (entry.value !== value && entry.preset) {
      problems.push(
        `${at(entry.origin)}model.preset ${entry.preset} makes ${key} ${JSON.stringify(entry.value)} but ${source.configFile} (initFrom) makes it ${JSON.stringify(value)} (from ${field}): leave model.preset out, or set ${key} to that`,
      );
    } else if (entry.value !== value) {
      problems.push(
        `${at(entry.origin)}${key} is ${describe(entry.value)} but ${source.configFile} (initFrom) makes it ${JSON.stringify(value)} (from ${field}): leave ${key} out or set it to that`,
      );
    }
  }
  if (!given.has('data.tokenizer') && source.tokenizer) given.set('data.tokenizer', { value: source.tokenizer, origin: '' });
}

/** Rotary positions turn channel pairs: the head size must be even (null when it is, or positions are learned). */
function ropeProblem(m: Pick<Recipe['model'], 'dModel' | 'numHeads' | 'positional'>): string | null {
  const head = m.dModel / m.numHeads;
  if (m.positional !== 'rope' || !Number.isInteger(head) || head % 2 === 0) return null;
  return `model.positional 'rope' rotates channel pairs: the head size model.dModel / model.numHeads (${head}) must be even`;
}

/** Constraints between keys (each message names the keys involved). */
function crossChecks(r: Recipe, origin: (key: string) => string, isGiven: (key: string) => boolean, note: (key: string) => string): string[] {
  const problems: string[] = [];
  if (r.train.warmupFraction !== null && isGiven('train.warmupSteps')) {
    problems.push(`${at(origin('train.warmupFraction'))}train.warmupFraction and train.warmupSteps are both set; set one of them`);
  }
  if (r.model.dModel % r.model.numHeads !== 0) {
    problems.push(`${at(origin('model.numHeads'))}model.dModel (${r.model.dModel}) must be divisible by model.numHeads (${r.model.numHeads})`);
  }
  const rope = ropeProblem(r.model);
  if (rope) problems.push(`${at(origin('model.positional'))}${rope}${note('model.positional')}`);
  const kind = attentionKindProblem(r.model.attention.name, r.model.kind);
  if (kind) problems.push(`${at(origin('model.attention.name'))}${kind}`);
  if (r.model.maxSeqLen < r.data.seqLen) {
    problems.push(`${at(origin('model.maxSeqLen'))}model.maxSeqLen (${r.model.maxSeqLen}) must be ≥ data.seqLen (${r.data.seqLen})`);
  }
  if (r.data.documentMask && r.model.kind !== 'gpt') {
    problems.push(`${at(origin('data.documentMask'))}data.documentMask applies to GPT packing; a BERT sequence already holds one document (set it false)`);
  }
  if (r.train.precision === 'bf16' && r.train.executor !== 'xla') {
    problems.push(
      `${at(origin('train.precision'))}train.precision bf16 runs on train.executor xla only (train.executor is ${r.train.executor}; TensorFlow.js has no bfloat16): set train.executor: xla, or train.precision: fp32`,
    );
  }
  if (r.train.attentionKernel === 'fused' && (r.train.executor !== 'xla' || r.model.attention.name !== 'softmax')) {
    problems.push(
      `${at(origin('train.attentionKernel'))}train.attentionKernel fused is softmax attention on train.executor xla (this recipe has train.executor ${r.train.executor}, model.attention.name ${r.model.attention.name}): set both, or train.attentionKernel: composed`,
    );
  }
  if (r.train.remat && r.train.executor !== 'xla') {
    problems.push(
      `${at(origin('train.remat'))}train.remat runs on train.executor xla only (train.executor is ${r.train.executor}; it shapes the programs XLA compiles): set train.executor: xla, or train.remat: false`,
    );
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
  const attention = isRecord(config.attention) ? config.attention : {};
  const value = (key: string) => (key.startsWith('model.attention.') ? attention[key.slice('model.attention.'.length)] : config[key.slice('model.'.length)]);
  // model.preset is the recipe's shorthand: a saved model config holds the keys it set.
  for (const key of KEYS.filter((k) => k.startsWith('model.') && k !== 'model.preset')) {
    const problem = checkType(key, SCHEMA[key], value(key), value);
    if (problem) problems.push(problem);
  }
  if (problems.length > 0) return problems;
  const options = checkAttentionOptions(attention.name as string, (attention.options ?? {}) as Record<string, unknown>);
  if (typeof options === 'string') problems.push(options);
  const m = config as unknown as Recipe['model'] & { vocabSize: number };
  if (m.dModel % m.numHeads !== 0) problems.push(`model.dModel (${m.dModel}) must be divisible by model.numHeads (${m.numHeads})`);
  const rope = ropeProblem(m);
  if (rope) problems.push(rope);
  const kind = attentionKindProblem(m.attention.name, m.kind);
  if (kind) problems.push(kind);
  problems.push(...tensorSizeProblems(m, undefined, Number.isSafeInteger(m.vocabSize) ? m.vocabSize : undefined));
  return problems;
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
      return violates(type, value) ? fail([noun, ...boundsText(type)].join(' ')) : null;
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
      return value === null || isRecord(value) ? null : fail('a mapping of attention options');
    case 'custom': {
      const expected = type.check(value, given);
      return expected === null ? null : fail(expected);
    }
  }
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

function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  if (Array.isArray(value)) return `a list ${JSON.stringify(value)}`;
  if (isRecord(value)) return `a mapping ${JSON.stringify(value)}`;
  return typeof value === 'number' && !Number.isFinite(value) ? String(value) : JSON.stringify(value);
}

function at(origin: string): string {
  return origin ? `override ${origin}: ` : '';
}
