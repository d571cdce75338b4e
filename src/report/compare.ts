// Compares logged training runs: reads each run folder (config.json = the resolved recipe,
// metrics.jsonl = MetricRecord lines, summary.json = the trainer's final summary, env.json = where it ran;
// see src/telemetry/run-logger.ts) and writes a report folder with
//   report.md       per-run table (with backend, commit and peak memory), runs of the same recipe + attention
//                   with different seeds grouped as mean ± sd (n = distinct seeds: a re-run of a seed is a repeat,
//                   averaged with it), what tells the groups apart, and each group's paired difference to the
//                   baseline attention (same other settings, same seeds), the comparison's columns first
//   index.html      the same tables with the plots inlined (opens in a browser, uses its width)
//   {train,val}-{loss,ppl}.svg, {train,val}-loss-time.svg   curves against tokens and against wall-clock
//                   time, one line per group: the mean over the group's seeds with a ±sd band
//   runs.csv, groups.csv, groups.tex   the tables for a spreadsheet or a paper (booktabs)
//   runs.json       the extracted numbers, machine-readable
// config.json and metrics.jsonl are required (a missing or corrupt one is an error naming the file,
// or with skipInvalid a printed warning and the run is left out); summary.json is optional (an
// unfinished run is compared on its metrics, with a warning); env.json is optional.
// Losses are comparable only between runs of one model kind (causal or masked LM), one tokenizer and the same
// validation tokens: runs that differ there are refused, naming the difference, or with `split` written as one
// report per such family. A group's mean ± sd measures how much the seed matters, so a group whose runs differ in
// more than the seed (tokens trained, the learning-rate schedule they followed) is refused unless forced.
import { createHash } from 'node:crypto';
import { existsSync, lstatSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { basename, dirname, join, relative, resolve } from 'node:path';
import { readSafetensorsHeader } from '../hf/safetensors.ts';
import { checkRecord } from '../telemetry/records.ts';
import type { MetricRecord } from '../telemetry/records.ts';
import { pairedT } from './paired.ts';
import type { PairedResult } from './paired.ts';
import { lineChartSvg, seriesColours } from './plot.ts';
import type { LinePoint } from './plot.ts';
import { formatMeanSd, formatNumber, groupBy, meanSd, meanSdOverSeeds, perSeed } from './stats.ts';
import type { MeanSd } from './stats.ts';
import { escapeHtml, escapeMarkdown } from './markdown.ts';
import { folderSegment, safeJoin } from './safe-path.ts';
import { RECIPE_SCHEMA } from '../recipe/schema.ts';
import { ENV_FILE, FINAL_DIR, METRICS_FILE, MODEL_FILE, RUN_CONFIG_FILE, RUN_MARKER, SUMMARY_FILE, TOKENIZER_FILE } from '../store/layout.ts';

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
  wallSeconds: number | null;
  finished: boolean;
  records: MetricRecord[];
  warnings: string[];
}

export interface RunGroup {
  label: string;
  attention: string;
  recipeName: string;
  runs: RunSummary[];
  /** The distinct seeds of its runs (in order of appearance) and how many runs each has. */
  seeds: { seed: number | null; runs: number }[];
  /**
   * Runs that repeat a seed already in the group (a re-run after a crash, say): not samples. Their spread is the
   * largest range (max − min) of the final validation loss among runs of one seed, which measures non-determinism;
   * null when no seed repeats.
   */
  repeats: { runs: number; spread: number | null };
  /** Mean ± sd over distinct seeds (a seed's repeats averaged first; n = seeds); finalValPpl is exp(mean final loss), without an sd. */
  stats: Record<'params' | 'tokens' | 'finalValLoss' | 'bestValLoss' | 'finalValPpl' | 'finalValBpb' | 'finalValAcc' | 'tokensPerSecond' | 'wallSeconds', MeanSd>;
  /** How the runs differ in more than the seed (empty when they do not). */
  mixed: string[];
  /** The runs' recipe without the attention (from the first run): the baseline group has the same. */
  pairingKey: string;
  /** The difference of the final validation loss to the baseline group, paired by distinct seed (repeats averaged first); null for the baseline or without one. */
  paired: (PairedResult & { baseline: string; wins: number }) | null;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

async function readJsonFile(file: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (err) {
    throw new Error(`${file}: cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw new Error(`${file}: not valid JSON (${(err as Error).message})`);
  }
  if (!isRecord(value)) throw new Error(`${file}: expected a JSON object`);
  return value;
}

/**
 * Parses metrics.jsonl. Every line must be a MetricRecord (checked by the logger's own checkRecord;
 * a diverged loss is logged as null and accepted); the one exception is a last line without its
 * newline that does not parse (a write cut short by a crash), which is dropped with a warning.
 */
export function parseMetrics(text: string, file: string, warnings: string[]): MetricRecord[] {
  const lines = text.split('\n');
  const records: MetricRecord[] = [];
  lines.forEach((line, index) => {
    if (line.trim() === '') return;
    const where = `${file}:${index + 1}`;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (err) {
      if (index === lines.length - 1) {
        warnings.push(`${where}: incomplete last line ignored`);
        return;
      }
      throw new Error(`${where}: not valid JSON (${(err as Error).message})`);
    }
    checkRecord(value, where);
    records.push(value);
  });
  return records;
}

const finite = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** Stable JSON (sorted keys) for comparing recipes. */
function canonical(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonical).join(',')}]`;
  if (isRecord(value)) {
    return `{${Object.keys(value).filter((k) => value[k] !== undefined).sort().map((k) => `${JSON.stringify(k)}:${canonical(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value);
}

/** Nested mappings as dotted keys ({train: {lr: 1}} → {"train.lr": 1}); lists and scalars are leaves. */
function flatten(value: Record<string, unknown>, prefix = '', out: Record<string, unknown> = {}): Record<string, unknown> {
  for (const [key, v] of Object.entries(value)) {
    if (isRecord(v) && Object.keys(v).length > 0) flatten(v, `${prefix}${key}.`, out);
    else if (v !== undefined) out[`${prefix}${key}`] = v;
  }
  return out;
}

/**
 * What identifies a run's tokenizer: the sha256 of the tokenizer final/ carries, else the one its model's metadata
 * records, else (an unfinished run of an older version) the path in config.json.
 */
function tokenizerIdentity(dir: string, configured: unknown): string {
  const path = typeof configured === 'string' ? configured : '?';
  const copy = join(dir, FINAL_DIR, TOKENIZER_FILE);
  if (existsSync(copy)) return `sha256 ${createHash('sha256').update(readFileSync(copy)).digest('hex').slice(0, 12)} (${basename(path)})`;
  try {
    const sha = readSafetensorsHeader(join(dir, FINAL_DIR, MODEL_FILE)).metadata.tokenizer_sha256;
    if (typeof sha === 'string') return `sha256 ${sha.slice(0, 12)} (${basename(path)})`;
  } catch {
    // no final/ (unfinished) or an unreadable one: the path is all there is
  }
  return path;
}

/** What a family key is called in messages, and how its value is shown. */
const FAMILY_KEYS = [
  { key: 'kind', label: 'model kind (causal vs masked LM loss)', folder: (v: string) => folderSegment(v) },
  { key: 'tokenizer', label: 'tokenizer (another vocabulary: other tokens, other losses)', folder: (v: string) => `tokenizer-${folderSegment(v.replace(/^sha256 (\w+).*$/, '$1')).slice(-24)}` },
  { key: 'evalTokens', label: 'train.evalTokens and train.evalSample (other validation tokens)', folder: (v: string) => `evalTokens-${folderSegment(v.replace(' ', '-'))}` },
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
  const ok = type.kind === 'enum'
    ? type.values.includes(value as string)
    : type.kind === 'int' && Number.isInteger(value) && (type.min === undefined || (value as number) >= type.min) && (type.max === undefined || (value as number) <= type.max);
  if (ok) return;
  const expected = type.kind === 'enum' ? `one of ${type.values.join(', ')}` : type.kind === 'int' ? `an integer${type.min === undefined ? '' : ` ≥ ${type.min}`}${type.max === undefined ? '' : ` ≤ ${type.max}`}` : type.kind;
  throw new Error(`${file}: ${key} must be ${expected} (got ${JSON.stringify(value)})`);
}

/** Reads one run folder. Errors name the file (and line) that is missing or malformed. */
export async function loadRun(dir: string): Promise<RunSummary> {
  const warnings: string[] = [];
  const configFile = join(dir, RUN_CONFIG_FILE);
  const metricsFile = join(dir, METRICS_FILE);
  const summaryFile = join(dir, SUMMARY_FILE);
  if (!existsSync(configFile) && existsSync(join(dir, RUN_MARKER))) throw new Error(`${configFile}: missing: ${dir} is an incomplete run folder (interrupted before it started?)`);
  const config = await readJsonFile(configFile);
  const model = config.model;
  if (!isRecord(model) || !isRecord(model.attention) || typeof model.attention.name !== 'string') {
    throw new Error(`${configFile}: expected the resolved recipe with model.attention.name (a string)`);
  }
  const train = isRecord(config.train) ? config.train : {};
  // These name report sub-folders (--split) and are shown: checked as the recipe checks them, not trusted.
  checkRecipeValue(configFile, 'model.kind', model.kind);
  checkRecipeValue(configFile, 'train.evalTokens', train.evalTokens);
  let metricsText: string;
  try {
    metricsText = await readFile(metricsFile, 'utf8');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') throw new Error(`${metricsFile}: missing: ${dir} is an incomplete run folder (interrupted before its first metric record?)`);
    throw new Error(`${metricsFile}: cannot be read (${code ?? (err as Error).message})`);
  }
  const records = parseMetrics(metricsText, metricsFile, warnings);
  if (records.length === 0) throw new Error(`${metricsFile}: no metric records`);
  let summary: Record<string, unknown> = {};
  const finished = existsSync(summaryFile);
  if (finished) summary = await readJsonFile(summaryFile);
  else warnings.push(`${summaryFile}: missing (run unfinished?); values come from metrics.jsonl and the parameter count is unknown`);

  const val = records.filter((r) => r.split === 'val');
  const lastRecord = records.reduce((a, b) => (b.step >= a.step ? b : a));
  // The last validation record, even a diverged one (loss null → no final value).
  const lastVal = val.length ? val.reduce((a, b) => (b.step >= a.step ? b : a)) : null;
  const finalValLoss = finite(summary.val_loss) ?? finite(lastVal?.loss);
  // A finished run validates last at its end; an unfinished one where its last validation record says.
  const finalValTokens = (finite(summary.val_loss) !== null ? finite(summary.tokens) : null) ?? lastVal?.tokens ?? null;
  const valLosses = [...val.map((r) => r.loss), finalValLoss].filter((v): v is number => finite(v) !== null);
  const tokens = finite(summary.tokens) ?? lastRecord.tokens;
  const wallSeconds = finite(summary.elapsed_s) ?? finite(lastRecord.elapsed_s);
  // Identity of the recipe: everything but the seed and the fields that only name or place the run.
  const { name: recipeName, wandb: _wandb, ...rest } = config;
  const identity = { ...rest, train: { ...train, seed: undefined, runDir: undefined } };
  const recipeKey = canonical(identity);
  const data = isRecord(config.data) ? config.data : {};
  let env: Record<string, unknown> = {};
  if (existsSync(join(dir, ENV_FILE))) {
    try {
      env = await readJsonFile(join(dir, ENV_FILE));
    } catch (err) {
      warnings.push(`${(err as Error).message}; backend and commit unknown`);
    }
  }
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
    settings: flatten(identity),
    pairingKey: canonical({ ...identity, model: { ...model, attention: undefined } }),
    family: {
      kind: typeof model.kind === 'string' ? model.kind : '?',
      tokenizer: tokenizerIdentity(dir, data.tokenizer),
      // Runs recorded before train.evalSample read the head; other samples are other validation tokens.
      evalTokens: `${String(train.evalTokens ?? '?')}${train.evalSample === undefined || train.evalSample === 'head' ? '' : ` ${String(train.evalSample)}`}`,
      dataset: typeof data.dataset === 'string' ? data.dataset : '?',
    },
    backend: distinct(sessions.map((e) => (isRecord(e.backend) && typeof e.backend.name === 'string' ? e.backend.name : null))),
    commit: distinct(sessions.map((e) => (isRecord(e.git) && typeof e.git.commit === 'string' ? `${e.git.commit.slice(0, 8)}${e.git.dirty ? '*' : ''}` : null))),
    peakRssBytes: finite(summary.peak_rss_bytes),
    params: finite(summary.parameters),
    tokens,
    finalValLoss,
    finalValTokens,
    bestValLoss: valLosses.length ? Math.min(...valLosses) : null,
    finalValPpl: finite(summary.val_ppl) ?? finite(lastVal?.ppl) ?? (finalValLoss === null ? null : Math.exp(finalValLoss)),
    finalValBpb: finite(summary.val_bpb) ?? finite(lastVal?.bpb),
    finalValAcc: finite(summary.val_acc) ?? finite(lastVal?.acc),
    tokensPerSecond: finite(summary.train_tokens_per_s) ?? (wallSeconds !== null && wallSeconds > 0 ? tokens / wallSeconds : null),
    wallSeconds,
    finished,
    records,
    warnings,
  };
}

function matchesSegment(pattern: string, name: string): boolean {
  const source = pattern.replace(/[.+^${}()|[\]\\]/g, '\\$&').replace(/\*/g, '[^/]*').replace(/\?/g, '[^/]');
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

/** A run folder, finished or not: its marker (what RunLogger writes first), or the files of a run of an older version. */
const isRunDir = (dir: string) => [RUN_MARKER, RUN_CONFIG_FILE, METRICS_FILE].some((name) => existsSync(join(dir, name)));

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
      const children = readdirSync(path).sort().map((e) => join(path, e)).filter((p) => statSync(p, { throwIfNoEntry: false })?.isDirectory() && isRunDir(p));
      if (children.length === 0) skipped.push(path);
      dirs.push(...children);
    }
  }
  const why = `not a run folder (no ${RUN_MARKER}, ${RUN_CONFIG_FILE} or ${METRICS_FILE}) and holds none`;
  if (dirs.length === 0) throw new Error(skipped.length === 1 ? `${skipped[0]}: ${why}` : `no run folders: ${skipped.join(', ')} are ${why.replace('a run folder', 'run folders').replace('holds', 'hold')}`);
  for (const path of skipped) warn(`skipped ${path}: ${why}`);
  return [...new Set(dirs.map((d) => resolve(d)))];
}

/** The settings (dotted recipe keys) whose values are not the same in all of `runs`. */
function differingSettings(runs: RunSummary[]): string[] {
  const keys = new Set(runs.flatMap((r) => Object.keys(r.settings)));
  return [...keys].filter((k) => new Set(runs.map((r) => canonical(r.settings[k]))).size > 1).sort();
}

/** A setting's value as a table cell or label part: strings as they are, the rest as JSON; — when unset. */
const settingText = (value: unknown) => (value === undefined ? '—' : typeof value === 'string' ? value : JSON.stringify(value));
/** A recipe key as short as it stays unambiguous: `options.prfFeatures` for attention options. */
const shortKey = (key: string) => key.replace(/^model\.attention\.options\./, 'options.');

/**
 * The groups' labels: the attention alone when it has one group; with several, the attention and the one setting
 * that tells its groups apart (`softmax lr=0.003`), or a number when several settings do (`softmax #2`), which the
 * report's table of differing settings then explains. Short, so that legends are not cut off.
 */
function groupLabels(grouped: RunSummary[][]): string[] {
  const byAttention = groupBy(grouped, (g) => g[0].attention);
  const seen = new Map<string, number>();
  return grouped.map((runs) => {
    const first = runs[0];
    const siblings = byAttention.get(first.attention)!;
    if (siblings.length === 1) return first.attention;
    const keys = differingSettings(siblings.map((g) => g[0]));
    const number = (seen.get(first.attention) ?? 0) + 1;
    seen.set(first.attention, number);
    if (keys.length !== 1) return `${first.attention} #${number}`;
    return `${first.attention} ${shortKey(keys[0]).split('.').at(-1)}=${settingText(first.settings[keys[0]])}`;
  });
}

/** The settings in which the groups differ (besides the seed), one column per key and one row per group. */
export function differencesTable(groups: RunGroup[]): { keys: string[]; rows: { label: string; values: string[] }[] } {
  const keys = differingSettings(groups.map((g) => g.runs[0])).filter((k) => k !== 'model.attention.name');
  return { keys, rows: groups.map((g) => ({ label: g.label, values: keys.map((k) => settingText(g.runs[0].settings[k])) })) };
}

const describeRun = (r: RunSummary) => `${r.name}${r.finished ? '' : ' (unfinished)'}`;

/**
 * What the runs of one group (same recipe up to the seed) still differ in: the tokens trained before their
 * final validation (an unfinished, stopped or diverged run next to finished ones) and the learning rate
 * logged at the same step (a run resumed with other train.* keys follows another schedule than its
 * config.json now says). Empty when they differ in the seed only.
 */
export function groupMixing(runs: RunSummary[]): string[] {
  if (runs.length < 2) return [];
  const problems: string[] = [];
  // "256,000: a, b; 153,600: c (unfinished)": the runs by value.
  const list = (value: (r: RunSummary) => string) =>
    [...groupBy(runs, value)].map(([v, same]) => `${v}: ${same.map(describeRun).join(', ')}`).join('; ');
  if (new Set(runs.map((r) => r.finalValTokens)).size > 1) {
    problems.push(`final validation after different token counts (${list((r) => formatNumber(r.finalValTokens))})`);
  } else if (new Set(runs.map((r) => r.tokens)).size > 1) {
    problems.push(`different tokens trained (${list((r) => formatNumber(r.tokens))})`);
  }
  const lrAt = runs.map((r) => new Map(r.records.filter((rec) => rec.split === 'train').map((rec) => [rec.step, rec.lr])));
  for (const [step, lr] of lrAt[0]) {
    const others = lrAt.map((m) => m.get(step));
    if (others.some((v) => v !== undefined && Math.abs(v - lr) > 1e-9 * Math.abs(lr))) {
      problems.push(`different learning rates at step ${step} (${list((r) => String(r.records.find((rec) => rec.split === 'train' && rec.step === step)?.lr ?? '—'))}): resumed with other train.* keys?`);
      break;
    }
  }
  return problems;
}

/**
 * Groups runs of the same recipe and attention (differing in seed only); labels are unique. With `baseline` (an
 * attention), every other group gets the paired difference of its final validation loss to the baseline group with
 * the same other settings, over the seeds both have (as `sweep report` computes it).
 */
export function groupRuns(runs: RunSummary[], baseline: string | null = null): RunGroup[] {
  const grouped = [...groupBy(runs, (r) => `${r.attention}\u0000${r.recipeKey}`).values()];
  const labels = groupLabels(grouped);
  const groups = grouped.map((runsOfGroup, i): RunGroup => {
    const first = runsOfGroup[0];
    const stat = (key: keyof RunGroup['stats']) => meanSdOverSeeds(runsOfGroup, (r) => r.seed, (r) => r[key]);
    const loss = stat('finalValLoss');
    const seeds = perSeed(runsOfGroup, (r) => r.seed, () => 0).map(({ seed, runs: count }) => ({ seed, runs: count }));
    const repeatedLosses = perSeed(runsOfGroup, (r) => r.seed, (r) => r.finalValLoss).filter((s) => s.runs > 1);
    return {
      label: labels[i],
      attention: first.attention,
      recipeName: first.recipeName,
      runs: runsOfGroup,
      seeds,
      repeats: {
        runs: runsOfGroup.length - seeds.length,
        spread: repeatedLosses.length > 0 ? Math.max(...repeatedLosses.map((s) => s.range)) : null,
      },
      stats: {
        params: stat('params'), tokens: stat('tokens'), finalValLoss: loss, bestValLoss: stat('bestValLoss'),
        // The perplexity of the mean loss: averaging perplexities would weight the worse seeds exponentially.
        finalValPpl: { mean: Math.exp(loss.mean), sd: null, n: loss.n },
        finalValBpb: stat('finalValBpb'), finalValAcc: stat('finalValAcc'), tokensPerSecond: stat('tokensPerSecond'), wallSeconds: stat('wallSeconds'),
      },
      mixed: groupMixing(runsOfGroup),
      pairingKey: first.pairingKey,
      paired: null,
    };
  });
  if (baseline !== null) pairWithBaseline(groups, baseline);
  return groups;
}

/**
 * The paired difference to the baseline group of the same settings (see groupRuns). A pair is one distinct seed: the
 * runs of a seed are averaged first on both sides, so a repeated run is never a second pair.
 */
function pairWithBaseline(groups: RunGroup[], baseline: string): void {
  const baselines = new Map<string, RunGroup>();
  for (const g of groups) if (g.attention === baseline && !baselines.has(g.pairingKey)) baselines.set(g.pairingKey, g);
  for (const g of groups) {
    const partner = baselines.get(g.pairingKey);
    if (g.attention === baseline || !partner) continue;
    const finalLoss = (r: RunSummary) => r.finalValLoss;
    const baseBySeed = new Map(perSeed(partner.runs, (r) => r.seed, finalLoss).filter((s) => s.seed !== null).map((s) => [s.seed, s.value]));
    const pairs = perSeed(g.runs, (r) => r.seed, finalLoss).filter((s) => s.seed !== null && baseBySeed.has(s.seed));
    if (pairs.length === 0) continue;
    const x = pairs.map((s) => s.value);
    const base = pairs.map((s) => baseBySeed.get(s.seed)!);
    g.paired = { ...pairedT(x, base), baseline: partner.label, wins: x.filter((v, i) => v < base[i]).length };
  }
}

/**
 * A table as cells: `text` for markdown, HTML and LaTeX (thousands separators, ±), `raw` for CSV (plain numbers, empty
 * when unknown). One model, four renderings, so the files cannot disagree.
 */
export interface Table {
  header: string[];
  /** Right-aligned (numbers) or left-aligned columns. */
  right: boolean[];
  rows: { text: string[]; raw: (string | number | null)[] }[];
}

interface Column<T> {
  title: string;
  right?: boolean;
  text: (item: T) => string;
  raw?: (item: T) => string | number | null;
}

function makeTable<T>(columns: Column<T>[], items: T[]): Table {
  return {
    header: columns.map((c) => c.title),
    right: columns.map((c) => c.right ?? false),
    rows: items.map((item) => ({ text: columns.map((c) => c.text(item)), raw: columns.map((c) => (c.raw ? c.raw(item) : c.text(item))) })),
  };
}

const MIB = 2 ** 20;
const number = <T>(title: string, value: (item: T) => number | null, digits = 0): Column<T> => ({ title, right: true, text: (item) => formatNumber(value(item), digits), raw: value });

/** One row per run, with where it ran: backend, commit, peak memory. */
export function runsTableModel(runs: RunSummary[]): Table {
  return makeTable<RunSummary>([
    { title: 'run', text: describeRun, raw: (r) => r.name },
    { title: 'attention', text: (r) => r.attention },
    { title: 'kind', text: (r) => r.kind },
    { title: 'seed', right: true, text: (r) => String(r.seed ?? '—'), raw: (r) => r.seed },
    number('params', (r) => r.params),
    number('tokens', (r) => r.tokens),
    number('final val loss', (r) => r.finalValLoss, 4),
    number('best val loss', (r) => r.bestValLoss, 4),
    number('val ppl', (r) => r.finalValPpl, 2),
    number('val bpb', (r) => r.finalValBpb, 4),
    number('val acc', (r) => r.finalValAcc, 4),
    number('tokens/s', (r) => r.tokensPerSecond),
    number('wall s', (r) => r.wallSeconds, 1),
    number('peak MiB', (r) => (r.peakRssBytes === null ? null : r.peakRssBytes / MIB)),
    { title: 'backend', text: (r) => r.backend ?? '—', raw: (r) => r.backend },
    { title: 'commit', text: (r) => r.commit ?? '—', raw: (r) => r.commit },
  ], runs);
}

/** Markdown table, one row per run. */
export function runsTable(runs: RunSummary[]): string {
  return markdownTable(runsTableModel(runs));
}

const signed = (v: number, digits: number) => `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(digits)}`;

/** "1, 2, 3"; a seed run more than once as "1337 (×2)". */
const seedsText = (g: RunGroup) => g.seeds.map(({ seed, runs }) => `${seed ?? '—'}${runs > 1 ? ` (×${runs})` : ''}`).join(', ');

/**
 * One row per group, the comparison first: with a baseline, the paired difference of the final validation loss, its
 * 95% interval (n ≥ 2), p and on how many seeds the group was lower; then n (distinct seeds) and the seeds, the
 * repeated runs when a seed was run twice (with their spread), and mean ± sample sd over the seeds (the value alone
 * when n = 1); ⚠ marks a mixed group. Parameters, tokens, speed and time equal over the seeds show no "± 0".
 */
export function groupsTableModel(groups: RunGroup[], baseline: string | null): Table {
  const ms = (pick: (g: RunGroup) => MeanSd, title: string, digits: number, { exact = false } = {}): Column<RunGroup> => ({
    title, right: true,
    // A count or speed equal over the seeds up to the digits shown reads as the value alone, not "1,334,016 ± 0".
    text: (g) => (exact && pick(g).sd !== null && Number(pick(g).sd!.toFixed(digits)) === 0 ? formatNumber(pick(g).mean, digits) : formatMeanSd(pick(g), digits, { showN: false })),
    raw: (g) => (pick(g).n === 0 ? null : pick(g).mean),
  });
  const columns: Column<RunGroup>[] = [{ title: 'group', text: (g) => `${g.mixed.length ? '⚠ ' : ''}${g.label}`, raw: (g) => g.label }];
  if (baseline !== null) {
    const base = (g: RunGroup) => (g.attention === baseline ? '(baseline)' : '—');
    columns.push(
      { title: `Δ final val loss vs ${baseline} [95% CI]`, right: true, text: (g) => (g.paired ? `${signed(g.paired.mean, 4)}${g.paired.ci ? ` [${signed(g.paired.ci[0], 4)}, ${signed(g.paired.ci[1], 4)}]` : ' (n = 1)'}` : base(g)), raw: (g) => g.paired?.mean ?? null },
      { title: 'CI low', right: true, text: (g) => (g.paired?.ci ? signed(g.paired.ci[0], 4) : ''), raw: (g) => g.paired?.ci?.[0] ?? null },
      { title: 'CI high', right: true, text: (g) => (g.paired?.ci ? signed(g.paired.ci[1], 4) : ''), raw: (g) => g.paired?.ci?.[1] ?? null },
      { title: 'p', right: true, text: (g) => (g.paired?.p == null ? '' : g.paired.p < 0.001 ? '< 0.001' : g.paired.p.toFixed(3)), raw: (g) => g.paired?.p ?? null },
      { title: `lower than ${baseline} on`, right: true, text: (g) => (g.paired ? `${g.paired.wins}/${g.paired.n}` : ''), raw: (g) => (g.paired ? `${g.paired.wins}/${g.paired.n}` : null) },
    );
  }
  columns.push(
    ms((g) => g.stats.finalValLoss, 'final val loss', 4),
    { title: 'final val loss sd', right: true, text: (g) => formatNumber(g.stats.finalValLoss.sd, 4), raw: (g) => g.stats.finalValLoss.sd },
    { title: 'n', right: true, text: (g) => String(g.seeds.length), raw: (g) => g.seeds.length },
    { title: 'seeds', text: seedsText },
  );
  if (groups.some((g) => g.repeats.runs > 0)) {
    columns.push(
      { title: 'repeated runs', right: true, text: (g) => String(g.repeats.runs), raw: (g) => g.repeats.runs },
      { title: 'repeat spread', right: true, text: (g) => formatNumber(g.repeats.spread, 4), raw: (g) => g.repeats.spread },
    );
  }
  columns.push(
    ms((g) => g.stats.bestValLoss, 'best val loss', 4),
    ms((g) => g.stats.finalValPpl, 'val ppl', 2),
    ms((g) => g.stats.finalValBpb, 'val bpb', 4),
    ms((g) => g.stats.finalValAcc, 'val acc', 4),
    ms((g) => g.stats.params, 'params', 0, { exact: true }),
    ms((g) => g.stats.tokens, 'tokens', 0, { exact: true }),
    ms((g) => g.stats.tokensPerSecond, 'tokens/s', 0, { exact: true }),
    ms((g) => g.stats.wallSeconds, 'wall s', 1, { exact: true }),
    { title: 'recipe', text: (g) => g.recipeName },
  );
  return makeTable(columns, groups);
}

/** The shown table leaves out the columns only a spreadsheet needs (the sd and interval bounds as numbers). */
const SPREADSHEET_ONLY = new Set(['final val loss sd', 'CI low', 'CI high']);

/** The columns of groups.tex (a page wide at most): the comparison and the final loss; the rest is in groups.csv. */
const PAPER_COLUMNS = (header: string) => header === 'group' || header.startsWith('Δ ') || ['p', 'final val loss', 'n', 'repeated runs', 'val ppl', 'val acc', 'params', 'tokens'].includes(header);

function selectColumns(table: Table, keep: (header: string) => boolean): Table {
  const kept = table.header.map((h, i) => (keep(h) ? i : -1)).filter((i) => i >= 0);
  return { header: kept.map((i) => table.header[i]), right: kept.map((i) => table.right[i]), rows: table.rows.map((r) => ({ text: kept.map((i) => r.text[i]), raw: kept.map((i) => r.raw[i]) })) };
}

function withoutColumns(table: Table, drop: ReadonlySet<string>): Table {
  return selectColumns(table, (h) => !drop.has(h));
}

/**
 * With two or more rows, the columns whose cell is the same in every row (params, tokens, n …) leave the table and are
 * said once (`constants`, title and cell); a column empty in every row (no p without two seeds) just leaves. The first
 * column (the row's name) always stays.
 */
export function factorConstants(table: Table): { table: Table; constants: { title: string; text: string }[] } {
  if (table.rows.length < 2) return { table, constants: [] };
  const constant = table.header.map((_, i) => i > 0 && table.rows.every((r) => r.text[i] === table.rows[0].text[i]));
  return {
    table: selectColumns(table, (h) => !constant[table.header.indexOf(h)]),
    constants: table.header.flatMap((title, i) => (constant[i] && !['', '—'].includes(table.rows[0].text[i]) ? [{ title, text: table.rows[0].text[i] }] : [])),
  };
}

/** "Same for every group: n 3 · params 12,345 · tokens 3,000." ('' when nothing is). */
export function constantsLine(constants: { title: string; text: string }[], what = 'group'): string {
  return constants.length === 0 ? '' : `Same for every ${what}: ${constants.map((c) => `${c.title} ${c.text}`).join(' · ')}.`;
}

/** Markdown table, one row per group (see groupsTableModel). */
export function groupsTable(groups: RunGroup[], baseline: string | null = null): string {
  return markdownTable(withoutColumns(groupsTableModel(groups, baseline), SPREADSHEET_ONLY));
}

/** Cells are escaped (escapeMarkdown): a run's or mechanism's name is shown as text, never as a link or HTML. */
export function markdownTable(table: Table): string {
  const line = (cells: string[]) => `| ${cells.map(escapeMarkdown).join(' | ')} |`;
  return [line(table.header), `|${table.right.map((r) => (r ? '---:' : '---')).join('|')}|`, ...table.rows.map((r) => line(r.text))].join('\n');
}

/** A whole cell that is a number as a spreadsheet reads one ("-0.5", "1e-3"): left as it is. */
const NUMBER_TEXT = /^[+-]?(\d+\.?\d*|\.\d+)(e[+-]?\d+)?$/i;

/**
 * RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled. A text cell that a spreadsheet
 * would run as a formula (starting with =, +, -, @, a tab or a carriage return: a run, recipe or mechanism name, a
 * backend or commit from env.json) gets a leading single quote, OWASP's rule for CSV injection; numbers stay numbers.
 */
export function csvTable(table: Table): string {
  const field = (v: string | number | null) => {
    const plain = v === null ? '' : String(v);
    const text = typeof v === 'string' && /^[=+\-@\t\r]/.test(v) && !NUMBER_TEXT.test(v) ? `'${v}` : plain;
    return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
  };
  return [table.header, ...table.rows.map((r) => r.raw)].map((cells) => cells.map(field).join(',')).join('\r\n') + '\r\n';
}

/** A booktabs table (\\usepackage{booktabs}) with the shown cells, LaTeX's special characters escaped. */
export function latexTable(table: Table, caption: string): string {
  const escape = (text: string) =>
    text.replace(/[\\{}$&#^_%~]/g, (c) => ({ '\\': '\\textbackslash{}', '~': '\\textasciitilde{}', '^': '\\textasciicircum{}' })[c] ?? `\\${c}`)
      .replace(/±/g, '$\\pm$').replace(/−/g, '$-$').replace(/Δ/g, '$\\Delta$').replace(/·/g, '$\\cdot$').replace(/×/g, '$\\times$').replace(/⚠ /g, '');
  const row = (cells: string[]) => `${cells.map(escape).join(' & ')} \\\\`;
  return [
    '\\begin{table}',
    '\\centering',
    '\\small',
    `\\caption{${escape(caption)}}`,
    `\\begin{tabular}{${table.right.map((r) => (r ? 'r' : 'l')).join('')}}`,
    '\\toprule',
    row(table.header),
    '\\midrule',
    ...table.rows.map((r) => row(r.text)),
    '\\bottomrule',
    '\\end{tabular}',
    '\\end{table}',
    '',
  ].join('\n');
}

/**
 * One curve per group: the mean over the group's distinct seeds of the loss at each token count logged (against time: at each
 * step logged, at the runs' mean elapsed time), with a ±sd band where two or more seeds logged it; perplexity curves
 * are exp of those (exp(mean loss), band exp(mean ± sd)).
 */
export function groupCurves(groups: RunGroup[], split: 'train' | 'val', value: 'loss' | 'ppl', against: 'tokens' | 'time' = 'tokens'): LinePoint[] {
  const scale = value === 'ppl' ? Math.exp : (v: number) => v;
  const points: LinePoint[] = [];
  for (const g of groups) {
    const byPoint = groupBy(
      g.runs.flatMap((r) => r.records.filter((rec) => rec.split === split && Number.isFinite(rec.loss)).map((rec) => ({ seed: r.seed, rec }))),
      ({ rec }) => String(against === 'tokens' ? rec.tokens : rec.step),
    );
    for (const [key, recs] of byPoint) {
      // Over distinct seeds, as the tables: a seed's repeated runs are averaged first.
      const { mean, sd } = meanSdOverSeeds(recs, (r) => r.seed, (r) => r.rec.loss);
      const band = sd === null ? {} : { lo: scale(mean - sd), hi: scale(mean + sd) };
      const x = against === 'tokens' ? Number(key) : meanSd(recs.map(({ rec }) => rec.elapsed_s)).mean;
      points.push({ series: g.label, x, y: scale(mean), ...band });
    }
  }
  return points.sort((a, b) => a.x - b.x);
}

export const PLOTS = [
  { file: 'val-loss.svg', split: 'val', value: 'loss', against: 'tokens', title: 'Validation loss' },
  { file: 'val-ppl.svg', split: 'val', value: 'ppl', against: 'tokens', title: 'Validation perplexity' },
  { file: 'train-loss.svg', split: 'train', value: 'loss', against: 'tokens', title: 'Training loss' },
  { file: 'train-ppl.svg', split: 'train', value: 'ppl', against: 'tokens', title: 'Training perplexity' },
  { file: 'val-loss-time.svg', split: 'val', value: 'loss', against: 'time', title: 'Validation loss against wall-clock time' },
  { file: 'train-loss-time.svg', split: 'train', value: 'loss', against: 'time', title: 'Training loss against wall-clock time' },
] as const;

export interface CompareOptions {
  outDir: string;
  /** Leave out runs whose files are missing or corrupt (with a warning) instead of failing. */
  skipInvalid?: boolean;
  /** Average groups whose runs differ in more than the seed (with a warning, and marked in the report) instead of failing. */
  force?: boolean;
  /**
   * Runs of different model kinds, tokenizers or validation tokens: one report per such family, in sub-folders of
   * outDir (with a report.md there listing them), instead of an error.
   */
  split?: boolean;
  /** The attention the others are paired with; undefined = defaultBaseline (softmax when a run uses it); null = none. */
  baseline?: string | null;
  /**
   * What the groups' recipe column says for a run folder, where the caller knows better than its config.json's
   * `name` (a sweep names each run's recipe after the run, seed included: `sweep report` gives the sweep's group).
   */
  recipeName?: (dir: string) => string | undefined;
  /** Warnings and progress (default: stderr). */
  warn?: (message: string) => void;
}

export interface CompareReport {
  outDir: string;
  runs: RunSummary[];
  groups: RunGroup[];
  files: string[];
}

export interface CompareResult extends CompareReport {
  /** With `split` and runs of several families: each family's report (in a sub-folder); else just this one. */
  reports: CompareReport[];
  baseline: string | null;
}

function htmlTable(table: Table): string {
  const align = table.right.map((r) => (r ? 'right' : 'left'));
  const cells = (tag: string, r: string[]) => r.map((c, i) => `<${tag} style="text-align:${align[i]}">${escapeHtml(c)}</${tag}>`).join('');
  return `<table><thead><tr>${cells('th', table.header)}</tr></thead><tbody>${table.rows.map((r) => `<tr>${cells('td', r.text)}</tr>`).join('')}</tbody></table>`;
}

/** The baseline attention when none is named: softmax when a run uses it, else none. `compare` and `sweep report` share it. */
export function defaultBaseline(attentions: Iterable<string>): string | null {
  return [...attentions].includes('softmax') ? 'softmax' : null;
}

/** Loads every run folder; with skipInvalid a broken one is left out with a warning. */
async function loadRuns(dirs: string[], opts: CompareOptions, warn: (m: string) => void): Promise<RunSummary[]> {
  if (dirs.length === 0) throw new Error('compare: no run folders given');
  const runs: RunSummary[] = [];
  for (const dir of dirs) {
    try {
      const run = await loadRun(dir);
      run.recipeName = opts.recipeName?.(dir) ?? run.recipeName;
      run.warnings.forEach(warn);
      runs.push(run);
    } catch (err) {
      if (!opts.skipInvalid) throw new Error(`${(err as Error).message}\nLeave that folder out, or pass --skip-invalid to skip the runs that cannot be read (with a warning).`);
      warn(`skipped ${dir}: ${(err as Error).message}`);
    }
  }
  if (runs.length === 0) throw new Error('compare: none of the run folders could be read');
  return runs;
}

/** One line per mixed group: its label and what its runs differ in. */
function mixingLines(groups: RunGroup[]): string[] {
  return groups.filter((g) => g.mixed.length > 0).map((g) => `${g.label}: ${g.mixed.join('; ')}`);
}

/** "(mean ± sd over 3 seeds)", "(n = 1: one run per group)" or, when the groups differ, "(mean ± sd over seeds, n per group in the legend)". */
function seedsNote(groups: RunGroup[]): string {
  const counts = new Set(groups.map((g) => g.seeds.length));
  if (counts.size > 1) return 'mean ± sd over seeds; n per group in the legend';
  const [n] = counts;
  return n === 1 ? 'n = 1: one seed per group, no spread' : `mean ± sd over n = ${n} seeds`;
}

/**
 * Each group's colour, fixed once for the whole report (every plot gives a group the same colour, whichever groups it
 * shows), keyed by the group's legend entry, in the groups' order.
 */
export function groupColours(groups: RunGroup[]): Map<string, string> {
  const legend = legendNames(groups);
  const colours = seriesColours(groups.map((g) => g.label), (label) => groups.find((g) => g.label === label)!.attention);
  return new Map(groups.map((g, i) => [legend.get(g.label)!, colours[i]]));
}

/** Groups of different sizes name theirs in the legend, so that a line without a band reads as n = 1. */
function legendNames(groups: RunGroup[]): Map<string, string> {
  const sizes = new Set(groups.map((g) => g.seeds.length));
  return new Map(groups.map((g) => [g.label, sizes.size > 1 ? `${g.label} (n = ${g.seeds.length})` : g.label]));
}

async function plotCurves(groups: RunGroup[]): Promise<{ file: string; title: string; svg: string }[]> {
  const legend = legendNames(groups);
  const colours = groupColours(groups);
  const svgs: { file: string; title: string; svg: string }[] = [];
  for (const plot of PLOTS) {
    const points = groupCurves(groups, plot.split, plot.value, plot.against).map((p) => ({ ...p, series: legend.get(p.series)! }));
    if (points.length === 0) continue;
    const svg = await lineChartSvg(points, {
      title: `${plot.title} (${seedsNote(groups)})`,
      xTitle: plot.against === 'tokens' ? 'tokens' : 'wall-clock time (s)',
      yTitle: plot.value === 'loss' ? 'loss (nats/token)' : 'perplexity',
      seriesTitle: 'group',
      logY: plot.value === 'ppl',
      colours,
    });
    svgs.push({ file: plot.file, title: plot.title, svg });
  }
  return svgs;
}

// Full window width; tables scroll sideways rather than wrap a number, but long headings wrap (the comparison columns
// come first, so they are in view at laptop widths); plots two or more abreast when they fit.
const PAGE_STYLE = `body{font-family:system-ui,sans-serif;margin:1.5em 2em}
.table{overflow-x:auto}table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:14px}
th,td{border:1px solid #ccc;padding:4px 8px;white-space:nowrap}
th{background:#f4f4f4;white-space:normal;vertical-align:bottom;min-width:4em}tbody tr:nth-child(even){background:#fafafa}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(640px,100%),1fr));gap:1em}
figure{margin:0}figure svg{width:100%;height:auto}figcaption{font-size:13px}
.warning{border:2px solid #d55e00;background:#fff4ec;padding:0.5em 1em}`;

interface ReportParts {
  intro: string;
  mixed: string[];
  perRun: Table;
  perGroup: Table;
  /** The group table's columns that are the same for every group, said once above it ('' when none). */
  groupConstants: string;
  /** The settings that tell the groups apart; null when the attention alone does. */
  differences: Table | null;
  svgs: { file: string; title: string; svg: string }[];
  runs: RunSummary[];
}

const MIXED_HEADING = '⚠ Groups whose runs differ in more than the seed (averaged with --force)';
const DIFFERENCES_HEADING = 'What tells the groups apart';
const TABLE_FILES = 'Tables: runs.csv, groups.csv (plain numbers), groups.tex (LaTeX, booktabs).';

function reportMarkdown(p: ReportParts): string {
  const mixed = p.mixed.length ? [`## ${MIXED_HEADING}`, '', ...p.mixed.map((line) => `- ${escapeMarkdown(line)}`), ''] : [];
  const differences = p.differences ? [`## ${DIFFERENCES_HEADING}`, '', markdownTable(p.differences), ''] : [];
  const constants = p.groupConstants ? [escapeMarkdown(p.groupConstants), ''] : [];
  return [
    '# Run comparison', '', escapeMarkdown(p.intro), '', ...mixed, '## Groups', '', ...constants, markdownTable(p.perGroup), '', ...differences,
    '## Curves', '', ...p.svgs.map((s) => `![${s.title}](${s.file})`), '',
    '## Runs', '', markdownTable(p.perRun), '', TABLE_FILES, '', '## Run folders', '', ...p.runs.map((r) => `- ${escapeMarkdown(`${r.name}: ${r.dir}`)}`), '',
  ].join('\n');
}

function reportHtml(p: ReportParts): string {
  const mixed = p.mixed.length
    ? `<div class="warning"><h2>${escapeHtml(MIXED_HEADING)}</h2><ul>${p.mixed.map((line) => `<li>${escapeHtml(line)}</li>`).join('')}</ul></div>`
    : '';
  const differences = p.differences ? `<h2>${escapeHtml(DIFFERENCES_HEADING)}</h2><div class="table">${htmlTable(p.differences)}</div>` : '';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>Run comparison</title>
<style>${PAGE_STYLE}</style>
</head><body>
<h1>Run comparison</h1><p>${escapeHtml(p.intro)}</p>${mixed}
<h2>Groups</h2>${p.groupConstants ? `<p>${escapeHtml(p.groupConstants)}</p>` : ''}<div class="table">${htmlTable(p.perGroup)}</div>${differences}
<h2>Curves</h2>
<div class="plots">
${p.svgs.map((s) => `<figure id="${s.file}">${s.svg}<figcaption><a href="${s.file}">${s.file}</a></figcaption></figure>`).join('\n')}
</div>
<h2>Runs</h2><div class="table">${htmlTable(p.perRun)}</div>
<p>${escapeHtml(TABLE_FILES)}</p>
</body></html>
`;
}

/**
 * Reads the run folders, groups them, and writes the report folder. Runs of different model kinds, tokenizers or
 * validation tokens are an error naming the difference, unless `split` (then one report per family, in sub-folders).
 * A group whose runs differ in more than the seed is an error naming it and the difference, unless `force` (then a
 * warning, and the report marks it).
 */
export async function compareRuns(dirs: string[], opts: CompareOptions): Promise<CompareResult> {
  const warn = opts.warn ?? ((m: string) => process.stderr.write(`warning: ${m}\n`));
  const runs = await loadRuns(dirs, opts, warn);
  const baseline = opts.baseline === undefined ? defaultBaseline(runs.map((r) => r.attention)) : opts.baseline;
  if (baseline !== null && !runs.some((r) => r.attention === baseline)) throw new Error(`--baseline ${baseline}: no run uses that attention (${[...new Set(runs.map((r) => r.attention))].join(', ')})`);
  const differences = familyDifferences(runs);
  if (differences.length === 0) {
    const report = await writeReport(runs, opts.outDir, baseline, opts, warn);
    return { ...report, reports: [report], baseline };
  }
  if (!opts.split) {
    throw new Error(
      `these runs' losses are not comparable on one axis; they differ in\n${differences.map((line) => `  ${line}`).join('\n')}\n` +
        'Compare them separately, or pass --split for one report per kind of run (in sub-folders of the report folder).',
    );
  }
  const families = [...groupBy(runs, (r) => familyFolder(r, runs)).entries()];
  const reports: CompareReport[] = [];
  for (const [folder, members] of families) {
    const familyBaseline = baseline !== null && members.some((r) => r.attention === baseline) ? baseline : null;
    reports.push(await writeReport(members, safeJoin(opts.outDir, folder), familyBaseline, opts, warn));
  }
  const index = [
    '# Run comparison, split', '',
    `The runs differ in what makes losses comparable, so each kind has its own report:`, '',
    ...differences.map((line) => `- ${escapeMarkdown(line)}`), '',
    ...reports.map((r) => `- [${relative(opts.outDir, r.outDir)}](${relative(opts.outDir, r.outDir)}/report.md): ${r.runs.length} runs in ${r.groups.length} groups ([page](${relative(opts.outDir, r.outDir)}/index.html))`), '',
  ].join('\n');
  const indexFile = safeJoin(opts.outDir, 'report.md');
  await writeFile(indexFile, index);
  warn(`the runs differ in ${differences.map((line) => line.slice(0, line.indexOf(' ('))).join(', ')}: one report per kind, in ${reports.map((r) => r.outDir).join(', ')}`);
  return { outDir: opts.outDir, runs, groups: reports.flatMap((r) => r.groups), files: [indexFile, ...reports.flatMap((r) => r.files)], reports, baseline };
}

/** The sub-folder of a run's family: its values of the family keys in which `all` the runs differ (`bert-evalTokens-4096`). */
function familyFolder(run: RunSummary, all: RunSummary[]): string {
  return FAMILY_KEYS.filter(({ key }) => new Set(all.map((r) => r.family[key])).size > 1).map(({ key, folder }) => folder(run.family[key])).join('-');
}

/** One report folder (see the file comment) for runs of one family. */
async function writeReport(runs: RunSummary[], outDir: string, baseline: string | null, opts: CompareOptions, warn: (m: string) => void): Promise<CompareReport> {
  const groups = groupRuns(runs, baseline);
  const mixed = mixingLines(groups);
  if (mixed.length > 0 && !opts.force) {
    throw new Error(
      `${mixed.length} group${mixed.length > 1 ? 's mix runs' : ' mixes runs'} that differ in more than the seed, so mean ± sd would not measure the seed's effect:\n` +
        `${mixed.map((line) => `  ${line}`).join('\n')}\nLeave out or finish the odd runs, or pass --force to average them anyway (the report marks these groups).`,
    );
  }
  for (const line of mixed) warn(`MIXED GROUP averaged because of --force: ${line}`);

  await mkdir(outDir, { recursive: true });
  const files: string[] = [];
  const write = async (name: string, content: string) => {
    const file = safeJoin(outDir, name);
    await writeFile(file, content);
    files.push(file);
  };
  const svgs = await plotCurves(groups);
  for (const { file, svg } of svgs) await write(file, svg);
  const single = groups.every((g) => g.seeds.length === 1);
  const repeated = groups.filter((g) => g.repeats.runs > 0);
  const intro = `${runs.length} runs in ${groups.length} groups (same recipe and attention, different seeds); n counts distinct seeds. ` +
    (single ? 'Every group has one seed (n = 1): its values are that seed’s, without a spread or interval. ' : 'Grouped values are mean ± sample sd over the group’s seeds (one seed: its value, n = 1), and a group’s perplexity is exp(mean loss). ') +
    (repeated.length > 0
      ? `Runs that repeat a seed (${repeated.map((g) => `${g.label}: ${g.repeats.runs}`).join(', ')}) are averaged with it first and are not counted in n; their spread (the largest max − min of the final validation loss among runs of one seed) measures non-determinism, not the seed. `
      : '') +
    (baseline ? `Δ is the paired difference of the final validation loss to the ${baseline} group with the same other settings, over the seeds both ran (negative = lower than ${baseline}), with a 95% Student t interval and the paired t-test’s p when there are two or more seeds. ` : '') +
    `Curves are group means at each logged token count (or step, against time), from the model before training (step 0) where the runs validated it${single ? '' : ', the band ± one sd over seeds'}.`;
  const diffTable = differencesTable(groups);
  const differences = diffTable.keys.length === 0
    ? null
    : makeTable<{ label: string; values: string[] }>([{ title: 'group', text: (r) => r.label }, ...diffTable.keys.map((k, i) => ({ title: shortKey(k), text: (r: { values: string[] }) => r.values[i] }))], diffTable.rows);
  const perGroupFull = groupsTableModel(groups, baseline);
  const shown = factorConstants(withoutColumns(perGroupFull, SPREADSHEET_ONLY));
  const paper = factorConstants(selectColumns(perGroupFull, PAPER_COLUMNS));
  const parts: ReportParts = { intro, mixed, perRun: runsTableModel(runs), perGroup: shown.table, groupConstants: constantsLine(shown.constants), differences, svgs, runs };
  await write('report.md', reportMarkdown(parts));
  await write('index.html', reportHtml(parts));
  await write('runs.csv', csvTable(parts.perRun));
  await write('groups.csv', csvTable(perGroupFull));
  await write('groups.tex', latexTable(paper.table, [`Final validation loss per group (${seedsNote(groups)}).`, constantsLine(paper.constants)].filter(Boolean).join(' ')));
  const json = {
    baseline,
    runs: runs.map(({ records: _records, ...r }) => r),
    groups: groups.map((g) => ({ label: g.label, attention: g.attention, recipeName: g.recipeName, runs: g.runs.map((r) => r.dir), seeds: g.seeds, repeats: g.repeats, stats: g.stats, mixed: g.mixed, paired: g.paired })),
  };
  await write('runs.json', JSON.stringify(json, null, 2) + '\n');
  return { outDir, runs, groups, files };
}
