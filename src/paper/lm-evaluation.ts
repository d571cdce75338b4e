// The evaluations of a language-model experiment's trained units, each a unit of its own that reads a done training
// unit's folder and trains nothing: `<unit>.eval` (loss by position from the final validation record, and a GPT's
// passkey retrieval at the lengths its context holds) and `<unit>.lm-eval` (the lm-evaluation-harness on the local
// tasks, a GPT's, only where the harness is set up). Being units, they resume as training units do: a finished
// training unit is evaluated without training again, and an evaluation done is not run again (docs/evaluation.md,
// "In the paper experiments").
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { LAUNCHER_FD, LAUNCHER_FD_ENV } from '../core/launcher-channel.ts';
import { LM_EVAL_DIR, readLmEvalScores } from '../report/lm-eval-results.ts';
import { FINAL_DIR, RUN_MARKER } from '../store/layout.ts';
import { RunFolder } from '../store/run-folder.ts';
import { TSX_IMPORT } from '../tsx-import.ts';
import { positionBucketEdges } from '../train/evaluate.ts';
import { loadModel, loadModelTokenizer } from '../store/load-model.ts';
import { passkeyCheckpoint, passkeyMinTokens, type PasskeyRow } from '../train/passkey.ts';
import type { UnitContext, UnitOutcome } from './protocol.ts';

const LM_EVAL_CLI = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'cli', 'lm-eval.ts');

/** The local tasks of tasks/lm-eval/ (docs/evaluation.md) and the numbers of each shown in the results. */
export const LM_EVAL_TASKS = ['moby_dick_ppl', 'moby_dick_lambada', 'moby_dick_cloze'];
export const LM_EVAL_COLUMNS = [
  { task: 'moby_dick_ppl', metric: 'bits_per_byte' },
  { task: 'moby_dick_ppl', metric: 'word_perplexity' },
  { task: 'moby_dick_lambada', metric: 'acc' },
  { task: 'moby_dick_lambada', metric: 'perplexity' },
  { task: 'moby_dick_cloze', metric: 'acc' },
  { task: 'moby_dick_cloze', metric: 'acc_norm' },
];

/** How each evaluation runs: passkey keys per depth, and the harness's documents per task (null: all). */
export interface EvaluationSettings {
  passkeyTrialsPerDepth: number;
  lmEvalLimit: number | null;
}

/** The keys of an evaluation unit's `extra`: a position bucket's loss, a length's passkey retrieval, a harness score. */
export const positionKey = (from: number, to: number) => `position:${from}-${to}`;
export const passkeyKey = (length: number) => `passkey:${length}`;
export const passkeyTokenKey = (length: number) => `passkey_token_acc:${length}`;
export const lmEvalKey = (task: string, metric: string) => `lm_eval:${task}:${metric}`;
/** The fewest tokens a passkey prompt with its answer takes with the unit's tokenizer. */
export const PASSKEY_MIN_TOKENS = 'passkey_min_tokens';

/** The position buckets of sequences of `seqLen` tokens, as the validation records hold them. */
export function positionBuckets(seqLen: number): { from: number; to: number }[] {
  const edges = positionBucketEdges(seqLen);
  return edges.slice(1).map((to, i) => ({ from: edges[i], to }));
}

/**
 * The run folder the training unit trained (the one finished run folder inside the unit's folder), and its final/.
 * Errors name the unit's folder when there is none or several.
 */
export function trainedRun(unitDir: string): { runDir: string; finalDir: string } {
  const runs = readdirSync(unitDir, { withFileTypes: true })
    .filter((e) => e.isDirectory() && existsSync(path.join(unitDir, e.name, RUN_MARKER)))
    .map((e) => path.join(unitDir, e.name))
    .filter((dir) => RunFolder.at(dir).finished() && existsSync(path.join(dir, FINAL_DIR)));
  if (runs.length !== 1) throw new Error(`${unitDir}: expected one finished training run folder with a ${FINAL_DIR}/ inside, found ${runs.length}`);
  return { runDir: runs[0], finalDir: path.join(runs[0], FINAL_DIR) };
}

/** The done training unit an evaluation unit reads; an error naming it when it is not done. */
function trainingUnit(context: UnitContext, name: string): { runDir: string; finalDir: string } {
  const done = context.doneUnit(name);
  if (!done) throw new Error(`unit ${name} is not done: its evaluation reads its trained model (run the experiment again once it is)`);
  return trainedRun(done.dir);
}

/** The loss by position of the run's last validation record (the final one), as extras; null when it has none. */
function lossByPosition(runDir: string): Record<string, number | null> | null {
  const last = RunFolder.at(runDir)
    .metrics()
    .filter((r) => r.split === 'val')
    .at(-1);
  if (!last?.by_position) return null;
  return Object.fromEntries(last.by_position.map((b) => [positionKey(b.from, b.to), b.loss]));
}

/**
 * A GPT's passkey retrieval at each of `lengths` that its prompt can hold (the others, shorter than the prompt's
 * fixed text, are reported so, not run), as extras, and its rows.
 */
async function passkeyRetrieval(finalDir: string, lengths: number[], trialsPerDepth: number) {
  const loaded = await loadModel(finalDir);
  let minTokens: number;
  try {
    const tokenizer = await loadModelTokenizer(loaded);
    minTokens = await passkeyMinTokens((texts) => tokenizer.encodeBatch(texts));
  } finally {
    loaded.model.dispose();
  }
  const extra: Record<string, number | null> = { [PASSKEY_MIN_TOKENS]: minTokens };
  const rows: PasskeyRow[] = [];
  const runnable = lengths.filter((length) => length >= minTokens);
  if (runnable.length > 0) rows.push(...(await passkeyCheckpoint({ checkpoint: finalDir, lengths: runnable, trialsPerDepth })).rows);
  for (const row of rows) {
    extra[passkeyKey(row.length)] = row.retrieval;
    extra[passkeyTokenKey(row.length)] = row.tokenAccuracy;
  }
  return { extra, rows, tooShort: lengths.filter((length) => length < minTokens) };
}

/**
 * `<unit>.eval`: the training unit's loss by position (every kind) and, for a GPT, its passkey retrieval at
 * `passkeyLengths`. The backend is started (the unit's process).
 */
export async function evaluateTrained(
  trained: string,
  kind: string,
  passkeyLengths: number[],
  settings: EvaluationSettings,
  context: UnitContext,
): Promise<UnitOutcome> {
  const { runDir, finalDir } = trainingUnit(context, trained);
  const byPosition = lossByPosition(runDir);
  const passkey = kind === 'gpt' ? await passkeyRetrieval(finalDir, passkeyLengths, settings.passkeyTrialsPerDepth) : null;
  const retrieved = passkey?.rows.filter((r) => r.retrieval !== null).map((r) => `${r.length}: ${r.retrieval!.toFixed(2)}`) ?? [];
  return {
    values: [],
    extra: { ...byPosition, ...passkey?.extra },
    details: {
      trainedRun: runDir,
      byPosition: byPosition ? 'the final validation record of metrics.jsonl' : `${runDir}: its last validation record has no by_position`,
      ...(passkey ? { passkey: passkey.rows, passkeyTooShort: passkey.tooShort } : {}),
    },
    headline:
      `${trained}: loss by position ${byPosition ? `in ${Object.keys(byPosition).length} buckets` : 'not recorded'}` +
      (passkey
        ? `; passkey retrieval ${retrieved.join(', ') || 'at no length'}${passkey.tooShort.length ? ` (${passkey.tooShort.join(', ')}: shorter than its prompt)` : ''}`
        : ''),
  };
}

/**
 * `npm run lm-eval` as a child process (its output is the unit's), the model exported into `out`. The child and the
 * harness's Python run in a process group of their own, which a stop request to this process (SIGTERM from its task,
 * SIGINT) ends as a whole: otherwise the harness would run on after the unit was stopped.
 */
function runLmEvalCommand(finalDir: string, out: string, limit: number | null): Promise<void> {
  const args = [LM_EVAL_CLI, finalDir, '--tasks', LM_EVAL_TASKS.join(','), '--out', out, '--batch-size', '16', ...(limit ? ['--limit', String(limit)] : [])];
  return new Promise((resolve, reject) => {
    // The last descriptor is a channel the child watches (src/core/launcher-channel.ts): this process killed with
    // SIGKILL, which no handler below sees, the channel closes and the child ends the harness.
    const child = spawn(process.execPath, ['--import', TSX_IMPORT, ...args], {
      stdio: ['ignore', 'inherit', 'inherit', 'pipe'],
      env: { ...process.env, [LAUNCHER_FD_ENV]: String(LAUNCHER_FD) },
      detached: true,
    });
    const channel = child.stdio[LAUNCHER_FD];
    channel?.on('error', () => {}); // the child is gone: its exit says why
    child.once('exit', () => channel?.destroy());
    let stoppedBy: NodeJS.Signals | null = null;
    const stop = (signal: NodeJS.Signals) => {
      stoppedBy = signal;
      if (child.pid !== undefined) process.kill(-child.pid, signal);
    };
    const signals = ['SIGINT', 'SIGTERM'] as const;
    for (const signal of signals) process.on(signal, stop);
    const settle = (error: Error | null) => {
      for (const signal of signals) process.off(signal, stop);
      if (error) reject(error);
      else resolve();
    };
    child.on('error', settle);
    child.on('close', (code, signal) => {
      if (code === 0) settle(null);
      else settle(new Error(`npm run lm-eval -- ${args.slice(1).join(' ')}: ${stoppedBy ? `stopped (${stoppedBy})` : `exited with ${signal ?? code}`}`));
    });
  });
}

/** `<unit>.lm-eval`: the harness on the training unit's final model; its results go into this unit's lm-eval/. */
export async function harnessTrained(trained: string, settings: EvaluationSettings, context: UnitContext): Promise<UnitOutcome> {
  const { finalDir } = trainingUnit(context, trained);
  await runLmEvalCommand(finalDir, path.join(context.dir, LM_EVAL_DIR), settings.lmEvalLimit);
  const warnings: string[] = [];
  const scores = (readLmEvalScores(context.dir, warnings) ?? []).filter((s) => s.filter === 'none');
  if (warnings.length) throw new Error(warnings.join('; '));
  const extra = Object.fromEntries(scores.map((s) => [lmEvalKey(s.task, s.metric), s.value]));
  const shown = LM_EVAL_COLUMNS.map(({ task, metric }) => `${task} ${metric} ${extra[lmEvalKey(task, metric)]?.toPrecision(3) ?? '—'}`);
  return {
    values: [],
    extra,
    details: { limit: settings.lmEvalLimit, samples: Object.fromEntries(scores.map((s) => [s.task, s.samples])) },
    headline: `${trained}: ${shown.join(', ')}`,
  };
}
