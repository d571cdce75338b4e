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
