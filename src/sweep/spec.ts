// Sweep files: a base recipe plus axes (a grid) and/or an explicit list of cases, expanded into runs. Each run is a
// complete recipe, validated by the recipe loader itself, with a deterministic name made of the values that vary.
//
//   name: demo-lm                               # default: the file's base name
//   recipe: recipes/demo/gpt-softmax.yaml       # the base recipe (a case may name another one)
//   set: { train.dataParallel: 1 }              # recipe keys for every run
//   cases:                                      # explicit runs; crossed with the grid when both are given
//     - { label: gpt }
//     - { label: bert, recipe: recipes/demo/bert-softmax.yaml }
//   grid:                                       # axes: every combination is a run
//     model.attention: [softmax, { name: slay, options: { prfFeatures: 16 } }]
//     train.seed: [1, 2, 3]
//   runDir: runs/demo-lm                        # default: <base recipe's train.runDir>/<name>
//   slurm: { partition: gpu, time: '24:00:00', gpus: 1 }   # an executor's settings, under its name (executor-registry.ts)
//   report: { baseline: softmax, metric: finalValLoss }
//
// Keys are recipe keys, dotted (`train.seed`) or nested (`train: { seed: 1 }`), or `model.attention`: a whole
// attention entry (a name, or { name, options }) that replaces the base recipe's, options included, so that every
// mechanism carries its own options. Later sources win: base recipe < set < case < grid axes.
//
// `npm run sweep -- plan|run|guard … --set key=value` (repeatable) adds keys for every run on top of the file's `set`,
// without editing the file; the runs' guards and trainers get the same --set. A key that a case or a grid axis also sets is
// refused rather than silently overridden by it. The backend of a run is decided as `train` decides it: `--backend NAME`
// (passed on to the guards and their trainers) > $SLAYFORMER_BACKEND > the run's recipe > auto; runs are packed onto
// the cores by the device that gives here (trainingCores).
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import YAML from 'yaml';
import { chooseBackend, resolveBackend, type BackendChoice, type BackendProbe, type Device } from '../backend/device.ts';
import { isRecord, flattenPaths, setPath } from '../core/json.ts';
import { resolveDataParallel } from '../backend/device.ts';
import { parseRecipe } from '../store/recipes.ts';
import { parseAssignment, parseYaml, RecipeError } from '../recipe/load.ts';
import { RECIPE_SCHEMA } from '../recipe/schema.ts';
import type { Recipe } from '../recipe/schema.ts';
import { executorSections, readExecutorSettings } from './executor-registry.ts';
import type { RunSet, SetRun } from './run-set.ts';
import {
  ATTENTION_KEY,
  attentionEntry,
  checkUniqueNames,
  expand,
  mergedValues,
  runCountProblems,
  runName,
  varyingKeys,
  type Axis,
  type Source,
} from './grid.ts';
import { REPORT_METRICS } from './report-metrics.ts';
import type { ReportMetric } from './report-metrics.ts';

const SWEEP_CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'sweep.ts');

/** Keys the sweep sets itself for every run. */
const RESERVED_KEYS = new Set(['name', 'train.runDir']);

export interface SweepRun extends SetRun {
  /** Deterministic name from the varying values: the recipe's `name`, so run folders are `<runDir>/<name>-<time>/`. */
  name: string;
  /** The name without the seed part: runs that differ only in their seed share it. */
  group: string;
  /** The name without the seed and attention parts: a run and its baseline (same seed) share it. */
  pairing: string;
  /** The sweep's value of every key it sets for this run (after merging), for the report's pairing. */
  values: Record<string, unknown>;
  /** The resolved recipe (absolute paths, every default filled in). */
  recipe: Recipe;
  /** The device it will train on here (--backend > $SLAYFORMER_BACKEND > the recipe's backend > auto), as it is packed by. */
  device: Device;
}

/** A sweep file's runs; each run's guard is `sweep guard <file> <index>`, which trains (or resumes) the run's recipe. */
export interface Sweep extends RunSet<SweepRun> {
  /** Keys whose value differs between runs, in name order. */
  varying: string[];
  report: { baseline: string | null; metric: ReportMetric };
  /** The command line's `--set key=value` entries the sweep was loaded with (its guards get them too). */
  overrides: string[];
  /** The command line's --backend, if given: its guards and their trainers get it too, so that it beats $SLAYFORMER_BACKEND there as well. */
  backend: BackendChoice | null;
}

export class SweepError extends Error {
  constructor(
    readonly file: string,
    readonly problems: string[],
  ) {
    super(problems.map((p) => `${file}: ${p}`).join('\n'));
    this.name = 'SweepError';
  }
}

/** A sweep file's keys: its own, then one section per executor that takes settings. */
const topKeys = () => ['name', 'recipe', 'set', 'grid', 'cases', 'runDir', 'report', ...executorSections()];
const LEAF_KEYS = new Set<string>([...Object.keys(RECIPE_SCHEMA), ATTENTION_KEY]);

/**
 * Reads, validates and expands a sweep file; every problem names the file and the key. `overrides`: the command
 * line's `--set key=value` entries (see the file comment), passed on to every guard; `backend`: its --backend; `probe`:
 * what is installed, which resolves `auto` (this machine's unless a test injects one).
 */
export function loadSweep(
  file: string,
  overrides: readonly string[] = [],
  { backend = null, probe }: { backend?: BackendChoice | null; probe?: BackendProbe } = {},
): Sweep {
  const spec = readSweepFile(file);
  const problems: string[] = [];
  const commandLine = commandLineSource(overrides, spec, problems);
  if (problems.length > 0) throw new SweepError(file, problems);
  const combos = expand(spec.cases.length > 0 ? spec.cases : [{ where: 'recipe', recipeFile: null, label: null, values: new Map() }], spec.axes);
  const varying = varyingKeys(combos, spec.baseRecipe);
  const named = combos.map((combo) => ({ combo, ...runName(combo, varying, spec.axes, spec.name) }));
  checkUniqueNames(
    named.map((n) => ({ name: n.name, where: n.combo.map((s) => s.where).join(' × ') })),
    problems,
  );
  if (problems.length > 0) throw new SweepError(file, problems);

  const cache = new Map<string, Record<string, unknown>>();
  const firstRecipe = resolveRunRecipe(
    spec.baseRecipe ?? combos[0].find((s) => s.recipeFile)!.recipeFile!,
    cache,
    [spec.set, commandLine],
    'base',
    null,
    problems,
  );
  if (!firstRecipe) throw new SweepError(file, problems);
  const runDir = path.resolve(spec.runDir ?? path.join(firstRecipe.train.runDir, spec.name));
  // It names folders and may reach an executor's batch script: a newline there would be a shell line of its own.
  if (/[\u0000-\u001f\u007f]/.test(runDir)) {
    const from = spec.runDir === null ? ` (the base recipe's train.runDir + the sweep's name)` : '';
    throw new SweepError(file, [`runDir ${JSON.stringify(runDir)}${from} holds a control character (newline, tab, …); name a folder without one`]);
  }
  const runs: SweepRun[] = [];
  named.forEach(({ combo, name, group, pairing }, index) => {
    const recipeFile = [...combo].reverse().find((s) => s.recipeFile)?.recipeFile ?? spec.baseRecipe!;
    const recipe = resolveRunRecipe(recipeFile, cache, [spec.set, commandLine, ...combo], name, runDir, problems);
    if (!recipe) return;
    const device = resolveBackend(chooseBackend({ flag: backend ?? undefined, recipe: recipe.backend }).choice, probe);
    runs.push({ index, name, group, pairing, values: mergedValues([spec.set, commandLine, ...combo]), recipe, device, ...trainingCores(recipe, device) });
  });
  if (problems.length > 0) throw new SweepError(file, dedupe(problems));
  if (spec.report.baseline !== null && !runs.some((r) => r.recipe.model.attention.name === spec.report.baseline)) {
    throw new SweepError(file, [`report.baseline: no run uses attention '${spec.report.baseline}'`]);
  }
  const guard = [SWEEP_CLI, 'guard', path.resolve(file), ...overrides.flatMap((entry) => ['--set', entry]), ...(backend ? ['--backend', backend] : [])];
  return {
    file,
    name: spec.name,
    runDir,
    runs,
    varying,
    executorSettings: spec.executorSettings,
    report: spec.report,
    guard,
    multiTask: true,
    overrides: [...overrides],
    backend,
  };
}

/**
 * The `--set key=value` entries as one source (values parsed as YAML scalars, as recipe overrides are). A key that a
 * case or a grid axis sets too (or a key inside it, or one it is inside of) is a problem: the case or axis would win.
 */
function commandLineSource(overrides: readonly string[], spec: ReturnType<typeof readSweepFile>, problems: string[]): Source {
  const mapping: Record<string, unknown> = {};
  for (const entry of overrides) {
    const parsed = parseAssignment(entry);
    if (!('problem' in parsed)) mapping[parsed.key] = parsed.value;
    else if (parsed.problem === 'not YAML') problems.push(`--set ${entry}: the value is not valid YAML (${parsed.message})`);
    else problems.push(`--set ${entry}: expected key=value (e.g. --set train.lr=1e-3)`);
  }
  const values = keyValues(mapping, '--set', problems);
  const related = (a: string, b: string) => a === b || a.startsWith(`${b}.`) || b.startsWith(`${a}.`);
  for (const key of values.keys()) {
    const axis = spec.axes.find((a) => related(a.key, key));
    if (axis) problems.push(`--set ${key}: the sweep's grid varies ${axis.key}, which would override it; change the grid in the file instead`);
    const inCase = spec.cases.find((c) => [...c.values.keys()].some((k) => related(k, key)));
    if (inCase)
      problems.push(
        `--set ${key}: ${inCase.where} sets ${[...inCase.values.keys()].find((k) => related(k, key))}, which would override it; change the case in the file instead`,
      );
  }
  return { where: '--set', recipeFile: null, label: null, values };
}

/**
 * Cores a training run keeps busy on `device`: its data-parallel replicas where each keeps one core busy (wasm,
 * cpu), the whole machine where the backend's thread pool takes every core (tensorflow: such runs go one at a
 * time); a scheduler's task asks for its replicas (`auto`: 1, the node then gives what it has).
 */
export function trainingCores(recipe: Recipe, device: Device): Pick<SetRun, 'cores' | 'requestedCpus'> {
  const { dataParallel, batchSize } = recipe.train;
  return {
    cores: device.coresPerReplica === 'all' ? 'all' : resolveDataParallel(dataParallel, device, batchSize) * device.coresPerReplica,
    requestedCpus: dataParallel === 'auto' ? 1 : Math.min(dataParallel, batchSize),
  };
}

/** The sweep file's sections, each checked on its own (not yet expanded into recipes). */
function readSweepFile(file: string) {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (err) {
    throw new SweepError(file, [`cannot read the sweep file (${(err as NodeJS.ErrnoException).code ?? String(err)})`]);
  }
  const { value: root, errors } = parseYaml(text);
  if (errors.length > 0) throw new SweepError(file, errors);
  if (!isRecord(root)) throw new SweepError(file, [`a sweep file must be a mapping (got ${describe(root)})`]);
  const problems: string[] = [];
  const keys = topKeys();
  for (const key of Object.keys(root)) if (!keys.includes(key)) problems.push(`unknown key ${key}; a sweep file has ${keys.join(', ')}`);
  const name = optionalString(root, 'name', problems) ?? path.basename(file, path.extname(file));
  if (!/^[A-Za-z0-9._-]+$/.test(name)) problems.push(`name ${JSON.stringify(name)} may only hold letters, digits, '.', '_' and '-' (it names folders)`);
  const spec = {
    name,
    baseRecipe: optionalString(root, 'recipe', problems),
    set: { where: 'set', recipeFile: null, label: null, values: keyValues(root.set ?? {}, 'set', problems) } as Source,
    cases: readCases(root.cases, problems),
    axes: readGrid(root.grid, problems),
    runDir: optionalString(root, 'runDir', problems),
    executorSettings: readExecutorSettings(root, problems, describe),
    report: readReport(root.report, problems),
  };
  if (spec.baseRecipe === null && (spec.cases.length === 0 || spec.cases.some((c) => c.recipeFile === null))) {
    problems.push('recipe (the base recipe file) is required unless every case names its own recipe');
  }
  problems.push(...runCountProblems(spec.cases, spec.axes));
  if (problems.length > 0) throw new SweepError(file, problems);
  return spec;
}

/** The run of a sweep by index (as an executor's task gets it) or by name. */
export function findRun(sweep: Sweep, which: string): SweepRun {
  const run = /^\d+$/.test(which) ? sweep.runs[Number(which)] : sweep.runs.find((r) => r.name === which);
  if (!run) throw new Error(`${sweep.file}: no run ${which} (the sweep has runs 0–${sweep.runs.length - 1}: ${sweep.runs.map((r) => r.name).join(', ')})`);
  return run;
}

/**
 * The sweep restricted to the runs `only` names: a comma-separated list of run names, globs (`gpt-*`) or indices.
 * Runs keep their index (and so their executor task's index).
 */
export function selectRuns(sweep: Sweep, only: string | undefined): Sweep {
  if (only === undefined) return sweep;
  const patterns = only
    .split(',')
    .map((p) => p.trim())
    .filter((p) => p !== '');
  const matchers = patterns.map((p) => {
    if (/^\d+$/.test(p)) return (r: SweepRun) => r.index === Number(p);
    const re = new RegExp(
      `^${p
        .replace(/[.+^${}()|[\]\\]/g, '\\$&')
        .replace(/\*/g, '.*')
        .replace(/\?/g, '.')}$`,
    );
    return (r: SweepRun) => re.test(r.name);
  });
  const runs = sweep.runs.filter((r) => matchers.some((m) => m(r)));
  if (runs.length === 0) throw new Error(`--only ${only}: no run of ${sweep.file} matches (runs: ${sweep.runs.map((r) => r.name).join(', ')})`);
  return { ...sweep, runs };
}

function readCases(value: unknown, problems: string[]): Source[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value) || value.length === 0) {
    problems.push(`cases must be a non-empty list of mappings of recipe keys (got ${describe(value)})`);
    return [];
  }
  return value.map((entry, i) => {
    const where = `cases[${i}]`;
    if (!isRecord(entry)) {
      problems.push(`${where} must be a mapping of recipe keys (got ${describe(entry)})`);
      return { where, recipeFile: null, label: null, values: new Map() };
    }
    const { recipe, label, ...keys } = entry;
    if (recipe !== undefined && (typeof recipe !== 'string' || recipe === ''))
      problems.push(`${where}.recipe must be a recipe file path (got ${describe(recipe)})`);
    if (label !== undefined && (typeof label !== 'string' || !/^[A-Za-z0-9._-]+$/.test(label))) {
      problems.push(`${where}.label must be a word of letters, digits, '.', '_' and '-' (got ${describe(label)})`);
    }
    return {
      where,
      recipeFile: typeof recipe === 'string' ? recipe : null,
      label: typeof label === 'string' ? label : null,
      values: keyValues(keys, where, problems),
    };
  });
}

function readGrid(value: unknown, problems: string[]): Axis[] {
  if (value === undefined || value === null) return [];
  if (!isRecord(value)) {
    problems.push(`grid must be a mapping of recipe keys to lists of values (got ${describe(value)})`);
    return [];
  }
  const axes: Axis[] = [];
  for (const [key, values] of flattenKeys(value)) {
    if (!Array.isArray(values) || values.length === 0) {
      problems.push(`grid.${key} must be a non-empty list of values (got ${describe(values)})`);
      continue;
    }
    if (RESERVED_KEYS.has(key)) problems.push(`grid.${key}: the sweep sets ${key} itself`);
    values.forEach((v, i) => checkAttentionEntry(key, v, `grid.${key}[${i}]`, problems));
    axes.push({ key, values });
  }
  return axes;
}

/** A mapping of recipe keys (dotted or nested) as one map of dotted keys. */
function keyValues(value: unknown, where: string, problems: string[]): Map<string, unknown> {
  if (!isRecord(value)) {
    problems.push(`${where} must be a mapping of recipe keys (got ${describe(value)})`);
    return new Map();
  }
  const out = flattenKeys(value);
  for (const [key, v] of out) {
    if (RESERVED_KEYS.has(key))
      problems.push(`${where}.${key}: the sweep sets ${key} itself (runs are named by their varying values; use runDir for the folder)`);
    checkAttentionEntry(key, v, `${where}.${key}`, problems);
  }
  return out;
}

/**
 * Nested mappings down to recipe keys: `{ train: { seed: 1 } }` and `{ 'train.seed': 1 }` both give `train.seed`.
 * `model.attention` and `model.attention.options` stop the descent (their values are mappings); an empty section
 * sets nothing. An unknown key is kept as written; the recipe loader then names it (with a suggestion).
 */
function flattenKeys(node: Record<string, unknown>): Map<string, unknown> {
  const isRecipeKey = (key: string) => LEAF_KEYS.has(key) || key.startsWith(`${ATTENTION_KEY}.options.`);
  return new Map(Object.entries(flattenPaths(node, isRecipeKey)).filter(([key, value]) => isRecipeKey(key) || !isRecord(value)));
}

function checkAttentionEntry(key: string, value: unknown, where: string, problems: string[]): void {
  if (key !== ATTENTION_KEY) return;
  if (typeof value === 'string') return;
  if (!isRecord(value) || typeof value.name !== 'string' || Object.keys(value).some((k) => k !== 'name' && k !== 'options')) {
    problems.push(`${where} must be an attention name or a mapping { name, options } (got ${describe(value)})`);
  } else if (value.options !== undefined && value.options !== null && !isRecord(value.options)) {
    problems.push(`${where}.options must be a mapping of attention options (got ${describe(value.options)})`);
  }
}

/**
 * The recipe of one run: the base recipe file's mapping with the sources' keys written in (an attention entry
 * replaces the whole `model.attention`), `name` and `train.runDir` set by the sweep, then validated by the recipe
 * loader. Its problems are added to `problems` prefixed with the run's name; returns null when there are any.
 */
function resolveRunRecipe(
  recipeFile: string,
  cache: Map<string, Record<string, unknown>>,
  sources: Source[],
  runName: string,
  runDir: string | null,
  problems: string[],
): Recipe | null {
  let base = cache.get(recipeFile);
  if (!base) {
    let text: string;
    try {
      text = fs.readFileSync(recipeFile, 'utf8');
    } catch (err) {
      problems.push(`recipe ${recipeFile}: cannot be read (${(err as NodeJS.ErrnoException).code ?? String(err)})`);
      return null;
    }
    const { value, errors } = parseYaml(text);
    if (errors.length > 0) {
      problems.push(...errors.map((e) => `recipe ${recipeFile}: ${e}`));
      return null;
    }
    base = isRecord(value) ? value : {};
    cache.set(recipeFile, base);
  }
  const mapping = structuredClone(base);
  for (const source of sources) {
    for (const [key, value] of source.values) {
      setPath(mapping, key, key === ATTENTION_KEY ? attentionEntry(value) : structuredClone(value));
    }
  }
  setPath(mapping, 'name', runName);
  if (runDir !== null) setPath(mapping, 'train.runDir', runDir);
  try {
    return parseRecipe(YAML.stringify(mapping), recipeFile);
  } catch (err) {
    if (!(err instanceof RecipeError)) throw err;
    const where =
      sources.length > 1 || runDir !== null ? `run ${runName} (${recipeFile} with ${sources.map((s) => s.where).join(', ')})` : `recipe ${recipeFile}`;
    for (const problem of err.problems) problems.push(`${where}: ${problem}`);
    return null;
  }
}

/** The same problem reported by many runs is listed once, with the number of runs. */
function dedupe(problems: string[]): string[] {
  const byText = new Map<string, number>();
  for (const p of problems) {
    const text = p.replace(/^run \S+ \((\S+) with [^)]*\): /, 'runs of $1: ');
    byText.set(text, (byText.get(text) ?? 0) + 1);
  }
  if (byText.size === problems.length) return problems;
  return [...byText].map(([text, n]) => (n > 1 ? `${text} (${n} runs)` : text));
}

function readReport(value: unknown, problems: string[]): Sweep['report'] {
  const out: Sweep['report'] = { baseline: null, metric: 'finalValLoss' };
  if (value === undefined || value === null) return out;
  if (!isRecord(value)) {
    problems.push(`report must be a mapping (got ${describe(value)})`);
    return out;
  }
  for (const [key, v] of Object.entries(value)) {
    if (key === 'baseline') {
      if (typeof v === 'string' && v !== '') out.baseline = v;
      else problems.push(`report.baseline must be an attention name (got ${describe(v)})`);
    } else if (key === 'metric') {
      if (typeof v === 'string' && v in REPORT_METRICS) out.metric = v as ReportMetric;
      else problems.push(`report.metric must be one of ${Object.keys(REPORT_METRICS).join(', ')} (got ${describe(v)})`);
    } else {
      problems.push(`unknown key report.${key}; allowed: baseline, metric`);
    }
  }
  return out;
}

function optionalString(node: Record<string, unknown>, key: string, problems: string[]): string | null {
  const value = node[key];
  if (value === undefined || value === null) return null;
  if (typeof value === 'string' && value !== '') return value;
  problems.push(`${key} must be a non-empty string (got ${describe(value)})`);
  return null;
}

function describe(value: unknown): string {
  if (value === undefined) return 'nothing';
  return JSON.stringify(value);
}
