// Learning-rate schedule: linear warm-up, then cosine or linear decay to minLr (or constant).

export type ScheduleKind = 'cosine' | 'linear' | 'constant';

export interface ScheduleOptions {
  lr: number;
  minLr: number;
  schedule: ScheduleKind;
  warmupSteps: number;
  totalSteps: number;
}

/**
 * The learning rate of optimizer step `step` (0-based: the first update is step 0).
 *   warm-up   step < W:   lr · (step + 1) / W          (never 0, reaches lr at step W − 1)
 *   decay     W ≤ step:   p = (step − W) / (T − W) ∈ [0, 1)
 *             cosine      minLr + (lr − minLr) · (1 + cos πp) / 2
 *             linear      lr − (lr − minLr) · p
 *             constant    lr
 *   after the last step (step ≥ T): minLr (constant: lr).
 */
export function learningRate(step: number, o: ScheduleOptions): number {
  if (!Number.isInteger(step) || step < 0) throw new Error(`learning rate: step must be an integer ≥ 0 (got ${step})`);
  if (step < o.warmupSteps) return (o.lr * (step + 1)) / o.warmupSteps;
  if (o.schedule === 'constant') return o.lr;
  const decaySteps = o.totalSteps - o.warmupSteps;
  if (decaySteps <= 0 || step >= o.totalSteps) return o.minLr;
  const progress = (step - o.warmupSteps) / decaySteps;
  if (o.schedule === 'cosine') return o.minLr + ((o.lr - o.minLr) * (1 + Math.cos(Math.PI * progress))) / 2;
  if (o.schedule === 'linear') return o.lr - (o.lr - o.minLr) * progress;
  throw new Error(`learning rate: unknown schedule '${String(o.schedule)}'; allowed: cosine, linear, constant`);
}

/** Warm-ups longer than this fraction of a run are warned about: the learning rate would peak late in it. */
export const WARMUP_WARNING_FRACTION = 0.2;

/**
 * The warm-up steps of a run of `totalSteps` (train.warmupFraction × totalSteps rounded, else train.warmupSteps), and a
 * warning when they are more than WARMUP_WARNING_FRACTION of the run.
 */
export function resolveWarmup(train: { warmupSteps: number; warmupFraction: number | null }, totalSteps: number): { steps: number; warning: string | null } {
  const steps = train.warmupFraction === null ? train.warmupSteps : Math.round(train.warmupFraction * totalSteps);
  if (steps <= WARMUP_WARNING_FRACTION * totalSteps) return { steps, warning: null };
  const share = `${Math.round((100 * steps) / totalSteps)}% of the run's ${totalSteps} steps`;
  const what =
    steps >= totalSteps
      ? `the run ends before the learning rate reaches train.lr (its last step uses ${((100 * totalSteps) / steps).toFixed(0)}% of it)`
      : `the learning rate peaks at step ${steps} and decays over only the last ${totalSteps - steps}`;
  const source = train.warmupFraction === null ? `train.warmupSteps ${steps}` : `train.warmupFraction ${train.warmupFraction}`;
  return { steps, warning: `warm-up of ${steps} steps (${source}) is ${share}: ${what}; set train.warmupFraction (e.g. 0.05) or lower train.warmupSteps` };
}
