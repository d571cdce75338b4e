// npm run tasks -- [--quick] [--tasks a,b] [--mechanisms a,b] [--seeds 42,43] [--steps N]
//                  [--batch N] [--eval-samples N] [--lr X] [--backend wasm] [--out DIR]
// Trains the paper's small attention-only model on the synthetic tasks for every mechanism and
// seed; prints accuracy mean ± sd per task and per category, and writes results.json + results.md.
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { initBackend } from '../backend.ts';
import { attentionNames } from '../model/attention/index.ts';
import { PAPER_PROTOCOL, TASK_ATTENTION_OPTIONS, runTaskBenchmark, summarizeTaskResults, taskResultsMarkdown } from '../experiments/task-runner.ts';
import { TASK_CATEGORIES, TASK_NAMES, tasksInCategory } from '../experiments/tasks.ts';
import type { TaskCategory } from '../experiments/tasks.ts';

/** --quick: the reference's quick protocol (50 steps, batch 16, one seed) on five tasks of length ≤ 32 from four categories. */
const QUICK_TASKS = ['copy', 'sort', 'pattern', 'bigram', 'majority'];
const QUICK_PROTOCOL = { steps: 50, batchSize: 16, seeds: [42] };

const USAGE = `usage: npm run tasks -- [options]
  --quick                 50 steps, batch 16, seed 42, tasks ${QUICK_TASKS.join(',')}
  --tasks a,b             tasks (default all 22): ${TASK_NAMES.join(', ')}
  --category c            the tasks of one category: ${TASK_CATEGORIES.join(', ')}
  --mechanisms a,b        attention mechanisms (default all registered)
  --seeds 42,43,44        seeds (default 42,43,44)
  --steps N               optimizer steps per run (default 200)
  --batch N               batch size (default 32)
  --eval-samples N        final evaluation samples (default 4 × batch)
  --lr X                  AdamW learning rate (default 1e-3)
  --backend B             auto | tensorflow | wasm | cpu (default wasm)
  --out DIR               report folder (default reports/tasks-<timestamp>)`;

function list(value: string | undefined, option: string, allowed: readonly string[]): string[] | undefined {
  if (value === undefined) return undefined;
  const items = value.split(',').map((s) => s.trim()).filter(Boolean);
  const unknown = items.filter((s) => !allowed.includes(s));
  if (unknown.length || items.length === 0) {
    throw new Error(`--${option}: unknown ${unknown.length ? `'${unknown.join("', '")}'` : 'empty list'}; allowed: ${allowed.join(', ')}`);
  }
  return items;
}

function positiveInteger(value: string | undefined, option: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`--${option} must be an integer ≥ 1 (got '${value}')`);
  return n;
}

function timestamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-').replace('T', '_').slice(0, 19);
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      quick: { type: 'boolean', default: false },
      tasks: { type: 'string' },
      category: { type: 'string' },
      mechanisms: { type: 'string' },
      seeds: { type: 'string' },
      steps: { type: 'string' },
      batch: { type: 'string' },
      'eval-samples': { type: 'string' },
      lr: { type: 'string' },
      backend: { type: 'string', default: 'wasm' },
      out: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  const backend = await initBackend(values.backend);
  const protocol = values.quick ? QUICK_PROTOCOL : PAPER_PROTOCOL;

  let tasks = list(values.tasks, 'tasks', TASK_NAMES);
  if (values.category !== undefined) {
    const [category] = list(values.category, 'category', TASK_CATEGORIES)!;
    if (tasks) throw new Error('--tasks and --category cannot be combined');
    tasks = tasksInCategory(category as TaskCategory);
  }
  tasks ??= values.quick ? QUICK_TASKS : [...TASK_NAMES];
  const attentions = list(values.mechanisms, 'mechanisms', attentionNames()) ?? attentionNames();
  const seeds = values.seeds === undefined
    ? [...protocol.seeds]
    : values.seeds.split(',').map((s) => {
        const n = Number(s);
        if (!Number.isInteger(n)) throw new Error(`--seeds must be integers separated by commas (got '${values.seeds}')`);
        return n;
      });
  const steps = positiveInteger(values.steps, 'steps') ?? protocol.steps;
  const batchSize = positiveInteger(values.batch, 'batch') ?? protocol.batchSize;
  const evalSamples = positiveInteger(values['eval-samples'], 'eval-samples') ?? 4 * batchSize;
  const lr = values.lr === undefined ? PAPER_PROTOCOL.lr : Number(values.lr);
  if (!(lr > 0)) throw new Error(`--lr must be a number > 0 (got '${values.lr}')`);
  const outDir = values.out ?? join('reports', `tasks-${timestamp()}`);

  const settings = { backend, tasks, attentions, seeds, steps, batchSize, evalSamples, lr, weightDecay: PAPER_PROTOCOL.weightDecay };
  console.log(`[tasks] ${tasks.length} tasks × ${attentions.length} mechanisms × ${seeds.length} seeds; ${steps} steps, batch ${batchSize}, eval ${evalSamples}, lr ${lr}, backend ${backend}`);
  const started = performance.now();
  const results = await runTaskBenchmark({
    ...settings,
    onResult(r, index, total) {
      const outcome = r.error ? `ERROR ${r.error}` : `acc ${r.accuracy?.toFixed(3)} loss ${r.loss?.toFixed(3)} (${r.trainSeconds.toFixed(1)} s)`;
      console.log(`[tasks] ${index}/${total} ${r.task} ${r.attention} seed ${r.seed}: ${outcome}`);
    },
  });
  const wallSeconds = (performance.now() - started) / 1000;
  const summary = summarizeTaskResults(results);
  const markdown = taskResultsMarkdown(summary);
  console.log(`\n${markdown}\ntotal wall time ${wallSeconds.toFixed(1)} s`);

  await mkdir(outDir, { recursive: true });
  const attentionOptions = Object.fromEntries(attentions.map((a) => [a, TASK_ATTENTION_OPTIONS[a] ?? {}]));
  await writeFile(
    join(outDir, 'results.json'),
    JSON.stringify({ settings: { ...settings, attentionOptions, quick: values.quick }, wallSeconds, summary, runs: results }, null, 2) + '\n',
  );
  const header = `# Synthetic tasks\n\n${tasks.length} tasks × ${attentions.length} mechanisms × seeds ${seeds.join(', ')}; ${steps} steps, batch ${batchSize}, ` +
    `${evalSamples} evaluation samples, AdamW lr ${lr}, backend ${backend}; wall time ${wallSeconds.toFixed(1)} s.\n\n`;
  await writeFile(join(outDir, 'results.md'), header + markdown);
  console.log(`[tasks] wrote ${join(outDir, 'results.json')} and ${join(outDir, 'results.md')}`);
}

main().catch((err: Error) => {
  console.error(`tasks: ${err.message}`);
  process.exit(1);
});
