import { describe, expect, it } from 'vitest';
import { learningRate } from '../../src/train/schedule.ts';

describe('learning-rate schedule', () => {
  const base = { lr: 1e-3, minLr: 1e-4, warmupSteps: 10, totalSteps: 110 };

  it('warms up linearly to lr, reaching it at the last warm-up step', () => {
    const o = { ...base, schedule: 'cosine' as const };
    expect(learningRate(0, o)).toBeCloseTo(1e-4, 15);
    expect(learningRate(4, o)).toBeCloseTo(5e-4, 15);
    expect(learningRate(9, o)).toBeCloseTo(1e-3, 15);
  });

  it('cosine: lr at the start of decay, the midpoint at half way, → minLr at the end', () => {
    const o = { ...base, schedule: 'cosine' as const };
    expect(learningRate(10, o)).toBeCloseTo(1e-3, 15);
    expect(learningRate(60, o)).toBeCloseTo((1e-3 + 1e-4) / 2, 15);
    // step 85: p = 0.75 → minLr + (lr − minLr)(1 + cos(3π/4))/2
    expect(learningRate(85, o)).toBeCloseTo(1e-4 + 9e-4 * (1 - Math.SQRT1_2) / 2, 15);
    expect(learningRate(109, o)).toBeGreaterThan(1e-4);
    expect(learningRate(110, o)).toBe(1e-4);
    expect(learningRate(500, o)).toBe(1e-4);
  });

  it('linear: straight line from lr to minLr; constant: lr after warm-up', () => {
    const lin = { ...base, schedule: 'linear' as const };
    expect(learningRate(35, lin)).toBeCloseTo(1e-3 - 9e-4 * 0.25, 15);
    expect(learningRate(110, lin)).toBe(1e-4);
    const constant = { ...base, schedule: 'constant' as const };
    expect(learningRate(5, constant)).toBeCloseTo(6e-4, 15);
    expect(learningRate(50, constant)).toBe(1e-3);
    expect(learningRate(1000, constant)).toBe(1e-3);
  });

  it('without warm-up starts at lr; rejects a bad step', () => {
    expect(learningRate(0, { ...base, warmupSteps: 0, schedule: 'cosine' })).toBe(1e-3);
    expect(() => learningRate(-1, { ...base, schedule: 'cosine' })).toThrow(/step must be an integer ≥ 0/);
  });
});
