// Line charts: one distinct colour per attention mechanism (checked perceptually, also for colour-blind
// readers), stable across plots, and ±sd bands drawn only where given.
import { describe, expect, it } from 'vitest';
import { attentionNames } from '../../src/model/attention/index.ts';
import { distinctColours, lineChartSvg, MECHANISM_COLOURS, seriesColours } from '../../src/report/plot.ts';
import type { LinePoint } from '../../src/report/plot.ts';

/** sRGB hex → linear RGB in [0, 1]. */
function linearRgb(hex: string): number[] {
  return [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255).map((v) => (v <= 0.04045 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4));
}

/** Linear RGB → CIELAB (D65). */
function lab([r, g, b]: number[]): number[] {
  const xyz = [(0.4124 * r + 0.3576 * g + 0.1805 * b) / 0.95047, 0.2126 * r + 0.7152 * g + 0.0722 * b, (0.0193 * r + 0.1192 * g + 0.9505 * b) / 1.08883];
  const f = xyz.map((t) => (t > 216 / 24389 ? Math.cbrt(t) : (841 / 108) * t + 4 / 29));
  return [116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])];
}

/** CIEDE2000 colour difference (Sharma, Wu & Dalal 2005); ~2 is just noticeable, ≥ 10 clearly different. */
function deltaE2000([L1, a1, b1]: number[], [L2, a2, b2]: number[]): number {
  const rad = Math.PI / 180;
  const Cbar = (Math.hypot(a1, b1) + Math.hypot(a2, b2)) / 2;
  const G = 0.5 * (1 - Math.sqrt(Cbar ** 7 / (Cbar ** 7 + 25 ** 7)));
  const [a1p, a2p] = [(1 + G) * a1, (1 + G) * a2];
  const [C1, C2] = [Math.hypot(a1p, b1), Math.hypot(a2p, b2)];
  const hue = (b: number, a: number) => (a === 0 && b === 0 ? 0 : (Math.atan2(b, a) / rad + 360) % 360);
  const [h1, h2] = [hue(b1, a1p), hue(b2, a2p)];
  let dh = C1 * C2 === 0 ? 0 : h2 - h1;
  if (dh > 180) dh -= 360;
  else if (dh < -180) dh += 360;
  const dH = 2 * Math.sqrt(C1 * C2) * Math.sin((dh * rad) / 2);
  const Lbar = (L1 + L2) / 2;
  const Cpbar = (C1 + C2) / 2;
  let hbar = h1 + h2;
  if (C1 * C2 !== 0) hbar = Math.abs(h1 - h2) > 180 ? (hbar < 360 ? hbar + 360 : hbar - 360) / 2 : hbar / 2;
  const T =
    1 - 0.17 * Math.cos((hbar - 30) * rad) + 0.24 * Math.cos(2 * hbar * rad) + 0.32 * Math.cos((3 * hbar + 6) * rad) - 0.2 * Math.cos((4 * hbar - 63) * rad);
  const SL = 1 + (0.015 * (Lbar - 50) ** 2) / Math.sqrt(20 + (Lbar - 50) ** 2);
  const SC = 1 + 0.045 * Cpbar;
  const SH = 1 + 0.015 * Cpbar * T;
  const RT = -Math.sin(2 * 30 * Math.exp(-(((hbar - 275) / 25) ** 2)) * rad) * 2 * Math.sqrt(Cpbar ** 7 / (Cpbar ** 7 + 25 ** 7));
  const [l, c, h] = [(L2 - L1) / SL, (C2 - C1) / SC, dH / SH];
  return Math.sqrt(l * l + c * c + h * h + RT * c * h);
}

/** Colour-vision-deficiency simulation matrices on linear RGB (Machado, Oliveira & Fernandes 2009, severity 1). */
const VISION: Record<string, number[][] | null> = {
  normal: null,
  deuteranopia: [
    [0.367322, 0.860646, -0.227968],
    [0.280085, 0.672501, 0.047413],
    [-0.01182, 0.04294, 0.968881],
  ],
  protanopia: [
    [0.152286, 1.052583, -0.204868],
    [0.114503, 0.786281, 0.099216],
    [-0.003882, -0.048116, 1.051998],
  ],
  tritanopia: [
    [1.255528, -0.076749, -0.178779],
    [-0.078411, 0.930809, 0.147602],
    [0.004733, 0.691367, 0.3039],
  ],
};

/** The smallest CIEDE2000 difference between any two of the colours as seen with `vision`. */
function closestPair(colours: string[], vision: number[][] | null): { delta: number; pair: string } {
  const seen = colours.map((c) => {
    const rgb = linearRgb(c);
    return lab(vision ? vision.map((row) => Math.min(1, Math.max(0, row[0] * rgb[0] + row[1] * rgb[1] + row[2] * rgb[2]))) : rgb);
  });
  let closest = { delta: Infinity, pair: '' };
  for (let i = 0; i < colours.length; i++) {
    for (let j = i + 1; j < colours.length; j++) {
      const delta = deltaE2000(seen[i], seen[j]);
      if (delta < closest.delta) closest = { delta, pair: `${colours[i]}/${colours[j]}` };
    }
  }
  return closest;
}

describe('mechanism colours', () => {
  it('the CIEDE2000 reference reproduces Sharma et al.’s test pairs', () => {
    expect(deltaE2000([50, 2.6772, -79.7751], [50, 0, -82.7485])).toBeCloseTo(2.0425, 4);
    expect(deltaE2000([50, 0, 0], [50, -1, 2])).toBeCloseTo(2.3669, 4);
    expect(deltaE2000([50, 2.5, 0], [73, 25, -18])).toBeCloseTo(27.1492, 4);
  });

  it('every registered mechanism has its own colour, clearly apart from the others and from the white background, also for colour-blind readers', () => {
    const colours = seriesColours(attentionNames());
    expect(colours).toEqual(attentionNames().map((m) => MECHANISM_COLOURS[m]));
    expect(new Set(colours).size).toBe(attentionNames().length);
    for (const [name, matrix] of Object.entries(VISION)) {
      const { delta, pair } = closestPair([...colours, '#ffffff'], matrix);
      expect(delta, `${name}: ${pair}`).toBeGreaterThanOrEqual(10);
    }
  });

  it('palette neighbours (one legend after the other) and SLAY beside spherical Yat, the pair the papers compare, are far apart', () => {
    const palette = Object.values(MECHANISM_COLOURS);
    for (const [name, matrix] of Object.entries(VISION)) {
      for (let i = 0; i + 1 < palette.length; i++) {
        const { delta, pair } = closestPair([palette[i], palette[i + 1]], matrix);
        expect(delta, `${name}: neighbours ${pair}`).toBeGreaterThanOrEqual(name === 'normal' ? 25 : 15);
      }
      expect(closestPair([MECHANISM_COLOURS.slay, MECHANISM_COLOURS['yat-spherical']], matrix).delta, name).toBeGreaterThanOrEqual(30);
    }
  });

  it('a mechanism keeps its colour in every plot; series that are not one per mechanism get distinct palette colours', () => {
    expect(seriesColours(['slay', 'softmax'])).toEqual([MECHANISM_COLOURS.slay, MECHANISM_COLOURS.softmax]);
    expect(seriesColours(['cosformer', 'slay', 'performer'])[1]).toBe(MECHANISM_COLOURS.slay);
    const twoOfOne = seriesColours(['softmax (lr 1e-3)', 'softmax (lr 3e-3)', 'slay'], (s) => s.split(' ')[0]);
    expect(new Set(twoOfOne).size).toBe(3);
  });

  it('groups that are not one per mechanism get colours that stay apart for any number of them', () => {
    // Two settings of one mechanism: the first colours of the palette, never two shades of one hue.
    expect(seriesColours(['softmax lr=0.001', 'softmax lr=0.003'], (s) => s.split(' ')[0])).toEqual(distinctColours(2));
    // Up to 16 as far apart as the mechanisms' own colours (CIEDE2000 ≥ 10, from each other and from the white
    // background); more crowd the colour space, but stay apart (24: ≥ 8) and never repeat.
    for (const [n, atLeast] of [
      [9, 10],
      [12, 10],
      [16, 10],
      [24, 8],
    ]) {
      const colours = distinctColours(n);
      expect(colours.slice(0, Object.keys(MECHANISM_COLOURS).length)).toEqual(Object.values(MECHANISM_COLOURS)); // the well-tested ones first
      const { delta, pair } = closestPair([...colours, '#ffffff'], null);
      expect(delta, `${n} colours: ${pair}`).toBeGreaterThanOrEqual(atLeast);
    }
    expect(new Set(distinctColours(100)).size).toBe(100);
  });

  it('renders each mechanism’s line in its colour, and a band only for the series that have one', async () => {
    const points: LinePoint[] = attentionNames().flatMap((series, i) =>
      [1, 2, 3].map((x) => ({ series, x, y: i + x, ...(series === 'slay' ? { lo: i + x - 0.5, hi: i + x + 0.5 } : {}) })),
    );
    const svg = await lineChartSvg(points, { title: 't', xTitle: 'x', yTitle: 'y' });
    const strokes = new Set([...svg.matchAll(/stroke="(#[0-9a-f]{6})" stroke-width="2"/g)].map((m) => m[1]));
    expect(strokes).toEqual(new Set(Object.values(MECHANISM_COLOURS)));
    expect(svg.match(/class="mark-area role-mark/g)).toHaveLength(1);
  });
});
