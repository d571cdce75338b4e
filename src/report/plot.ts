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
  /**
   * Each series' colour, fixed by the caller, and the legend's order: a report colours its groups once, so that every
   * plot of it gives a group the same colour whichever groups the plot shows. Overrides mechanismOf.
   */
  colours?: ReadonlyMap<string, string>;
}

/**
 * One colour per attention mechanism, the same in every plot: Paul Tol's 'muted' scheme (designed for colour-blind
 * readers; https://personal.sron.nl/~pault/), its pale grey for bad data left out. Softmax, the baseline, is black.
 * Okabe–Ito's orange beside vermillion was too close for SLAY and spherical Yat, the pair the papers compare most;
 * here they are rose and indigo. test/report/plot.test.ts checks every pair (and white) apart by CIEDE2000 ≥ 10, also
 * under simulated deuteranopia, protanopia and tritanopia.
 */
export const MECHANISM_COLOURS: Readonly<Record<string, string>> = {
  softmax: '#000000',
  slay: '#cc6677',
  'yat-spherical': '#332288',
  performer: '#117733',
  darkformer: '#ddcc77',
  schoenbat: '#88ccee',
  'linear-elu': '#aa4499',
  cosformer: '#44aa99',
  gla: '#882255',
};

/**
 * `n` colours as far apart as can be, for series that are not one per mechanism (several settings of one mechanism,
 * other names): the mechanism palette's colours first, then, one at a time, the colour of a 16-level sRGB grid farthest
 * (CIELAB distance) from those chosen and from the white background, leaving out the lightest (L* > 80, faint on
 * white). Deterministic, and distinct for any number of series; the first ones stay far apart.
 */
export function distinctColours(n: number): string[] {
  const chosen = Object.values(MECHANISM_COLOURS).slice(0, n);
  if (n <= chosen.length) return chosen;
  const levels = Array.from({ length: 16 }, (_, i) => Math.round((i * 255) / 15));
  const candidates = levels
    .flatMap((r) => levels.flatMap((g) => levels.map((b) => [r, g, b])))
    .map((rgb) => ({ hex: `#${rgb.map((v) => v.toString(16).padStart(2, '0')).join('')}`, lab: labOf(rgb) }))
    .filter((c) => c.lab[0] <= 80);
  const distance = (a: number[], b: number[]) => Math.hypot(a[0] - b[0], a[1] - b[1], a[2] - b[2]);
  const white = labOf([255, 255, 255]);
  const nearest = candidates.map((c) => Math.min(distance(c.lab, white), ...chosen.map((hex) => distance(c.lab, labOf(rgbOf(hex))))));
  while (chosen.length < n) {
    let best = 0;
    for (let i = 1; i < candidates.length; i++) if (nearest[i] > nearest[best]) best = i;
    chosen.push(candidates[best].hex);
    for (let i = 0; i < candidates.length; i++) nearest[i] = Math.min(nearest[i], distance(candidates[i].lab, candidates[best].lab));
  }
  return chosen;
}

function rgbOf(hex: string): number[] {
  return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
}

/** sRGB (0–255) → CIELAB (D65). */
function labOf(rgb: number[]): number[] {
  const [r, g, b] = rgb.map((v) => v / 255).map((v) => (v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
  const xyz = [(0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b, (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883];
  const f = xyz.map((t) => (t > 216 / 24389 ? Math.cbrt(t) : (841 / 108) * t + 4 / 29));
  return [116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])];
}

/** Each series' colour: its mechanism's when every series is a different known mechanism, else distinctColours in order. */
export function seriesColours(series: readonly string[], mechanismOf: (series: string) => string = (s) => s): string[] {
  const mechanisms = series.map(mechanismOf);
  const ownColours = mechanisms.every((m) => m in MECHANISM_COLOURS) && new Set(mechanisms).size === series.length;
  return ownColours ? mechanisms.map((m) => MECHANISM_COLOURS[m]) : distinctColours(series.length);
}

type Layer = Extract<TopLevelSpec, { layer: unknown }>['layer'][number];
type Encoding = NonNullable<Extract<Layer, { mark: unknown }>['encoding']>;
type Scale = Extract<NonNullable<Encoding['y']>, { scale?: unknown }>['scale'];

/** The vega-lite spec of a multi-series line chart with optional bands (exported so that tests and pages can reuse it). */
function lineChartSpec(points: LinePoint[], opts: LineChartOptions): TopLevelSpec {
  const positive = (v: number | undefined) => v === undefined || ((!opts.logY || v > 0) && Number.isFinite(v));
  const values = points.filter((p) => Number.isFinite(p.x) && (!opts.logX || p.x > 0) && positive(p.y) && positive(p.lo) && positive(p.hi));
  const present = new Set(values.map((p) => p.series));
  const series = opts.colours ? [...opts.colours.keys()].filter((name) => present.has(name)) : [...present];
  const missing = [...present].filter((name) => opts.colours && !opts.colours.has(name));
  if (missing.length > 0) throw new Error(`lineChartSpec: no colour given for ${missing.join(', ')}`);
  const x: Encoding['x'] = {
    field: 'x',
    type: 'quantitative',
    title: opts.xTitle,
    axis: { format: '~s', labelExpr: "datum.value === 0 ? '0' : datum.label" },
    scale: opts.logX ? { type: 'log', base: 2 } : undefined,
  };
  const yScale: Scale = opts.logY ? { type: 'log', nice: false } : { zero: false };
  const color: Encoding['color'] = {
    field: 'series',
    type: 'nominal',
    title: opts.seriesTitle ?? 'series',
    scale: { domain: series, range: opts.colours ? series.map((name) => opts.colours!.get(name)!) : seriesColours(series, opts.mechanismOf) },
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
