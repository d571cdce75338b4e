// Checkpoints: `<run>/checkpoints/step-000100/` holds
//   model.safetensors      parameters and the attention mechanisms' buffers (random projections), by stable name
//   optimizer.safetensors  AdamW moments `m.<parameter>` and `v.<parameter>`; metadata.step = AdamW's step count
//   cursor.json            the training stream's DataCursor (exact resume of the batch order)
//   state.json             counters (step, tokens, batches, seconds, the logging window), validation losses,
//                          the tokenizer's path and sha256
//   recipe.json            the resolved recipe
//   COMPLETE               written last; a folder without it is ignored by every reader
// Nothing else is random: dropout masks are seeded by deriveSeed(train.seed, `dropout/<step>`) and the
// Performer/DARKFormer projection in use is draw floor(step / redrawInterval), so both follow from the step.
//
// Writing is crash-safe (core/atomic-folder.ts): the files go into `checkpoints/.step-000100.tmp-<pid>/`, each is fsynced,
// COMPLETE records their sha256, the folder is fsynced and renamed to `step-000100`, and the parent is fsynced. A
// process killed at any moment leaves every earlier checkpoint complete; a save that fails (a full disk) removes its
// temporary folder, and a resume removes those of saves whose process died (removeDeadSaves). Loading checks the checksums, and treats
// every file as untrusted: state, recipe and cursor are validated and the tensors decoded with bounds checks.
//
// A checkpoint belongs to a run when it sits in `<run>/checkpoints/step-NNNNNN/`, `<run>` carries the run marker that
// RunLogger writes (run-folder.ts) and the marker's run id is the one in the checkpoint's state.json (when both have
// one); only then does a resume continue in (and prune, and replace final/ of) that folder. File names alone
// (config.json, env.json) make no folder a run.
import { existsSync, readdirSync, realpathSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { parse as parseYaml } from 'yaml';
import { parseCursor } from '../data/stream.ts';
import type { DataCursor } from '../data/stream.ts';
import { decodeSafetensors, encodeSafetensors } from '../hf/safetensors.ts';
import type { NamedArray } from '../hf/safetensors.ts';
import type { LanguageModel } from '../model/lm.ts';
import { ARCHITECTURE_DEFAULTS, architectureOf } from '../model/transformer.ts';
import type { Architecture } from '../model/transformer.ts';
import type { Recipe } from '../recipe/schema.ts';
import { canonicalJson } from '../core/json.ts';
import {
  COMPLETE_MARKER,
  isSymbolicLink,
  readCheckedFiles,
  removeDeadTemporaries,
  removeOwnFolder,
  temporaryWriterIsLive,
  writeFolderAtomically,
} from '../core/atomic-folder.ts';
import { CHECKPOINT_NAME, checkpointName, CHECKPOINTS_DIR, CURSOR_FILE, FINAL_DIR, MODEL_FILE, OPTIMIZER_FILE, RECIPE_FILE, STATE_FILE } from './layout.ts';
import { FINAL_FILES, modelFileHeader, modelTensors, namedArrays, parseSavedRecipe } from './model-folder.ts';
import { RUN_ID_PATTERN, RunFolder, runFolderOf, type CheckpointInfo } from './run-folder.ts';

const STATE_VERSION = 1;
/** What a checkpoint folder holds besides COMPLETE: the only names pruning may delete. */
const CHECKPOINT_FILES = new Set([MODEL_FILE, OPTIMIZER_FILE, CURSOR_FILE, STATE_FILE, RECIPE_FILE]);

/** The optimizer state a checkpoint holds (AdamW's, src/train/optimizer.ts): its step count and moments by parameter name. */
export interface OptimizerState {
  getState(): { step: number; m: Map<string, tf.Tensor>; v: Map<string, tf.Tensor> };
  setState(step: number, m: Map<string, tf.Tensor>, v: Map<string, tf.Tensor>): void;
}

/** Loop counters a resumed run continues from. */
export interface TrainingCounters {
  /** Optimizer steps done. */
  step: number;
  /** Input tokens trained on. */
  tokens: number;
  /** Micro-batches taken from the training stream. */
  batchesSeen: number;
  /** Seconds spent in train steps, and since the start of the run (both continue across resumes). */
  trainSeconds: number;
  elapsedS: number;
  /** The partial logging window (sums since the last train record), so the next record averages the same steps. */
  window: { loss: number; steps: number; tokens: number; seconds: number };
  /** Updates dropped by train.nanPolicy = skip, in all and in a row up to this step. */
  skippedSteps: number;
  consecutiveSkips: number;
}

export interface CheckpointState extends TrainingCounters {
  version: number;
  /** Validation loss measured at this step (null when no validation ran at this step). */
  valLoss: number | null;
  /** Lowest validation loss of the run so far. */
  bestValLoss: number | null;
  tokenizer: { path: string; sha256: string };
  /** The id in the run folder's marker when the checkpoint was saved (null: none, or a checkpoint of an older version). */
  runId: string | null;
  savedAt: string;
}

export interface CheckpointInput {
  model: LanguageModel;
  optimizer: OptimizerState;
  cursor: DataCursor;
  recipe: Recipe;
  state: Omit<CheckpointState, 'version' | 'savedAt' | 'runId'> & { runId?: string | null };
}

/**
 * Writes the checkpoint of `input.state.step` under `<runDir>/checkpoints/` (see the top of this file); returns its
 * folder. `note` hears of a checkpoint of that step that was a symbolic link (kept aside, src/core/atomic-folder.ts).
 */
export async function saveCheckpoint(runDir: string, input: CheckpointInput, note?: (text: string) => void): Promise<string> {
  const { model, optimizer, cursor, recipe, state } = input;
  const header = modelFileHeader(model, { tokenizer_sha256: state.tokenizer.sha256, step: String(state.step) });
  const weights = await modelTensors(model);
  const adam = optimizer.getState();
  let moments: Map<string, NamedArray>;
  try {
    moments = new Map([...(await namedArrays(adam.m, 'm.')), ...(await namedArrays(adam.v, 'v.'))]);
  } finally {
    tf.dispose([...adam.m.values(), ...adam.v.values()]);
  }
  const full: CheckpointState = { version: STATE_VERSION, ...state, runId: state.runId ?? null, savedAt: new Date().toISOString() };
  const files = new Map<string, string | Uint8Array>([
    [MODEL_FILE, encodeSafetensors(weights, header)],
    [OPTIMIZER_FILE, encodeSafetensors(moments, { optimizer: 'adamw', step: String(adam.step) })],
    [CURSOR_FILE, JSON.stringify(cursor)],
    [STATE_FILE, JSON.stringify(full, null, 2) + '\n'],
    [RECIPE_FILE, JSON.stringify(recipe, null, 2) + '\n'],
  ]);
  return writeFolderAtomically(path.join(runDir, CHECKPOINTS_DIR), checkpointName(state.step), files, CHECKPOINT_FILES, note);
}

export interface LoadedCheckpoint {
  dir: string;
  /** The run folder the checkpoint belongs to (`<run>/checkpoints/<step>/` → `<run>`), or null when it is not inside one. */
  runDir: string | null;
  /** When runDir is null: why the checkpoint is not inside a run folder, for the log ("is not inside a run folder (…)"). */
  outsideRun: string | null;
  state: CheckpointState;
  recipe: Recipe;
  cursor: DataCursor;
  weights: Map<string, NamedArray>;
  optimizer: { step: number; m: Map<string, NamedArray>; v: Map<string, NamedArray> };
}

/** Reads a complete checkpoint folder, checking every file (see the top of this file); errors name the file and the field. */
export async function loadCheckpoint(dir: string): Promise<LoadedCheckpoint> {
  const abs = path.resolve(dir);
  if (!statSync(abs, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`checkpoint ${abs} does not exist`);
  if (!existsSync(path.join(abs, COMPLETE_MARKER))) {
    throw new Error(`checkpoint ${abs} is incomplete (no ${COMPLETE_MARKER} marker: the save was interrupted); use an earlier one`);
  }
  const files = await readCheckedFiles(abs, [...CHECKPOINT_FILES]);
  const file = (name: string) => path.join(abs, name);
  const json = (name: string): unknown => {
    try {
      return JSON.parse(files.get(name)!.toString('utf8'));
    } catch (err) {
      throw new Error(`${file(name)} is not valid JSON (${(err as Error).message})`);
    }
  };
  const state = checkState(json(STATE_FILE), file(STATE_FILE));
  const recipeText = files.get(RECIPE_FILE)!.toString('utf8');
  const recipe = parseSavedRecipe(files.get(RECIPE_FILE)!, file(RECIPE_FILE));
  // Checkpoints saved before train.evalSample existed evaluated the split's head: recording that keeps a resume's
  // change to the spread sample visible among the changed keys (docs/training.md#validation).
  if (!savedRecipeHasKey(recipeText, 'train', 'evalSample')) recipe.train.evalSample = 'head';
  const cursor = parseCursor(json(CURSOR_FILE), file(CURSOR_FILE));
  const weights = decodeSafetensors(files.get(MODEL_FILE)!, file(MODEL_FILE)).tensors;
  const optimizer = readMoments(files.get(OPTIMIZER_FILE)!, file(OPTIMIZER_FILE));
  return { dir: abs, ...runFolderOf(abs, state.runId), state, recipe, cursor, weights, optimizer };
}

function savedRecipeHasKey(text: string, section: string, key: string): boolean {
  // parseRecipe has accepted the text, so it parses; YAML is what the recipe loader reads it as.
  const saved = parseYaml(text) as Record<string, unknown>;
  const values = saved[section];
  return typeof values === 'object' && values !== null && key in values;
}

/** AdamW's step count and moments m.<name> / v.<name>, each m with its v of the same shape. */
function readMoments(bytes: Uint8Array, source: string): LoadedCheckpoint['optimizer'] {
  const adam = decodeSafetensors(bytes, source);
  const m = new Map<string, NamedArray>();
  const v = new Map<string, NamedArray>();
  for (const [name, t] of adam.tensors) {
    if (!/^[mv]\./.test(name)) throw new Error(`${source}: tensor '${name}' is neither m.<parameter> nor v.<parameter>`);
    (name.startsWith('m.') ? m : v).set(name.slice(2), t);
  }
  for (const [name, t] of m) {
    if (!tf.util.arraysEqual(v.get(name)?.shape ?? [-1], t.shape)) throw new Error(`${source}: m.${name} has no v.${name} of the same shape`);
  }
  if (v.size !== m.size) throw new Error(`${source}: ${v.size} v moments but ${m.size} m moments`);
  const step = Number(adam.metadata.step);
  if (!Number.isSafeInteger(step) || step < 0) throw new Error(`${source}: metadata 'step' must be an integer ≥ 0 (got ${JSON.stringify(adam.metadata.step)})`);
  return { step, m, v };
}

/** state.json, checked field by field (errors name the file and the field). */
function checkState(value: unknown, file: string): CheckpointState {
  const fail = (field: string, expected: string, got: unknown): never => {
    throw new Error(`${file}: ${field} must be ${expected} (got ${String(JSON.stringify(got)).slice(0, 80)})`);
  };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) fail('the file', 'a JSON object', value);
  const s = value as Record<string, unknown>;
  if (s.version !== STATE_VERSION) throw new Error(`${file}: version ${JSON.stringify(s.version)} is not supported (expected ${STATE_VERSION})`);
  const count = (field: string, v: unknown) => (Number.isSafeInteger(v) && (v as number) >= 0 ? v : fail(field, 'an integer ≥ 0', v));
  const seconds = (field: string, v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? v : fail(field, 'a finite number ≥ 0', v));
  const lossOrNull = (field: string, v: unknown) =>
    v === null || (typeof v === 'number' && Number.isFinite(v)) ? v : fail(field, 'a finite number or null', v);
  s.consecutiveSkips ??= 0; // checkpoints written before train.nanSkipLimit existed
  s.runId ??= null; // checkpoints written before run folders were marked
  if (s.runId !== null && (typeof s.runId !== 'string' || !RUN_ID_PATTERN.test(s.runId))) fail('runId', 'null or a run id (a UUID)', s.runId);
  for (const field of ['step', 'tokens', 'batchesSeen', 'skippedSteps', 'consecutiveSkips']) count(field, s[field]);
  for (const field of ['trainSeconds', 'elapsedS']) seconds(field, s[field]);
  for (const field of ['valLoss', 'bestValLoss']) lossOrNull(field, s[field]);
  const w = s.window as Record<string, unknown> | null;
  if (typeof w !== 'object' || w === null) fail('window', 'an object {loss, steps, tokens, seconds}', w);
  count('window.steps', w!.steps);
  count('window.tokens', w!.tokens);
  seconds('window.seconds', w!.seconds);
  if (typeof w!.loss !== 'number' || !Number.isFinite(w!.loss)) fail('window.loss', 'a finite number', w!.loss);
  const t = s.tokenizer as Record<string, unknown> | null;
  if (typeof t !== 'object' || t === null || typeof t.path !== 'string' || typeof t.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(t.sha256)) {
    fail('tokenizer', 'an object {path, sha256 (64 hex digits)}', t);
  }
  return value as CheckpointState;
}

/** Copies the checkpoint's weights and buffers into `model` and its moments into `optimizer` (names and shapes must match). */
export function restoreCheckpoint(checkpoint: LoadedCheckpoint, model: LanguageModel, optimizer: OptimizerState): void {
  const variables = new Map([...model.parameters(), ...model.buffers()]);
  const missing = [...variables.keys()].filter((n) => !checkpoint.weights.has(n));
  const extra = [...checkpoint.weights.keys()].filter((n) => !variables.has(n));
  if (missing.length > 0 || extra.length > 0) {
    throw new Error(
      `checkpoint ${checkpoint.dir}: its tensors do not match the model` +
        (missing.length ? `; missing ${missing.slice(0, 5).join(', ')}${missing.length > 5 ? ' …' : ''}` : '') +
        (extra.length ? `; unexpected ${extra.slice(0, 5).join(', ')}${extra.length > 5 ? ' …' : ''}` : ''),
    );
  }
  const toTensors = (arrays: Map<string, NamedArray>) => new Map([...arrays].map(([n, a]) => [n, tf.tensor(a.data, a.shape)] as const));
  for (const [name, variable] of variables) {
    const saved = checkpoint.weights.get(name)!;
    if (!tf.util.arraysEqual(saved.shape, variable.shape)) {
      throw new Error(`checkpoint ${checkpoint.dir}: '${name}' has shape [${saved.shape}] but the model has [${variable.shape}]`);
    }
    tf.tidy(() => variable.assign(tf.tensor(saved.data, saved.shape)));
  }
  const m = toTensors(checkpoint.optimizer.m);
  const v = toTensors(checkpoint.optimizer.v);
  try {
    optimizer.setState(checkpoint.optimizer.step, m, v);
  } finally {
    tf.dispose([...m.values(), ...v.values()]);
  }
}

/** Keys that must be equal for an exact resume: they fix the model's tensors or the data order. */
const RESUME_KEYS: [string, (r: Recipe) => unknown][] = [
  ['model.kind', (r) => r.model.kind],
  ['model.dModel', (r) => r.model.dModel],
  ['model.numLayers', (r) => r.model.numLayers],
  ['model.numHeads', (r) => r.model.numHeads],
  ['model.mlpRatio', (r) => r.model.mlpRatio],
  ['model.maxSeqLen', (r) => r.model.maxSeqLen],
  ['model.bias', (r) => r.model.bias],
  // Recipes saved before these options existed have the defaults.
  ...(Object.keys(ARCHITECTURE_DEFAULTS) as (keyof Architecture)[]).map(
    (key) => [`model.${key}`, (r: Recipe) => architectureOf(r.model)[key]] as [string, (r: Recipe) => unknown],
  ),
  ['model.attention.name', (r) => r.model.attention.name],
  ['model.attention.options', (r) => r.model.attention.options],
  // Recipes saved before it existed drew the features from train.seed: null.
  ['model.featureSeed', (r) => r.model.featureSeed ?? null],
  ['data.textColumn', (r) => r.data.textColumn],
  ['data.seqLen', (r) => r.data.seqLen],
  ['data.shuffleBuffer', (r) => r.data.shuffleBuffer],
  ['train.batchSize', (r) => r.train.batchSize],
  ['train.seed', (r) => r.train.seed],
];

/**
 * Whether `dataset` is the checkpoint's dataset: the same path, the same folder through links, or the recorded path
 * of a run folder that moved together with its data (env.json's run-relative path, as eval finds it).
 */
function sameDataset(checkpoint: LoadedCheckpoint, dataset: string): boolean {
  const saved = checkpoint.recipe.data.dataset;
  const candidates = [saved, ...(checkpoint.runDir ? [RunFolder.at(checkpoint.runDir).relocateDataPaths(checkpoint.recipe.data).dataset] : [])];
  const real = (p: string) => {
    try {
      return realpathSync(p);
    } catch {
      return path.resolve(p); // a glob, or a path that does not exist (any more)
    }
  };
  return candidates.some((c) => path.resolve(c) === path.resolve(dataset) || real(c) === real(dataset));
}

/**
 * Refuses a resume whose recipe would build different tensors or a different data order than the checkpoint's
 * (model shape, attention name/options, tokenizer file content, dataset, text column, sequence length, batch size,
 * seed); the error
 * names every key that differs with both values. Returns the other keys that differ (e.g. train.lr), which a
 * resume accepts.
 */
export function checkResumeCompatible(checkpoint: LoadedCheckpoint, recipe: Recipe, tokenizerSha256: string): string[] {
  const problems: string[] = [];
  for (const [key, get] of RESUME_KEYS) {
    const before = canonicalJson(get(checkpoint.recipe));
    const now = canonicalJson(get(recipe));
    if (before !== now) problems.push(`${key}: checkpoint ${before}, recipe ${now}`);
  }
  const savedData = checkpoint.recipe.data.dataset;
  if (!sameDataset(checkpoint, recipe.data.dataset)) {
    problems.push(
      `data.dataset: checkpoint ${JSON.stringify(savedData)}, recipe ${JSON.stringify(recipe.data.dataset)} ` +
        `(the data cursor is a position in the checkpoint's dataset; to train on other data, start a new run, e.g. with initFrom: ${checkpoint.dir})`,
    );
  }
  if (checkpoint.state.tokenizer.sha256 !== tokenizerSha256) {
    problems.push(
      `tokenizer: checkpoint used ${checkpoint.state.tokenizer.path} (sha256 ${checkpoint.state.tokenizer.sha256.slice(0, 12)}…), ` +
        `recipe's ${recipe.data.tokenizer} has sha256 ${tokenizerSha256.slice(0, 12)}…`,
    );
  }
  if (problems.length > 0) {
    throw new Error(
      `cannot resume from ${checkpoint.dir}: the recipe differs from the checkpoint's in what fixes the model or the data order:\n  ${problems.join('\n  ')}`,
    );
  }
  const flat = (r: Recipe) => {
    const out = new Map<string, string>();
    for (const [section, values] of Object.entries(r)) {
      if (values && typeof values === 'object' && !Array.isArray(values)) {
        for (const [k, v] of Object.entries(values)) out.set(`${section}.${k}`, canonicalJson(v));
      } else out.set(section, canonicalJson(values));
    }
    return out;
  };
  const before = flat(checkpoint.recipe);
  const changed: string[] = [];
  // A key the saved recipe lacks reads as undefined there, as it does in a recipe that leaves it unset.
  for (const [key, value] of flat(recipe)) if ((before.get(key) ?? canonicalJson(undefined)) !== value) changed.push(key);
  return changed;
}

/**
 * Deletes checkpoints beyond the newest `keep`, except the one with the lowest validation loss (among checkpoints
 * taken at a validation step), and leftovers of interrupted saves (temporary or unmarked folders) other than
 * `exceptDir`. Only in a run folder (its marker, run-folder.ts), only folders named as this project names them and
 * holding nothing but checkpoint files are deleted; anything else under checkpoints/ is left alone. A checkpoint that
 * is a symbolic link (moved to another disk and linked back) is never followed: it and what it points to stay, and
 * `onLink` is told its path. Returns the deleted folders.
 */
export async function pruneCheckpoints(runDir: string, keep: number, exceptDir?: string, onLink: (dir: string) => void = () => {}): Promise<string[]> {
  const run = RunFolder.at(runDir);
  const parent = run.file(CHECKPOINTS_DIR);
  if (!existsSync(parent) || !run.marker().marked) return []; // not a run folder: nothing there is ours to delete
  const complete = run.checkpoints();
  let best: CheckpointInfo | null = null;
  let bestLoss = Infinity;
  for (const c of complete) {
    try {
      const state = JSON.parse(await readFile(path.join(c.dir, STATE_FILE), 'utf8')) as CheckpointState;
      if (typeof state.valLoss === 'number' && state.valLoss < bestLoss) {
        bestLoss = state.valLoss;
        best = c;
      }
    } catch {
      // An unreadable state.json makes that checkpoint no candidate for "best"; it is still pruned by age.
    }
  }
  const kept = new Set(complete.slice(-keep).map((c) => c.dir));
  if (best) kept.add(best.dir);
  if (exceptDir) kept.add(path.resolve(exceptDir));
  const deleted: string[] = [];
  for (const entry of readdirSync(parent)) {
    const dir = path.join(parent, entry);
    const leftover = /^\.step-\d{6,}\.(tmp|old)-\d+$/.exec(entry);
    const ours = CHECKPOINT_NAME.test(entry) || leftover !== null;
    // A temporary folder whose writer still runs is a save in progress, not a leftover.
    if (!ours || kept.has(dir) || (leftover?.[1] === 'tmp' && temporaryWriterIsLive(dir))) continue;
    if (isSymbolicLink(dir)) onLink(dir);
    else if (await removeOwnFolder(dir, CHECKPOINT_FILES)) deleted.push(dir);
  }
  return deleted;
}

/**
 * Removes what saves killed before their rename left in run folder `runDir` (a run folder: its marker): the temporary
 * folders `checkpoints/.step-NNNNNN.tmp-<pid>/` and `.final.tmp-<pid>/` whose process no longer runs, holding nothing
 * but the project's files (src/core/atomic-folder.ts says how a dead writer is told from a live one). Returns them.
 */
export async function removeDeadSaves(runDir: string): Promise<string[]> {
  if (!RunFolder.at(runDir).marker().marked) return [];
  return [
    ...(await removeDeadTemporaries(path.join(runDir, CHECKPOINTS_DIR), (name) => CHECKPOINT_NAME.test(name), CHECKPOINT_FILES)),
    ...(await removeDeadTemporaries(runDir, (name) => name === FINAL_DIR, FINAL_FILES)),
  ];
}

/** What the training loop keeps between checkpoints: where they go, the best validation loss, the newest one. */
export class CheckpointWriter {
  bestValLoss: number | null;
  /** The newest complete checkpoint of this run (the one resumed from, until a new one is saved), and its step. */
  lastDir: string | null;
  lastStep: number | null;
  /** The id in the run folder's marker, recorded in every checkpoint (null: no marker, or an empty one). */
  private readonly runId: string | null;
  /** Linked checkpoints pruning left alone, each said once. */
  private readonly linksSaid = new Set<string>();

  constructor(
    private readonly runDir: string,
    private readonly recipe: Recipe,
    private readonly tokenizer: { path: string; sha256: string },
    resumed: LoadedCheckpoint | null,
    private readonly line: (text: string) => void = () => {},
  ) {
    this.bestValLoss = resumed?.state.bestValLoss ?? null;
    this.lastDir = resumed?.dir ?? null;
    this.lastStep = resumed?.state.step ?? null;
    const marker = RunFolder.at(runDir).marker();
    this.runId = marker.marked && marker.id !== '' ? marker.id : null;
  }

  /** Saves the checkpoint of `counters.step` (valLoss: the validation loss measured at that step, if any), then prunes. */
  async save(model: LanguageModel, optimizer: OptimizerState, cursor: DataCursor, counters: TrainingCounters, valLoss: number | null): Promise<string> {
    const t0 = performance.now();
    if (valLoss !== null && (this.bestValLoss === null || valLoss < this.bestValLoss)) this.bestValLoss = valLoss;
    const dir = await saveCheckpoint(
      this.runDir,
      {
        model,
        optimizer,
        cursor,
        recipe: this.recipe,
        state: { ...counters, window: { ...counters.window }, valLoss, bestValLoss: this.bestValLoss, tokenizer: this.tokenizer, runId: this.runId },
      },
      this.line,
    );
    this.lastDir = dir;
    this.lastStep = counters.step;
    await pruneCheckpoints(this.runDir, this.recipe.train.keepCheckpoints, dir, (link) => {
      if (this.linksSaid.has(link)) return;
      this.linksSaid.add(link);
      this.line(`${link} is a symbolic link: train.keepCheckpoints does not prune it (neither the link nor what it points to is removed; remove it yourself)`);
    });
    this.line(`checkpoint step ${counters.step} saved in ${((performance.now() - t0) / 1000).toFixed(2)} s: ${dir}`);
    return dir;
  }
}
