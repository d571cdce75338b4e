// Line charts as standalone SVG through vega-lite (compiled to a vega spec, rendered headless by
// vega's SVG renderer; no browser or canvas needed).
import * as vega from 'vega';
import { compile } from 'vega-lite';
import type { TopLevelSpec } from 'vega-lite';

export interface LinePoint {
  /** One line per distinct series (e.g. the attention mechanism). */
  series: string;
  x: number;
  y: number;
}

export interface LineChartOptions {
  title: string;
  xTitle: string;
  yTitle: string;
  seriesTitle?: string;
  /** Logarithmic y axis (perplexity). */
  logY?: boolean;
  /** Logarithmic x axis (sequence lengths). */
  logX?: boolean;
  width?: number;
  height?: number;
}

/** The vega-lite spec of a multi-series line chart (exported so that tests and pages can reuse it). */
export function lineChartSpec(points: LinePoint[], opts: LineChartOptions): TopLevelSpec {
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: opts.title,
    width: opts.width ?? 560,
    height: opts.height ?? 320,
    background: 'white',
    data: {
      values: points.filter((p) => Number.isFinite(p.x) && Number.isFinite(p.y) && (!opts.logY || p.y > 0) && (!opts.logX || p.x > 0)),
    },
    mark: { type: 'line', point: !!opts.logX, strokeWidth: 1.5 },
    encoding: {
      x: { field: 'x', type: 'quantitative', title: opts.xTitle, axis: { format: '~s' }, scale: opts.logX ? { type: 'log', base: 2 } : undefined },
      y: { field: 'y', type: 'quantitative', title: opts.yTitle, scale: opts.logY ? { type: 'log' } : { zero: false } },
      color: { field: 'series', type: 'nominal', title: opts.seriesTitle ?? 'series' },
      order: { field: 'x', type: 'quantitative' },
    },
  };
}

/** Renders the chart to an SVG document (`<svg xmlns=…>`: a browser opens it, an HTML page can inline it). */
export async function lineChartSvg(points: LinePoint[], opts: LineChartOptions): Promise<string> {
  const view = new vega.View(vega.parse(compile(lineChartSpec(points, opts)).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
