// Compares logged training runs: reads each run folder (config.json = the resolved recipe,
// metrics.jsonl = MetricRecord lines, summary.json = the trainer's final summary; see
// src/train/metrics.ts) and writes a report folder with
//   report.md       per-run table, and runs of the same recipe + attention with different seeds
//                   grouped as mean ± sd (n)
//   index.html      the same tables with the plots inlined (opens in a browser)
//   {train,val}-{loss,ppl}.svg   curves against tokens, one line per group (= per attention when
//                   every attention ran one recipe), averaged over the group's seeds
//   runs.json       the extracted numbers, machine-readable
// config.json and metrics.jsonl are required (a missing or corrupt one is an error naming the file,
// or with skipInvalid a printed warning and the run is left out); summary.json is optional (an
// unfinished run is compared on its metrics, with a warning).
import { existsSync, readdirSync, statSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { checkRecord } from '../train/metrics.ts';
import type { MetricRecord } from '../train/metrics.ts';
import { lineChartSvg } from './plot.ts';
import type { LinePoint } from './plot.ts';
import { formatMeanSd, groupBy, meanSd } from './stats.ts';
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
  params: number | null;
  tokens: number | null;
  finalValLoss: number | null;
  bestValLoss: number | null;
  finalValPpl: number | null;
  finalValBpb: number | null;
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
  stats: Record<'params' | 'tokens' | 'finalValLoss' | 'bestValLoss' | 'finalValPpl' | 'finalValBpb' | 'tokensPerSecond' | 'wallSeconds', MeanSd>;
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
  const valLosses = [...val.map((r) => r.loss), finalValLoss].filter((v): v is number => finite(v) !== null);
  const tokens = finite(summary.tokens) ?? lastRecord.tokens;
  const wallSeconds = finite(summary.elapsed_s) ?? finite(lastRecord.elapsed_s);
  // Identity of the recipe: everything but the seed and the fields that only name or place the run.
  const { name: recipeName, wandb: _wandb, ...rest } = config;
  const recipeKey = canonical({ ...rest, train: { ...train, seed: undefined, runDir: undefined } });
  return {
    dir,
    name: basename(resolve(dir)),
    recipeName: typeof recipeName === 'string' ? recipeName : basename(resolve(dir)),
    kind: typeof model.kind === 'string' ? model.kind : '?',
    attention: model.attention.name,
    attentionOptions: isRecord(model.attention.options) ? model.attention.options : {},
    seed: finite(train.seed),
    recipeKey,
    params: finite(summary.parameters),
    tokens,
    finalValLoss,
    bestValLoss: valLosses.length ? Math.min(...valLosses) : null,
    finalValPpl: finite(summary.val_ppl) ?? finite(lastVal?.ppl) ?? (finalValLoss === null ? null : Math.exp(finalValLoss)),
    finalValBpb: finite(summary.val_bpb) ?? finite(lastVal?.bpb),
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

/** Groups runs of the same recipe and attention (differing in seed only); labels are unique. */
export function groupRuns(runs: RunSummary[]): RunGroup[] {
  const grouped = [...groupBy(runs, (r) => `${r.attention}\u0000${r.recipeKey}`).values()];
  const attentionCount = new Map<string, number>();
  for (const g of grouped) attentionCount.set(g[0].attention, (attentionCount.get(g[0].attention) ?? 0) + 1);
  const used = new Set<string>();
  return grouped.map((runsOfGroup) => {
    const first = runsOfGroup[0];
    let label = attentionCount.get(first.attention)! > 1 ? `${first.attention} (${first.recipeName})` : first.attention;
    for (let i = 2; used.has(label); i++) label = `${first.attention} (${first.recipeName} #${i})`;
    used.add(label);
    const stat = (key: keyof RunGroup['stats']) => meanSd(runsOfGroup.map((r) => r[key]));
    return {
      label,
      attention: first.attention,
      recipeName: first.recipeName,
      runs: runsOfGroup,
      stats: {
        params: stat('params'), tokens: stat('tokens'), finalValLoss: stat('finalValLoss'), bestValLoss: stat('bestValLoss'),
        finalValPpl: stat('finalValPpl'), finalValBpb: stat('finalValBpb'), tokensPerSecond: stat('tokensPerSecond'), wallSeconds: stat('wallSeconds'),
      },
    };
  });
}

const fmt = (v: number | null, digits: number) => (v === null ? '—' : v.toFixed(digits));
const fmtInt = (v: number | null) => (v === null ? '—' : Math.round(v).toLocaleString('en-US'));

/** Markdown table, one row per run. */
export function runsTable(runs: RunSummary[]): string {
  const lines = [
    '| run | attention | kind | seed | params | tokens | final val loss | best val loss | val ppl | val bpb | tokens/s | wall s |',
    '|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const r of runs) {
    lines.push(
      `| ${r.name}${r.finished ? '' : ' (unfinished)'} | ${r.attention} | ${r.kind} | ${r.seed ?? '—'} | ${fmtInt(r.params)} | ${fmtInt(r.tokens)} | ` +
        `${fmt(r.finalValLoss, 4)} | ${fmt(r.bestValLoss, 4)} | ${fmt(r.finalValPpl, 2)} | ${fmt(r.finalValBpb, 4)} | ${fmtInt(r.tokensPerSecond)} | ${fmt(r.wallSeconds, 1)} |`,
    );
  }
  return lines.join('\n');
}

/** Markdown table, one row per group: mean ± sample sd over the group's seeds, n = runs. */
export function groupsTable(groups: RunGroup[]): string {
  const lines = [
    '| group | recipe | n | seeds | params | tokens | final val loss | best val loss | val ppl | val bpb | tokens/s | wall s |',
    '|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|',
  ];
  for (const g of groups) {
    const s = g.stats;
    const ms = (m: MeanSd, digits: number) => formatMeanSd(m, digits, { showN: false });
    lines.push(
      `| ${g.label} | ${g.recipeName} | ${g.runs.length} | ${g.runs.map((r) => r.seed ?? '—').join(', ')} | ${ms(s.params, 0)} | ${ms(s.tokens, 0)} | ` +
        `${ms(s.finalValLoss, 4)} | ${ms(s.bestValLoss, 4)} | ${ms(s.finalValPpl, 2)} | ${ms(s.finalValBpb, 4)} | ${ms(s.tokensPerSecond, 0)} | ${ms(s.wallSeconds, 1)} |`,
    );
  }
  return lines.join('\n');
}

/** One curve per group: the mean over the group's runs of `value` at each token count logged. */
export function groupCurves(groups: RunGroup[], split: 'train' | 'val', value: 'loss' | 'ppl'): LinePoint[] {
  const points: LinePoint[] = [];
  for (const g of groups) {
    const byTokens = groupBy(
      g.runs.flatMap((r) => r.records.filter((rec) => rec.split === split && Number.isFinite(rec[value]))),
      (rec) => String(rec.tokens),
    );
    for (const [tokens, recs] of byTokens) points.push({ series: g.label, x: Number(tokens), y: meanSd(recs.map((rec) => rec[value])).mean });
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

/** A markdown pipe table as an HTML table (only the tables this module writes). */
function markdownTableToHtml(markdown: string): string {
  const rows = markdown.split('\n').map((line) => line.slice(1, -1).split('|').map((c) => escapeHtml(c.trim())));
  const [head, , ...body] = rows;
  return `<table><thead><tr>${head.map((c) => `<th>${c}</th>`).join('')}</tr></thead><tbody>${body
    .map((r) => `<tr>${r.map((c) => `<td>${c}</td>`).join('')}</tr>`)
    .join('')}</tbody></table>`;
}

export async function compareRuns(dirs: string[], opts: CompareOptions): Promise<CompareResult> {
  const warn = opts.warn ?? ((m: string) => process.stderr.write(`warning: ${m}\n`));
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
  const groups = groupRuns(runs);
  await mkdir(opts.outDir, { recursive: true });
  const files: string[] = [];
  const write = async (name: string, content: string) => {
    const file = join(opts.outDir, name);
    await writeFile(file, content);
    files.push(file);
  };

  const svgs: { file: string; title: string; svg: string }[] = [];
  for (const plot of PLOTS) {
    const points = groupCurves(groups, plot.split, plot.value);
    if (points.length === 0) continue;
    const svg = await lineChartSvg(points, {
      title: plot.title,
      xTitle: 'tokens',
      yTitle: plot.value === 'loss' ? 'loss (nats/token)' : 'perplexity',
      seriesTitle: 'attention',
      logY: plot.value === 'ppl',
    });
    await write(plot.file, svg);
    svgs.push({ file: plot.file, title: plot.title, svg });
  }

  const perRun = runsTable(runs);
  const perGroup = groupsTable(groups);
  const intro = `${runs.length} runs in ${groups.length} groups (same recipe and attention, different seeds); ` +
    'grouped values are mean ± sample sd over the group’s runs. Curves are group means at each logged token count.';
  const markdown = [
    '# Run comparison', '', intro, '', '## Runs', '', perRun, '', '## Groups', '', perGroup, '',
    '## Curves', '', ...svgs.map((s) => `![${s.title}](${s.file})`), '',
    '## Run folders', '', ...runs.map((r) => `- ${r.name}: ${r.dir}`), '',
  ].join('\n');
  await write('report.md', markdown);

  const html = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Run comparison</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}th:first-child,td:first-child{text-align:left}figure{margin:1em 0}</style>
</head><body>
<h1>Run comparison</h1><p>${escapeHtml(intro)}</p>
<h2>Runs</h2>${markdownTableToHtml(perRun)}
<h2>Groups</h2>${markdownTableToHtml(perGroup)}
<h2>Curves</h2>
${svgs.map((s) => `<figure id="${s.file}">${s.svg}<figcaption><a href="${s.file}">${s.file}</a></figcaption></figure>`).join('\n')}
</body></html>
`;
  await write('index.html', html);

  const json = {
    runs: runs.map(({ records: _records, ...r }) => r),
    groups: groups.map((g) => ({ label: g.label, attention: g.attention, recipeName: g.recipeName, runs: g.runs.map((r) => r.dir), stats: g.stats })),
  };
  await write('runs.json', JSON.stringify(json, null, 2) + '\n');
  return { outDir: opts.outDir, runs, groups, files };
}
