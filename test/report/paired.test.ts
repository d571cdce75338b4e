// The paired t comparison against closed forms and tables, and the coverage of its interval by simulation.
import { describe, expect, it } from 'vitest';
import { holmAdjusted, pairedT, pValueAgainst } from '../../src/report/paired.ts';

/** Student t CDF in closed form for 1 and 2 degrees of freedom (Cauchy; t/(2√(2 + t²)) + 1/2). */
const tCdf = { 1: (t: number) => 0.5 + Math.atan(t) / Math.PI, 2: (t: number) => 0.5 + t / (2 * Math.sqrt(2 + t * t)) };

/** Seeded standard normals (Box–Muller on a 32-bit LCG): independent of the code under test. */
function normals(seed: number): () => number {
  let state = seed >>> 0;
  const uniform = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return (state + 0.5) / 2 ** 32;
  };
  return () => Math.sqrt(-2 * Math.log(uniform())) * Math.cos(2 * Math.PI * uniform());
}

describe('pairedT', () => {
  it('matches the closed-form t distribution for 2 and 3 pairs (1 and 2 degrees of freedom)', () => {
    for (const [x, base] of [
      [
        [5.31, 5.4],
        [5.3, 5.35],
      ],
      [
        [5.37, 5.41, 5.36],
        [5.35, 5.36, 5.355],
      ],
    ] as const) {
      const r = pairedT(x, base);
      const d = x.map((v, i) => v - base[i]);
      const n = d.length;
      const mean = d.reduce((a, b) => a + b, 0) / n;
      const sd = Math.sqrt(d.reduce((a, v) => a + (v - mean) ** 2, 0) / (n - 1));
      const t = mean / (sd / Math.sqrt(n));
      const df = (n - 1) as 1 | 2;
      expect(r.n).toBe(n);
      expect(r.mean).toBeCloseTo(mean, 12);
      expect(r.sd).toBeCloseTo(sd, 12);
      expect(r.t).toBeCloseTo(t, 10);
      expect(r.p).toBeCloseTo(2 * tCdf[df](-Math.abs(t)), 10);
      // The interval's half-width q·sd/√n with q the 97.5% quantile: the closed-form CDF at q is 0.975.
      const q = (r.ci![1] - r.mean) / (sd / Math.sqrt(n));
      expect(tCdf[df](q)).toBeCloseTo(0.975, 10);
      expect(r.ci![0]).toBeCloseTo(2 * r.mean - r.ci![1], 12);
    }
  });

  it('uses the tabulated t quantiles (not the normal 1.96)', () => {
    // Table values of t_{0.975, df}: 12.706 (1), 4.303 (2), 2.776 (4), 2.228 (10); t_{0.95, 4} = 2.132.
    const halfWidth = (n: number, level = 0.95) => {
      const d = Array.from({ length: n }, (_, i) => (i % 2 === 0 ? 1 : -1) * (1 + i / 10));
      const r = pairedT(d, new Array(n).fill(0), level);
      return (r.ci![1] - r.ci![0]) / 2 / (r.sd! / Math.sqrt(n));
    };
    expect(halfWidth(2)).toBeCloseTo(12.7062, 3);
    expect(halfWidth(3)).toBeCloseTo(4.3027, 3);
    expect(halfWidth(5)).toBeCloseTo(2.7764, 3);
    expect(halfWidth(11)).toBeCloseTo(2.2281, 3);
    expect(halfWidth(5, 0.9)).toBeCloseTo(2.1318, 3);
  });

  it('covers the true mean difference 95% of the time with 3 seeds (Monte Carlo, 4,000 sweeps)', () => {
    const draw = normals(7);
    const trials = 4000;
    let covered = 0;
    for (let i = 0; i < trials; i++) {
      // Three seeds; a shared per-seed effect (data order) that pairing removes, and a true difference of 0.02.
      const seedEffect = [draw(), draw(), draw()].map((v) => 0.5 * v);
      const base = seedEffect.map((e) => 5.3 + e + 0.01 * draw());
      const x = seedEffect.map((e) => 5.32 + e + 0.01 * draw());
      const { ci } = pairedT(x, base);
      if (ci![0] <= 0.02 && 0.02 <= ci![1]) covered++;
    }
    // Binomial sd of the coverage √(0.95·0.05/4000) = 0.0034; 4 sd either side. A normal quantile would give ≈ 0.80.
    expect(Math.abs(covered / trials - 0.95)).toBeLessThan(4 * 0.0034);
  });

  it('handles one pair, identical differences and bad input', () => {
    expect(pairedT([1], [0.5])).toMatchObject({ n: 1, mean: 0.5, sd: null, ci: null, p: null });
    expect(pairedT([1, 2], [0.5, 1.5])).toMatchObject({ n: 2, mean: 0.5, sd: 0, ci: [0.5, 0.5], p: null });
    expect(() => pairedT([1, 2], [1])).toThrow(/2 values against 1/);
    expect(() => pairedT([1, 2], [1, 2], 1.5)).toThrow(/level 1.5/);
  });
});

describe('holmAdjusted', () => {
  it("is Holm's step-down: sorted ascending, the k-th of m times (m − k + 1), never below an earlier one, at most 1", () => {
    // Sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → kept at 0.06 (monotone).
    const adjusted = holmAdjusted([0.01, 0.04, 0.03, 0.005]);
    [0.03, 0.06, 0.06, 0.02].forEach((p, i) => expect(adjusted[i]).toBeCloseTo(p, 12));
    expect(holmAdjusted([0.6, 0.5])).toEqual([1, 1]);
    // A test not run is not in the family: m counts the others.
    expect(holmAdjusted([null, 0.02, 0.04, null])).toEqual([null, 0.04, 0.04, null]);
    expect(holmAdjusted([])).toEqual([]);
  });
});

describe('pValueAgainst', () => {
  it('tests the mean difference against a threshold: the paired t-test of the shifted differences', () => {
    const x = [2.31, 2.42, 2.37, 2.29];
    const base = [2.3, 2.4, 2.3, 2.3];
    const shifted = pairedT(
      x.map((v) => v - 0.01),
      base,
    );
    expect(pValueAgainst(pairedT(x, base), 0.01)).toBeCloseTo(shifted.p!, 12);
    expect(pValueAgainst(pairedT(x, base), 0)).toBeCloseTo(pairedT(x, base).p!, 12);
  });
});
