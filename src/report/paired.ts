// Paired comparison across seeds: run i of a mechanism against run i of the baseline with the same seed (same data
// order and initial draws), differences d_i = x_i − baseline_i, mean ± the Student t confidence interval
// mean ± t_{1−α/2, n−1} · sd/√n and the two-sided p-value of H0: E[d] = 0. The t quantile and CDF come from
// @stdlib (well kept, tested against reference tables); the arithmetic around them is a few lines.
import tCdf from '@stdlib/stats-base-dists-t-cdf';
import tQuantile from '@stdlib/stats-base-dists-t-quantile';

export interface PairedResult {
  /** Number of pairs. */
  n: number;
  /** Mean of the differences (x − baseline). */
  mean: number;
  /** Sample sd of the differences (n − 1); null when n < 2. */
  sd: number | null;
  /** The (1 − α) confidence interval of the mean difference; null when n < 2. */
  ci: [number, number] | null;
  /** Two-sided p-value of the paired t-test; null when n < 2 or every difference is the same. */
  p: number | null;
  /** t statistic, degrees of freedom n − 1. */
  t: number | null;
  level: number;
}

/**
 * The two-sided p-value of H0: E[d] = `threshold` for the differences `result` summarises (its own p is against 0);
 * null where it has none (n < 2, or every difference the same).
 */
export function pValueAgainst(result: PairedResult, threshold: number): number | null {
  if (result.sd === null || result.sd === 0) return null;
  const t = (result.mean - threshold) / (result.sd / Math.sqrt(result.n));
  return 2 * tCdf(-Math.abs(t), result.n - 1);
}

/**
 * Holm's step-down adjustment (Holm 1979) of a family of p-values, which keeps the chance of any false rejection
 * in the family at most α without assuming the tests independent: sorted ascending, the k-th of m becomes
 * max over j ≤ k of min(1, (m − j + 1)·p_(j)). Nulls (tests not run) are not in the family and stay null.
 */
export function holmAdjusted(pValues: readonly (number | null)[]): (number | null)[] {
  const order = pValues
    .map((p, index) => ({ p, index }))
    .filter((e): e is { p: number; index: number } => e.p !== null)
    .sort((a, b) => a.p - b.p);
  const adjusted: (number | null)[] = pValues.map(() => null);
  let running = 0;
  order.forEach(({ p, index }, k) => {
    running = Math.max(running, Math.min(1, (order.length - k) * p));
    adjusted[index] = running;
  });
  return adjusted;
}

/** The Student t quantile: P(T ≤ q) = p with `dof` degrees of freedom. */
export function tQuantileOf(p: number, dof: number): number {
  return tQuantile(p, dof);
}

export function pairedT(x: readonly number[], baseline: readonly number[], level = 0.95): PairedResult {
  if (x.length !== baseline.length) throw new Error(`pairedT: ${x.length} values against ${baseline.length} baseline values`);
  if (!(level > 0 && level < 1)) throw new Error(`pairedT: confidence level ${level} must be in (0, 1)`);
  const d = x.map((v, i) => v - baseline[i]);
  const n = d.length;
  const mean = n > 0 ? d.reduce((a, b) => a + b, 0) / n : Number.NaN;
  if (n < 2) return { n, mean, sd: null, ci: null, p: null, t: null, level };
  const sd = Math.sqrt(d.reduce((a, v) => a + (v - mean) ** 2, 0) / (n - 1));
  const se = sd / Math.sqrt(n);
  const half = tQuantile(1 - (1 - level) / 2, n - 1) * se;
  if (se === 0) return { n, mean, sd, ci: [mean, mean], p: null, t: null, level };
  const t = mean / se;
  return { n, mean, sd, ci: [mean - half, mean + half], p: 2 * tCdf(-Math.abs(t), n - 1), t, level };
}
