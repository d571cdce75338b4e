// An experiment's results file: every cell's numbers (ours from its units, the paper's), its verdict under the
// protocol's rule, the agreement count, an explanation for every disagreement, and where the numbers come from
// (commits, backends, machines, wall time, the command that regenerates them). Written as
//   <out>/<experiment>[-quick].md     the tables and the disagreements, for people
//   <out>/<experiment>[-quick].json   the same, every unit's outcome included, for programs
//   <out>/<experiment>[-quick]/agreement.svg   ours against the paper's, one point per cell
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { groupBy, meanSd } from '../report/stats.ts';
import type { MeanSd } from '../report/stats.ts';
import { EXPLANATION_TITLES, judge } from './protocol.ts';
import type { CellSpec, CellVerdict, Claim, Difference, Explanation, MeasureTable, PlotAgainst, ShownExtra } from './protocol.ts';
import { describeInterval, describeSeedsNeeded, seedsToSeparate } from './paired-claims.ts';
import { holmAdjusted } from '../report/paired.ts';
import { splitSeedVariance, type SeedVarianceSplit } from '../report/seed-variance.ts';
import { agreementPlotSvg } from './agreement-plot.ts';
import { lineChartSvg } from '../report/plot.ts';
import { escapeMarkdown } from '../core/markdown.ts';
import type { LinePoint } from '../report/plot.ts';
import type { ExperimentRunSet, UnitRecord } from './run.ts';
import { makeFolders } from '../core/folders.ts';

export interface CellResult extends Omit<CellSpec, 'explanation'>, CellVerdict {
  ours: MeanSd;
  values: number[];
  /** Where the cell disagrees: the protocol's explanation, or an open question. */
  explanation: Explanation | null;
  /** Why the cell has no value though its units ran (e.g. out of memory), or why they did not. */
  error: string | null;
  /** Mean ± sd of the units' other numbers. */
  extra: Record<string, MeanSd>;
  /** Validation loss against optimizer steps, mean ± sd over the units at each step; null when no unit records curves. */
  curve: CurvePoint[] | null;
  /** Present when the cell's units cross settings seed and featureSeed in a full grid: the metric's variance split between them. */
  seedVariance?: SeedVarianceSplit;
}

/** A measure table (protocol.ts) filled: each row's cells, mean ± sd over its units that have the extra. */
export interface MeasuredTable extends Omit<MeasureTable, 'rows' | 'columns'> {
  columns: string[];
  rows: { row: string; cells: MeanSd[] }[];
}

export interface CurvePoint extends MeanSd {
  step: number;
}

export interface ExperimentResults {
  experiment: string;
  version: number;
  title: string;
  source: string;
  measures: string;
  metric: { name: string; digits: number };
  rule: string;
  protocol: Record<string, string>;
  notes: string[];
  shown: ShownExtra[];
  /** The metric drawn against one of the units' other numbers, a plot per table (experiments that declare it). */
  plotAgainst: PlotAgainst | null;
  quick: boolean;
  command: string;
  provenance: {
    commits: string[];
    backends: string[];
    machines: string[];
    /** First unit started → last unit finished. */
    wallSeconds: number | null;
    /** Σ of the units' own seconds, and CPU seconds. */
    unitSeconds: number;
    cpuSeconds: number;
    units: { total: number; done: number; notDone: number };
    writtenAt: string;
  };
  counts: {
    withPublished: number;
    agrees: number;
    disagrees: number;
    notRun: number;
    extra: number;
    disagreementsBy: Record<Explanation['kind'], number>;
  };
  cells: CellResult[];
  /** The claims tested and their verdicts (experiments that declare claims). */
  claims: Claim[];
  /** Paired differences reported without a claim (experiments that declare them). */
  differences: Difference[];
  /** Other measurements of the units, not judged (experiments that declare measure tables). */
  measured: MeasuredTable[];
  /** Each unit's outcome, and the commit it ran at (an experiment resumed across sessions may span several). */
  units: {
    name: string;
    dir: string | null;
    values: number[];
    extra: Record<string, number | null>;
    error: string | null;
    seconds: number | null;
    commit: string | null;
  }[];
}

const OPEN: Explanation = { kind: 'open', text: 'not explained yet' };

/**
 * The split of a cell's metric between its units' settings `seed` (weights, data) and `featureSeed` (random features;
 * docs/experiments.md, "Seed variance"), each unit's values averaged; null unless they cross both in a full grid.
 */
export function cellSeedVariance(units: readonly UnitRecord[]): SeedVarianceSplit | null {
  const cells = units.flatMap((u) => {
    const { seed, featureSeed } = u.unit.settings;
    const values = u.result?.outcome.values ?? [];
    if (typeof seed !== 'number' || typeof featureSeed !== 'number' || values.length === 0) return [];
    return [{ weightSeed: seed, featureSeed, value: values.reduce((a, b) => a + b, 0) / values.length }];
  });
  const split = splitSeedVariance(cells);
  return 'problem' in split ? null : split;
}

/** Verdicts and provenance from the units' records. */
export function buildResults(set: ExperimentRunSet, records: UnitRecord[], writtenAt = new Date()): ExperimentResults {
  const { experiment, settings } = set;
  const byName = new Map(records.map((r) => [r.unit.name, r]));
  const cells = experiment.cells(settings.quick).map((spec): CellResult => {
    const units = spec.units.map((name) => {
      const record = byName.get(name);
      if (!record) throw new Error(`${experiment.name}: cell ${spec.row} × ${spec.column} names unit ${name}, which the protocol does not run`);
      return record;
    });
    const values = units.flatMap((u) => u.result?.outcome.values ?? []);
    const ours = meanSd(values);
    const verdict = judge(experiment.agreement, spec.published, ours);
    const errors = units.map((u) => u.result?.outcome.error ?? u.failure ?? (u.result ? null : 'not run yet')).filter((e): e is string => e !== null);
    const extraKeys = [...new Set(units.flatMap((u) => Object.keys(u.result?.outcome.extra ?? {})))];
    const seedVariance = cellSeedVariance(units);
    return {
      ...spec,
      ...verdict,
      ours,
      values,
      explanation: verdict.verdict === 'disagrees' ? (spec.explanation ?? OPEN) : null,
      error: errors.length > 0 ? [...new Set(errors)].join('; ') : null,
      extra: Object.fromEntries(extraKeys.map((k) => [k, meanSd(units.map((u) => u.result?.outcome.extra[k]))])),
      curve: meanCurve(units),
      ...(seedVariance ? { seedVariance } : {}),
    };
  });
  const done = records.filter((r) => r.result);
  const starts = done.map((r) => Date.parse(r.result!.startedAt));
  const ends = done.map((r) => Date.parse(r.result!.finishedAt));
  const withPublished = cells.filter((c) => c.published);
  const disagreeing = cells.filter((c) => c.verdict === 'disagrees');
  return {
    experiment: experiment.name,
    version: experiment.version,
    title: experiment.title,
    source: experiment.source,
    measures: experiment.measures,
    metric: experiment.metric,
    rule: experiment.agreement.statement,
    protocol: experiment.protocol,
    notes: [...experiment.notes, ...(experiment.measuredNotes?.(unitView(records), settings.quick) ?? [])],
    shown: experiment.shown ?? [],
    plotAgainst: experiment.plotAgainst ?? null,
    quick: settings.quick,
    command: set.file,
    provenance: {
      commits: commitsOfUnits(done),
      backends: distinct(done.map((r) => describeBackend(r.env))),
      machines: distinct(done.map((r) => describeMachine(r.env))),
      wallSeconds: done.length ? (Math.max(...ends) - Math.min(...starts)) / 1000 : null,
      unitSeconds: done.reduce((s, r) => s + r.result!.seconds, 0),
      cpuSeconds: done.reduce((s, r) => s + r.result!.cpuSeconds, 0),
      units: { total: records.length, done: done.length, notDone: records.length - done.length },
      writtenAt: writtenAt.toISOString(),
    },
    counts: {
      withPublished: withPublished.length,
      agrees: withPublished.filter((c) => c.verdict === 'agrees').length,
      disagrees: disagreeing.length,
      notRun: withPublished.filter((c) => c.verdict === 'not run').length,
      extra: cells.filter((c) => !c.published).length,
      disagreementsBy: {
        deliberate: disagreeing.filter((c) => c.explanation?.kind === 'deliberate').length,
        'protocol-gap': disagreeing.filter((c) => c.explanation?.kind === 'protocol-gap').length,
        open: disagreeing.filter((c) => c.explanation?.kind === 'open').length,
      },
    },
    cells,
    ...correctedForFamily(experiment.claims?.(unitView(records), settings.quick) ?? [], experiment.differences?.(unitView(records), settings.quick) ?? []),
    measured: (experiment.measureTables?.(unitView(records), settings.quick) ?? []).map((table) => measuredTable(table, unitView(records))),
    units: records.map((r) => ({
      name: r.unit.name,
      dir: r.dir && path.relative(process.cwd(), r.dir),
      values: r.result?.outcome.values ?? [],
      extra: r.result?.outcome.extra ?? {},
      error: r.result?.outcome.error ?? r.failure,
      seconds: r.result?.seconds ?? null,
      commit: r.result ? describeCommit(r.env) : null,
    })),
  };
}

/** A measure table's cells from the units' extras. */
function measuredTable({ rows, columns, ...rest }: MeasureTable, view: ReturnType<typeof unitView>): MeasuredTable {
  return {
    ...rest,
    columns: columns.map((c) => c.title),
    rows: rows.map(({ row, units }) => ({ row, cells: columns.map((c) => meanSd(units.map((unit) => view.extra(unit, c.key)))) })),
  };
}

/** The level every verdict of a paired test is judged at, after the family's correction. */
const FAMILY_ALPHA = 0.05;

/**
 * The experiment's claims and differences with the multiple comparisons taken into account: Holm's adjustment
 * (src/report/paired.ts) over every paired test it reports — each claim's, and each difference's main metric (the shown
 * extras are descriptive, not tested) — so that the chance of any false "holds", "contradicted", "above" or "below" in
 * the experiment stays at most 5%. A claim's verdict is then judged by its adjusted p (below 0.05: holds or
 * contradicted by the side of its mean; else not separated), which uncorrected is its 95% interval's rule.
 */
export function correctedForFamily(claims: Claim[], differences: Difference[]): { claims: Claim[]; differences: Difference[] } {
  const adjusted = holmAdjusted([...claims.map((c) => c.test?.p ?? null), ...differences.map((d) => d.metric?.p ?? null)]);
  const tests = adjusted.filter((p) => p !== null).length;
  return {
    claims: claims.map((claim, i) => {
      const p = adjusted[i];
      if (!claim.test || p === null) return claim;
      const verdict = p < FAMILY_ALPHA ? (claim.test.side > 0 ? 'holds' : 'contradicted') : 'not separated';
      return { ...claim, verdict, evidence: `${claim.evidence}; Holm-adjusted p = ${p.toPrecision(2)} over the experiment's ${tests} paired tests` };
    }),
    differences: differences.map((d, i) => ({ ...d, pAdjusted: adjusted[claims.length + i] })),
  };
}

/** The units' validation curves (outcome.details.curves.val, as units that train record them) averaged step by step. */
function meanCurve(units: UnitRecord[]): CurvePoint[] | null {
  const byStep = new Map<number, number[]>();
  for (const unit of units) {
    const val = (unit.result?.outcome.details?.curves as { val?: unknown } | undefined)?.val;
    if (!Array.isArray(val)) continue;
    for (const point of val as { step?: unknown; loss?: unknown }[]) {
      if (typeof point?.step !== 'number' || typeof point.loss !== 'number' || !Number.isFinite(point.loss)) continue;
      byStep.set(point.step, [...(byStep.get(point.step) ?? []), point.loss]);
    }
  }
  if (byStep.size === 0) return null;
  return [...byStep].sort((a, b) => a[0] - b[0]).map(([step, losses]) => ({ step, ...meanSd(losses) }));
}

/** The done units' numbers by name, for the experiment's claims. */
function unitView(records: UnitRecord[]) {
  const byName = new Map(records.map((r) => [r.unit.name, r.result?.outcome ?? null]));
  return {
    values: (name: string) => byName.get(name)?.values ?? [],
    extra: (name: string, key: string) => byName.get(name)?.extra[key] ?? null,
  };
}

const distinct = (items: string[]) => [...new Set(items)].sort();

type Env = Record<string, any> | null;

/** The commits the units ran at; where there are several, each with the units that ran at it (the per-unit list is in the JSON). */
function commitsOfUnits(done: UnitRecord[]): string[] {
  const byCommit = groupBy(done, (r) => describeCommit(r.env));
  if (byCommit.size <= 1) return [...byCommit.keys()];
  return [...byCommit].map(([commit, units]) => {
    const names = units.map((r) => r.unit.name);
    return `${commit}: ${names.length} unit${names.length > 1 ? 's' : ''} (${names.slice(0, 3).join(', ')}${names.length > 3 ? ', …' : ''})`;
  });
}

function describeCommit(env: Env): string {
  const git = env?.git;
  if (!git?.commit) return 'unknown (not a git checkout)';
  return `${String(git.commit).slice(0, 12)}${git.dirty ? ' (with uncommitted changes)' : ''}`;
}

function describeBackend(env: Env): string {
  const backend = env?.backend;
  if (!backend?.name) return 'unknown';
  const tfjs = backend.versions?.['tfjs-core'] ?? backend.versions?.tfjs;
  return `${backend.name}${backend.tensorflow ? ` (TensorFlow ${backend.tensorflow})` : ''}${tfjs ? `, TensorFlow.js ${tfjs}` : ''}`;
}

function describeMachine(env: Env): string {
  if (!env) return 'unknown';
  return `${env.cpuModel ?? 'unknown CPU'}, ${env.cpus} cores, ${env.memoryGiB} GiB, ${env.platform}, Node ${env.node}`;
}

/** "1 h 02 min", "4 min 05 s", "12.3 s". */
export function formatDuration(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return '—';
  if (seconds < 60) return `${seconds.toFixed(1)} s`;
  const s = Math.round(seconds);
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}

const MARK: Record<CellResult['verdict'], string> = { agrees: '✓', disagrees: '✗', 'no published value': '', 'not run': '' };

function formatValue(value: number, digits: number): string {
  return Math.abs(value) >= 1e4 ? value.toExponential(2) : value.toFixed(digits);
}

function formatStat(stat: MeanSd, digits: number): string {
  if (stat.n === 0) return '—';
  return stat.sd === null ? formatValue(stat.mean, digits) : `${formatValue(stat.mean, digits)} ± ${formatValue(stat.sd, digits)}`;
}

function formatPublished(cell: CellResult, digits: number): string {
  if (!cell.published) return '';
  const { mean, sd } = cell.published;
  return sd === null ? formatValue(mean, digits) : `${formatValue(mean, digits)} ± ${formatValue(sd, digits)}`;
}

function cellText(cell: CellResult, digits: number): string {
  // An error text comes from a unit's files: escaped, so that it reads as text (no heading, link or HTML).
  if (cell.verdict === 'not run') return cell.error && cell.error !== 'not run yet' ? `— (${escapeMarkdown(cell.error.slice(0, 60))})` : '—';
  const ours = formatStat(cell.ours, digits);
  if (!cell.published) return ours;
  return `${ours} · paper ${formatPublished(cell, digits)} ${MARK[cell.verdict]}`;
}

/** A markdown table of one results table's cells: its rows × its columns, each cell as `text` writes it. */
function gridTable(cells: CellResult[], text: (cell: CellResult) => string): string[] {
  const columns = [...new Set(cells.map((c) => c.column))];
  const rows = [...new Set(cells.map((c) => c.row))];
  return [
    `| | ${columns.join(' | ')} |`,
    `|---|${columns.map(() => '---:').join('|')}|`,
    ...rows.map(
      (row) =>
        `| ${row} | ${columns
          .map((column) => {
            const cell = cells.find((c) => c.row === row && c.column === column);
            return cell ? text(cell) : '';
          })
          .join(' | ')} |`,
    ),
  ];
}

function extraText(cell: CellResult, extra: ShownExtra): string {
  const ours = cell.extra[extra.key];
  const paper = extra.paperKey ? cell.extra[extra.paperKey] : undefined;
  const text = ours && ours.n > 0 ? formatStat(ours, extra.digits) : '—';
  return paper && paper.n > 0 ? `${text} · paper ${formatValue(paper.mean, extra.digits)}` : text;
}

/** "1 of 5 claims hold, 3 not separated, 1 contradicted, 0 not run". */
function claimCounts(claims: Claim[]): string {
  const count = (v: Claim['verdict']) => claims.filter((c) => c.verdict === v).length;
  return `${count('holds')} of ${claims.length} claims hold, ${count('not separated')} not separated, ${count('contradicted')} contradicted, ${count('not run')} not run`;
}

/** "2 of 7 paired differences separated from 0 (1 above, 1 below), 1 not run": an experiment with neither published numbers nor claims. */
function differenceCounts(differences: Difference[]): string {
  const sides = differences.map(separation);
  const count = (side: string) => sides.filter((s) => s === side).length;
  const above = count('**above**');
  const below = count('**below**');
  const notRun = differences.filter((d) => !d.metric).length;
  return `${above + below} of ${differences.length} paired differences separated from 0 (${above} above, ${below} below)${notRun ? `, ${notRun} without two pairs done` : ''}`;
}

/** The results in one line: the cells' agreement count, or the claims' verdicts where the paper prints no numbers. */
export function resultsHeadline(results: ExperimentResults): string {
  const c = results.counts;
  if (c.withPublished === 0 && results.claims.length > 0) return claimCounts(results.claims);
  if (c.withPublished === 0 && results.differences.length > 0) return differenceCounts(results.differences);
  return (
    `${c.agrees} of ${c.withPublished} cells agree with the paper (${c.disagrees} disagree: ${c.disagreementsBy.deliberate} deliberate, ` +
    `${c.disagreementsBy['protocol-gap']} protocol gap, ${c.disagreementsBy.open} open; ${c.notRun} not run)`
  );
}

/** The results file for people. */
export function resultsMarkdown(
  results: ExperimentResults,
  plotFile: string | null,
  curvePlots: ReadonlyMap<string, string> = new Map(),
  againstPlots: ReadonlyMap<string, string> = new Map(),
): string {
  const { counts, provenance: p, metric } = results;
  const digits = metric.digits;
  const lines: string[] = [
    `# ${results.title}${results.quick ? ' (--quick: a smoke test, not a reproduction)' : ''}`,
    '',
    `${results.source}. Protocol version ${results.version}. Compared: ${results.measures}.`,
    '',
    counts.withPublished === 0 && results.claims.length > 0
      ? `**The paper prints no numbers to set beside ours: ${claimCounts(results.claims)}** (the claims are below).`
      : counts.withPublished === 0 && results.differences.length > 0
        ? `**The paper prints no numbers to set beside ours: ${differenceCounts(results.differences)}** (the paired differences are below).`
        : `**${counts.agrees} of ${counts.withPublished} cells with a published value agree with the paper**` +
          ` (${counts.disagrees} disagree: ${counts.disagreementsBy.deliberate} by a deliberate difference, ${counts.disagreementsBy['protocol-gap']} by a protocol gap, ${counts.disagreementsBy.open} open` +
          `${counts.notRun ? `; ${counts.notRun} without a value of ours` : ''})` +
          `${counts.extra ? `; ${counts.extra} more cells have no published value` : ''}.`,
    `Agreement rule: ${results.rule}.`,
    '',
    '| | |',
    '|---|---|',
    `| regenerate | \`${results.command}\` |`,
    // These come from the units' env.json: escaped like any text read from a file.
    `| commit | ${escapeMarkdown(p.commits.join('; ')) || '—'} |`,
    `| backend | ${escapeMarkdown(p.backends.join('; ')) || '—'} |`,
    `| machine | ${escapeMarkdown(p.machines.join('; ')) || '—'} |`,
    `| wall time | ${formatDuration(p.wallSeconds)} from the first unit’s start to the last one’s end; the units’ own time adds up to ${formatDuration(p.unitSeconds)} (${formatDuration(p.cpuSeconds)} of CPU) |`,
    `| units | ${p.units.done} of ${p.units.total} done${p.units.notDone ? ` (${p.units.notDone} not done: the cells they feed show —)` : ''} |`,
    `| written | ${p.writtenAt} |`,
    '',
    '## Protocol',
    '',
    ...Object.entries(results.protocol).map(([key, value]) => `- **${key}**: ${value}`),
    '',
  ];
  const tables = [...groupBy(results.cells, (c) => c.table)];
  for (const [table, cells] of tables) {
    lines.push(`## ${table}`, '', ...gridTable(cells, (cell) => cellText(cell, digits)), '');
    const curves = curvePlots.get(table);
    if (curves) lines.push(`![${table}: validation loss against optimizer steps, mean ± sd over seeds](${curves})`, '');
    const against = againstPlots.get(table);
    if (against) lines.push(`![${table}: ${results.metric.name} against ${results.plotAgainst!.title}, a line per row](${against})`, '');
  }
  lines.push(
    counts.withPublished === 0
      ? 'Each cell: ours, mean ± sd over its seeds; — not run.'
      : `Each cell: ours (mean ± sd over its seeds) · the paper’s, ✓ agrees, ✗ disagrees under the rule above; ours alone where the paper has no number; — not run.`,
    '',
  );
  for (const extra of results.shown) {
    for (const [table, cells] of tables) {
      lines.push(`### ${extra.title}${tables.length > 1 ? `: ${table}` : ''}`, '', ...gridTable(cells, (cell) => extraText(cell, extra)), '');
    }
  }
  for (const table of results.measured) {
    lines.push(
      `## ${table.title}`,
      '',
      `| | ${table.columns.join(' | ')} |`,
      `|---|${table.columns.map(() => '---:').join('|')}|`,
      ...table.rows.map((r) => `| ${r.row} | ${r.cells.map((cell) => formatStat(cell, table.digits)).join(' | ')} |`),
      '',
      table.note,
      '',
    );
  }
  const split = results.cells.filter((c) => c.seedVariance);
  if (split.length) {
    const sd = (variance: number) => Math.sqrt(variance).toFixed(digits + 1);
    lines.push(
      '## Seed variance',
      '',
      `Cells whose units cross the seed (weights, data) with the feature seed (random features): ${results.metric.name}'s variance split by the two-way ANOVA estimator, each as an sd (docs/experiments.md, "Seed variance"; a negative component shown as 0).`,
      '',
      '| table | row | column | seeds × feature seeds | sd from the seed | sd from the feature seed | residual sd |',
      '|---|---|---|---|---|---|---|',
      ...split.map((c) => {
        const v = c.seedVariance!;
        return `| ${c.table} | ${c.row} | ${c.column} | ${v.weightSeeds.length} × ${v.featureSeeds.length} | ${sd(v.weights)} | ${sd(v.features)} | ${sd(v.residual)} |`;
      }),
      '',
    );
  }
  if (results.differences.length) lines.push(...differencesMarkdown(results));
  if (results.claims.length) {
    lines.push('## Claims', '', `${claimCounts(results.claims)}.`, '');
    lines.push('| claim | verdict | evidence |', '|---|---|---|', ...results.claims.map((c) => `| ${c.statement} | **${c.verdict}** | ${c.evidence} |`), '');
  }
  const disagreeing = results.cells.filter((c) => c.verdict === 'disagrees');
  lines.push('## Disagreements', '');
  if (disagreeing.length === 0) lines.push('None.', '');
  else {
    // Each explanation once, numbered; the table refers to it.
    const keyOf = (e: Explanation | null) => `${(e ?? OPEN).kind}\u0000${(e ?? OPEN).text}`;
    const explanations = [...new Map(disagreeing.map((c) => [keyOf(c.explanation), c.explanation ?? OPEN])).values()];
    const refOf = (c: CellResult) => explanations.findIndex((e) => keyOf(e) === keyOf(c.explanation)) + 1;
    lines.push('| table | cell | ours | paper | Δ | tolerance | explanation |', '|---|---|---:|---:|---:|---:|---|');
    for (const c of disagreeing) {
      lines.push(
        `| ${c.table} | ${c.row} × ${c.column} | ${formatStat(c.ours, digits)} | ${formatPublished(c, digits)} (${c.published!.source}) | ` +
          `${c.delta! >= 0 ? '+' : '−'}${formatValue(Math.abs(c.delta!), digits)} | ${formatValue(c.tolerance!, digits)} | ${EXPLANATION_TITLES[(c.explanation ?? OPEN).kind]} [${refOf(c)}] |`,
      );
    }
    lines.push(
      '',
      ...explanations.map((e, i) => {
        const count = disagreeing.filter((c) => refOf(c) === i + 1).length;
        return `${i + 1}. **${EXPLANATION_TITLES[e.kind]}** (${count} cell${count > 1 ? 's' : ''}): ${e.text}.`;
      }),
      '',
    );
  }
  if (results.notes.length) lines.push('## Notes', '', ...results.notes.flatMap((n) => [n, '']));
  if (plotFile) lines.push(`![ours against the paper, one point per cell](${plotFile})`, '');
  return lines.join('\n');
}

/** Whether the difference lies above 0 or below it after the family's correction (Holm-adjusted p < 0.05), or neither. */
function separation(d: Difference): string {
  if (!d.metric?.ci) return '—';
  if (d.pAdjusted == null) {
    const [lo, hi] = d.metric.ci;
    return lo > 0 ? '**above**' : hi < 0 ? '**below**' : 'no';
  }
  return d.pAdjusted >= FAMILY_ALPHA ? 'no' : d.metric.mean > 0 ? '**above**' : '**below**';
}

/** The paired differences, a table per results table: Δ with its interval, p, separated or the pairs that would separate it. */
function differencesMarkdown(results: ExperimentResults): string[] {
  const digits = results.metric.digits;
  const lines = [
    '## Paired differences',
    '',
    `Each row minus its baseline, paired by seed: the mean difference with its 95% Student t interval and the paired t-test's p. Separated: above or below 0 with a Holm-adjusted p below 0.05, Holm's correction taken over every paired test this experiment reports (its claims' and these rows'), so that the chance of any false separation among them stays at most 5%; if the interval itself crosses 0, the seeds a difference of the observed size and spread would need (uncorrected).`,
    '',
  ];
  for (const [table, differences] of groupBy(results.differences, (d) => d.table)) {
    const baselines = [...new Set(differences.map((d) => d.baseline))].join(', ');
    lines.push(
      `### ${table}: each − ${baselines}`,
      '',
      `| | pairs | Δ ${results.metric.name} | p | p (Holm) | ${results.shown.map((e) => `Δ ${e.title.toLowerCase()} | `).join('')}separated | seeds to separate |`,
      `|---|---:|---:|---:|---:|${results.shown.map(() => '---:|').join('')}---|---:|`,
      ...differences.map((d) => {
        const separated = separation(d);
        // An interval that crosses 0 needs n ≥ 2, so the sd exists.
        const crosses = d.metric?.ci ? d.metric.ci[0] <= 0 && d.metric.ci[1] >= 0 : false;
        const needed = crosses ? seedsToSeparate(d.metric!.mean, d.metric!.sd!) : null;
        return (
          `| ${d.row} | ${d.n} | ${d.metric ? describeInterval(d.metric, digits) : '—'} | ${d.metric?.p != null ? d.metric.p.toPrecision(2) : '—'} | ` +
          `${d.pAdjusted != null ? d.pAdjusted.toPrecision(2) : '—'} | ` +
          results.shown
            .map((e) => {
              const x = d.extra[e.key];
              return `${x ? describeInterval(x, e.digits) : '—'} | `;
            })
            .join('') +
          `${separated} | ${needed === null ? '' : describeSeedsNeeded(needed)} |`
        );
      }),
      '',
    );
  }
  return lines;
}

/** One results table's validation curves: a line per cell (its row, and its column where the table has several). */
function curvesSvg(results: ExperimentResults, table: string, cells: CellResult[]): Promise<string> | null {
  const withCurves = cells.filter((c) => c.curve);
  if (withCurves.length === 0) return null;
  const severalColumns = new Set(cells.map((c) => c.column)).size > 1;
  const label = (c: CellResult) => (severalColumns ? `${c.row} · ${c.column}` : c.row);
  const rowOf = new Map(withCurves.map((c) => [label(c), c.row]));
  const points: LinePoint[] = withCurves.flatMap((c) =>
    c.curve!.map((p) => ({ series: label(c), x: p.step, y: p.mean, ...(p.sd !== null ? { lo: p.mean - p.sd, hi: p.mean + p.sd } : {}) })),
  );
  return lineChartSvg(points, {
    title: `${results.title}: ${table}`,
    xTitle: 'optimizer step',
    yTitle: 'validation loss (nats/token)',
    seriesTitle: 'cell',
    mechanismOf: (series) => rowOf.get(series) ?? series,
  });
}

/** One results table's metric against the extra the experiment plots it against: a line per row through its cells (mean over their units). */
function againstSvg(results: ExperimentResults, table: string, cells: CellResult[]): Promise<string> | null {
  const against = results.plotAgainst;
  if (!against) return null;
  const points: LinePoint[] = cells
    .filter((c) => c.ours.n > 0 && (c.extra[against.key]?.n ?? 0) > 0)
    .map((c) => ({
      series: c.row,
      x: c.extra[against.key].mean,
      y: c.ours.mean,
      ...(c.ours.sd !== null ? { lo: c.ours.mean - c.ours.sd, hi: c.ours.mean + c.ours.sd } : {}),
    }))
    .sort((a, b) => a.x - b.x);
  if (points.length === 0) return null;
  return lineChartSvg(points, {
    title: `${results.title}: ${table}`,
    xTitle: against.title,
    yTitle: results.metric.name,
    seriesTitle: 'row',
    logX: against.log,
  });
}

/** Writes the markdown, the JSON and the plots (agreement; validation curves per table where units record them); returns the files. */
export async function writeResults(results: ExperimentResults, outDir: string): Promise<string[]> {
  const base = `${results.experiment}${results.quick ? '-quick' : ''}`;
  makeFolders(path.join(outDir, base));
  const plot = path.join(base, 'agreement.svg');
  const svg = await agreementPlotSvg(results);
  const files: string[] = [];
  if (svg) {
    await writeFile(path.join(outDir, plot), svg);
    files.push(path.join(outDir, plot));
  }
  const curvePlots = new Map<string, string>();
  for (const [i, [table, cells]] of [...groupBy(results.cells, (c) => c.table)].entries()) {
    const curves = await curvesSvg(results, table, cells);
    if (!curves) continue;
    const file = path.join(base, `curves-${i + 1}.svg`);
    await writeFile(path.join(outDir, file), curves);
    files.push(path.join(outDir, file));
    curvePlots.set(table, file);
  }
  const againstPlots = new Map<string, string>();
  for (const [i, [table, cells]] of [...groupBy(results.cells, (c) => c.table)].entries()) {
    const svg = await againstSvg(results, table, cells);
    if (!svg) continue;
    const file = path.join(base, `against-${results.plotAgainst!.key}-${i + 1}.svg`);
    await writeFile(path.join(outDir, file), svg);
    files.push(path.join(outDir, file));
    againstPlots.set(table, file);
  }
  const markdown = path.join(outDir, `${base}.md`);
  await writeFile(markdown, resultsMarkdown(results, svg ? plot : null, curvePlots, againstPlots));
  const json = path.join(outDir, `${base}.json`);
  await writeFile(json, JSON.stringify(results, null, 2) + '\n');
  return [markdown, json, ...files];
}
