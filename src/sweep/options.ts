// The settings a sweep file and `npm run sweep` options share: the Slurm fields and the report's metrics. Plain data,
// no recipe or tfjs import, so that the sweep command builds its --help from them before anything heavy loads.

export interface SlurmOptions {
  partition?: string;
  time?: string;
  gpus?: number | string;
  mem?: string;
  cpusPerTask?: number;
  /** At most this many array tasks at once (`--array=…%N`). */
  maxParallel?: number;
  /** Seconds before the time limit at which the task checkpoints (and requeues itself). */
  signalSeconds?: number;
  /** After that checkpoint, requeue the array task so that it goes on (default true). */
  requeueOnTimeLimit?: boolean;
  /** Extra sbatch options, one per line, e.g. `--account=lab` or `--constraint=a100`. */
  sbatch?: string[];
  /** Shell lines run before the task, e.g. `module load nodejs/20`. */
  setup?: string[];
}

/** Characters an sbatch option value may hold unquoted (and a shell word too). */
export const SAFE_WORD = /^[A-Za-z0-9._:,+@%=\/-]+$/;
/** C0 controls and DEL: a newline or carriage return would split a line of the script. */
export const CONTROL = /[\u0000-\u001f\u007f]/;
const positiveInt = (v: unknown) => (Number.isInteger(v) && (v as number) >= 1 ? null : 'an integer ≥ 1');
const word = (v: unknown) => (typeof v === 'string' && SAFE_WORD.test(v) ? null : 'a word of letters, digits and . _ : , + @ % = / -');
const oneLine = (l: unknown) => typeof l === 'string' && l.trim() !== '' && !CONTROL.test(l);
const lines = (v: unknown) => (Array.isArray(v) && v.every(oneLine) ? null : 'a list of one-line strings without control characters');
/** Extra sbatch options: `--name` or `--name=value` each (the value is quoted for sbatch, see the top of this file). */
const options = (v: unknown) =>
  Array.isArray(v) && v.every((o) => oneLine(o) && /^--[A-Za-z][A-Za-z0-9-]*(=|$)/.test(o as string))
    ? null
    : 'a list of sbatch options --name or --name=value (the value as it is, unquoted), without control characters';

/** Each option's check (null = valid, else what it must be), its sbatch flag and its help. */
export const SLURM_FIELDS: Record<keyof SlurmOptions, { check(v: unknown): string | null; flag: string; help: string }> = {
  partition: { check: word, flag: '--partition', help: 'partition (queue)' },
  time: { check: word, flag: '--time', help: 'time limit per task, e.g. 24:00:00 or 2-00:00:00' },
  gpus: { check: (v) => (positiveInt(v) === null || word(v) === null ? null : 'a GPU count or type:count'), flag: '--gpus', help: 'GPUs per task, e.g. 1 or a100:1' },
  mem: { check: word, flag: '--mem', help: 'memory per task, e.g. 64G' },
  cpusPerTask: { check: positiveInt, flag: '--cpus-per-task', help: 'CPU cores per task (default: the run\'s data-parallel replicas)' },
  maxParallel: { check: positiveInt, flag: '--max-parallel', help: 'at most this many tasks at once' },
  signalSeconds: { check: positiveInt, flag: '--signal-seconds', help: 'checkpoint this many seconds before the time limit (default 120)' },
  requeueOnTimeLimit: { check: (v) => (typeof v === 'boolean' ? null : 'true or false'), flag: '--requeue-on-time-limit', help: 'requeue a task stopped by its time limit (default true)' },
  sbatch: { check: options, flag: '--sbatch', help: 'an extra sbatch option (repeatable), e.g. --sbatch=--account=lab' },
  setup: { check: lines, flag: '--setup', help: 'a shell line run before the task (repeatable), e.g. "module load nodejs"' },
};

/** What the report compares (fields of compare.ts's RunSummary) and which way is better. */
export const REPORT_METRICS = {
  finalValLoss: { title: 'final validation loss (nats/token)', higherIsBetter: false },
  bestValLoss: { title: 'best validation loss (nats/token)', higherIsBetter: false },
  finalValBpb: { title: 'final validation bits per byte', higherIsBetter: false },
  finalValPpl: { title: 'final validation perplexity', higherIsBetter: false },
  finalValAcc: { title: 'final validation top-1 accuracy', higherIsBetter: true },
} as const;
export type ReportMetric = keyof typeof REPORT_METRICS;
