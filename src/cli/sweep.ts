// npm run sweep -- plan|run|status|report|guard <sweep.yaml> …   (--help; the sweep file format: src/sweep/spec.ts)
// The sweep modules (which load the recipe loader and TensorFlow.js) are imported when a subcommand runs, so that
// --help answers at once.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { BACKENDS } from '../backend/device.ts';
import { DEFAULT_EXECUTOR, SWEEP_EXECUTORS } from '../sweep/executor-registry.ts';
import { REPORT_METRICS } from '../sweep/report-metrics.ts';
import type { ReportMetric } from '../sweep/report-metrics.ts';
import type { Sweep } from '../sweep/spec.ts';
import { startBackend } from './backend-option.ts';
import { runCommand, UsageError, type ParsedCommand } from './command.ts';
import { EXECUTOR_OPTIONS, EXECUTOR_SETTING_OPTIONS, runOnExecutor } from './executor-options.ts';

const SUBCOMMANDS = ['plan', 'run', 'status', 'report', 'guard'] as const;
type Subcommand = (typeof SUBCOMMANDS)[number];

const COMMAND = {
  name: 'sweep',
  usage: ['plan|run|status <sweep.yaml> [options]', 'report <sweep.yaml> [options]', 'guard <sweep.yaml> <index|name>'],
  description: `A sweep file (sweeps/*.yaml) is a base recipe plus a grid of recipe keys and/or a list of cases; each
combination is a run named by its varying values, trained under <runDir>/<name>-<timestamp>/.

  plan    the runs, their names and planned tokens, and the estimated time (from runs of the sweep that
          already logged a speed, else --tokens-per-s)
  run     the runs that are not done, by an executor (--executor NAME; a sweep file's <executor>: section
          holds its settings, the options below override them):
${SWEEP_EXECUTORS.map((e) => `          ${e.name}${e.name === DEFAULT_EXECUTOR ? ' (default)' : ''}: ${e.description.replace(/\n/g, '\n            ')}`).join('\n')}
  status  every run: done, running, pending, stopped or failed (with its last log line), from the run
          folders, the guards' records and the executors' queues
  report  mean ± sd over seeds per group, a paired comparison with the baseline mechanism (95% t
          interval, p-value) and the compare plots; default folder reports/sweep-<name>/
  guard   run one run of the sweep: take its lock, skip it when done, else train (what every
          executor starts)`,
  options: {
    only: { type: 'string', value: 'RUNS', help: "plan, run, status: only these runs (names, globs or indices, comma-separated, e.g. 'gpt-*')" },
    set: {
      type: 'string',
      value: 'KEY=VALUE',
      multiple: true,
      help: "plan, run, guard: a recipe key for every run, on top of the file's set: (repeatable), e.g. --set train.lr=1e-3; a key the grid or a case sets is refused",
    },
    backend: {
      type: 'string',
      value: 'NAME',
      choices: BACKENDS,
      help: "plan, run, guard: every run on this backend (beats $SLAYFORMER_BACKEND, then the runs' recipes; else auto)",
    },
    'tokens-per-s': { type: 'string', value: 'N', number: { min: 0, exclusiveMin: true }, help: 'plan: assumed training speed when no run has logged one' },
    executor: { ...EXECUTOR_OPTIONS.executor, help: `run: ${EXECUTOR_OPTIONS.executor.help}` },
    'dry-run': { ...EXECUTOR_OPTIONS['dry-run'], help: `run: ${EXECUTOR_OPTIONS['dry-run'].help}` },
    ...EXECUTOR_SETTING_OPTIONS,
    baseline: {
      type: 'string',
      value: 'NAME',
      help: "report: the mechanism the others are paired with (default: the sweep file's report.baseline, else softmax if present, as compare; 'none': no pairing)",
    },
    metric: { type: 'string', value: 'NAME', choices: Object.keys(REPORT_METRICS), help: 'report: the compared number' },
    out: { type: 'string', value: 'DIR', help: 'report: the report folder' },
  },
  positionals: { min: 2, max: 3, name: 'command, sweep file and (guard) run' },
  notes: 'Exit status: 0 fine, 1 a run failed or a command went wrong, 2 bad sweep file or arguments.',
} as const;

type Args = ParsedCommand<typeof COMMAND.options>;

/** The options each subcommand takes; giving another's is a usage error. */
const ALLOWED: Record<Subcommand, readonly string[]> = {
  plan: ['only', 'tokens-per-s', 'set', 'backend'],
  run: ['only', 'executor', 'dry-run', 'set', 'backend', ...Object.keys(EXECUTOR_SETTING_OPTIONS)],
  status: ['only'],
  report: ['baseline', 'metric', 'out'],
  guard: ['set', 'backend'],
};

function checkOptionsFor(command: Subcommand, values: Record<string, unknown>): void {
  for (const [name, value] of Object.entries(values)) {
    const given = value !== undefined && value !== false && !(Array.isArray(value) && value.length === 0);
    if (given && !ALLOWED[command].includes(name)) throw new UsageError(`option --${name} is not one of ${command}'s`);
  }
}

async function main({ values, positionals }: Args): Promise<number> {
  const [given, file, run] = positionals as [string, string, string | undefined];
  // `task`, the guard's name before: Slurm jobs queued by an older version still run `sweep task …` when they start (not listed).
  const command = (given === 'task' ? 'guard' : given) as Subcommand;
  if (!SUBCOMMANDS.includes(command)) throw new UsageError(`unknown command '${given}' (one of ${SUBCOMMANDS.join(', ')})`);
  if ((command === 'guard') !== (run !== undefined))
    throw new UsageError(command === 'guard' ? 'guard needs one run: its index or name' : `unexpected argument '${run}'`);
  checkOptionsFor(command, values);
  const { findRun, loadSweep, selectRuns } = await import('../sweep/spec.ts');
  const sweep = loadSweep(file, values.set, { backend: values.backend ?? null });
  if (command === 'guard') {
    const { runSweepGuard } = await import('../sweep/guard.ts');
    const result = await runSweepGuard(sweep, findRun(sweep, run!));
    if (result.action !== 'trained') console.log(result.message);
    return result.exitCode;
  }
  const selected = selectRuns(sweep, values.only);
  switch (command) {
    case 'plan':
      return plan(selected, values);
    case 'run':
      return runSweep(selected, values);
    case 'status':
      return status(selected);
    default:
      return report(sweep, values);
  }
}

async function plan(sweep: Sweep, values: Args['values']): Promise<number> {
  // Imported here, not at the top: every run's guard starts this CLI, and needs neither the trainer's planning
  // nor the report's plotting libraries.
  const [{ planRun }, { formatPlan, planSweep }] = await Promise.all([import('../train/plan.ts'), import('../sweep/plan.ts')]);
  await startBackend(COMMAND.name, { flag: 'cpu' }, { silent: true }); // counting parameters builds the mechanisms' small buffers
  const planned = await planSweep(sweep, { planRun, tokensPerSecond: values['tokens-per-s'] });
  console.log(formatPlan(sweep, planned));
  return 0;
}

async function runSweep(sweep: Sweep, values: Args['values']): Promise<number> {
  const { SweepError } = await import('../sweep/spec.ts');
  const outcome = await runOnExecutor(sweep, values, {
    nothingLeft: `sweep ${sweep.name}: every run is done; nothing to submit`,
    preflight: (executor) => {
      const missing = missingInputs(sweep);
      if (missing.length > 0 && !executor.submits) throw new SweepError(sweep.file, missing);
      // A cluster's nodes may see paths this host does not: only a warning there.
      for (const line of missing) console.error(`warning: ${line}`);
    },
  });
  if (outcome === null) return 0;
  if (outcome.kind === 'submitted') {
    console.log(`submitted ${outcome.what} (${outcome.runs} of ${sweep.runs.length} runs): ${outcome.file}\nstatus: npm run sweep -- status ${sweep.file}`);
    return 0;
  }
  console.log(
    `sweep ${sweep.name}: ${outcome.done.length} done now, ${outcome.skipped.length} done before, ${outcome.stopped.length} stopped, ${outcome.failed.length} failed` +
      (outcome.elsewhere.length ? `, ${outcome.elsewhere.length} running in another process (${outcome.elsewhere.join(', ')})` : '') +
      (outcome.failed.length ? `\n${outcome.failed.map((f) => `  failed: ${f.name}: ${f.lastLine}`).join('\n')}` : '') +
      `\nstatus: npm run sweep -- status ${sweep.file}   report: npm run sweep -- report ${sweep.file}`,
  );
  return outcome.failed.length > 0 ? 1 : outcome.stopped.length > 0 ? 130 : 0;
}

/** Datasets and tokenizers the runs name that do not exist here, one line each with the runs that need them. */
function missingInputs(sweep: Sweep): string[] {
  const needs = new Map<string, string[]>();
  for (const run of sweep.runs) {
    const { dataset, tokenizer } = run.recipe.data;
    for (const [key, file] of [
      ['data.dataset', dataset],
      ['data.tokenizer', tokenizer],
    ]) {
      if (/[*?[]/.test(file) || existsSync(file)) continue; // globs are the trainer's to resolve
      const line = `${key} ${file} does not exist`;
      needs.set(line, [...(needs.get(line) ?? []), run.name]);
    }
  }
  return [...needs].map(([line, runs]) => `${line} (needed by ${runs.length === sweep.runs.length ? 'every run' : runs.join(', ')})`);
}

async function status(sweep: Sweep): Promise<number> {
  const { setStatus } = await import('../sweep/status.ts');
  const { text, failed } = setStatus(sweep, 'sweep');
  console.log(text);
  return failed ? 1 : 0;
}

async function report(sweep: Sweep, values: Args['values']): Promise<number> {
  const metric = values.metric as ReportMetric | undefined;
  const baseline = values.baseline === 'none' ? null : values.baseline;
  if (typeof baseline === 'string' && !sweep.runs.some((r) => r.recipe.model.attention.name === baseline)) {
    throw new UsageError(`--baseline ${baseline}: no run of the sweep uses that attention`);
  }
  const outDir = values.out ?? path.join('reports', `sweep-${sweep.name}`);
  const { buildReport } = await import('../sweep/report.ts');
  const result = await buildReport(sweep, { outDir, baseline, metric });
  console.log(
    `sweep ${sweep.name}: ${result.groups.length} groups from ${sweep.runs.length - result.missing.length} finished runs; wrote:\n${result.files.map((f) => `  ${f}`).join('\n')}`,
  );
  return 0;
}

await runCommand(COMMAND, async (args) => {
  const { SweepError } = await import('../sweep/spec.ts');
  try {
    return await main(args);
  } catch (err) {
    // A bad sweep file is reported as its own lines (file, run, key), exit 2 like a usage error.
    if (!(err instanceof SweepError)) throw err;
    console.error(err.message);
    return 2;
  }
});
