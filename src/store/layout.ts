// The names of everything the project keeps on disk for a run, in one place (docs/layout.md, "Recipe and store"):
//
//   <train.runDir>/<name>-<UTC timestamp>[-n]/   a run folder (run-folder.ts)
//     .slayformer-run     RUN_MARKER: makes the folder a run (nothing else does)
//     .slayformer-lock    RUN_LOCK: the process training it, while it trains (run-folder.ts)
//     config.json         RUN_CONFIG_FILE: the resolved recipe
//     env.json            ENV_FILE: commit, versions, machine, command line, data paths
//     metrics.jsonl       METRICS_FILE
//     log.txt             LOG_FILE
//     events.out.tfevents.<seconds>.slayformer   TENSORBOARD_FILE_PREFIX/SUFFIX: the records as TensorBoard events
//     summary.json        SUMMARY_FILE: written last, whole; it marks the run finished
//     final/              FINAL_DIR: a model folder
//     checkpoints/step-NNNNNN/   CHECKPOINTS_DIR: model folders with the training state (checkpoint.ts)
//
//   A model folder (final/, a checkpoint): MODEL_FILE (parameters and buffers, the model config in its metadata) and
//   RECIPE_FILE (the resolved recipe); final/ also holds TOKENIZER_FILE, a checkpoint OPTIMIZER_FILE, CURSOR_FILE and
//   STATE_FILE. Each is written whole with a COMPLETE marker holding the files' sha256 (core/atomic-folder.ts).

export const RUN_MARKER = '.slayformer-run';
export const RUN_LOCK = '.slayformer-lock';
export const RUN_CONFIG_FILE = 'config.json';
export const ENV_FILE = 'env.json';
export const METRICS_FILE = 'metrics.jsonl';
export const LOG_FILE = 'log.txt';
/** The TensorBoard event file: `${TENSORBOARD_FILE_PREFIX}<run start, Unix seconds>${TENSORBOARD_FILE_SUFFIX}` (telemetry/tensorboard.ts). */
export const TENSORBOARD_FILE_PREFIX = 'events.out.tfevents.';
export const TENSORBOARD_FILE_SUFFIX = '.slayformer';
export const SUMMARY_FILE = 'summary.json';
export const FINAL_DIR = 'final';
export const CHECKPOINTS_DIR = 'checkpoints';

export const MODEL_FILE = 'model.safetensors';
export const RECIPE_FILE = 'recipe.json';
/** final/'s copy of the run's tokenizer, so that the folder alone is a complete model for eval, generate and export. */
export const TOKENIZER_FILE = 'tokenizer.json';
export const OPTIMIZER_FILE = 'optimizer.safetensors';
export const CURSOR_FILE = 'cursor.json';
export const STATE_FILE = 'state.json';

/** `<run>/checkpoints/step-000100`: a checkpoint's folder name (six digits at least), and the pattern readers accept. */
export function checkpointName(step: number): string {
  return `step-${String(step).padStart(6, '0')}`;
}
export const CHECKPOINT_NAME = /^step-(\d{6,})$/;
