// Trains the task model on the synthetic tasks and summarises accuracy per task and per category.
// Protocol of the SLAY paper's benchmark (docs/notes/slay-task-benchmark.md): AdamW
// lr 1e-3 (PyTorch's default weight decay 0.01, β = (0.9, 0.999), ε = 1e-8), one freshly generated
// batch per optimizer step, final accuracy on 4 × batch fresh samples, seeds 42/43/44.
import { currentCluster, type Cluster } from '../backend/collective.ts';
import { currentDevice } from '../backend/current.ts';
import type { Batch } from '../data/batch.ts';
import { IGNORE_LABEL, type ModelBatch } from '../model/lm.ts';
import { graphStatus } from '../train/compiled-step.ts';
import { shardMicroBatches } from '../train/data-parallel.ts';
import { planAdamW, resolveExecutionPlan } from '../train/execution-plan.ts';
import type { AdamW } from '../train/optimizer.ts';
import type { StepExecutor } from '../train/step-executor.ts';
import { startStepExecutor } from '../train/step-executors/index.ts';
import { groupBy, meanSd, formatMeanSd } from '../report/stats.ts';
import type { MeanSd } from '../report/stats.ts';
import { PAPER_TASK_MODEL, TaskModel } from './task-model.ts';
import type { TaskModelConfig } from './task-model.ts';
import { TASK_CATEGORIES, TaskGenerator, taskSpec } from './synthetic-tasks.ts';
import type { TaskBatch, TaskCategory, TaskSpec } from './synthetic-tasks.ts';

/**
 * Per-mechanism options of the paper's task benchmark (mapped to our option names): SLAY anchor
 * variant with R = 2 quadrature nodes, M = 16 PRF features, P = 32 anchors, ε = 1e-6; spherical
 * Yat ε = 1e-6; Performer 64 features. Mechanisms not listed run with their registry defaults.
 */
export const TASK_ATTENTION_OPTIONS: Readonly<Record<string, Record<string, unknown>>> = {
  slay: { quadratureNodes: 2, prfFeatures: 16, anchors: 32, epsilon: 1e-6 },
  'yat-spherical': { epsilon: 1e-6 },
  performer: { features: 64 },
};

export interface TaskTrainOptions {
  task: string;
  attention: string;
  seed: number;
  /** Optimizer steps, each on a fresh batch (paper: 200). */
  steps: number;
  batchSize: number;
  /** Fresh samples of the final evaluation (paper: 4 × batch = 128). */
  evalSamples: number;
  lr: number;
  weightDecay: number;
  /** Overrides TASK_ATTENTION_OPTIONS for this mechanism. */
  attentionOptions?: Record<string, unknown>;
  /** Steps (forward + backward, and AdamW's update) as TensorFlow functions where the backend can, as train.graph (default true). */
  graph?: boolean;
  /** Those functions compiled by XLA (train.xla resolved; default false). */
  xla?: boolean;
  /** The batches, where they come from another generator than the named task's (e.g. MQAR, src/paper/mqar-task.ts). */
  generator?: TaskBatchSource;
  /** The task model's width, heads and layers where they differ from the paper's (PAPER_TASK_MODEL). */
  model?: Partial<Pick<TaskModelConfig, 'dModel' | 'numHeads' | 'numLayers'>>;
}

/** What trainOnTask reads a task from: its spec, and its training and evaluation streams. */
export interface TaskBatchSource {
  spec: TaskSpec;
  trainBatch(batchSize: number): TaskBatch;
  evalBatch(batchSize: number): TaskBatch;
}

export const PAPER_PROTOCOL = { steps: 200, batchSize: 32, evalSamples: 128, lr: 1e-3, weightDecay: 0.01, seeds: [42, 43, 44] } as const;

export interface TaskRunResult {
  task: string;
  category: TaskCategory;
  attention: string;
  seed: number;
  /** Final accuracy over the scored positions of the evaluation samples; null if the run failed. */
  accuracy: number | null;
  /** Final masked cross-entropy on the evaluation samples. */
  loss: number | null;
  /** Training loss every 10 steps (step 1, 11, 21, …). */
  lossCurve: number[];
  params: number;
  trainSeconds: number;
  /** How the last training step ran: 'graph', 'eager' (op by op) or why it stayed eager. */
  execution: string;
  error?: string;
}

/**
 * A task batch as the training step and validation read it: the targets as labels where the mask scores,
 * IGNORE_LABEL elsewhere (TaskModel.lossInputs). The task model is causal, hence kind 'gpt'; its bytes
 * are not text, so bits per byte stay undefined.
 */
function stepBatch(batch: TaskBatch): Batch {
  const labels = new Int32Array(batch.targets.length).fill(IGNORE_LABEL);
  let tokens = 0;
  for (let i = 0; i < labels.length; i++) {
    if (batch.mask[i] === 0) continue;
    labels[i] = batch.targets[i];
    tokens++;
  }
  return { kind: 'gpt', batchSize: batch.batchSize, seqLen: batch.seqLen, inputIds: batch.inputs, labels, tokens, bytes: 0 };
}

/**
 * Trains one fresh model on one task with one seed and evaluates it, through the training step of
 * src/train/step.ts (the step executor `auto` picks: TensorFlow functions where the backend has them and
 * `graph` is on, else op by op; `collective` in a rank of a run across processes, which trains on its shard
 * of every batch): the loss is the mean cross-entropy over the step's scored positions, and a NaN/Inf step
 * is dropped as in training. Never leaves tensors behind.
 */
export async function trainOnTask(opts: TaskTrainOptions): Promise<TaskRunResult> {
  const generator = opts.generator ?? new TaskGenerator(opts.task, opts.seed);
  const spec = generator.spec;
  const model = new TaskModel({
    vocabSize: spec.vocabSize,
    seqLen: spec.seqLen,
    ...PAPER_TASK_MODEL,
    ...opts.model,
    attention: opts.attention,
    attentionOptions: opts.attentionOptions ?? TASK_ATTENTION_OPTIONS[opts.attention] ?? {},
    seed: opts.seed,
  });
  const params = model.parameters();
  // The backend and cluster are read once here (a paper unit's command started and joined them); the plan carries them on.
  const cluster = currentCluster();
  let optimizer: AdamW | null = null;
  let executor: StepExecutor | null = null;
  try {
    const plan = resolveExecutionPlan({ graph: opts.graph ?? true, xla: opts.xla ? 'on' : 'off' }, currentDevice(), cluster, model);
    const graph = plan.gradients === 'recorded';
    // Embeddings decay too, as PyTorch's AdamW over model.parameters() in the reference; biases and
    // the mechanisms' own parameters do not (see src/train/optimizer.ts; over 200 steps at lr·λ = 1e-5
    // the difference is a factor (1 − 1e-5)^200 ≈ 0.998).
    optimizer = planAdamW(plan, params, { beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: opts.weightDecay, decayEmbeddings: true });
    executor = await startStepExecutor({ plan, model, optimizer, trainable: params });
    const lossCurve: number[] = [];
    const start = performance.now();
    let batch: Batch | null = null;
    for (let step = 0; step < opts.steps; step++) {
      batch = stepBatch(generator.trainBatch(opts.batchSize));
      const result = await executor.step([batch], { lr: opts.lr, clip: 0, dropoutSeed: null });
      if (step % 10 === 0) lossCurve.push(result.loss);
      model.onTrainStep(step + 1);
    }
    const trainSeconds = (performance.now() - start) / 1000;
    // Evaluated in chunks of the training batch size: memory stays what training needed.
    const evalBatches: Batch[] = [];
    for (let done = 0; done < opts.evalSamples; done += opts.batchSize) {
      evalBatches.push(stepBatch(generator.evalBatch(Math.min(opts.batchSize, opts.evalSamples - done))));
    }
    const scored = await executor.evaluate(evalBatches);
    return {
      task: spec.name,
      category: spec.category,
      attention: opts.attention,
      seed: opts.seed,
      accuracy: scored.tokens > 0 ? scored.accuracy : null,
      loss: scored.tokens > 0 ? scored.loss : null,
      lossCurve,
      params: model.parameterCount(),
      trainSeconds,
      execution: graph && batch ? graphStatus(model, ownShard(batch, cluster), [...params.values()]) : 'eager',
    };
  } finally {
    await executor?.close();
    optimizer?.dispose();
    model.dispose();
  }
}

/** The rows of `batch` whose step this process recorded: its shard in a rank of a run across processes (a Slurm unit of several tasks). */
function ownShard(batch: Batch, cluster: Cluster | null): ModelBatch {
  return cluster ? shardMicroBatches([batch], cluster.worldSize, null)[cluster.rank].batches[0] : batch;
}

export interface BenchmarkOptions extends Omit<TaskTrainOptions, 'task' | 'attention' | 'seed' | 'attentionOptions'> {
  tasks: string[];
  attentions: string[];
  seeds: number[];
  /** Options per mechanism; defaults to TASK_ATTENTION_OPTIONS. */
  attentionOptions?: Record<string, Record<string, unknown>>;
  /** Called after every run (progress output). */
  onResult?: (result: TaskRunResult, index: number, total: number) => void;
}

/**
 * Every task × mechanism × seed. A run that throws (e.g. a mechanism that cannot handle a shape)
 * is recorded with its error and the benchmark goes on.
 */
export async function runTaskBenchmark(opts: BenchmarkOptions): Promise<TaskRunResult[]> {
  for (const task of opts.tasks) taskSpec(task); // unknown names fail before any training
  const results: TaskRunResult[] = [];
  const total = opts.tasks.length * opts.attentions.length * opts.seeds.length;
  for (const task of opts.tasks) {
    for (const attention of opts.attentions) {
      for (const seed of opts.seeds) {
        let result: TaskRunResult;
        try {
          result = await trainOnTask({ ...opts, task, attention, seed, attentionOptions: opts.attentionOptions?.[attention] });
        } catch (err) {
          const spec = taskSpec(task);
          result = {
            task,
            category: spec.category,
            attention,
            seed,
            accuracy: null,
            loss: null,
            lossCurve: [],
            params: 0,
            trainSeconds: 0,
            execution: 'failed',
            error: (err as Error).message,
          };
        }
        results.push(result);
        opts.onResult?.(result, results.length, total);
        // Yield to the event loop between runs (progress output, signals).
        await new Promise((resolve) => setImmediate(resolve));
      }
    }
  }
  return results;
}

export interface TaskSummaryRow {
  task: string;
  category: TaskCategory;
  attention: string;
  accuracy: MeanSd;
  loss: MeanSd;
  trainSeconds: MeanSd;
  errors: string[];
}

export interface CategorySummaryRow {
  category: TaskCategory | 'all';
  attention: string;
  tasks: string[];
  /** Per seed: mean accuracy over the category's tasks; then mean ± sd over seeds. */
  accuracy: MeanSd;
}

export interface TaskSummary {
  attentions: string[];
  tasks: TaskSummaryRow[];
  categories: CategorySummaryRow[];
}

export function summarizeTaskResults(results: TaskRunResult[]): TaskSummary {
  const attentions = [...new Set(results.map((r) => r.attention))];
  const tasks: TaskSummaryRow[] = [];
  for (const runs of groupBy(results, (r) => `${r.task}\u0000${r.attention}`).values()) {
    const { task, category, attention } = runs[0];
    tasks.push({
      task,
      category,
      attention,
      accuracy: meanSd(runs.map((r) => r.accuracy)),
      loss: meanSd(runs.map((r) => r.loss)),
      trainSeconds: meanSd(runs.filter((r) => !r.error).map((r) => r.trainSeconds)),
      errors: runs.filter((r) => r.error).map((r) => `seed ${r.seed}: ${r.error}`),
    });
  }
  const categories: CategorySummaryRow[] = [];
  const ok = results.filter((r) => r.accuracy !== null);
  for (const category of [...TASK_CATEGORIES, 'all'] as const) {
    for (const attention of attentions) {
      const runs = ok.filter((r) => r.attention === attention && (category === 'all' || r.category === category));
      if (runs.length === 0) continue;
      const perSeed = [...groupBy(runs, (r) => String(r.seed)).values()].map((seedRuns) => meanSd(seedRuns.map((r) => r.accuracy)).mean);
      categories.push({ category, attention, tasks: [...new Set(runs.map((r) => r.task))], accuracy: meanSd(perSeed) });
    }
  }
  return { attentions, tasks, categories };
}

/** Markdown: accuracy per task (rows) and mechanism (columns), then per category, then run time. */
export function taskResultsMarkdown(summary: TaskSummary, digits = 2): string {
  const { attentions } = summary;
  const header = (first: string[]) => [
    `| ${[...first, ...attentions].join(' | ')} |`,
    `|${[...first.map(() => '---'), ...attentions.map(() => '---:')].join('|')}|`,
  ];
  const cell = (row: { accuracy: MeanSd; errors?: string[] } | undefined) => {
    if (!row) return '';
    if (row.accuracy.n === 0) return 'error';
    const text = formatMeanSd(row.accuracy, digits, { showN: false });
    return row.errors?.length ? `${text} (${row.errors.length} failed)` : text;
  };
  const lines = ['### Accuracy per task (mean ± sd over seeds)', '', ...header(['task', 'category'])];
  for (const task of [...new Set(summary.tasks.map((r) => r.task))]) {
    const rows = summary.tasks.filter((r) => r.task === task);
    lines.push(`| ${task} | ${rows[0].category} | ${attentions.map((a) => cell(rows.find((r) => r.attention === a))).join(' | ')} |`);
  }
  lines.push('', '### Accuracy per category (mean over the category’s tasks, then mean ± sd over seeds)', '', ...header(['category']));
  for (const category of [...new Set(summary.categories.map((r) => r.category))]) {
    const rows = summary.categories.filter((r) => r.category === category);
    lines.push(`| ${category} | ${attentions.map((a) => cell(rows.find((r) => r.attention === a))).join(' | ')} |`);
  }
  lines.push('', '### Training seconds per run (mean)', '', ...header([]));
  lines.push(
    `| ${attentions
      .map((a) => {
        const times = summary.tasks.filter((r) => r.attention === a && r.trainSeconds.n > 0).map((r) => r.trainSeconds.mean);
        return times.length ? (times.reduce((x, y) => x + y, 0) / times.length).toFixed(1) : '—';
      })
      .join(' | ')} |`,
  );
  const errors = summary.tasks.flatMap((r) => r.errors.map((e) => `- ${r.task} / ${r.attention}, ${e}`));
  if (errors.length) lines.push('', '### Failed runs', '', ...errors);
  return lines.join('\n') + '\n';
}
