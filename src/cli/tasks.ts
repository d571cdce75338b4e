// npm run tasks -- [--quick] [--tasks a,b | --category C] [--mechanisms a,b] [--seeds 42,43] [--steps N]
//                  [--batch N] [--eval-samples N] [--lr X] [--backend wasm] [--graph on|off] [--xla auto|on|off] [--out DIR]
// Trains the paper's small attention-only model on the synthetic tasks for every mechanism and
// seed; prints accuracy mean ± sd per task and per category, and writes results.json + results.md.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
// The task runner, the attention registry, the graph helpers and the backend load TensorFlow.js: imported when the
// command runs, so that --help answers at once.
import { TASK_CATEGORIES, TASK_NAMES, tasksInCategory } from '../paper/synthetic-tasks.ts';
import { backendOption, startBackend, VERBOSE_OPTION } from './backend-option.ts';
import { listOption, numberListOption, runCommand, UsageError } from './command.ts';
import { makeFolders } from '../core/folders.ts';

/** --quick: the reference's quick protocol (50 steps, batch 16, one seed) on five tasks of length ≤ 32 from four categories. */
const QUICK_TASKS = ['copy', 'sort', 'pattern', 'bigram', 'majority'];
const QUICK_PROTOCOL = { steps: 50, batchSize: 16, seeds: [42] };

const COMMAND = {
  name: 'tasks',
  usage: '[options]',
  description: `Trains the SLAY paper's 2-layer attention-only model on the synthetic tasks for every mechanism and seed;
prints accuracy mean ± sd per task and per category and writes results.json and results.md.`,
  options: {
    quick: { type: 'boolean', help: `50 steps, batch 16, seed 42, tasks ${QUICK_TASKS.join(',')}` },
    tasks: { type: 'string', value: 'a,b', help: `tasks (default all 22): ${TASK_NAMES.join(', ')}` },
    category: { type: 'string', value: 'C', choices: TASK_CATEGORIES, help: 'the tasks of one category' },
    mechanisms: { type: 'string', value: 'a,b', help: 'attention mechanisms (default all registered)' },
    seeds: { type: 'string', value: '42,43,44', help: 'seeds (default 42,43,44)' },
    steps: { type: 'string', value: 'N', number: { integer: true, min: 1 }, help: 'optimizer steps per run (default 200)' },
    batch: { type: 'string', value: 'N', number: { integer: true, min: 1 }, help: 'batch size (default 32)' },
    'eval-samples': { type: 'string', value: 'N', number: { integer: true, min: 1 }, help: 'final evaluation samples (default 4 × batch)' },
    lr: { type: 'string', value: 'X', number: { min: 0, exclusiveMin: true }, help: 'AdamW learning rate (default 1e-3)' },
    backend: backendOption('wasm'),
    verbose: VERBOSE_OPTION,
    graph: {
      type: 'string',
      value: 'on|off',
      choices: ['on', 'off'],
      default: 'on',
      help: 'tensorflow: steps as TensorFlow functions (on) or op by op (off), as train.graph',
    },
    xla: {
      type: 'string',
      value: 'auto|on|off',
      choices: ['auto', 'on', 'off'],
      default: 'auto',
      help: 'tensorflow: compile those functions with XLA, as train.xla',
    },
    out: { type: 'string', value: 'DIR', help: 'report folder (default reports/tasks-<timestamp>)' },
  },
} as const;

/** How the runs' steps ran, e.g. "as TensorFlow functions on …/device:CPU:0 (66 runs)" or "op by op (5 runs)". */
function describeExecution(executions: string[], xla: boolean, device: string): string {
  const counts = new Map<string, number>();
  for (const e of executions) {
    const how =
      e === 'graph' ? `as TensorFlow functions${xla ? ' compiled by XLA' : ''} on ${device}` : e === 'eager' ? 'op by op' : e.replace(/^eager: /, 'op by op: ');
    counts.set(how, (counts.get(how) ?? 0) + 1);
  }
  return [...counts].map(([how, n]) => `${how} (${n} run${n === 1 ? '' : 's'})`).join(', ');
}

function timestamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-').replace('T', '_').slice(0, 19);
}

await runCommand(COMMAND, async ({ values }) => {
  const [
    { graphDevice, resolveXla },
    { attentionNames },
    { PAPER_PROTOCOL, TASK_ATTENTION_OPTIONS, runTaskBenchmark, summarizeTaskResults, taskResultsMarkdown },
  ] = await Promise.all([import('../backend/tf-graph.ts'), import('../model/attention/index.ts'), import('../paper/task-runner.ts')]);
  const protocol = values.quick ? QUICK_PROTOCOL : PAPER_PROTOCOL;
  let tasks = listOption(values.tasks, 'tasks', TASK_NAMES);
  if (values.category !== undefined) {
    if (tasks) throw new UsageError('--tasks and --category cannot be combined');
    tasks = tasksInCategory(values.category);
  }
  tasks ??= values.quick ? QUICK_TASKS : [...TASK_NAMES];
  const attentions = listOption(values.mechanisms, 'mechanisms', attentionNames()) ?? attentionNames();
  const seeds = numberListOption(values.seeds, 'seeds', { integer: true }) ?? [...protocol.seeds];
  const steps = values.steps ?? protocol.steps;
  const batchSize = values.batch ?? protocol.batchSize;
  const evalSamples = values['eval-samples'] ?? 4 * batchSize;
  const lr = values.lr ?? PAPER_PROTOCOL.lr;
  const device = await startBackend(COMMAND.name, { flag: values.backend, recipe: 'wasm' }, { verbose: values.verbose });
  const { backend } = device;
  const outDir = values.out ?? join('reports', `tasks-${timestamp()}`);

  const [graph, xla] = [values.graph === 'on', resolveXla(values.xla)];
  const settings = { backend, tasks, attentions, seeds, steps, batchSize, evalSamples, lr, weightDecay: PAPER_PROTOCOL.weightDecay, graph, xla };
  console.log(
    `[tasks] ${tasks.length} tasks × ${attentions.length} mechanisms × ${seeds.length} seeds; ${steps} steps, batch ${batchSize}, eval ${evalSamples}, lr ${lr}, backend ${backend}`,
  );
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
  const execution = describeExecution(
    results.map((r) => r.execution),
    xla,
    graphDevice(),
  );
  console.log(`\n${markdown}\ntotal wall time ${wallSeconds.toFixed(1)} s; steps ran ${execution}`);

  makeFolders(outDir);
  const attentionOptions = Object.fromEntries(attentions.map((a) => [a, TASK_ATTENTION_OPTIONS[a] ?? {}]));
  await writeFile(
    join(outDir, 'results.json'),
    JSON.stringify({ settings: { ...settings, attentionOptions, quick: values.quick }, wallSeconds, execution, summary, runs: results }, null, 2) + '\n',
  );
  const header =
    `# Synthetic tasks\n\n${tasks.length} tasks × ${attentions.length} mechanisms × seeds ${seeds.join(', ')}; ${steps} steps, batch ${batchSize}, ` +
    `${evalSamples} evaluation samples, AdamW lr ${lr}, backend ${backend}; wall time ${wallSeconds.toFixed(1)} s; steps ran ${execution}.\n\n`;
  await writeFile(join(outDir, 'results.md'), header + markdown);
  console.log(`[tasks] wrote ${join(outDir, 'results.json')} and ${join(outDir, 'results.md')}`);
});
