// Compares logged training runs: reads each run folder (config.json = the resolved recipe,
// metrics.jsonl = MetricRecord lines, summary.json = the trainer's final summary; see
// src/train/metrics.ts) and writes a report folder with
//   report.md       per-run table, and runs of the same recipe + attention with different seeds
//                   grouped as mean ± sd (n); a group's perplexity is exp(mean loss)
//   index.html      the same tables with the plots inlined (opens in a browser, uses its width)
//   {train,val}-{loss,ppl}.svg   curves against tokens, one line per group (= per attention when
//                   every attention ran one recipe): the mean over the group's seeds with a ±sd band
//   runs.json       the extracted numbers, machine-readable
// config.json and metrics.jsonl are required (a missing or corrupt one is an error naming the file,
// or with skipInvalid a printed warning and the run is left out); summary.json is optional (an
// unfinished run is compared on its metrics, with a warning).
// A group's mean ± sd measures how much the seed matters, so a group whose runs differ in more than
// the seed (tokens trained, the learning-rate schedule they followed) is refused unless forced.
import { existsSync, readdirSync, statSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { checkRecord } from '../train/metrics.ts';
import type { MetricRecord } from '../train/metrics.ts';
import { lineChartSvg } from './plot.ts';
import type { LinePoint } from './plot.ts';
import { formatMeanSd, formatNumber, groupBy, meanSd } from './stats.ts';
import type { MeanSd } from './stats.ts';

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
  /** Mean ± sd over the runs; finalValPpl is exp(mean final loss), without an sd. */
  stats: Record<'params' | 'tokens' | 'finalValLoss' | 'bestValLoss' | 'finalValPpl' | 'finalValBpb' | 'finalValAcc' | 'tokensPerSecond' | 'wallSeconds', MeanSd>;
  /** How the runs differ in more than the seed (empty when they do not). */
  mixed: string[];
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

/** Reads one run folder. Errors name the file (and line) that is missing or malformed. */
export async function loadRun(dir: string): Promise<RunSummary> {
  const warnings: string[] = [];
  const configFile = join(dir, 'config.json');
  const metricsFile = join(dir, 'metrics.jsonl');
  const summaryFile = join(dir, 'summary.json');
  const config = await readJsonFile(configFile);
  const model = config.model;
  if (!isRecord(model) || !isRecord(model.attention) || typeof model.attention.name !== 'string') {
    throw new Error(`${configFile}: expected the resolved recipe with model.attention.name (a string)`);
  }
  const train = isRecord(config.train) ? config.train : {};
  let metricsText: string;
  try {
    metricsText = await readFile(metricsFile, 'utf8');
  } catch (err) {
    throw new Error(`${metricsFile}: cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
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

const isRunDir = (dir: string) => existsSync(join(dir, 'config.json')) || existsSync(join(dir, 'metrics.jsonl'));

/**
 * Run folders from command-line arguments: run folders, globs of them (quoted, so the shell leaves
 * them alone), or a parent folder such as runs/ whose sub-folders are runs.
 */
export function resolveRunDirs(args: string[]): string[] {
  const dirs: string[] = [];
  for (const arg of args) {
    const matches = /[*?]/.test(arg) ? expandGlob(arg) : [arg];
    if (matches.length === 0) throw new Error(`${arg}: no folder matches`);
    for (const path of matches) {
      const stat = statSync(path, { throwIfNoEntry: false });
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
      const children = readdirSync(path).sort().map((e) => join(path, e)).filter((p) => statSync(p).isDirectory() && isRunDir(p));
      if (children.length === 0) throw new Error(`${path}: not a run folder (no config.json or metrics.jsonl) and holds none`);
      dirs.push(...children);
    }
  }
  return [...new Set(dirs.map((d) => resolve(d)))];
}

/** The settings (dotted recipe keys) whose values are not the same in all of `runs`. */
function differingSettings(runs: RunSummary[]): string[] {
  const keys = new Set(runs.flatMap((r) => Object.keys(r.settings)));
  return [...keys].filter((k) => new Set(runs.map((r) => canonical(r.settings[k]))).size > 1).sort();
}

/**
 * A group's label: its attention, and when that attention has several groups, the settings that tell them
 * apart ("softmax (train.lr=0.003)"); unique.
 */
function groupLabels(grouped: RunSummary[][]): string[] {
  const byAttention = groupBy(grouped, (g) => g[0].attention);
  const used = new Set<string>();
  return grouped.map((runs) => {
    const first = runs[0];
    const siblings = byAttention.get(first.attention)!;
    let label = first.attention;
    if (siblings.length > 1) {
      const keys = differingSettings(siblings.map((g) => g[0])).filter((k) => k !== 'model.attention.name');
      const shown = keys.slice(0, 3).map((k) => `${k.replace(/^model\.attention\.options\./, 'options.')}=${JSON.stringify(first.settings[k] ?? null)}`);
      label = `${first.attention} (${[...shown, ...(keys.length > 3 ? ['…'] : [])].join(', ') || first.recipeName})`;
    }
    for (let i = 2; used.has(label); i++) label = `${first.attention} (${first.recipeName} #${i})`;
    used.add(label);
    return label;
  });
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

/** Groups runs of the same recipe and attention (differing in seed only); labels are unique. */
export function groupRuns(runs: RunSummary[]): RunGroup[] {
  const grouped = [...groupBy(runs, (r) => `${r.attention}\u0000${r.recipeKey}`).values()];
  const labels = groupLabels(grouped);
  return grouped.map((runsOfGroup, i) => {
    const first = runsOfGroup[0];
    const stat = (key: keyof RunGroup['stats']) => meanSd(runsOfGroup.map((r) => r[key]));
    const loss = stat('finalValLoss');
    return {
      label: labels[i],
      attention: first.attention,
      recipeName: first.recipeName,
      runs: runsOfGroup,
      stats: {
        params: stat('params'), tokens: stat('tokens'), finalValLoss: loss, bestValLoss: stat('bestValLoss'),
        // The perplexity of the mean loss: averaging perplexities would weight the worse seeds exponentially.
        finalValPpl: { mean: Math.exp(loss.mean), sd: null, n: loss.n },
        finalValBpb: stat('finalValBpb'), finalValAcc: stat('finalValAcc'), tokensPerSecond: stat('tokensPerSecond'), wallSeconds: stat('wallSeconds'),
      },
      mixed: groupMixing(runsOfGroup),
    };
  });
}

/** Markdown table, one row per run. */
export function runsTable(runs: RunSummary[]): string {
  const lines = [
    '| run | attention | kind | seed | params | tokens | final val loss | best val loss | val ppl | val bpb | val acc | tokens/s | wall s |',
    '|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of runs) {
    lines.push(
      `| ${describeRun(r)} | ${r.attention} | ${r.kind} | ${r.seed ?? '—'} | ${formatNumber(r.params)} | ${formatNumber(r.tokens)} | ` +
        `${formatNumber(r.finalValLoss, 4)} | ${formatNumber(r.bestValLoss, 4)} | ${formatNumber(r.finalValPpl, 2)} | ${formatNumber(r.finalValBpb, 4)} | ${formatNumber(r.finalValAcc, 4)} | ${formatNumber(r.tokensPerSecond)} | ${formatNumber(r.wallSeconds, 1)} |`,
    );
  }
  return lines.join('\n');
}

/** Markdown table, one row per group: mean ± sample sd over the group's seeds, n = runs; ⚠ marks a mixed group. */
export function groupsTable(groups: RunGroup[]): string {
  const lines = [
    '| group | recipe | n | seeds | params | tokens | final val loss | best val loss | val ppl | val bpb | val acc | tokens/s | wall s |',
    '|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const g of groups) {
    const s = g.stats;
    const ms = (m: MeanSd, digits: number) => formatMeanSd(m, digits, { showN: false });
    lines.push(
      `| ${g.mixed.length ? '⚠ ' : ''}${g.label} | ${g.recipeName} | ${g.runs.length} | ${g.runs.map((r) => r.seed ?? '—').join(', ')} | ${ms(s.params, 0)} | ${ms(s.tokens, 0)} | ` +
        `${ms(s.finalValLoss, 4)} | ${ms(s.bestValLoss, 4)} | ${ms(s.finalValPpl, 2)} | ${ms(s.finalValBpb, 4)} | ${ms(s.finalValAcc, 4)} | ${ms(s.tokensPerSecond, 0)} | ${ms(s.wallSeconds, 1)} |`,
    );
  }
  return lines.join('\n');
}

/**
 * One curve per group: the mean over the group's runs of the loss at each token count logged, with a
 * ±sd band where two or more runs logged it; perplexity curves are exp of those (exp(mean loss), band
 * exp(mean ± sd)).
 */
export function groupCurves(groups: RunGroup[], split: 'train' | 'val', value: 'loss' | 'ppl'): LinePoint[] {
  const scale = value === 'ppl' ? Math.exp : (v: number) => v;
  const points: LinePoint[] = [];
  for (const g of groups) {
    const byTokens = groupBy(
      g.runs.flatMap((r) => r.records.filter((rec) => rec.split === split && Number.isFinite(rec.loss))),
      (rec) => String(rec.tokens),
    );
    for (const [tokens, recs] of byTokens) {
      const { mean, sd } = meanSd(recs.map((rec) => rec.loss));
      const band = sd === null ? {} : { lo: scale(mean - sd), hi: scale(mean + sd) };
      points.push({ series: g.label, x: Number(tokens), y: scale(mean), ...band });
    }
  }
  return points.sort((a, b) => a.x - b.x);
}

export const PLOTS = [
  { file: 'val-loss.svg', split: 'val', value: 'loss', title: 'Validation loss' },
  { file: 'val-ppl.svg', split: 'val', value: 'ppl', title: 'Validation perplexity' },
  { file: 'train-loss.svg', split: 'train', value: 'loss', title: 'Training loss' },
  { file: 'train-ppl.svg', split: 'train', value: 'ppl', title: 'Training perplexity' },
] as const;

export interface CompareOptions {
  outDir: string;
  /** Leave out runs whose files are missing or corrupt (with a warning) instead of failing. */
  skipInvalid?: boolean;
  /** Average groups whose runs differ in more than the seed (with a warning, and marked in the report) instead of failing. */
  force?: boolean;
  /** Warnings and progress (default: stderr). */
  warn?: (message: string) => void;
}

export interface CompareResult {
  outDir: string;
  runs: RunSummary[];
  groups: RunGroup[];
  files: string[];
}

function escapeHtml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');
}

/** A markdown pipe table as an HTML table (only the tables this module writes), keeping its column alignment. */
function markdownTableToHtml(markdown: string): string {
  const rows = markdown.split('\n').map((line) => line.slice(1, -1).split('|').map((c) => escapeHtml(c.trim())));
  const [head, alignment, ...body] = rows;
  const align = alignment.map((a) => (a.endsWith(':') ? 'right' : 'left'));
  const cells = (tag: string, r: string[]) => r.map((c, i) => `<${tag} style="text-align:${align[i]}">${c}</${tag}>`).join('');
  return `<table><thead><tr>${cells('th', head)}</tr></thead><tbody>${body.map((r) => `<tr>${cells('td', r)}</tr>`).join('')}</tbody></table>`;
}

/** Loads every run folder; with skipInvalid a broken one is left out with a warning. */
async function loadRuns(dirs: string[], opts: CompareOptions, warn: (m: string) => void): Promise<RunSummary[]> {
  if (dirs.length === 0) throw new Error('compare: no run folders given');
  const runs: RunSummary[] = [];
  for (const dir of dirs) {
    try {
      const run = await loadRun(dir);
      run.warnings.forEach(warn);
      runs.push(run);
    } catch (err) {
      if (!opts.skipInvalid) throw err;
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

async function plotCurves(groups: RunGroup[]): Promise<{ file: string; title: string; svg: string }[]> {
  const attentionOf = new Map(groups.map((g) => [g.label, g.attention]));
  const svgs: { file: string; title: string; svg: string }[] = [];
  for (const plot of PLOTS) {
    const points = groupCurves(groups, plot.split, plot.value);
    if (points.length === 0) continue;
    const svg = await lineChartSvg(points, {
      title: `${plot.title} (mean ± sd over seeds)`,
      xTitle: 'tokens',
      yTitle: plot.value === 'loss' ? 'loss (nats/token)' : 'perplexity',
      seriesTitle: 'attention',
      logY: plot.value === 'ppl',
      mechanismOf: (label) => attentionOf.get(label) ?? label,
    });
    svgs.push({ file: plot.file, title: plot.title, svg });
  }
  return svgs;
}

// Full window width; tables scroll sideways rather than wrap a number; plots two or more abreast when they fit.
const PAGE_STYLE = `body{font-family:system-ui,sans-serif;margin:1.5em 2em}
.table{overflow-x:auto}table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:14px}
th,td{border:1px solid #ccc;padding:4px 8px;white-space:nowrap}
th{background:#f4f4f4}tbody tr:nth-child(even){background:#fafafa}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(640px,100%),1fr));gap:1em}
figure{margin:0}figure svg{width:100%;height:auto}figcaption{font-size:13px}
.warning{border:2px solid #d55e00;background:#fff4ec;padding:0.5em 1em}`;

interface ReportParts {
  intro: string;
  mixed: string[];
  perRun: string;
  perGroup: string;
  svgs: { file: string; title: string; svg: string }[];
  runs: RunSummary[];
}

const MIXED_HEADING = '⚠ Groups whose runs differ in more than the seed (averaged with --force)';

function reportMarkdown(p: ReportParts): string {
  const mixed = p.mixed.length ? [`## ${MIXED_HEADING}`, '', ...p.mixed.map((line) => `- ${line}`), ''] : [];
  return [
    '# Run comparison', '', p.intro, '', ...mixed, '## Groups', '', p.perGroup, '',
    '## Curves', '', ...p.svgs.map((s) => `![${s.title}](${s.file})`), '',
    '## Runs', '', p.perRun, '', '## Run folders', '', ...p.runs.map((r) => `- ${r.name}: ${r.dir}`), '',
  ].join('\n');
}

function reportHtml(p: ReportParts): string {
  const mixed = p.mixed.length
    ? `<div class="warning"><h2>${escapeHtml(MIXED_HEADING)}</h2><ul>${p.mixed.map((line) => `<li>${escapeHtml(line)}</li>`).join('')}</ul></div>`
    : '';
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1"><title>Run comparison</title>
<style>${PAGE_STYLE}</style>
</head><body>
<h1>Run comparison</h1><p>${escapeHtml(p.intro)}</p>${mixed}
<h2>Groups</h2><div class="table">${markdownTableToHtml(p.perGroup)}</div>
<h2>Curves</h2>
<div class="plots">
${p.svgs.map((s) => `<figure id="${s.file}">${s.svg}<figcaption><a href="${s.file}">${s.file}</a></figcaption></figure>`).join('\n')}
</div>
<h2>Runs</h2><div class="table">${markdownTableToHtml(p.perRun)}</div>
</body></html>
`;
}

/**
 * Reads the run folders, groups them, and writes the report folder. A group whose runs differ in more than
 * the seed is an error naming it and the difference, unless `force` (then a warning, and the report marks it).
 */
export async function compareRuns(dirs: string[], opts: CompareOptions): Promise<CompareResult> {
  const warn = opts.warn ?? ((m: string) => process.stderr.write(`warning: ${m}\n`));
  const runs = await loadRuns(dirs, opts, warn);
  const groups = groupRuns(runs);
  const mixed = mixingLines(groups);
  if (mixed.length > 0 && !opts.force) {
    throw new Error(
      `${mixed.length} group${mixed.length > 1 ? 's mix runs' : ' mixes runs'} that differ in more than the seed, so mean ± sd would not measure the seed's effect:\n` +
        `${mixed.map((line) => `  ${line}`).join('\n')}\nLeave out or finish the odd runs, or pass --force to average them anyway (the report marks these groups).`,
    );
  }
  for (const line of mixed) warn(`MIXED GROUP averaged because of --force: ${line}`);

  await mkdir(opts.outDir, { recursive: true });
  const files: string[] = [];
  const write = async (name: string, content: string) => {
    const file = join(opts.outDir, name);
    await writeFile(file, content);
    files.push(file);
  };
  const svgs = await plotCurves(groups);
  for (const { file, svg } of svgs) await write(file, svg);
  const intro = `${runs.length} runs in ${groups.length} groups (same recipe and attention, different seeds); ` +
    'grouped values are mean ± sample sd over the group’s runs, and a group’s perplexity is exp(mean loss). ' +
    'Curves are group means at each logged token count, the band ± one sd.';
  const parts: ReportParts = { intro, mixed, perRun: runsTable(runs), perGroup: groupsTable(groups), svgs, runs };
  await write('report.md', reportMarkdown(parts));
  await write('index.html', reportHtml(parts));
  const json = {
    runs: runs.map(({ records: _records, ...r }) => r),
    groups: groups.map((g) => ({ label: g.label, attention: g.attention, recipeName: g.recipeName, runs: g.runs.map((r) => r.dir), stats: g.stats, mixed: g.mixed })),
  };
  await write('runs.json', JSON.stringify(json, null, 2) + '\n');
  return { outDir: opts.outDir, runs, groups, files };
}
