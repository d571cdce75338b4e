// `sweep report`: the comparison of a sweep's finished runs.
//   report.md / report.json   per group of runs that differ only in their seed: the metric's mean ± sd over seeds
//                             (and the final validation accuracy's, beside it) and the backend(s) the runs trained on;
//                             against the baseline mechanism: the paired difference over the seeds both finished,
//                             its confidence interval (Student t) and p-value, and how many seeds it won
//   compare/                  `npm run compare` of the same runs (per-run tables and the loss/perplexity plots); one
//                             sub-folder per kind of run when they differ in model kind or tokenizer (GPT and BERT)
import { writeFile } from 'node:fs/promises';
import path from 'node:path';
import { compareRuns, PLOTS } from '../report/compare.ts';
import { defaultBaseline } from '../report/groups.ts';
import { loadRun, type RunSummary } from '../report/load-runs.ts';
import { escapeMarkdown } from '../core/markdown.ts';
import { safeJoin } from '../report/safe-path.ts';
import { formatMeanSd, groupBy, meanSdOverSeeds, perSeed } from '../report/stats.ts';
import type { MeanSd } from '../report/stats.ts';
import { pairedT } from '../report/paired.ts';
import type { PairedResult } from '../report/paired.ts';
import { REPORT_METRICS, type ReportMetric } from './report-metrics.ts';
import type { Sweep, SweepRun } from './spec.ts';
import { runFolders } from './run-folders.ts';
import { makeFolders } from '../core/folders.ts';

export interface ReportOptions {
  outDir: string;
  baseline?: string | null;
  metric?: ReportMetric;
  level?: number;
  warn?: (message: string) => void;
}

export interface GroupReport {
  group: string;
  /** Shared with the baseline group it is compared with (see SweepRun.pairing). */
  pairing: string;
  attention: string;
  /** Finished runs (seed → value of the metric). */
  values: { seed: number; value: number; run: string }[];
  /** Runs that repeat a seed already in the group: averaged with it, not counted in n (see compare's groups). */
  repeatedRuns: number;
  stats: MeanSd;
  /** Final validation top-1 accuracy over the same runs. */
  accuracy: MeanSd;
  tokensPerSecond: MeanSd;
  /** The backends its runs trained on (from their env.json; '—' where no run recorded one). */
  backend: string;
  /** Against the baseline group with the same other settings; null for the baseline itself or without one. */
  paired: (PairedResult & { baselineGroup: string; wins: number }) | null;
}

export interface SweepReport {
  sweep: string;
  metric: ReportMetric;
  baseline: string | null;
  level: number;
  groups: GroupReport[];
  /** Runs of the sweep that have not finished (left out). */
  missing: string[];
  files: string[];
}

export async function buildReport(sweep: Sweep, opts: ReportOptions): Promise<SweepReport> {
  const warn = opts.warn ?? ((m: string) => process.stderr.write(`warning: ${m}\n`));
  const metric = opts.metric ?? sweep.report.metric;
  // The sweep file's report.baseline, else compare's default (softmax when a run uses it); null (--baseline none): none.
  const baseline =
    opts.baseline === undefined ? (sweep.report.baseline ?? defaultBaseline(sweep.runs.map((r) => r.recipe.model.attention.name))) : opts.baseline;
  const level = opts.level ?? 0.95;
  const finished: { run: SweepRun; summary: RunSummary }[] = [];
  const missing: string[] = [];
  for (const run of sweep.runs) {
    const folder = runFolders(sweep, run).findLast((f) => f.done);
    if (!folder) {
      missing.push(run.name);
      continue;
    }
    finished.push({ run, summary: await loadRun(folder.dir) });
  }
  if (finished.length === 0) throw new Error(`${sweep.file}: no run of the sweep has finished yet (npm run sweep -- status ${sweep.file})`);
  if (missing.length > 0) warn(`${missing.length} of ${sweep.runs.length} runs have not finished and are left out: ${missing.join(', ')}`);

  const value = (s: RunSummary) => s[metric];
  const groups = [...groupBy(finished, (f) => f.run.group).values()].map((members): GroupReport => {
    const values = members.flatMap(({ run, summary }) => {
      const v = value(summary);
      return v === null ? [] : [{ seed: run.recipe.train.seed, value: v, run: run.name }];
    });
    return {
      group: members[0].run.group,
      pairing: members[0].run.pairing,
      attention: members[0].run.recipe.model.attention.name,
      values,
      repeatedRuns: values.length - new Set(values.map((v) => v.seed)).size,
      // n counts distinct seeds: a seed's repeated runs are averaged first.
      stats: meanSdOverSeeds(
        values,
        (v) => v.seed,
        (v) => v.value,
      ),
      accuracy: meanSdOverSeeds(
        members,
        (m) => m.run.recipe.train.seed,
        (m) => m.summary.finalValAcc,
      ),
      tokensPerSecond: meanSdOverSeeds(
        members,
        (m) => m.run.recipe.train.seed,
        (m) => m.summary.tokensPerSecond,
      ),
      backend: [...new Set(members.map((m) => m.summary.backend ?? '—'))].join(', '),
      paired: null,
    };
  });
  if (baseline !== null) pairWithBaseline(groups, baseline, level, REPORT_METRICS[metric].higherIsBetter);

  makeFolders(opts.outDir);
  const compareDir = safeJoin(opts.outDir, 'compare');
  // The recipe column names the sweep's group (the run's name without its seed), not the run (`softmax-seed1`).
  const groupOf = new Map(finished.map((f) => [f.summary.dir, f.run.group]));
  const compared = await compareRuns(
    finished.map((f) => f.summary.dir),
    {
      outDir: compareDir,
      warn,
      split: true,
      baseline: baseline !== null && finished.some((f) => f.summary.attention === baseline) ? baseline : null,
      recipeName: (dir) => groupOf.get(dir),
    },
  );
  const report: SweepReport = { sweep: sweep.file, metric, baseline, level, groups, missing, files: [] };
  const compareFolders = compared.reports.map((r) => ({
    folder: path.relative(opts.outDir, r.outDir),
    files: r.files.map((f) => path.relative(opts.outDir, f)),
  }));
  const markdown = renderMarkdown(sweep, report, compareFolders);
  const mdFile = safeJoin(opts.outDir, 'report.md');
  const jsonFile = safeJoin(opts.outDir, 'report.json');
  await writeFile(mdFile, markdown);
  report.files = [mdFile, jsonFile, ...compared.files];
  await writeFile(jsonFile, JSON.stringify(report, null, 2) + '\n');
  return report;
}

/**
 * Pairs each group with the baseline group of the same settings (its run names without seed and attention), one pair
 * per distinct seed: a seed's repeated runs are averaged first on both sides.
 */
function pairWithBaseline(groups: GroupReport[], baseline: string, level: number, higherIsBetter: boolean): void {
  const baselineGroups = new Map<string, GroupReport>();
  for (const g of groups) if (g.attention === baseline && !baselineGroups.has(g.pairing)) baselineGroups.set(g.pairing, g);
  for (const g of groups) {
    if (g.attention === baseline || g.values.length === 0) continue;
    const partner = baselineGroups.get(g.pairing);
    if (!partner) continue;
    const bySeed = new Map(
      perSeed(
        partner.values,
        (v) => v.seed,
        (v) => v.value,
      ).map((v) => [v.seed, v.value]),
    );
    const pairs = perSeed(
      g.values,
      (v) => v.seed,
      (v) => v.value,
    ).filter((v) => bySeed.has(v.seed));
    const x = pairs.map((v) => v.value);
    const base = pairs.map((v) => bySeed.get(v.seed)!);
    g.paired = { ...pairedT(x, base, level), baselineGroup: partner.group, wins: x.filter((v, i) => (higherIsBetter ? v > base[i] : v < base[i])).length };
  }
}

const signed = (v: number, digits: number) => `${v >= 0 ? '+' : '−'}${Math.abs(v).toFixed(digits)}`;

function renderMarkdown(sweep: Sweep, report: SweepReport, compareFolders: { folder: string; files: string[] }[]): string {
  const digits = report.metric === 'finalValPpl' ? 2 : 4;
  const pct = Math.round(report.level * 100);
  // Accuracy beside the compared metric, unless it is the compared metric.
  const accuracyColumn = report.metric !== 'finalValAcc';
  // The comparison first (Δ, its interval, p), then the group's own numbers.
  const header =
    `| group |${report.baseline ? ` Δ vs ${report.baseline} (paired mean [${pct}% CI]) | p | better on |` : ''} ${REPORT_METRICS[report.metric].title} (mean ± sd) | n | seeds | attention |` +
    `${accuracyColumn ? ' val acc |' : ''} tokens/s | backend |`;
  const rule = `|---|${report.baseline ? '---:|---:|---:|' : ''}---:|---:|---|---|${accuracyColumn ? '---:|' : ''}---:|---|`;
  const rows = report.groups.map((g) => {
    const seeds = perSeed(
      g.values,
      (v) => v.seed,
      (v) => v.value,
    )
      .map((v) => `${v.seed}${v.runs > 1 ? ` (×${v.runs})` : ''}`)
      .join(', ');
    const accuracy = accuracyColumn ? ` ${formatMeanSd(g.accuracy, 4, { showN: false })} |` : '';
    const own = ` ${formatMeanSd(g.stats, digits, { showN: false })} | ${g.stats.n} | ${seeds} | ${g.attention} |${accuracy} ${formatMeanSd(g.tokensPerSecond, 0, { showN: false })} | ${escapeMarkdown(g.backend)} |`;
    if (!report.baseline) return `| ${g.group} |${own}`;
    const p = g.paired;
    if (!p) return `| ${g.group} | ${g.attention === report.baseline ? '(baseline)' : '—'} | | |${own}`;
    const ci = p.ci ? ` [${signed(p.ci[0], digits)}, ${signed(p.ci[1], digits)}]` : '';
    return `| ${g.group} | ${signed(p.mean, digits)}${ci} | ${p.p === null ? '—' : p.p < 0.001 ? '< 0.001' : p.p.toFixed(3)} | ${p.wins}/${p.n} |${own}`;
  });
  const repeated = report.groups.filter((g) => g.repeatedRuns > 0);
  // One set of curves per compare report (one per kind of run, e.g. GPT and BERT, whose losses share no axis).
  const plots = compareFolders.flatMap(({ folder, files }) => [
    ...(compareFolders.length > 1 ? [`### ${path.basename(folder)}`, ''] : []),
    ...PLOTS.filter((plot) => files.includes(path.join(folder, plot.file))).map((plot) => `![${plot.title}](${folder}/${plot.file})`),
    '',
  ]);
  return [
    `# Sweep ${sweep.name}`,
    '',
    `${sweep.file}: ${sweep.runs.length} runs, ${sweep.runs.length - report.missing.length} finished. Groups are runs that differ only in ` +
      `their seed; values are mean ± sample sd over the seeds, and n counts distinct seeds.` +
      (repeated.length > 0
        ? ` Runs that repeat a seed (${repeated.map((g) => `${g.group}: ${g.repeatedRuns}`).join(', ')}) are averaged with it first, not counted in n.`
        : '') +
      (report.baseline
        ? ` Δ is the paired difference to the ${report.baseline} run with the same seed and settings (negative = lower ${report.metric} than ${report.baseline}), ` +
          `with a ${pct}% Student t confidence interval over the seeds both finished and the two-sided paired t-test's p; "better on" counts those seeds ` +
          `(${REPORT_METRICS[report.metric].higherIsBetter ? 'higher' : 'lower'} is better).`
        : ''),
    '',
    header,
    rule,
    ...rows,
    '',
    ...(report.missing.length ? [`Not finished (left out): ${report.missing.join(', ')}.`, ''] : []),
    '## Curves (group means)',
    '',
    ...plots,
    '',
    `Per-run tables: ${compareFolders.map(({ folder }) => `[${folder}/report.md](${folder}/report.md) · [${folder}/index.html](${folder}/index.html)`).join(' · ')}`,
    '',
  ].join('\n');
}
