// Ours against the paper's, one point per cell with a published value: x the paper's number, y ours (mean, with a
// ±sd bar over the seeds), a colour per column (mechanism) and the diagonal y = x. Axes are logarithmic when the
// values span more than two orders of magnitude (the ablation's errors run from 0.4 to 10⁶).
import type { TopLevelSpec } from 'vega-lite';
import { seriesColours, specSvg } from '../report/plot.ts';
import type { MeanSd } from '../report/stats.ts';
import type { PublishedValue, Verdict } from './protocol.ts';

/** What the plot reads of an experiment's results (results.ts's ExperimentResults, which imports this file). */
export interface AgreementPlotInput {
  title: string;
  metric: { name: string };
  counts: { agrees: number; withPublished: number };
  cells: { row: string; column: string; published: PublishedValue | null; ours: MeanSd; verdict: Verdict }[];
}

export async function agreementPlotSvg(results: AgreementPlotInput): Promise<string | null> {
  const points = results.cells
    .filter((c) => c.published && c.ours.n > 0)
    .map((c) => ({
      series: c.column,
      cell: `${c.row} × ${c.column}`,
      paper: c.published!.mean,
      ours: c.ours.mean,
      lo: c.ours.mean - (c.ours.sd ?? 0),
      hi: c.ours.mean + (c.ours.sd ?? 0),
      verdict: c.verdict,
    }));
  const positive = points.filter((p) => p.paper > 0 && p.ours > 0);
  const extent = positive.flatMap((p) => [p.paper, p.ours]);
  const log = extent.length > 0 && Math.max(...extent) / Math.min(...extent) > 100;
  const shown = (log ? positive : points).map((p) => (log ? { ...p, lo: Math.max(p.lo, p.ours / 10), hi: p.hi } : p));
  if (shown.length === 0) return null;
  const values = shown.flatMap((p) => [p.paper, p.ours, p.lo, p.hi]);
  const [min, max] = [Math.min(...values), Math.max(...values)];
  const series = [...new Set(shown.map((p) => p.series))];
  const scale = log ? { type: 'log' as const, domain: [min, max] } : { domain: [Math.min(0, min), Math.max(1, max)] };
  const color = { field: 'series', type: 'nominal' as const, title: 'column', scale: { domain: series, range: seriesColours(series) } };
  const x = { field: 'paper', type: 'quantitative' as const, title: `paper's ${results.metric.name}`, scale };
  const spec: TopLevelSpec = {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: { text: `${results.title}: ours against the paper (${results.counts.agrees} of ${results.counts.withPublished} agree)`, fontSize: 14 },
    width: 480,
    height: 480,
    background: 'white',
    layer: [
      {
        data: {
          values: [
            { paper: log ? min : Math.min(0, min), ours: log ? min : Math.min(0, min) },
            { paper: max, ours: max },
          ],
        },
        mark: { type: 'line', color: '#999999', strokeDash: [4, 4] },
        encoding: { x, y: { field: 'ours', type: 'quantitative', scale } },
      },
      {
        data: { values: shown },
        mark: { type: 'rule', strokeWidth: 1.5 },
        encoding: { x, y: { field: 'lo', type: 'quantitative', scale }, y2: { field: 'hi' }, color },
      },
      {
        data: { values: shown },
        mark: { type: 'point', filled: true, size: 60 },
        encoding: {
          x,
          y: { field: 'ours', type: 'quantitative', title: `ours (mean ± sd over seeds)`, scale },
          color,
          shape: { field: 'verdict', type: 'nominal', title: 'verdict', scale: { domain: ['agrees', 'disagrees'], range: ['circle', 'cross'] } },
          tooltip: [{ field: 'cell' }, { field: 'paper' }, { field: 'ours' }],
        },
      },
    ],
  };
  return specSvg(spec);
}
