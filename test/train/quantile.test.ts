// The benchmarks' medians and quartiles (src/train/throughput.ts): an even count's median is the mean of the middle two,
// not the upper one (bench:train's median of 6 rounds once printed the 4th ratio of 6).
import { describe, expect, it } from 'vitest';
import { median, medianAndQuartiles, quantile } from '../../src/train/throughput.ts';

describe('quantile', () => {
  it('median of odd and even counts, in any order', () => {
    expect(median([3, 1, 2])).toBe(2);
    expect(median([0.83, 1.32, 0.87, 1.26, 0.89, 1.26])).toBeCloseTo(1.075, 12);
    expect(median([5])).toBe(5);
  });

  it('quartiles between ranks, linearly (numpy: quantile([1, 2, 3, 4], [.25, .75]) = 1.75, 3.25)', () => {
    expect(quantile([4, 3, 2, 1], 0.25)).toBeCloseTo(1.75, 12);
    expect(quantile([1, 2, 3, 4], 0.75)).toBeCloseTo(3.25, 12);
    expect(quantile([1, 2, 3, 4], 0)).toBe(1);
    expect(quantile([1, 2, 3, 4], 1)).toBe(4);
    expect(medianAndQuartiles([1, 2, 3, 4])).toBe('2.500 [1.750, 3.250]');
  });
});
