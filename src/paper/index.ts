// The paper experiments by name. Each module is loaded when asked for: slay-ablation brings TensorFlow.js with it,
// which the processes that only schedule or report units do not need.
import path from 'node:path';
import type { Experiment } from './protocol.ts';

/** The parent folder of the units' run folders (here, not in run.ts, so that `paper --help` can name it without loading the runner). */
export const DEFAULT_RUNS_ROOT = path.join('runs', 'paper');

const LOADERS: Record<string, () => Promise<Experiment>> = {
  'slay-tasks': async () => (await import('./slay-tasks.ts')).slayTasks,
  'slay-ablation': async () => (await import('./slay-ablation.ts')).slayAblation,
  'lm-compare': async () => (await import('./lm-compare.ts')).lmCompare,
  'darkformer-finetune': async () => (await import('./darkformer-finetune.ts')).darkformerFinetune,
  mqar: async () => (await import('./mqar.ts')).mqar,
};

export const EXPERIMENT_NAMES = Object.keys(LOADERS);

export async function loadExperiment(name: string): Promise<Experiment> {
  const load = LOADERS[name];
  if (!load) throw new Error(`unknown experiment '${name}'; the experiments are ${EXPERIMENT_NAMES.join(', ')}`);
  return load();
}
