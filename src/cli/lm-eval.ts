// npm run lm-eval -- <run|checkpoint|hf-folder> --tasks T1,T2 [--limit N] [--batch-size N] [--device D] [--num-fewshot N]
//   [--model-args K=V,…] [--include-path DIR]… [--out DIR] [--backend NAME]
// Evaluates a model with EleutherAI's lm-evaluation-harness as any GPT-2 is evaluated (`lm_eval --model hf
// --model_args pretrained=<folder>,trust_remote_code=True`): a run or checkpoint is first exported (npm run export)
// into <out>/model/ (<out>: <run>/lm-eval/ by default); the harness runs offline on the local tasks of tasks/lm-eval/
// (and --include-path), in the Python that `npm run setup:lm-eval` makes; its results JSON is written per task as
// <out>/<task>.json, which compare's report reads (docs/evaluation.md).
import { type ChildProcess, spawn } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { readJsonFile } from '../core/json.ts';
import { ignoreOutputErrors, watchLauncher } from '../core/launcher-channel.ts';
import { replaceOwnFile } from '../core/own-file.ts';
import { harnessJsonForTask, LM_EVAL_DIR, LM_EVAL_SETUP, lmEvalPython, scoresOf } from '../report/lm-eval-results.ts';
import { FINAL_DIR, RUN_MARKER } from '../store/layout.ts';
import { backendOption, startBackend, VERBOSE_OPTION } from './backend-option.ts';
import { isMainModule, runCommand, UsageError } from './command.ts';

const PROJECT_ROOT = path.resolve(import.meta.dirname, '..', '..');
/** The local tasks the harness is always given (their data paths are relative to PROJECT_ROOT, where it runs). */
export const LOCAL_TASKS_DIR = path.join(PROJECT_ROOT, 'tasks', 'lm-eval');
/** The sub-folder of the results folder a run or checkpoint is exported into. */
const EXPORT_SUBDIR = 'model';

const COMMAND = {
  name: 'lm-eval',
  usage: '<run|checkpoint|hf-folder> --tasks T1,T2 [options]',
  description: `Evaluates a model with EleutherAI's lm-evaluation-harness (lm_eval --model hf --model_args
pretrained=<folder>,trust_remote_code=True). A run folder, a run's final/ or a checkpoint folder is exported first into
<out>/model/ (npm run export); a Hugging Face folder (one written by npm run export) is evaluated as it is. The harness
runs offline, with the local tasks of tasks/lm-eval/ (moby_dick_ppl, moby_dick_lambada, moby_dick_cloze) and any
--include-path, in the Python of ${LM_EVAL_SETUP} (or $SLAYFORMER_LM_EVAL_PYTHON). Its results JSON is written per
task as <out>/<task>.json, which npm run compare reads (docs/evaluation.md).`,
  options: {
    tasks: { type: 'string', value: 'T1,T2', help: 'the harness tasks to run, comma-separated; required' },
    out: {
      type: 'string',
      value: 'DIR',
      help: 'where the results go (default <run>/lm-eval for a run or its final/; required for a checkpoint or a Hugging Face folder)',
    },
    limit: { type: 'string', value: 'N', number: { integer: true, min: 1 }, help: 'evaluate only the first N documents of each task' },
    'batch-size': { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '1', help: "the harness's batch size" },
    device: { type: 'string', value: 'DEVICE', default: 'cpu', help: 'the torch device the harness runs on (cpu, cuda, cuda:0)' },
    'num-fewshot': { type: 'string', value: 'N', number: { integer: true, min: 0 }, help: "few-shot examples per document (default: the task's)" },
    'model-args': { type: 'string', value: 'K=V,…', help: 'more --model_args for the harness (max_length=…, prefix_token_id=…)' },
    'include-path': { type: 'string', value: 'DIR', multiple: true, help: 'another folder of task YAMLs (may be given again)' },
    backend: backendOption(),
    verbose: VERBOSE_OPTION,
  },
  positionals: { min: 1, max: 1, name: '<run|checkpoint|hf-folder>' },
} as const;

/**
 * The run folder whose results these are: `dir` itself when it is one (its marker, or a final/), the run of a final/;
 * null for a checkpoint or anything else, whose results would be taken for the run's.
 */
function runFolderOf(dir: string): string | null {
  if (existsSync(path.join(dir, RUN_MARKER)) || existsSync(path.join(dir, FINAL_DIR))) return dir;
  const parent = path.dirname(dir);
  return path.basename(dir) === FINAL_DIR && existsSync(path.join(parent, RUN_MARKER)) ? parent : null;
}

export interface LmEvalOptions {
  /** A run folder, a run's final/, a checkpoint folder or a Hugging Face folder. */
  model: string;
  tasks: string[];
  /** The results folder; default <run>/lm-eval for a run folder or its final/ (required otherwise). */
  out?: string;
  limit?: number;
  batchSize?: number;
  device?: string;
  numFewshot?: number;
  /** Appended to the harness's --model_args. */
  modelArgs?: string;
  includePaths?: string[];
  python: string;
  /** Exports a run or checkpoint (npm run export) into a folder; called only when `model` is not a Hugging Face folder. */
  exportModel: (checkpoint: string, out: string) => Promise<void>;
  /** Where the harness's output goes (default: inherited, so a user sees its progress and table). */
  stdio?: 'inherit' | 'pipe';
}

export interface LmEvalResult {
  /** The Hugging Face folder the harness evaluated. */
  folder: string;
  /** <out>/<task>.json, by task. */
  files: Map<string, string>;
  /** The harness's output when stdio is 'pipe'. */
  output: string;
}

/** The harness's process while it runs: what this command ends when the process that started it is gone (below). */
let harness: ChildProcess | null = null;

function runHarness(python: string, args: string[], env: NodeJS.ProcessEnv, stdio: 'inherit' | 'pipe'): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(python, ['-m', 'lm_eval', 'run', ...args], { cwd: PROJECT_ROOT, env, stdio: ['ignore', stdio, stdio] });
    harness = child;
    child.on('exit', () => (harness = null));
    if (stdio === 'inherit') console.log(`lm-eval: the harness runs as pid ${child.pid}`);
    let output = '';
    child.stdout?.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr?.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', (err) => reject(new Error(`${python}: ${err.message}`)));
    child.on('close', (code, signal) =>
      code === 0
        ? resolve(output)
        : reject(new Error(`lm_eval exited with ${signal ?? code}${stdio === 'pipe' ? `:\n${output.slice(-4000)}` : ' (its output is above)'}`)),
    );
  });
}

/** Exports the model when needed, runs the harness on it and writes each task's results as <out>/<task>.json. */
export async function runLmEval(opts: LmEvalOptions): Promise<LmEvalResult> {
  if (opts.tasks.length === 0) throw new UsageError('--tasks names no task');
  for (const task of opts.tasks) {
    if (!/^[\w.-]+$/.test(task)) throw new UsageError(`--tasks: ${JSON.stringify(task)} is not a task name (letters, digits, _ . -)`);
  }
  for (const dir of opts.includePaths ?? []) if (!existsSync(dir)) throw new UsageError(`--include-path ${dir}: no such folder`);
  const model = path.resolve(opts.model);
  if (!existsSync(model)) throw new Error(`${model}: no such folder`);
  // Imported here: src/hf/folder.ts loads TensorFlow.js, which --help must not wait for.
  const { isHfFolder } = await import('../hf/folder.ts');
  const hf = isHfFolder(model);
  const run = hf ? null : runFolderOf(model);
  if (opts.out === undefined && run === null)
    throw new UsageError(`${model} is ${hf ? 'a Hugging Face folder' : 'not a run folder nor its final/'}: give --out DIR for the harness's results`);
  const out = path.resolve(opts.out ?? path.join(run!, LM_EVAL_DIR));
  mkdirSync(out, { recursive: true });
  const folder = hf ? model : path.join(out, EXPORT_SUBDIR);
  if (!hf) await opts.exportModel(model, folder);

  // The harness's own output folder, its dataset cache and transformers' copy of the model's code: aside, removed after.
  const scratch = mkdtempSync(path.join(tmpdir(), 'slayformer-lm-eval-'));
  try {
    // The harness's command line takes one --include_path, and does not follow symbolic links: the task folders are
    // copied under one (a task's `!function` files travel with its YAML; data paths are relative to PROJECT_ROOT).
    const taskFolder = path.join(scratch, 'tasks');
    [LOCAL_TASKS_DIR, ...(opts.includePaths ?? [])].forEach((dir, i) => cpSync(dir, path.join(taskFolder, String(i)), { recursive: true, dereference: true }));
    const modelArgs = [`pretrained=${folder}`, 'trust_remote_code=True', ...(opts.modelArgs ? [opts.modelArgs] : [])].join(',');
    const args = [
      ...['--model', 'hf', '--model_args', modelArgs, '--tasks', opts.tasks.join(',')],
      ...['--include_path', taskFolder],
      ...['--device', opts.device ?? 'cpu', '--batch_size', String(opts.batchSize ?? 1), '--output_path', path.join(scratch, 'out')],
      ...(opts.limit !== undefined ? ['--limit', String(opts.limit)] : []),
      ...(opts.numFewshot !== undefined ? ['--num_fewshot', String(opts.numFewshot)] : []),
    ];
    const env = {
      ...process.env,
      HF_HUB_OFFLINE: '1',
      HF_DATASETS_OFFLINE: '1',
      HF_HOME: path.join(scratch, 'hf-home'),
      HF_MODULES_CACHE: path.join(scratch, 'hf-modules'),
    };
    const output = await runHarness(opts.python, args, env, opts.stdio ?? 'inherit');
    const written = readdirSync(path.join(scratch, 'out'), { recursive: true, encoding: 'utf8' }).filter((f) => /(^|\/)results_[^/]*\.json$/.test(f));
    if (written.length !== 1) throw new Error(`lm_eval wrote ${written.length} results files under its --output_path, expected one`);
    const resultsFile = path.join(scratch, 'out', written[0]);
    const results = readJsonFile(resultsFile);
    // Checked as compare will read it back (an error naming the file when it is not the harness's results).
    const tasks = new Set(scoresOf(results, resultsFile).map((s) => s.task));
    const files = new Map<string, string>();
    for (const task of tasks) {
      const file = path.join(out, `${task}.json`);
      replaceOwnFile(file, `${JSON.stringify(harnessJsonForTask(results as Record<string, unknown>, task), null, 2)}\n`);
      files.set(task, file);
    }
    return { folder, files, output };
  } finally {
    rmSync(scratch, { recursive: true, force: true });
  }
}

if (isMainModule(import.meta.url)) {
  // Started with a channel from its parent (a paper unit's worker, src/paper/lm-evaluation.ts): however the parent
  // ends, kill -9 included, the harness ends too, and the command with it (its scratch folder removed as it unwinds).
  watchLauncher(() => {
    ignoreOutputErrors();
    if (harness) harness.kill('SIGTERM');
    else process.exit(143);
  });
  await runCommand(COMMAND, async ({ values, positionals }) => {
    if (values.tasks === undefined) throw new UsageError('--tasks T1,T2 is required');
    const python = lmEvalPython();
    if (!python) throw new Error(`lm-evaluation-harness is not set up: run ${LM_EVAL_SETUP} (or set SLAYFORMER_LM_EVAL_PYTHON to a Python with lm_eval)`);
    const result = await runLmEval({
      model: positionals[0],
      tasks: values.tasks.split(',').filter(Boolean),
      out: values.out,
      limit: values.limit,
      batchSize: values['batch-size'],
      device: values.device,
      numFewshot: values['num-fewshot'],
      modelArgs: values['model-args'],
      includePaths: values['include-path'],
      python,
      exportModel: async (checkpoint, out) => {
        await startBackend(COMMAND.name, { flag: values.backend }, { verbose: values.verbose });
        const { exportHf } = await import('../store/hf-export.ts');
        await exportHf(checkpoint, { out, overwrite: true });
      },
    });
    for (const [task, file] of result.files) console.log(`wrote ${file} (${task})`);
  });
}
