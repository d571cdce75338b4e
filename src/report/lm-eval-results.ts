// lm-evaluation-harness results in a run folder: `npm run lm-eval` (src/cli/lm-eval.ts) writes the harness's results
// JSON narrowed to one task as `<run>/lm-eval/<task>.json`; compare reads every such file back as scores
// (docs/evaluation.md).
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { isRecord, readJsonFile } from '../core/json.ts';

/** The command that makes the harness's Python (scripts/setup-lm-eval.sh). */
export const LM_EVAL_SETUP = 'npm run setup:lm-eval';

/** The Python with lm_eval: $SLAYFORMER_LM_EVAL_PYTHON, else the repository's .venv-lm-eval's; null when neither exists. */
export function lmEvalPython(): string | null {
  const candidates = [process.env.SLAYFORMER_LM_EVAL_PYTHON, resolve(import.meta.dirname, '..', '..', '.venv-lm-eval', 'bin', 'python')];
  return candidates.find((p): p is string => !!p && existsSync(p)) ?? null;
}

/** The folder of a run that holds the harness's results, one JSON per task. */
export const LM_EVAL_DIR = 'lm-eval';
/** A results file is a few kilobytes (the task's config, the numbers, the environment); one far larger is not one. */
const MAX_RESULTS_BYTES = 16 << 20;
/** Keys of the harness's results JSON that hold one entry per task (the rest describe the whole run). */
const PER_TASK_KEYS = ['results', 'configs', 'versions', 'n-shot', 'higher_is_better', 'n-samples', 'task_hashes', 'group_subtasks'];

/** One number the harness reported: `metric` under `filter` ("none" unless the task filters its outputs). */
export interface LmEvalScore {
  task: string;
  metric: string;
  filter: string;
  value: number;
  /** The harness's bootstrap standard error; null where it gives none ("N/A", e.g. for perplexities of one pass). */
  stderr: number | null;
  /** Documents evaluated (n-samples' effective count: fewer than the task's with --limit). */
  samples: number | null;
}

/** The harness's results JSON with its per-task entries narrowed to `task`; the run-wide fields as they are. */
export function harnessJsonForTask(results: Record<string, unknown>, task: string): Record<string, unknown> {
  const out: Record<string, unknown> = { ...results };
  for (const key of PER_TASK_KEYS) {
    const entry = results[key];
    if (isRecord(entry)) out[key] = task in entry ? { [task]: entry[task] } : {};
  }
  return out;
}

const finiteNumber = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? v : null);

/** The scores of one results JSON (every task it holds); an error naming `file` when it is not the harness's. */
export function scoresOf(json: unknown, file: string): LmEvalScore[] {
  if (!isRecord(json) || !isRecord(json.results)) throw new Error(`${file}: not lm-evaluation-harness results (no "results" object)`);
  const samples = isRecord(json['n-samples']) ? json['n-samples'] : {};
  const scores: LmEvalScore[] = [];
  for (const [task, metrics] of Object.entries(json.results)) {
    if (!isRecord(metrics)) throw new Error(`${file}: results.${task} must be an object`);
    const count = isRecord(samples[task]) ? finiteNumber((samples[task] as Record<string, unknown>).effective) : null;
    for (const [key, value] of Object.entries(metrics)) {
      const [metric, filter, ...rest] = key.split(',');
      const number = finiteNumber(value);
      if (filter === undefined || rest.length > 0 || metric.endsWith('_stderr') || number === null) continue;
      const stderr = finiteNumber(metrics[`${metric}_stderr,${filter}`]);
      scores.push({ task, metric, filter, value: number, stderr, samples: count });
    }
  }
  return scores;
}

/**
 * The scores of every `<runDir>/lm-eval/*.json`, by task and metric; null when the run has none. A file that is not
 * the harness's results is a warning and left out.
 */
export function readLmEvalScores(runDir: string, warnings: string[]): LmEvalScore[] | null {
  const dir = join(runDir, LM_EVAL_DIR);
  if (!existsSync(dir)) return null;
  const scores: LmEvalScore[] = [];
  for (const name of readdirSync(dir)
    .filter((n) => n.endsWith('.json'))
    .sort()) {
    const file = join(dir, name);
    try {
      const stat = statSync(file);
      if (!stat.isFile()) continue;
      if (stat.size > MAX_RESULTS_BYTES) throw new Error(`${file}: ${stat.size} bytes, more than the ${MAX_RESULTS_BYTES} a results file can be`);
      scores.push(...scoresOf(readJsonFile(file), file));
    } catch (err) {
      warnings.push(`${(err as Error).message}; its lm-eval scores are left out`);
    }
  }
  return scores.length > 0 ? scores : null;
}
