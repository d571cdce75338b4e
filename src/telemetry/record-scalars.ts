// A metric record as named scalars, the one naming W&B's history rows (wandb.ts) and TensorBoard's tags
// (tensorboard.ts) share: `train/loss`, `val/bpb`, `val/estimator_health/kernel_error/layer0`, `tokens`, …
import type { MetricRecord, PositionLossRecord } from '../store/run-record.ts';

/**
 * Each record field: where the record sits (sent as it is) or what it measured (sent with the split as prefix).
 * A Record over every field, so that a new MetricRecord field does not compile until it is placed here.
 */
export const METRIC_FIELD_ROLES: Record<Exclude<keyof MetricRecord, 'split'>, 'position' | 'measured'> = {
  step: 'position',
  tokens: 'position',
  elapsed_s: 'position',
  epoch_fraction: 'position',
  readback_values: 'measured',
  readback_bytes: 'measured',
  loss: 'measured',
  ppl: 'measured',
  lr: 'measured',
  grad_norm: 'measured',
  tokens_per_s: 'measured',
  model_flops_per_s: 'measured',
  mfu: 'measured',
  bpb: 'measured',
  acc: 'measured',
  estimator_health: 'measured',
  by_position: 'measured',
};

/**
 * One metric record as named scalars (W&B's history fields, TensorBoard's tags): measurements get the split as prefix (`train/loss`, `val/loss`,
 * `val/bpb`, `train/lr`, …) so that training and validation curves are separate charts; `step`, `tokens`,
 * `elapsed_s` and `epoch_fraction` are sent as they are. Null values (e.g. grad_norm of validation records)
 * are left out.
 */
export function scalarRow(record: MetricRecord): Record<string, number> {
  const row: Record<string, number> = {};
  for (const [key, value] of Object.entries(record)) {
    if (key === 'split' || value === null || value === undefined) continue;
    if (key === 'estimator_health') {
      // One scalar per measure and layer: val/estimator_health/kernel_error/layer0, …
      for (const [measure, layers] of Object.entries(value as Record<string, (number | null)[]>)) {
        layers.forEach((v, layer) => {
          if (v !== null) row[`${record.split}/${key}/${measure}/layer${layer}`] = v;
        });
      }
      continue;
    }
    if (key === 'by_position') {
      // One scalar per bucket of positions [from, to): val/loss_by_position/0-1, val/loss_by_position/1-2, …
      for (const b of value as PositionLossRecord[]) if (b.loss !== null) row[`${record.split}/loss_by_position/${b.from}-${b.to}`] = b.loss;
      continue;
    }
    row[METRIC_FIELD_ROLES[key as keyof typeof METRIC_FIELD_ROLES] === 'position' ? key : `${record.split}/${key}`] = value as number;
  }
  return row;
}
