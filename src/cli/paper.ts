// npm run paper -- <experiment> [--quick] [--backend NAME] [--executor NAME] [--cores N] [--report | --status | --plan]
// npm run paper -- list
// npm run paper -- summary   (the README's Results table from docs/results/*.json)
// Runs a paper experiment's units through the sweep machinery (resumable; any executor: here, or a scheduler's job
// array) and writes its results file: ours beside the paper's numbers, a verdict per cell, the agreement count (src/paper/).
// The run machinery (which loads TensorFlow.js) is imported when the command runs, so that --help answers at once.
import path from 'node:path';
import { DEFAULT_RUNS_ROOT, loadExperiment, EXPERIMENT_NAMES } from '../paper/index.ts';
import type { ExperimentRunSet } from '../paper/run.ts';
import { clusterFromEnv } from '../backend/cluster-env.ts';
import { chooseBackend, resolveBackend } from '../backend/device.ts';
import { backendOption, startBackend } from './backend-option.ts';
import { runCommand, UsageError, type ParsedCommand } from './command.ts';
import { EXECUTOR_OPTIONS, EXECUTOR_SETTING_OPTIONS, runOnExecutor } from './executor-options.ts';

const COMMAND = {
  name: 'paper',
  usage: ['<experiment> [options]', 'list', 'summary [--out DIR]'],
  description: `Reproduces one experiment of the papers: runs its units (resumable: run it again to go on), then writes
<out>/<experiment>.md (+ .json and agreement.svg): ours beside the paper's numbers, a verdict per cell under the
experiment's stated rule, the count of agreements and an explanation for every disagreement.
Experiments: ${EXPERIMENT_NAMES.join(', ')} (list describes them). summary rewrites the README's Results table from
the results files.`,
  options: {
    quick: { type: 'boolean', help: 'a small subset in a few minutes (a smoke test, kept apart from the full run)' },
    backend: backendOption("the experiment's (wasm for the SLAY experiments)"),
    ...EXECUTOR_OPTIONS,
    ...EXECUTOR_SETTING_OPTIONS,
    report: { type: 'boolean', help: 'only write the results file from the units done so far' },
    status: { type: 'boolean', help: 'only print every unit’s state' },
    plan: { type: 'boolean', help: 'only print the protocol and its units' },
    out: { type: 'string', value: 'DIR', help: 'folder of the results file (default docs/results; reports/paper with --quick)' },
    runs: { type: 'string', value: 'DIR', help: `parent folder of the units' run folders (default ${DEFAULT_RUNS_ROOT})` },
    guard: { type: 'string', hidden: true, help: "internal: one unit's guard (lock, skip when done, run the worker)" },
    // --guard's name before: Slurm jobs queued by an older version still pass it when they start.
    task: { type: 'string', hidden: true, help: 'internal: --guard, as older versions named it' },
    unit: { type: 'string', hidden: true, help: 'internal: run one unit in this process' },
  },
  positionals: { min: 1, max: 1, name: '<experiment>, list or summary' },
  notes: 'Exit status: 0 fine, 1 a unit failed or a command went wrong, 2 bad arguments, 130 stopped (Ctrl-C: run it again to go on).',
} as const;

type Args = ParsedCommand<typeof COMMAND.options>;

function unitIndex(value: string, option: string): number {
  if (!/^\d+$/.test(value)) throw new UsageError(`--${option} takes a unit index (got '${value}')`);
  return Number(value);
}

async function list(): Promise<number> {
  for (const name of EXPERIMENT_NAMES) {
    const e = await loadExperiment(name);
    console.log(`${name} (v${e.version}): ${e.title}. ${e.source}.\n  ${e.units(false).length} units\n`);
  }
  return 0;
}

async function summary(resultsDir: string): Promise<number> {
  const { writeSummary } = await import('../paper/summary.ts');
  const lines = await writeSummary('README.md', resultsDir);
  console.log(`README.md: Results table rewritten from ${resultsDir}/*.json\n${lines.join('\n')}`);
  return 0;
}

function plan(set: ExperimentRunSet): number {
  const { experiment } = set;
  const cells = experiment.cells(set.settings.quick);
  console.log(`${experiment.name} v${experiment.version}: ${experiment.title}\n${experiment.source}\nCompared: ${experiment.measures}\n`);
  for (const [key, value] of Object.entries(experiment.protocol)) console.log(`  ${key}: ${value}`);
  console.log(`\nAgreement rule: ${experiment.agreement.statement}`);
  console.log(`${set.units.length} units → ${set.runDir}; ${cells.length} cells, ${cells.filter((c) => c.published).length} with a published value`);
  console.log(`run: ${set.file}`);
  return 0;
}

async function main({ values, positionals }: Args): Promise<number> {
  const [name] = positionals;
  if (name === 'list') return list();
  if (name === 'summary') return summary(values.out ?? path.join('docs', 'results'));
  if (!EXPERIMENT_NAMES.includes(name)) throw new UsageError(`unknown experiment '${name}' (one of ${EXPERIMENT_NAMES.join(', ')}, list or summary)`);
  const experiment = await loadExperiment(name);
  const [{ buildResults, resultsHeadline, writeResults }, { collectUnits, experimentRunSet, runExperimentGuard, runUnitHere }, { setStatus }] =
    await Promise.all([import('../paper/results.ts'), import('../paper/run.ts'), import('../sweep/status.ts')]);
  // Resolved here, before any backend loads: the units' folder names it, and the executor packs them by its device.
  const { backend } = resolveBackend(chooseBackend({ flag: values.backend, recipe: experiment.backend }).choice);
  const set = experimentRunSet(experiment, { quick: values.quick ?? false, backend, runsRoot: values.runs ?? DEFAULT_RUNS_ROOT });

  if (values.unit !== undefined) {
    const index = unitIndex(values.unit, 'unit');
    // A unit of a training experiment under srun, one process per Slurm task: the ranks of one run (docs/distributed.md).
    const rank = set.multiTask ? clusterFromEnv() : null;
    // A unit's process: the command that started it said which backend runs.
    await startBackend(COMMAND.name, { flag: backend }, { silent: true });
    // Before any tensor exists: joining renames the devices (src/backend/collective.ts).
    const collective = rank ? await import('../backend/collective.ts') : null;
    const cluster = rank ? collective!.joinCluster(rank) : null;
    if (cluster) {
      // Once a rank joined, TensorFlow's runtime holds SIGTERM and the rank would train on to the end (seen on a
      // time-limit warning): each rank ends at once, as a unit of one process does, and the stopped unit runs again.
      const { signalExitCode } = await import('../train/stop.ts');
      for (const signal of ['SIGINT', 'SIGTERM'] as const) process.on(signal, () => process.exit(signalExitCode(signal)));
    }
    try {
      const dir = await runUnitHere(set, index, cluster);
      if (dir) console.log(`${set.units[index].name}: done → ${dir}`);
    } catch (err) {
      // The other ranks' collectives fail at once, quoting this error, rather than after the heartbeat timeout.
      if (cluster) collective!.reportFailureToCluster(cluster, err);
      throw err;
    }
    return 0;
  }
  const guard = values.guard ?? values.task;
  if (guard !== undefined) {
    const result = await runExperimentGuard(set, unitIndex(guard, values.guard !== undefined ? 'guard' : 'task'));
    if (result.action !== 'trained') console.log(result.message);
    return result.exitCode;
  }
  if (values.plan) return plan(set);
  if (values.status) {
    const { text, failed } = setStatus(set, 'paper');
    console.log(text);
    return failed ? 1 : 0;
  }

  let exitCode = 0;
  if (!values.report) {
    await experiment.prepare?.((line) => console.log(`${name}: ${line}`));
    // An executor that submits: the results file is written by --report once the units are done.
    const outcome = await runOnExecutor(set, values, { nothingLeft: `${set.file}: every unit is done; write the results with --report` });
    if (outcome === null) return 0;
    if (outcome.kind === 'submitted') {
      console.log(
        `submitted ${outcome.what} (${outcome.runs} of ${set.runs.length} units): ${outcome.file}\n` +
          `status: ${set.file} --status   results, once done: ${set.file} --report`,
      );
      return 0;
    }
    console.log(
      `${set.file}: ${outcome.done.length} units done now, ${outcome.skipped.length} done before, ${outcome.stopped.length} stopped, ${outcome.failed.length} failed` +
        (outcome.elsewhere.length ? `, ${outcome.elsewhere.length} running in another process (${outcome.elsewhere.join(', ')})` : '') +
        outcome.failed.map((f) => `\n  failed: ${f.name}: ${f.lastLine}`).join(''),
    );
    exitCode = outcome.failed.length > 0 ? 1 : outcome.stopped.length > 0 ? 130 : 0;
    if (outcome.stopped.length > 0) return exitCode;
  }
  const results = buildResults(set, collectUnits(set));
  const outDir = values.out ?? (set.settings.quick ? path.join('reports', 'paper') : path.join('docs', 'results'));
  const files = await writeResults(results, outDir);
  console.log(`${name}: ${resultsHeadline(results)}; wrote\n${files.map((f) => `  ${f}`).join('\n')}`);
  return exitCode;
}

await runCommand(COMMAND, main);
