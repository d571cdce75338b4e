// A run's counters in one place: what a checkpoint saves (TrainingCounters, src/store/checkpoint.ts) and a
// resume restores, and how one optimizer step moves them. The loop (trainer.ts) reads them for its log
// lines, its validation records and its checkpoints.
import type { TrainingCounters } from '../store/checkpoint.ts';
import type { StepResult } from './optimizer.ts';

type Window = TrainingCounters['window'];

const EMPTY_WINDOW: Readonly<Window> = Object.freeze({ loss: 0, steps: 0, tokens: 0, seconds: 0 });

export class RunState {
  /** Optimizer steps done. */
  step: number;
  /** Input tokens trained on. */
  tokens: number;
  /** Micro-batches taken from the training stream. */
  batchesSeen: number;
  /** Seconds spent in train steps (continues across resumes). */
  trainSeconds: number;
  /** Sums of the applied steps since the last train record. */
  window: Window;
  /** Updates dropped by train.nanPolicy = skip, in all and in a row up to this step. */
  skippedSteps: number;
  consecutiveSkips: number;
  /** performance.now() of the run's start, moved back by the time earlier sessions ran. */
  private readonly started: number;

  /** Counters from zero, or as the checkpoint resumed from saved them. */
  constructor(restored?: TrainingCounters) {
    this.started = performance.now() - (restored?.elapsedS ?? 0) * 1000;
    this.step = restored?.step ?? 0;
    this.tokens = restored?.tokens ?? 0;
    this.batchesSeen = restored?.batchesSeen ?? 0;
    this.trainSeconds = restored?.trainSeconds ?? 0;
    this.window = { ...(restored?.window ?? EMPTY_WINDOW) };
    this.skippedSteps = restored?.skippedSteps ?? 0;
    this.consecutiveSkips = restored?.consecutiveSkips ?? 0;
  }

  /** Seconds since the run started (earlier sessions included). */
  elapsed(): number {
    return (performance.now() - this.started) / 1000;
  }

  /** What a checkpoint saves. */
  counters(): TrainingCounters {
    const { step, tokens, batchesSeen, trainSeconds, skippedSteps, consecutiveSkips } = this;
    return { step, tokens, batchesSeen, trainSeconds, elapsedS: this.elapsed(), window: { ...this.window }, skippedSteps, consecutiveSkips };
  }

  /** A dropped update (train.nanPolicy: skip): one more in all and in a row. */
  skipped(): void {
    this.skippedSteps++;
    this.consecutiveSkips++;
  }

  /** A step that took `tokens` input tokens in `seconds`; its loss joins the logging window only when it was applied. */
  stepped(result: StepResult, tokens: number, seconds: number): void {
    this.step++;
    this.tokens += tokens;
    this.trainSeconds += seconds;
    if (!result.applied) return;
    this.consecutiveSkips = 0;
    const w = this.window;
    this.window = { loss: w.loss + result.loss, steps: w.steps + 1, tokens: w.tokens + tokens, seconds: w.seconds + seconds };
  }

  /** The logging window's sums, emptied for the next. */
  takeWindow(): Window {
    const window = this.window;
    this.window = { ...EMPTY_WINDOW };
    return window;
  }

  /** Fraction of the (estimated) epoch's batches taken so far. */
  epochFraction(epochBatches: number): number {
    return this.batchesSeen / Math.max(1, epochBatches);
  }
}
