// The run's counters (src/train/run-state.ts): what a step moves, what a checkpoint saves, and a resume
// continuing from exactly those values.
import { describe, expect, it } from 'vitest';
import { RunState } from '../../src/train/run-state.ts';

const step = (loss: number, applied = true) => ({ loss, gradNorm: 1, tokens: 10, applied });

describe('RunState', () => {
  it('an applied step joins the logging window and ends a run of skips; a dropped one only counts', () => {
    const state = new RunState();
    state.batchesSeen = 2;
    state.stepped(step(3), 64, 0.5);
    state.skipped();
    state.stepped(step(NaN, false), 64, 0.25);
    expect(state).toMatchObject({ step: 2, tokens: 128, trainSeconds: 0.75, skippedSteps: 1, consecutiveSkips: 1 });
    expect(state.window).toEqual({ loss: 3, steps: 1, tokens: 64, seconds: 0.5 });
    state.stepped(step(2), 64, 0.5);
    expect(state.consecutiveSkips).toBe(0);
    expect(state.takeWindow()).toEqual({ loss: 5, steps: 2, tokens: 128, seconds: 1 });
    expect(state.window).toEqual({ loss: 0, steps: 0, tokens: 0, seconds: 0 });
    expect(state.epochFraction(8)).toBe(0.25);
    expect(state.epochFraction(0)).toBe(2); // an empty estimate divides by 1, never by 0
  });

  it('a resume continues from the saved counters, the partial window and the elapsed time included', () => {
    const first = new RunState();
    first.batchesSeen = 3;
    first.stepped(step(4), 32, 1);
    first.skipped();
    const saved = first.counters();
    saved.elapsedS = 100;
    const resumed = new RunState(saved);
    expect(resumed.counters()).toMatchObject({
      step: 1,
      tokens: 32,
      batchesSeen: 3,
      trainSeconds: 1,
      window: { loss: 4, steps: 1, tokens: 32, seconds: 1 },
      skippedSteps: 1,
      consecutiveSkips: 1,
    });
    expect(resumed.elapsed()).toBeGreaterThanOrEqual(100);
    // The saved window is a copy: moving the resumed state leaves the checkpoint's record as it was.
    resumed.stepped(step(1), 32, 1);
    expect(saved.window.steps).toBe(1);
  });
});
