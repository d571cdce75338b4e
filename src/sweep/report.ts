// `sweep report`: the comparison of a sweep's finished runs.
//   report.md / report.json   per group of runs that differ only in their seed: the metric's mean ± sd over seeds
//                             (and the final validation accuracy's, beside it);
//                             against the baseline mechanism: the paired difference over the seeds both finished,
//                             its confidence interval (Student t) and p-value, and how many seeds it won
//   compare/                  `npm run compare` of the same runs (per-run tables and the loss/perplexity plots); one
//                             sub-folder per kind of run when they differ in model kind or tokenizer (GPT and BERT)
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { compareRuns, loadRun, PLOTS } from '../report/compare.ts';
import type { RunSummary } from '../report/compare.ts';
import { formatMeanSd, groupBy, meanSd } from '../report/stats.ts';
import type { MeanSd } from '../report/stats.ts';
import { pairedT } from '../report/paired.ts';
import type { PairedResult } from '../report/paired.ts';
import { REPORT_METRICS } from './spec.ts';
import type { ReportMetric, Sweep, SweepRun } from './spec.ts';
import { runFolders } from './run-folders.ts';

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
  stats: MeanSd;
  /** Final validation top-1 accuracy over the same runs. */
  accuracy: MeanSd;
  tokensPerSecond: MeanSd;
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
  const baseline = opts.baseline === undefined ? sweep.report.baseline : opts.baseline;
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
      stats: meanSd(values.map((v) => v.value)),
      accuracy: meanSd(members.map((m) => m.summary.finalValAcc)),
      tokensPerSecond: meanSd(members.map((m) => m.summary.tokensPerSecond)),
      paired: null,
    };
  });
  if (baseline !== null) pairWithBaseline(groups, baseline, level, REPORT_METRICS[metric].higherIsBetter);

  await mkdir(opts.outDir, { recursive: true });
  const compareDir = path.join(opts.outDir, 'compare');
  const compared = await compareRuns(finished.map((f) => f.summary.dir), {
    outDir: compareDir, warn, split: true, baseline: baseline !== null && finished.some((f) => f.summary.attention === baseline) ? baseline : null,
  });
  const report: SweepReport = { sweep: sweep.file, metric, baseline, level, groups, missing, files: [] };
  const compareFolders = compared.reports.map((r) => ({ folder: path.relative(opts.outDir, r.outDir), files: r.files.map((f) => path.relative(opts.outDir, f)) }));
  const markdown = renderMarkdown(sweep, report, compareFolders);
  const mdFile = path.join(opts.outDir, 'report.md');
  const jsonFile = path.join(opts.outDir, 'report.json');
  await writeFile(mdFile, markdown);
  report.files = [mdFile, jsonFile, ...compared.files];
  await writeFile(jsonFile, JSON.stringify(report, null, 2) + '\n');
  return report;
}

/** Pairs each group with the baseline group of the same settings (its run names without seed and attention). */
function pairWithBaseline(groups: GroupReport[], baseline: string, level: number, higherIsBetter: boolean): void {
  const baselineGroups = new Map<string, GroupReport>();
  for (const g of groups) if (g.attention === baseline && !baselineGroups.has(g.pairing)) baselineGroups.set(g.pairing, g);
  for (const g of groups) {
    if (g.attention === baseline || g.values.length === 0) continue;
    const partner = baselineGroups.get(g.pairing);
    if (!partner) continue;
    const bySeed = new Map(partner.values.map((v) => [v.seed, v.value]));
    const pairs = g.values.filter((v) => bySeed.has(v.seed));
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
  const header = `| group | attention | n | seeds | ${REPORT_METRICS[report.metric].title} (mean ± sd) |${accuracyColumn ? ' val acc |' : ''} tokens/s |` +
    (report.baseline ? ` Δ vs ${report.baseline} (paired mean [${pct}% CI]) | p | better on |` : '');
  const rule = `|---|---|---:|---|---:|${accuracyColumn ? '---:|' : ''}---:|${report.baseline ? '---:|---:|---:|' : ''}`;
  const rows = report.groups.map((g) => {
    const accuracy = accuracyColumn ? ` ${formatMeanSd(g.accuracy, 4, { showN: false })} |` : '';
    const base = `| ${g.group} | ${g.attention} | ${g.stats.n} | ${g.values.map((v) => v.seed).join(', ')} | ${formatMeanSd(g.stats, digits, { showN: false })} |${accuracy} ${formatMeanSd(g.tokensPerSecond, 0, { showN: false })} |`;
    if (!report.baseline) return base;
    const p = g.paired;
    if (!p) return `${base} ${g.attention === report.baseline ? '(baseline)' : '—'} | | |`;
    const ci = p.ci ? ` [${signed(p.ci[0], digits)}, ${signed(p.ci[1], digits)}]` : '';
    return `${base} ${signed(p.mean, digits)}${ci} | ${p.p === null ? '—' : p.p < 0.001 ? '< 0.001' : p.p.toFixed(3)} | ${p.wins}/${p.n} |`;
  });
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
      `their seed; values are mean ± sample sd over the seeds.` +
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
