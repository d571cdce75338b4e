import { describe, expect, it } from 'vitest';
import { learningRate, resolveWarmup } from '../../src/train/schedule.ts';

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
    expect(learningRate(85, o)).toBeCloseTo(1e-4 + (9e-4 * (1 - Math.SQRT1_2)) / 2, 15);
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

describe('warm-up of a run', () => {
  it('as a fraction of the run follows its length; a warm-up longer than a fifth of the run is warned about', () => {
    expect(resolveWarmup({ warmupSteps: 100, warmupFraction: null }, 1000)).toEqual({ steps: 100, warning: null });
    expect(resolveWarmup({ warmupSteps: 100, warmupFraction: 0.05 }, 1000)).toEqual({ steps: 50, warning: null });
    expect(resolveWarmup({ warmupSteps: 100, warmupFraction: 0.05 }, 30).steps).toBe(2); // round(1.5)
    // The demo's 25 of 250 steps is 10%: no warning. A run shortened to 40 steps keeps its 25 warm-up steps: warned.
    expect(resolveWarmup({ warmupSteps: 25, warmupFraction: null }, 250).warning).toBeNull();
    expect(resolveWarmup({ warmupSteps: 25, warmupFraction: null }, 40).warning).toBe(
      "warm-up of 25 steps (train.warmupSteps 25) is 63% of the run's 40 steps: the learning rate peaks at step 25 and decays over only the last 15; set train.warmupFraction (e.g. 0.05) or lower train.warmupSteps",
    );
    // Shorter than its warm-up: the run never reaches train.lr (its last step, index 9, uses 10/100 of it).
    const short = resolveWarmup({ warmupSteps: 100, warmupFraction: null }, 10);
    expect(short.warning).toMatch(/is 1000% of the run's 10 steps: the run ends before the learning rate reaches train\.lr \(its last step uses 10% of it\)/);
    expect(learningRate(9, { lr: 1, minLr: 0.1, schedule: 'cosine', warmupSteps: short.steps, totalSteps: 10 })).toBeCloseTo(0.1, 15);
  });
});
