// Mean ± sample sd over seeds and the grouping helper.
import { describe, expect, it } from 'vitest';
import { formatMeanSd, formatNumber, groupBy, meanSd } from '../../src/report/stats.ts';

describe('meanSd', () => {
  it('uses the sample standard deviation (n − 1)', () => {
    const s = meanSd([1, 2, 3, 4]);
    expect(s.n).toBe(4);
    expect(s.mean).toBe(2.5);
    // Σ(x − 2.5)² = 5, / (4 − 1)
    expect(s.sd).toBeCloseTo(Math.sqrt(5 / 3), 14);
    expect(meanSd([0.7, 0.7, 0.7]).sd).toBeCloseTo(0, 14);
  });

  it('handles n = 1 (no sd), n = 0, and leaves out missing or non-finite values', () => {
    expect(meanSd([0.25])).toEqual({ mean: 0.25, sd: null, n: 1 });
    const empty = meanSd([]);
    expect(empty.n).toBe(0);
    expect(empty.sd).toBeNull();
    expect(Number.isNaN(empty.mean)).toBe(true);
    const mixed = meanSd([2, null, Number.NaN, undefined, 4, Number.POSITIVE_INFINITY]);
    expect(mixed.n).toBe(2);
    expect(mixed.mean).toBe(3);
    expect(mixed.sd).toBeCloseTo(Math.SQRT2, 14);
  });

  it('formats as mean ± sd (n)', () => {
    expect(formatMeanSd(meanSd([1, 2, 3, 4]), 2)).toBe('2.50 ± 1.29 (n=4)');
    expect(formatMeanSd(meanSd([0.5]), 3)).toBe('0.500 (n=1)');
    expect(formatMeanSd(meanSd([0.5, 0.7]), 1, { showN: false })).toBe('0.6 ± 0.1');
    expect(formatMeanSd(meanSd([]))).toBe('—');
    expect(formatMeanSd(meanSd([12_000, 14_000]), 0, { showN: false })).toBe('13,000 ± 1,414');
  });

  it('separates thousands and keeps the requested decimals', () => {
    expect(formatNumber(1234567.891, 2)).toBe('1,234,567.89');
    expect(formatNumber(999.5, 0)).toBe('1,000');
    expect(formatNumber(0.5, 3)).toBe('0.500');
    expect(formatNumber(-2500, 1)).toBe('-2,500.0');
    expect(formatNumber(null)).toBe('—');
    expect(formatNumber(Number.NaN, 2)).toBe('—');
  });
});

describe('groupBy', () => {
  it('groups by key in order of first appearance', () => {
    const runs = [
      { attention: 'slay', seed: 1 },
      { attention: 'softmax', seed: 1 },
      { attention: 'slay', seed: 2 },
    ];
    const groups = groupBy(runs, (r) => r.attention);
    expect([...groups.keys()]).toEqual(['slay', 'softmax']);
    expect(groups.get('slay')!.map((r) => r.seed)).toEqual([1, 2]);
  });
});
