// The report of `npm run compare` and `sweep report`: reads each run folder (load-runs.ts), groups the runs
// (groups.ts) and writes a report folder with
//   report.md       per-run table (with backend, commit and peak memory), runs of the same recipe + attention
//                   with different seeds grouped as mean ± sd (n = distinct seeds: a re-run of a seed is a repeat,
//                   averaged with it), what tells the groups apart, and each group's paired difference to the
//                   baseline attention (same other settings, same seeds), the comparison's columns first
//   index.html      the same tables with the plots inlined (opens in a browser, uses its width)
//   {train,val}-{loss,ppl}.svg, {train,val}-loss-time.svg   curves against tokens and against wall-clock
//                   time, one line per group: the mean over the group's seeds with a ±sd band
//   runs.csv, groups.csv, groups.tex   the tables for a spreadsheet or a paper (booktabs)
//   val-by-position.csv, val-loss-by-position.svg   loss by position in the sequence per group at the runs' last
//                   validation (metrics.jsonl's by_position), when they logged it
//   by-position.csv, loss-by-position.svg   the same from eval.json, when runs hold one of `eval --by-position`
//                   (load-runs.ts)
//   estimator-health.csv, estimator-health.svg   each run's estimator health per layer and its kernel error during
//                   training, when runs logged it (train.estimatorHealth; estimator-report.ts)
//   seed-variance.csv   the final loss's variance split between train.seed and model.featureSeed, for runs that cross
//                   both (seed-variance.ts)
//   lm-eval.csv     lm-evaluation-harness scores per run, when runs hold `npm run lm-eval` results (lm-eval-results.ts)
//   passkey.csv     passkey retrieval per run and length, when runs hold `eval --passkey --json <run>/passkey.json`
//   runs.json       the extracted numbers, machine-readable
// Every table is one model (table.ts) rendered into each file. Runs of different families (load-runs.ts: model kind,
// tokenizer, validation tokens) are refused, naming the difference, or with `split` written as one report per family.
// A group's mean ± sd measures how much the seed matters, so a group whose runs differ in more than the seed (tokens
// trained, the learning-rate schedule they followed) is refused unless forced.
import { writeFile } from 'node:fs/promises';
import { relative } from 'node:path';
import { defaultBaseline, describeRun, differencesTable, groupCurves, groupRuns, shortKey, type RunGroup } from './groups.ts';
import { familyDifferences, familyFolder, loadRuns, type LoadOptions, type PositionLossRow, type RunSummary } from './load-runs.ts';
import type { LmEvalScore } from './lm-eval-results.ts';
import { escapeHtml, escapeMarkdown } from '../core/markdown.ts';
import { HEALTH_HEADING, HEALTH_NOTE, healthTableModel, plotHealth, SEED_VARIANCE_HEADING, SEED_VARIANCE_NOTE, seedVarianceModel } from './estimator-report.ts';
import { lineChartSvg, seriesColours } from './plot.ts';
import { safeJoin } from './safe-path.ts';
import { formatMeanSd, formatNumber, groupBy } from './stats.ts';
import { holmAdjusted } from './paired.ts';
import type { MeanSd } from './stats.ts';
import {
  constantsLine,
  csvTable,
  factorConstants,
  htmlTable,
  latexTable,
  makeTable,
  markdownTable,
  selectColumns,
  withoutColumns,
  type Column,
  type Table,
} from './table.ts';
import { makeFolders } from '../core/folders.ts';

const MIB = 2 ** 20;
const number = <T>(title: string, value: (item: T) => number | null, digits = 0): Column<T> => ({
  title,
  right: true,
  text: (item) => formatNumber(value(item), digits),
  raw: value,
});

/** One row per run, with where it ran: backend, commit, peak memory. */
function runsTableModel(runs: RunSummary[]): Table {
  return makeTable<RunSummary>(
    [
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
      // Runs logged before MFU was (or on a device of unknown peak) have none: no column of dashes then.
      ...(runs.some((r) => r.mfu !== null) ? [number<RunSummary>('MFU %', (r) => (r.mfu === null ? null : 100 * r.mfu), 2)] : []),
      number('wall s', (r) => r.wallSeconds, 1),
      number('peak MiB', (r) => (r.peakRssBytes === null ? null : r.peakRssBytes / MIB)),
      { title: 'backend', text: (r) => r.backend ?? '—', raw: (r) => r.backend },
      { title: 'commit', text: (r) => r.commit ?? '—', raw: (r) => r.commit },
    ],
    runs,
  );
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
/** A fraction's mean ± sd in percent. */
const percent = (stat: MeanSd): MeanSd => ({ ...stat, mean: 100 * stat.mean, sd: stat.sd === null ? null : 100 * stat.sd });

function groupsTableModel(groups: RunGroup[], baseline: string | null): Table {
  const ms = (pick: (g: RunGroup) => MeanSd, title: string, digits: number, { exact = false } = {}): Column<RunGroup> => ({
    title,
    right: true,
    // A count or speed equal over the seeds up to the digits shown reads as the value alone, not "1,334,016 ± 0".
    text: (g) =>
      exact && pick(g).sd !== null && Number(pick(g).sd!.toFixed(digits)) === 0
        ? formatNumber(pick(g).mean, digits)
        : formatMeanSd(pick(g), digits, { showN: false }),
    raw: (g) => (pick(g).n === 0 ? null : pick(g).mean),
  });
  const columns: Column<RunGroup>[] = [{ title: 'group', text: (g) => `${g.mixed.length ? '⚠ ' : ''}${g.label}`, raw: (g) => g.label }];
  if (baseline !== null) {
    const base = (g: RunGroup) => (g.attention === baseline ? '(baseline)' : '—');
    // The groups' tests against the baseline are one family: Holm's adjustment keeps the chance of any false "p < 0.05" among them at 5%.
    const adjusted = holmAdjusted(groups.map((g) => g.paired?.p ?? null));
    const holm = new Map(groups.map((g, i) => [g, adjusted[i]]));
    columns.push(
      {
        title: `Δ final val loss vs ${baseline} [95% CI]`,
        right: true,
        text: (g) =>
          g.paired ? `${signed(g.paired.mean, 4)}${g.paired.ci ? ` [${signed(g.paired.ci[0], 4)}, ${signed(g.paired.ci[1], 4)}]` : ' (n = 1)'}` : base(g),
        raw: (g) => g.paired?.mean ?? null,
      },
      { title: 'CI low', right: true, text: (g) => (g.paired?.ci ? signed(g.paired.ci[0], 4) : ''), raw: (g) => g.paired?.ci?.[0] ?? null },
      { title: 'CI high', right: true, text: (g) => (g.paired?.ci ? signed(g.paired.ci[1], 4) : ''), raw: (g) => g.paired?.ci?.[1] ?? null },
      {
        title: 'p',
        right: true,
        text: (g) => (g.paired?.p == null ? '' : g.paired.p < 0.001 ? '< 0.001' : g.paired.p.toFixed(3)),
        raw: (g) => g.paired?.p ?? null,
      },
      {
        title: 'p (Holm)',
        right: true,
        text: (g) => {
          const p = holm.get(g);
          return p == null ? '' : p < 0.001 ? '< 0.001' : p.toFixed(3);
        },
        raw: (g) => holm.get(g) ?? null,
      },
      {
        title: `lower than ${baseline} on`,
        right: true,
        text: (g) => (g.paired ? `${g.paired.wins}/${g.paired.n}` : ''),
        raw: (g) => (g.paired ? `${g.paired.wins}/${g.paired.n}` : null),
      },
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
    ...(groups.some((g) => g.stats.mfu.n > 0) ? [ms((g) => percent(g.stats.mfu), 'MFU %', 2, { exact: true })] : []),
    ms((g) => g.stats.wallSeconds, 'wall s', 1, { exact: true }),
    { title: 'recipe', text: (g) => g.recipeName },
  );
  return makeTable(columns, groups);
}

/** The shown table leaves out the columns only a spreadsheet needs (the sd and interval bounds as numbers). */
const SPREADSHEET_ONLY = new Set(['final val loss sd', 'CI low', 'CI high']);

/** The columns of groups.tex (a page wide at most): the comparison and the final loss; the rest is in groups.csv. */
const PAPER_COLUMNS = (header: string) =>
  header === 'group' || header.startsWith('Δ ') || ['p', 'final val loss', 'n', 'repeated runs', 'val ppl', 'val acc', 'params', 'tokens'].includes(header);

export const PLOTS = [
  { file: 'val-loss.svg', split: 'val', value: 'loss', against: 'tokens', title: 'Validation loss' },
  { file: 'val-ppl.svg', split: 'val', value: 'ppl', against: 'tokens', title: 'Validation perplexity' },
  { file: 'train-loss.svg', split: 'train', value: 'loss', against: 'tokens', title: 'Training loss' },
  { file: 'train-ppl.svg', split: 'train', value: 'ppl', against: 'tokens', title: 'Training perplexity' },
  { file: 'val-loss-time.svg', split: 'val', value: 'loss', against: 'time', title: 'Validation loss against wall-clock time' },
  { file: 'train-loss-time.svg', split: 'train', value: 'loss', against: 'time', title: 'Training loss against wall-clock time' },
] as const;

export interface CompareOptions extends LoadOptions {
  outDir: string;
  /** Average groups whose runs differ in more than the seed (with a warning, and marked in the report) instead of failing. */
  force?: boolean;
  /**
   * Runs of different model kinds, tokenizers or validation tokens: one report per such family, in sub-folders of
   * outDir (with a report.md there listing them), instead of an error.
   */
  split?: boolean;
  /** The attention the others are paired with; undefined = defaultBaseline (softmax when a run uses it); null = none. */
  baseline?: string | null;
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
function groupColours(groups: RunGroup[]): Map<string, string> {
  const legend = legendNames(groups);
  const colours = seriesColours(
    groups.map((g) => g.label),
    (label) => groups.find((g) => g.label === label)!.attention,
  );
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

/**
 * Where runs' loss by position comes from: their last validation record (metrics.jsonl's by_position, on the
 * validation tokens every run of a family shares) or the eval.json of `eval --by-position`. Each is its own section,
 * table and plot: the two measure different tokens.
 */
interface PositionSource {
  rows: (run: RunSummary) => PositionLossRow[] | null;
  heading: string;
  note: string;
  csv: string;
  svg: string;
  plotTitle: string;
  plotNote: string;
}

/** The loss by position of a run's last validation record, when it logged one (runs of older versions did not). */
function lastValidationByPosition(run: RunSummary): PositionLossRow[] | null {
  const val = run.records.filter((r) => r.split === 'val');
  const last = val.length ? val.reduce((a, b) => (b.step >= a.step ? b : a)) : null;
  return last?.by_position ?? null;
}

const POSITION_SOURCES: PositionSource[] = [
  {
    rows: lastValidationByPosition,
    heading: 'Validation loss by position',
    note: 'Loss (nats/token) of the validation tokens at positions [from, to) of their sequence at each run’s last validation (the final one of a finished run; metrics.jsonl’s by_position, on the train.evalTokens tokens every run here shares), averaged over the runs of a group that logged it (n). Table: val-by-position.csv.',
    csv: 'val-by-position.csv',
    svg: 'val-loss-by-position.svg',
    plotTitle: 'Validation loss by position at the last validation',
    plotNote: 'metrics.jsonl; mean over the runs that logged it',
  },
  {
    rows: (run) => run.byPosition,
    heading: 'Loss by position',
    note: 'Validation loss (nats/token) of the tokens at positions [from, to) of their sequence, from each run’s eval.json (`npm run eval -- <run> --by-position --json <run>/eval.json`), averaged over the runs of a group that have one (n). Table: by-position.csv.',
    csv: 'by-position.csv',
    svg: 'loss-by-position.svg',
    plotTitle: 'Validation loss by position in the sequence',
    plotNote: 'eval --by-position; mean over the runs that have it',
  },
];

/** A bucket's mean loss over the runs of a group whose `source` gives it, and how many runs that is. */
function positionLossOf(source: PositionSource, group: RunGroup, from: number, to: number): { loss: number; runs: number } | null {
  const losses = group.runs.flatMap(
    (r) =>
      source
        .rows(r)
        ?.filter((b) => b.from === from && b.to === to && b.loss !== null)
        .map((b) => b.loss!) ?? [],
  );
  return losses.length ? { loss: losses.reduce((a, b) => a + b, 0) / losses.length, runs: losses.length } : null;
}

/**
 * Loss by position in the sequence from `source`: one row per bucket, one column per group with the mean over its runs
 * that have one (n in the heading); null when no run has one.
 */
function positionTableModel(source: PositionSource, groups: RunGroup[]): Table | null {
  const buckets = new Map<string, { from: number; to: number }>();
  for (const g of groups) for (const r of g.runs) for (const b of source.rows(r) ?? []) buckets.set(`${b.from}-${b.to}`, { from: b.from, to: b.to });
  if (buckets.size === 0) return null;
  const rows = [...buckets.values()].sort((a, b) => a.from - b.from || a.to - b.to);
  const shown = groups.filter((g) => g.runs.some((r) => source.rows(r)));
  return makeTable<{ from: number; to: number }>(
    [
      { title: 'positions', text: (b) => `[${b.from}, ${b.to})` },
      ...shown.map((g) =>
        number<{ from: number; to: number }>(
          `${g.label} (n = ${g.runs.filter((r) => source.rows(r)).length})`,
          (b) => positionLossOf(source, g, b.from, b.to)?.loss ?? null,
          4,
        ),
      ),
    ],
    rows,
  );
}

/** A harness score's column: its task and metric (and filter, when the task filters its outputs). */
const scoreColumn = (s: LmEvalScore) => `${s.task} ${s.metric}${s.filter === 'none' ? '' : ` (${s.filter})`}`;

/**
 * lm-evaluation-harness scores (the runs' lm-eval/<task>.json from `npm run lm-eval`): one row per run that has any,
 * one column per task and metric, with the harness's standard error where it gives one; null when no run has any.
 */
function lmEvalTableModel(runs: RunSummary[]): Table | null {
  const shown = runs.filter((r) => r.lmEval);
  if (shown.length === 0) return null;
  const columns = [...new Set(shown.flatMap((r) => r.lmEval!.map(scoreColumn)))].sort();
  const scoreOf = (r: RunSummary, column: string) => r.lmEval!.find((s) => scoreColumn(s) === column) ?? null;
  return makeTable<RunSummary>(
    [
      { title: 'run', text: (r) => r.name },
      { title: 'attention', text: (r) => r.attention },
      ...columns.map((column) => ({
        title: column,
        right: true,
        text: (r: RunSummary) => {
          const s = scoreOf(r, column);
          return s === null ? '' : `${formatNumber(s.value, 4)}${s.stderr === null ? '' : ` ± ${formatNumber(s.stderr, 4)}`}`;
        },
        raw: (r: RunSummary) => scoreOf(r, column)?.value ?? null,
      })),
      number<RunSummary>('documents', (r) => Math.max(...r.lmEval!.map((s) => s.samples ?? 0)) || null),
    ],
    shown,
  );
}

/** Passkey retrieval per run: one column per length (the share of keys retrieved; † beyond the trained context). */
function passkeyTableModel(runs: RunSummary[]): Table | null {
  const shown = runs.filter((r) => r.passkey);
  if (shown.length === 0) return null;
  const lengths = [...new Set(shown.flatMap((r) => r.passkey!.map((s) => s.length)))].sort((a, b) => a - b);
  const scoreOf = (r: RunSummary, length: number) => r.passkey!.find((s) => s.length === length) ?? null;
  return makeTable<RunSummary>(
    [
      { title: 'run', text: (r) => r.name },
      { title: 'attention', text: (r) => r.attention },
      ...lengths.map((length) => ({
        title: `${length} tokens`,
        right: true,
        text: (r: RunSummary) => {
          const s = scoreOf(r, length);
          if (s === null) return '';
          if (s.retrieval === null) return 'not run';
          return `${formatNumber(s.retrieval, 2)}${s.beyondTrainedContext ? ' †' : ''}`;
        },
        raw: (r: RunSummary) => scoreOf(r, length)?.retrieval ?? null,
      })),
      number<RunSummary>('keys per length', (r) => Math.max(...r.passkey!.map((s) => s.trials)) || null),
    ],
    shown,
  );
}

/** The loss by position from `source` as a line per group against the bucket's end (log scale: the buckets double). */
async function plotPositions(source: PositionSource, groups: RunGroup[]): Promise<{ file: string; title: string; svg: string }[]> {
  const legend = legendNames(groups);
  const points = groups.flatMap((g) => {
    const buckets = g.runs.map(source.rows).find((rows) => rows) ?? [];
    return buckets.flatMap((b) => {
      const mean = positionLossOf(source, g, b.from, b.to);
      return mean ? [{ series: legend.get(g.label)!, x: b.to, y: mean.loss }] : [];
    });
  });
  if (points.length === 0) return [];
  const title = source.plotTitle;
  const svg = await lineChartSvg(points, {
    title: `${title} (${source.plotNote})`,
    xTitle: 'end of the position bucket (tokens of context)',
    yTitle: 'loss (nats/token)',
    seriesTitle: 'group',
    logX: true,
    colours: groupColours(groups),
  });
  return [{ file: source.svg, title, svg }];
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
  /** Loss by position per group from each source that some run has (its last validation, its eval.json). */
  byPosition: { source: PositionSource; table: Table }[];
  /** Estimator health per run and layer; null when no run logged it. */
  health: Table | null;
  /** The seed-variance split, and the sets of runs that vary both seeds without a full grid. */
  seedVariance: { table: Table | null; problems: string[] };
  /** lm-evaluation-harness scores per run; null when no run has any. */
  lmEval: Table | null;
  /** Passkey retrieval per run (runs' passkey.json); null when no run has one. */
  passkey: Table | null;
  svgs: { file: string; title: string; svg: string }[];
  runs: RunSummary[];
}

const MIXED_HEADING = '⚠ Groups whose runs differ in more than the seed (averaged with --force)';
const DIFFERENCES_HEADING = 'What tells the groups apart';
const LM_EVAL_HEADING = 'lm-evaluation-harness';
const LM_EVAL_NOTE =
  'Scores of EleutherAI’s lm-evaluation-harness on each run’s export (`npm run lm-eval -- RUN --tasks …`, read from RUN/lm-eval/TASK.json), ± the harness’s standard error where it gives one (docs/evaluation.md). Documents: the most any task evaluated. Table: lm-eval.csv.';
const PASSKEY_HEADING = 'Passkey retrieval';
const PASSKEY_NOTE =
  'Share of 5-digit keys retrieved whole (each answer token the top-1) from filler text at each length, from each run’s passkey.json (`npm run eval -- RUN --passkey --json RUN/passkey.json`; docs/training.md, "Passkey retrieval"); † beyond the sequences the run trained on; not run: beyond its position table. Table: passkey.csv.';
const TABLE_FILES = 'Tables: runs.csv, groups.csv (plain numbers), groups.tex (LaTeX, booktabs).';

/** The estimator-health and seed-variance sections, each a heading, its note and its table (empty when it has none). */
function featureSections(p: ReportParts): { heading: string; note: string; table: Table | null; problems: string[] }[] {
  const { table, problems } = p.seedVariance;
  return [
    ...(p.health ? [{ heading: HEALTH_HEADING, note: HEALTH_NOTE, table: p.health, problems: [] }] : []),
    ...(table || problems.length ? [{ heading: SEED_VARIANCE_HEADING, note: SEED_VARIANCE_NOTE, table, problems }] : []),
  ];
}

function reportMarkdown(p: ReportParts): string {
  const mixed = p.mixed.length ? [`## ${MIXED_HEADING}`, '', ...p.mixed.map((line) => `- ${escapeMarkdown(line)}`), ''] : [];
  const differences = p.differences ? [`## ${DIFFERENCES_HEADING}`, '', markdownTable(p.differences), ''] : [];
  const constants = p.groupConstants ? [escapeMarkdown(p.groupConstants), ''] : [];
  return [
    '# Run comparison',
    '',
    escapeMarkdown(p.intro),
    '',
    ...mixed,
    '## Groups',
    '',
    ...constants,
    markdownTable(p.perGroup),
    '',
    ...differences,
    ...p.byPosition.flatMap(({ source, table }) => [`## ${source.heading}`, '', source.note, '', markdownTable(table), '']),
    ...featureSections(p).flatMap((s) => [
      `## ${s.heading}`,
      '',
      escapeMarkdown(s.note),
      '',
      ...(s.table ? [markdownTable(s.table), ''] : []),
      ...s.problems.map((line) => `- ${escapeMarkdown(line)}`),
      ...(s.problems.length ? [''] : []),
    ]),
    ...(p.lmEval ? [`## ${LM_EVAL_HEADING}`, '', LM_EVAL_NOTE, '', markdownTable(p.lmEval), ''] : []),
    ...(p.passkey ? [`## ${PASSKEY_HEADING}`, '', PASSKEY_NOTE, '', markdownTable(p.passkey), ''] : []),
    '## Curves',
    '',
    ...p.svgs.map((s) => `![${s.title}](${s.file})`),
    '',
    '## Runs',
    '',
    markdownTable(p.perRun),
    '',
    TABLE_FILES,
    '',
    '## Run folders',
    '',
    ...p.runs.map((r) => `- ${escapeMarkdown(`${r.name}: ${r.dir}`)}`),
    '',
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
<h2>Groups</h2>${p.groupConstants ? `<p>${escapeHtml(p.groupConstants)}</p>` : ''}<div class="table">${htmlTable(p.perGroup)}</div>${differences}${p.byPosition
    .map(({ source, table }) => `<h2>${escapeHtml(source.heading)}</h2><p>${escapeHtml(source.note)}</p><div class="table">${htmlTable(table)}</div>`)
    .join('')}${featureSections(p)
    .map(
      (s) =>
        `<h2>${escapeHtml(s.heading)}</h2><p>${escapeHtml(s.note)}</p>${s.table ? `<div class="table">${htmlTable(s.table)}</div>` : ''}${
          s.problems.length ? `<ul>${s.problems.map((line) => `<li>${escapeHtml(line)}</li>`).join('')}</ul>` : ''
        }`,
    )
    .join('')}
  }${p.lmEval ? `<h2>${escapeHtml(LM_EVAL_HEADING)}</h2><p>${escapeHtml(LM_EVAL_NOTE)}</p><div class="table">${htmlTable(p.lmEval)}</div>` : ''}${
    p.passkey ? `<h2>${escapeHtml(PASSKEY_HEADING)}</h2><p>${escapeHtml(PASSKEY_NOTE)}</p><div class="table">${htmlTable(p.passkey)}</div>` : ''
  }
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
  if (baseline !== null && !runs.some((r) => r.attention === baseline))
    throw new Error(`--baseline ${baseline}: no run uses that attention (${[...new Set(runs.map((r) => r.attention))].join(', ')})`);
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
    '# Run comparison, split',
    '',
    `The runs differ in what makes losses comparable, so each kind has its own report:`,
    '',
    ...differences.map((line) => `- ${escapeMarkdown(line)}`),
    '',
    ...reports.map(
      (r) =>
        `- [${relative(opts.outDir, r.outDir)}](${relative(opts.outDir, r.outDir)}/report.md): ${r.runs.length} runs in ${r.groups.length} groups ([page](${relative(opts.outDir, r.outDir)}/index.html))`,
    ),
    '',
  ].join('\n');
  const indexFile = safeJoin(opts.outDir, 'report.md');
  await writeFile(indexFile, index);
  warn(
    `the runs differ in ${differences.map((line) => line.slice(0, line.indexOf(' ('))).join(', ')}: one report per kind, in ${reports.map((r) => r.outDir).join(', ')}`,
  );
  return { outDir: opts.outDir, runs, groups: reports.flatMap((r) => r.groups), files: [indexFile, ...reports.flatMap((r) => r.files)], reports, baseline };
}

/** One report folder (see the file comment) for runs of one family. */
async function writeReport(
  runs: RunSummary[],
  outDir: string,
  baseline: string | null,
  opts: CompareOptions,
  warn: (m: string) => void,
): Promise<CompareReport> {
  const groups = groupRuns(runs, baseline);
  const mixed = mixingLines(groups);
  if (mixed.length > 0 && !opts.force) {
    throw new Error(
      `${mixed.length} group${mixed.length > 1 ? 's mix runs' : ' mixes runs'} that differ in more than the seed, so mean ± sd would not measure the seed's effect:\n` +
        `${mixed.map((line) => `  ${line}`).join('\n')}\nLeave out or finish the odd runs, or pass --force to average them anyway (the report marks these groups).`,
    );
  }
  for (const line of mixed) warn(`MIXED GROUP averaged because of --force: ${line}`);

  makeFolders(outDir);
  const files: string[] = [];
  const write = async (name: string, content: string) => {
    const file = safeJoin(outDir, name);
    await writeFile(file, content);
    files.push(file);
  };
  const positionPlots = (await Promise.all(POSITION_SOURCES.map((source) => plotPositions(source, groups)))).flat();
  const svgs = [...(await plotCurves(groups)), ...positionPlots, ...(await plotHealth(runs))];
  for (const { file, svg } of svgs) await write(file, svg);
  const single = groups.every((g) => g.seeds.length === 1);
  const repeated = groups.filter((g) => g.repeats.runs > 0);
  const intro =
    `${runs.length} runs in ${groups.length} groups (same recipe and attention, different seeds); n counts distinct seeds. ` +
    (single
      ? 'Every group has one seed (n = 1): its values are that seed’s, without a spread or interval. '
      : 'Grouped values are mean ± sample sd over the group’s seeds (one seed: its value, n = 1), and a group’s perplexity is exp(mean loss). ') +
    (repeated.length > 0
      ? `Runs that repeat a seed (${repeated.map((g) => `${g.label}: ${g.repeats.runs}`).join(', ')}) are averaged with it first and are not counted in n; their spread (the largest max − min of the final validation loss among runs of one seed) measures non-determinism, not the seed. `
      : '') +
    (baseline
      ? `Δ is the paired difference of the final validation loss to the ${baseline} group with the same other settings, over the seeds both ran (negative = lower than ${baseline}), with a 95% Student t interval and the paired t-test’s p when there are two or more seeds; p (Holm) is that p adjusted by Holm’s method over every group’s test against the baseline, the one to read when several groups are compared (the chance of any false p < 0.05 among them stays at 5%). `
      : '') +
    `Curves are group means at each logged token count (or step, against time), from the model before training (step 0) where the runs validated it${single ? '' : ', the band ± one sd over seeds'}.`;
  const diffTable = differencesTable(groups);
  const differences =
    diffTable.keys.length === 0
      ? null
      : makeTable<{ label: string; values: string[] }>(
          [{ title: 'group', text: (r) => r.label }, ...diffTable.keys.map((k, i) => ({ title: shortKey(k), text: (r: { values: string[] }) => r.values[i] }))],
          diffTable.rows,
        );
  const perGroupFull = groupsTableModel(groups, baseline);
  const shown = factorConstants(withoutColumns(perGroupFull, SPREADSHEET_ONLY));
  const paper = factorConstants(selectColumns(perGroupFull, PAPER_COLUMNS));
  const parts: ReportParts = {
    intro,
    mixed,
    perRun: runsTableModel(runs),
    perGroup: shown.table,
    groupConstants: constantsLine(shown.constants),
    differences,
    byPosition: POSITION_SOURCES.flatMap((source) => {
      const table = positionTableModel(source, groups);
      return table ? [{ source, table }] : [];
    }),
    health: healthTableModel(runs),
    seedVariance: seedVarianceModel(runs),
    lmEval: lmEvalTableModel(runs),
    passkey: passkeyTableModel(runs),
    svgs,
    runs,
  };
  await write('report.md', reportMarkdown(parts));
  await write('index.html', reportHtml(parts));
  await write('runs.csv', csvTable(parts.perRun));
  await write('groups.csv', csvTable(perGroupFull));
  for (const { source, table } of parts.byPosition) await write(source.csv, csvTable(table));
  if (parts.health) await write('estimator-health.csv', csvTable(parts.health));
  if (parts.seedVariance.table) await write('seed-variance.csv', csvTable(parts.seedVariance.table));
  if (parts.lmEval) await write('lm-eval.csv', csvTable(parts.lmEval));
  if (parts.passkey) await write('passkey.csv', csvTable(parts.passkey));
  await write(
    'groups.tex',
    latexTable(paper.table, [`Final validation loss per group (${seedsNote(groups)}).`, constantsLine(paper.constants)].filter(Boolean).join(' ')),
  );
  const json = {
    baseline,
    runs: runs.map(({ records: _records, ...r }) => r),
    groups: groups.map((g) => ({
      label: g.label,
      attention: g.attention,
      recipeName: g.recipeName,
      runs: g.runs.map((r) => r.dir),
      seeds: g.seeds,
      repeats: g.repeats,
      stats: g.stats,
      mixed: g.mixed,
      paired: g.paired,
    })),
  };
  await write('runs.json', JSON.stringify(json, null, 2) + '\n');
  return { outDir, runs, groups, files };
}
