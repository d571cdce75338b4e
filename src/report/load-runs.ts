// Loading runs: a run folder as compare reads it (RunSummary), from its config.json (the resolved recipe), its run record
// (metrics.jsonl and summary.json, src/store/run-record.ts) and env.json (where it ran; see src/telemetry/run-logger.ts),
// and which folders the command line names.
// config.json and metrics.jsonl are required (a missing or corrupt one is an error naming the file, or with
// skipInvalid a printed warning and the run is left out); summary.json is optional (an unfinished run is compared on
// its metrics, with a warning); env.json is optional.
// Losses are comparable only between runs of one model kind (causal or masked LM), one tokenizer and the same
// validation tokens: a run's `family`, which compare refuses to mix or, with --split, reports apart.
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { canonicalJson, flattenPaths, isRecord, readJsonFile } from '../core/json.ts';
import { RECIPE_SCHEMA } from '../recipe/schema.ts';
import { FINAL_DIR, METRICS_FILE, RUN_CONFIG_FILE, RUN_MARKER, SUMMARY_FILE, TOKENIZER_FILE } from '../store/layout.ts';
import { readModelMetadata } from '../store/model-folder.ts';
import { RunFolder } from '../store/run-folder.ts';
import { positionBucketsProblem } from '../store/run-record.ts';
import type { MetricRecord, PositionLossRecord, SummaryFields } from '../store/run-record.ts';
import { groupBy } from './stats.ts';
import { readLmEvalScores, type LmEvalScore } from './lm-eval-results.ts';
import { readPasskeyScores, type PasskeyScore } from './passkey-results.ts';
import { folderSegment } from './safe-path.ts';

export interface RunSummary {
  dir: string;
  /** The run folder's base name. */
  name: string;
  recipeName: string;
  kind: string;
  attention: string;
  attentionOptions: Record<string, unknown>;
  seed: number | null;
  /** Same key = same recipe apart from the seed and the naming/logging fields. */
  recipeKey: string;
  /** The recipe keys that make up recipeKey, flattened ("train.lr" → 0.003). */
  settings: Record<string, unknown>;
  /** recipeKey without the attention: a group and its baseline share it. */
  pairingKey: string;
  /** What makes losses comparable at all (see the file comment); runs that differ in it are not compared. */
  family: { kind: string; tokenizer: string; evalTokens: string; dataset: string };
  /** The backend the run trained on (every session's, when a resume changed it), from env.json. */
  backend: string | null;
  /** The slayformer commit it ran (8 hex digits, `*` when the tree was dirty; every session's), from env.json. */
  commit: string | null;
  /** Peak resident memory of the training process, from summary.json (runs of older versions lack it). */
  peakRssBytes: number | null;
  params: number | null;
  tokens: number | null;
  finalValLoss: number | null;
  /** Tokens trained when finalValLoss was measured. */
  finalValTokens: number | null;
  bestValLoss: number | null;
  finalValPpl: number | null;
  finalValBpb: number | null;
  /** Top-1 accuracy of the final validation (null for runs logged before accuracy was). */
  finalValAcc: number | null;
  tokensPerSecond: number | null;
  /** Model FLOPs utilisation of the whole run (summary.json; null for runs before it was logged, or on a device of unknown peak). */
  mfu: number | null;
  wallSeconds: number | null;
  finished: boolean;
  /** The loss by position of `npm run eval -- … --by-position --json <run>/eval.json`, when the run folder holds one. */
  byPosition: PositionLossRow[] | null;
  /** lm-evaluation-harness scores from `npm run lm-eval` (<run>/lm-eval/<task>.json), when the run folder holds any. */
  lmEval: LmEvalScore[] | null;
  /** Passkey retrieval by length from `npm run eval -- <run> --passkey --json <run>/passkey.json`, when the run folder holds it. */
  passkey: PasskeyScore[] | null;
  records: MetricRecord[];
  warnings: string[];
}

/** One position bucket of eval.json's by_position: the labelled tokens at positions [from, to) (loss null when none). */
export type PositionLossRow = PositionLossRecord;

/** Where compare looks for a run's `eval --by-position --json` result (docs/training.md, "Evaluate and generate"). */
export const RUN_EVAL_FILE = 'eval.json';

/** The by_position of `<dir>/eval.json`: null when absent or without it; a malformed one is a warning and null. */
function readByPosition(dir: string, warnings: string[]): PositionLossRow[] | null {
  const file = join(dir, RUN_EVAL_FILE);
  if (!existsSync(file)) return null;
  try {
    const value = readJsonFile(file);
    if (!isRecord(value) || value.by_position === undefined) return null;
    const problem = positionBucketsProblem(value.by_position);
    if (problem !== null) throw new Error(`${file}: by_position${problem.startsWith('[') ? '' : ' '}${problem}`);
    return (value.by_position as PositionLossRecord[]).map(({ from, to, loss, tokens }) => ({ from, to, loss, tokens }));
  } catch (err) {
    warnings.push(`${(err as Error).message}; its loss by position is left out`);
    return null;
  }
}

const finite = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/**
 * What identifies a run's tokenizer: the sha256 of the tokenizer final/ carries, else the one its model's metadata
 * records, else (an unfinished run of an older version) the path in config.json.
 */
function tokenizerIdentity(dir: string, configured: unknown): string {
  const path = typeof configured === 'string' ? configured : '?';
  const copy = join(dir, FINAL_DIR, TOKENIZER_FILE);
  if (existsSync(copy)) return `sha256 ${createHash('sha256').update(readFileSync(copy)).digest('hex').slice(0, 12)} (${basename(path)})`;
  try {
    const sha = readModelMetadata(join(dir, FINAL_DIR)).tokenizer_sha256;
    if (typeof sha === 'string') return `sha256 ${sha.slice(0, 12)} (${basename(path)})`;
  } catch {
    // no final/ (unfinished) or an unreadable one: the path is all there is
  }
  return path;
}

/** What a family key is called in messages, and how its value is shown. */
const FAMILY_KEYS = [
  { key: 'kind', label: 'model kind (causal vs masked LM loss)', folder: (v: string) => folderSegment(v) },
  {
    key: 'tokenizer',
    label: 'tokenizer (another vocabulary: other tokens, other losses)',
    folder: (v: string) => `tokenizer-${folderSegment(v.replace(/^sha256 (\w+).*$/, '$1')).slice(-24)}`,
  },
  {
    key: 'evalTokens',
    label: 'train.evalTokens and train.evalSample (other validation tokens)',
    folder: (v: string) => `evalTokens-${folderSegment(v.replace(' ', '-'))}`,
  },
  { key: 'dataset', label: 'data.dataset (other validation data)', folder: (v: string) => `dataset-${folderSegment(basename(v))}` },
] as const;

/** One line per family key in which the runs differ: its values and the runs with each. */
export function familyDifferences(runs: RunSummary[]): string[] {
  return FAMILY_KEYS.flatMap(({ key, label }) => {
    const byValue = groupBy(runs, (r) => r.family[key]);
    if (byValue.size < 2) return [];
    return [`${label}: ${[...byValue].map(([value, same]) => `${value}: ${same.map((r) => r.name).join(', ')}`).join('; ')}`];
  });
}

/**
 * A value config.json gives for a recipe key, checked against the recipe schema's type (an enum's values, an
 * integer's bounds); absent is allowed (runs of older versions). An error names the file, the key and the value.
 */
function checkRecipeValue(file: string, key: 'model.kind' | 'train.evalTokens', value: unknown): void {
  if (value === undefined) return;
  const type = RECIPE_SCHEMA[key].type;
  const ok =
    type.kind === 'enum'
      ? type.values.includes(value as string)
      : type.kind === 'int' &&
        Number.isInteger(value) &&
        (type.min === undefined || (value as number) >= type.min) &&
        (type.max === undefined || (value as number) <= type.max);
  if (ok) return;
  const expected =
    type.kind === 'enum'
      ? `one of ${type.values.join(', ')}`
      : type.kind === 'int'
        ? `an integer${type.min === undefined ? '' : ` ≥ ${type.min}`}${type.max === undefined ? '' : ` ≤ ${type.max}`}`
        : type.kind;
  throw new Error(`${file}: ${key} must be ${expected} (got ${JSON.stringify(value)})`);
}

/** Reads one run folder. Errors name the file (and line) that is missing or malformed. */
export async function loadRun(dir: string): Promise<RunSummary> {
  const warnings: string[] = [];
  const run = RunFolder.at(dir);
  const configFile = run.file(RUN_CONFIG_FILE);
  const summaryFile = run.file(SUMMARY_FILE);
  const config = run.config();
  const model = config.model;
  if (!isRecord(model) || !isRecord(model.attention) || typeof model.attention.name !== 'string') {
    throw new Error(`${configFile}: expected the resolved recipe with model.attention.name (a string)`);
  }
  const train = isRecord(config.train) ? config.train : {};
  // These name report sub-folders (--split) and are shown: checked as the recipe checks them, not trusted.
  checkRecipeValue(configFile, 'model.kind', model.kind);
  checkRecipeValue(configFile, 'train.evalTokens', train.evalTokens);
  // A run may have been stopped in the middle of writing a record: its last line, cut short, is left out with a warning.
  const records = run.metrics({ cutLastLine: (message) => warnings.push(message) });
  if (records.length === 0) throw new Error(`${run.file(METRICS_FILE)}: no metric records`);
  const read = run.summary();
  const finished = read !== undefined;
  const summary: SummaryFields = read ?? {};
  if (!finished) warnings.push(`${summaryFile}: missing (run unfinished?); values come from metrics.jsonl and the parameter count is unknown`);

  const val = records.filter((r) => r.split === 'val');
  const lastRecord = records.reduce((a, b) => (b.step >= a.step ? b : a));
  // The last validation record, even a diverged one (loss null → no final value).
  const lastVal = val.length ? val.reduce((a, b) => (b.step >= a.step ? b : a)) : null;
  const finalValLoss = summary.val_loss ?? finite(lastVal?.loss);
  // A finished run validates last at its end; an unfinished one where its last validation record says.
  const finalValTokens = (summary.val_loss !== undefined ? summary.tokens : undefined) ?? lastVal?.tokens ?? null;
  const valLosses = [...val.map((r) => r.loss), finalValLoss].filter((v): v is number => finite(v) !== null);
  const tokens = summary.tokens ?? lastRecord.tokens;
  const wallSeconds = summary.elapsed_s ?? finite(lastRecord.elapsed_s);
  // Identity of the recipe: everything but the seed and the fields that only name or place the run.
  const { name: recipeName, wandb: _wandb, ...rest } = config;
  // model.preset only names the keys it set, which config.json holds: runs that resolved to the same keys are one recipe.
  const identity = { ...rest, model: { ...model, preset: undefined }, train: { ...train, seed: undefined, runDir: undefined } };
  const recipeKey = canonicalJson(identity);
  const data = isRecord(config.data) ? config.data : {};
  const env = run.env({ unreadable: (message) => warnings.push(`${message}; backend and commit unknown`) }) ?? {};
  const sessions = [env, ...(Array.isArray(env.resumes) ? env.resumes.filter(isRecord) : [])];
  const distinct = (values: (string | null)[]) => [...new Set(values.filter((v): v is string => v !== null))].join(' → ') || null;
  return {
    dir,
    name: basename(resolve(dir)),
    recipeName: typeof recipeName === 'string' ? recipeName : basename(resolve(dir)),
    kind: typeof model.kind === 'string' ? model.kind : '?',
    attention: model.attention.name,
    attentionOptions: isRecord(model.attention.options) ? model.attention.options : {},
    seed: finite(train.seed),
    recipeKey,
    settings: flattenPaths(identity),
    pairingKey: canonicalJson({ ...identity, model: { ...identity.model, attention: undefined } }),
    family: {
      kind: typeof model.kind === 'string' ? model.kind : '?',
      tokenizer: tokenizerIdentity(dir, data.tokenizer),
      // Runs recorded before train.evalSample read the head; other samples are other validation tokens.
      evalTokens: `${String(train.evalTokens ?? '?')}${train.evalSample === undefined || train.evalSample === 'head' ? '' : ` ${String(train.evalSample)}`}`,
      dataset: typeof data.dataset === 'string' ? data.dataset : '?',
    },
    backend: distinct(sessions.map((e) => (isRecord(e.backend) && typeof e.backend.name === 'string' ? e.backend.name : null))),
    commit: distinct(
      sessions.map((e) => (isRecord(e.git) && typeof e.git.commit === 'string' ? `${e.git.commit.slice(0, 8)}${e.git.dirty ? '*' : ''}` : null)),
    ),
    peakRssBytes: summary.peak_rss_bytes ?? null,
    params: summary.parameters ?? null,
    tokens,
    finalValLoss,
    finalValTokens,
    bestValLoss: valLosses.length ? Math.min(...valLosses) : null,
    finalValPpl: summary.val_ppl ?? finite(lastVal?.ppl) ?? (finalValLoss === null ? null : Math.exp(finalValLoss)),
    finalValBpb: summary.val_bpb ?? finite(lastVal?.bpb),
    finalValAcc: summary.val_acc ?? finite(lastVal?.acc),
    tokensPerSecond: summary.train_tokens_per_s ?? (wallSeconds !== null && wallSeconds > 0 ? tokens / wallSeconds : null),
    mfu: summary.mfu ?? null,
    wallSeconds,
    finished,
    byPosition: readByPosition(dir, warnings),
    lmEval: readLmEvalScores(dir, warnings),
    passkey: readPasskeyScores(dir, warnings),
    records,
    warnings,
  };
}

function matchesSegment(pattern: string, name: string): boolean {
  const source = pattern
    .replace(/[.+^${}()|[\]\\]/g, '\\$&')
    .replace(/\*/g, '[^/]*')
    .replace(/\?/g, '[^/]');
  return new RegExp(`^${source}$`).test(name);
}

/** Folders matching a pattern with * and ? inside path segments (Node 20 has no fs.glob). */
function expandGlob(pattern: string): string[] {
  const absolute = pattern.startsWith('/');
  let paths = [absolute ? '/' : '.'];
  for (const segment of pattern.split('/').filter(Boolean)) {
    const next: string[] = [];
    for (const base of paths) {
      if (!/[*?]/.test(segment)) {
        const candidate = join(base, segment);
        if (existsSync(candidate)) next.push(candidate);
        continue;
      }
      if (!statSync(base, { throwIfNoEntry: false })?.isDirectory()) continue;
      for (const entry of readdirSync(base).sort()) if (matchesSegment(segment, entry)) next.push(join(base, entry));
    }
    paths = next;
  }
  return paths;
}

const isRunDir = (dir: string) => RunFolder.at(dir).holdsRun();

/**
 * Run folders from command-line arguments: run folders, globs of them (quoted, so the shell leaves
 * them alone), or a parent folder such as runs/ whose sub-folders are runs. A folder that is neither a run nor holds
 * one (`runs/paper`, which holds paper experiments' units, when the shell expands `runs/*`) is skipped with one
 * line; when nothing is left, that is an error.
 */
export function resolveRunDirs(args: string[], warn: (message: string) => void = (m) => process.stderr.write(`warning: ${m}\n`)): string[] {
  const dirs: string[] = [];
  const skipped: string[] = [];
  for (const arg of args) {
    const matches = /[*?]/.test(arg) ? expandGlob(arg) : [arg];
    if (matches.length === 0) throw new Error(`${arg}: no folder matches`);
    for (const path of matches) {
      const stat = statSync(path, { throwIfNoEntry: false });
      if (!stat && lstatSync(path, { throwIfNoEntry: false })?.isSymbolicLink()) {
        warn(`skipped ${path}: a symbolic link to nothing`);
        continue;
      }
      if (!stat) throw new Error(`${path}: no such folder`);
      if (!stat.isDirectory()) {
        // A file inside a run folder (e.g. runs/x/metrics.jsonl from a glob) stands for its folder.
        if (isRunDir(dirname(path))) dirs.push(dirname(path));
        continue;
      }
      if (isRunDir(path)) {
        dirs.push(path);
        continue;
      }
      const children = readdirSync(path)
        .sort()
        .map((e) => join(path, e))
        .filter((p) => statSync(p, { throwIfNoEntry: false })?.isDirectory() && isRunDir(p));
      if (children.length === 0) skipped.push(path);
      dirs.push(...children);
    }
  }
  const why = `not a run folder (no ${RUN_MARKER}, ${RUN_CONFIG_FILE} or ${METRICS_FILE}) and holds none`;
  if (dirs.length === 0)
    throw new Error(
      skipped.length === 1
        ? `${skipped[0]}: ${why}`
        : `no run folders: ${skipped.join(', ')} are ${why.replace('a run folder', 'run folders').replace('holds', 'hold')}`,
    );
  for (const path of skipped) warn(`skipped ${path}: ${why}`);
  return [...new Set(dirs.map((d) => resolve(d)))];
}

export interface LoadOptions {
  /** Leave out runs whose files are missing or corrupt (with a warning) instead of failing. */
  skipInvalid?: boolean;
  /**
   * What the groups' recipe column says for a run folder, where the caller knows better than its config.json's
   * `name` (a sweep names each run's recipe after the run, seed included: `sweep report` gives the sweep's group).
   */
  recipeName?: (dir: string) => string | undefined;
}

/** Loads every run folder; with skipInvalid a broken one is left out with a warning. */
export async function loadRuns(dirs: string[], opts: LoadOptions, warn: (m: string) => void): Promise<RunSummary[]> {
  if (dirs.length === 0) throw new Error('compare: no run folders given');
  const runs: RunSummary[] = [];
  for (const dir of dirs) {
    try {
      const run = await loadRun(dir);
      run.recipeName = opts.recipeName?.(dir) ?? run.recipeName;
      run.warnings.forEach(warn);
      runs.push(run);
    } catch (err) {
      if (!opts.skipInvalid)
        throw new Error(`${(err as Error).message}\nLeave that folder out, or pass --skip-invalid to skip the runs that cannot be read (with a warning).`);
      warn(`skipped ${dir}: ${(err as Error).message}`);
    }
  }
  if (runs.length === 0) throw new Error('compare: none of the run folders could be read');
  return runs;
}

/** The sub-folder of a run's family: its values of the family keys in which `all` the runs differ (`bert-evalTokens-4096`). */
export function familyFolder(run: RunSummary, all: RunSummary[]): string {
  return FAMILY_KEYS.filter(({ key }) => new Set(all.map((r) => r.family[key])).size > 1)
    .map(({ key, folder }) => folder(run.family[key]))
    .join('-');
}
