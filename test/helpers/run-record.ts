// A training run's summary as the trainer hands it to the run logger (src/store/run-record.ts), for tests of the
// logger and its sinks that finish a run without training one.
import type { TrainingSummary } from '../../src/store/run-record.ts';

export const TRAINING_SUMMARY: TrainingSummary = {
  steps: 4,
  tokens: 256,
  elapsed_s: 1.5,
  train_tokens_per_s: 170,
  val_loss: 4.4,
  val_ppl: Math.exp(4.4),
  val_bpb: 1.9,
  val_acc: 0.1,
  parameters: 1000,
  final: 'final',
};
