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
  /** A band drawn around the line from lo to hi (e.g. mean ± sd over seeds), where given. */
  lo?: number;
  hi?: number;
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
  /** The attention mechanism a series shows (default: the series name), which picks its colour. */
  mechanismOf?: (series: string) => string;
}

/**
 * One colour per attention mechanism, the same in every plot: the Okabe–Ito palette, which stays distinct
 * for colour-blind readers, with its yellow (faint on white) replaced by Tol's wine. Softmax, the baseline,
 * is black. test/experiments/plot.test.ts checks every pair (and white) apart by CIEDE2000 ≥ 10, also under
 * simulated deuteranopia, protanopia and tritanopia.
 */
export const MECHANISM_COLOURS: Readonly<Record<string, string>> = {
  softmax: '#000000',
  slay: '#d55e00',
  'yat-spherical': '#e69f00',
  performer: '#0072b2',
  darkformer: '#56b4e9',
  schoenbat: '#009e73',
  'linear-elu': '#cc79a7',
  cosformer: '#882255',
};

/** Tableau 20: for series that are not one per mechanism (two recipes of one mechanism, other names). */
const PALETTE = [
  '#4e79a7', '#f28e2b', '#e15759', '#76b7b2', '#59a14f', '#edc948', '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac',
  '#a0cbe8', '#ffbe7d', '#ff9d9a', '#86bcb6', '#8cd17d', '#f1ce63', '#d4a6c8', '#fabfd2', '#d7b5a6', '#79706e',
];

/** Each series' colour: its mechanism's when every series is a different known mechanism, else the palette in order. */
export function seriesColours(series: readonly string[], mechanismOf: (series: string) => string = (s) => s): string[] {
  const mechanisms = series.map(mechanismOf);
  const ownColours = mechanisms.every((m) => m in MECHANISM_COLOURS) && new Set(mechanisms).size === series.length;
  return ownColours ? mechanisms.map((m) => MECHANISM_COLOURS[m]) : series.map((_, i) => PALETTE[i % PALETTE.length]);
}

type Layer = Extract<TopLevelSpec, { layer: unknown }>['layer'][number];
type Encoding = NonNullable<Extract<Layer, { mark: unknown }>['encoding']>;
type Scale = Extract<NonNullable<Encoding['y']>, { scale?: unknown }>['scale'];

/** The vega-lite spec of a multi-series line chart with optional bands (exported so that tests and pages can reuse it). */
export function lineChartSpec(points: LinePoint[], opts: LineChartOptions): TopLevelSpec {
  const positive = (v: number | undefined) => v === undefined || ((!opts.logY || v > 0) && Number.isFinite(v));
  const values = points.filter((p) => Number.isFinite(p.x) && (!opts.logX || p.x > 0) && positive(p.y) && positive(p.lo) && positive(p.hi));
  const series = [...new Set(values.map((p) => p.series))];
  const x: Encoding['x'] = { field: 'x', type: 'quantitative', title: opts.xTitle, axis: { format: '~s', labelExpr: "datum.value === 0 ? '0' : datum.label" }, scale: opts.logX ? { type: 'log', base: 2 } : undefined };
  const yScale: Scale = opts.logY ? { type: 'log', nice: false } : { zero: false };
  const color: Encoding['color'] = {
    field: 'series',
    type: 'nominal',
    title: opts.seriesTitle ?? 'series',
    scale: { domain: series, range: seriesColours(series, opts.mechanismOf) },
    // Line swatches at full opacity: the legend is shared with the faint bands.
    legend: { labelFontSize: 12, labelLimit: 360, titleFontSize: 12, symbolType: 'stroke', symbolStrokeWidth: 3, symbolOpacity: 1 },
  };
  const order: Encoding['order'] = { field: 'x', type: 'quantitative' };
  const line: Layer = {
    mark: { type: 'line', point: !!opts.logX, strokeWidth: 2 },
    encoding: { x, y: { field: 'y', type: 'quantitative', title: opts.yTitle, scale: yScale }, color, order },
  };
  const band: Layer = {
    transform: [{ filter: 'isValid(datum.lo) && isValid(datum.hi)' }],
    mark: { type: 'area', opacity: 0.15 },
    encoding: { x, y: { field: 'lo', type: 'quantitative', scale: yScale }, y2: { field: 'hi' }, color },
  };
  const hasBands = values.some((p) => p.lo !== undefined && p.hi !== undefined);
  return {
    $schema: 'https://vega.github.io/schema/vega-lite/v6.json',
    title: { text: opts.title, fontSize: 14 },
    width: opts.width ?? 560,
    height: opts.height ?? 320,
    background: 'white',
    config: { axis: { labelFontSize: 11, titleFontSize: 12 } },
    data: { values },
    layer: hasBands ? [band, line] : [line],
  };
}

/** Renders the chart to an SVG document (`<svg xmlns=…>`: a browser opens it, an HTML page can inline it). */
export function lineChartSvg(points: LinePoint[], opts: LineChartOptions): Promise<string> {
  return specSvg(lineChartSpec(points, opts));
}

/** Any vega-lite spec as an SVG document. */
export async function specSvg(spec: TopLevelSpec): Promise<string> {
  const view = new vega.View(vega.parse(compile(spec).spec), { renderer: 'none' });
  try {
    return await view.toSVG();
  } finally {
    view.finalize();
  }
}
