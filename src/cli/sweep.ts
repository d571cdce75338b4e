// npm run sweep -- plan|run|status|report|task <sweep.yaml> …   (see HELP; the sweep file format: src/sweep/spec.ts)
import { existsSync } from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import type { ParseArgsConfig } from 'node:util';
import { runLocal } from '../sweep/local.ts';
import { findRun, loadSweep, REPORT_METRICS, selectRuns, SweepError } from '../sweep/spec.ts';
import type { ReportMetric, Sweep } from '../sweep/spec.ts';
import { queueState, readSubmissions, renderSbatchScript, SLURM_FIELDS, submitSweep } from '../sweep/slurm.ts';
import type { SlurmOptions } from '../sweep/slurm.ts';
import { formatStatus, runState } from '../sweep/status.ts';
import { runFolders, runTask } from '../sweep/task.ts';
import { execFileSync } from 'node:child_process';

const HELP = `Usage: npm run sweep -- <command> <sweep.yaml> [options]

A sweep file (sweeps/*.yaml) is a base recipe plus a grid of recipe keys and/or a list of cases; each
combination is a run named by its varying values, trained under <runDir>/<name>-<timestamp>/.

  plan <file> [--tokens-per-s N]     the runs, their names and planned tokens, and the estimated time (from
                                     runs of the sweep that already logged a speed, else --tokens-per-s)
  run <file> [--executor local|slurm]
      local (default): the runs as separate processes, as many at a time as the cores allow given each
        run's data-parallel replicas (--cores N to change the count), one progress line per run. A failing
        run does not stop the others; run it again to skip finished runs and resume interrupted ones.
        Ctrl-C: the running runs save a checkpoint and stop.
      slurm: one sbatch job array, one task per run that is not done; every task runs the local command
        of its run (sweep task <file> <index>), so a requeued or preempted task resumes from its checkpoint.
        Settings from the sweep file's slurm: section or these flags:
${Object.values(SLURM_FIELDS).map((f) => `          ${f.flag.padEnd(24)} ${f.help}`).join('\n')}
        --dry-run prints the sbatch script instead of submitting it.
  status <file>                      every run: done, running, pending, stopped or failed (with its last log line),
                                     from the run folders, the tasks' records and squeue/sacct
  report <file> [--baseline NAME] [--metric ${Object.keys(REPORT_METRICS).join('|')}] [--out DIR]
                                     mean ± sd over seeds per group, a paired comparison with the baseline
                                     mechanism (95% t interval, p-value) and the compare plots; default
                                     reports/sweep-<name>/
  task <file> <index|name>           run one run of the sweep (what both executors start)

plan, run and status take --only <names, globs or indices>, comma-separated, e.g. --only 'gpt-*'.

Exit status: 0 fine, 1 a run failed or a command went wrong, 2 bad sweep file or arguments.`;

class UsageError extends Error {}

async function main(argv: string[]): Promise<number> {
  const [command, file, ...rest] = argv;
  if (!command || command === '-h' || command === '--help') {
    console.log(HELP);
    return command ? 0 : 2;
  }
  if (!['plan', 'run', 'status', 'report', 'task'].includes(command)) throw new UsageError(`unknown command '${command}'`);
  if (!file) throw new UsageError(`${command} needs a sweep file`);
  const sweep = loadSweep(file);
  if (command === 'task') {
    if (rest.length !== 1) throw new UsageError('task needs one run: its index or name');
    const result = await runTask(sweep, findRun(sweep, rest[0]));
    if (result.action !== 'trained') console.log(result.message);
    return result.exitCode;
  }
  const onlyAt = rest.findIndex((a) => a === '--only' || a.startsWith('--only='));
  let only: string | undefined;
  if (onlyAt >= 0) {
    only = rest[onlyAt].startsWith('--only=') ? rest[onlyAt].slice('--only='.length) : rest[onlyAt + 1];
    if (!only) throw new UsageError('--only needs run names, globs or indices, e.g. --only "gpt-*"');
    rest.splice(onlyAt, rest[onlyAt].startsWith('--only=') ? 1 : 2);
  }
  const selected = selectRuns(sweep, only);
  switch (command) {
    case 'plan':
      return plan(selected, rest);
    case 'run':
      return run(selected, rest);
    case 'status':
      return status(selected, rest);
    default:
      return report(sweep, rest);
  }
}

function parse(args: string[], options: NonNullable<ParseArgsConfig['options']>) {
  try {
    return parseArgs({ args, options, allowPositionals: false, strict: true }).values as Record<string, unknown>;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

function positiveNumber(value: unknown, flag: string): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!(n > 0)) throw new UsageError(`${flag} must be a positive number (got '${value}')`);
  return n;
}

async function plan(sweep: Sweep, args: string[]): Promise<number> {
  const values = parse(args, { 'tokens-per-s': { type: 'string' } });
  // Imported here, not at the top: every task process starts this CLI, and needs neither the trainer's planning
  // nor the report's plotting libraries.
  const [{ initBackend }, { planRun }, { formatPlan, planSweep }] = await Promise.all([import('../backend.ts'), import('../train/trainer.ts'), import('../sweep/plan.ts')]);
  await initBackend('cpu', { quiet: true }); // counting parameters builds the mechanisms' small buffers
  const planned = await planSweep(sweep, { planRun, tokensPerSecond: positiveNumber(values['tokens-per-s'], '--tokens-per-s') });
  console.log(formatPlan(sweep, planned));
  return 0;
}

async function run(sweep: Sweep, args: string[]): Promise<number> {
  const slurmFlags = Object.fromEntries(
    Object.entries(SLURM_FIELDS).map(([key, f]) => [f.flag.slice(2), { type: 'string' as const, multiple: key === 'sbatch' || key === 'setup' }]),
  );
  const values = parse(args, { executor: { type: 'string' }, cores: { type: 'string' }, 'dry-run': { type: 'boolean' }, ...slurmFlags });
  const executor = (values.executor as string | undefined) ?? 'local';
  const missing = missingInputs(sweep);
  if (missing.length > 0 && executor === 'local') throw new SweepError(sweep.file, missing);
  // A cluster's nodes may see paths this host does not: only a warning there.
  for (const line of missing) console.error(`warning: ${line}`);
  if (executor === 'local') {
    const result = await runLocal(sweep, { cores: positiveNumber(values.cores, '--cores') });
    console.log(
      `sweep ${sweep.name}: ${result.done.length} done now, ${result.skipped.length} done before, ${result.stopped.length} stopped, ${result.failed.length} failed` +
        (result.failed.length ? `\n${result.failed.map((f) => `  failed: ${f.name}: ${f.lastLine}`).join('\n')}` : '') +
        `\nstatus: npm run sweep -- status ${sweep.file}   report: npm run sweep -- report ${sweep.file}`,
    );
    return result.failed.length > 0 ? 1 : result.stopped.length > 0 ? 130 : 0;
  }
  if (executor !== 'slurm') throw new UsageError(`--executor must be local or slurm (got '${executor}')`);
  const options = slurmOptions(sweep.slurm, values);
  const todo = sweep.runs.filter((r) => !runFolders(sweep, r).some((f) => f.done)).map((r) => r.index);
  if (todo.length === 0) {
    console.log(`sweep ${sweep.name}: every run is done; nothing to submit`);
    return 0;
  }
  if (values['dry-run']) {
    process.stdout.write(renderSbatchScript(sweep, todo, options, process.cwd()));
    return 0;
  }
  const submission = submitSweep(sweep, todo, options);
  console.log(`submitted job array ${submission.jobId} (${todo.length} of ${sweep.runs.length} runs): ${submission.script}\nstatus: npm run sweep -- status ${sweep.file}`);
  return 0;
}

/** Datasets and tokenizers the runs name that do not exist here, one line each with the runs that need them. */
function missingInputs(sweep: Sweep): string[] {
  const needs = new Map<string, string[]>();
  for (const run of sweep.runs) {
    const { dataset, tokenizer } = run.recipe.data;
    for (const [key, file] of [['data.dataset', dataset], ['data.tokenizer', tokenizer]]) {
      if (/[*?[]/.test(file) || existsSync(file)) continue; // globs are the trainer's to resolve
      const line = `${key} ${file} does not exist`;
      needs.set(line, [...(needs.get(line) ?? []), run.name]);
    }
  }
  return [...needs].map(([line, runs]) => `${line} (needed by ${runs.length === sweep.runs.length ? 'every run' : runs.join(', ')})`);
}

/** The sweep file's slurm: settings with the command-line flags on top, checked like the file's. */
function slurmOptions(fromFile: SlurmOptions, values: Record<string, unknown>): SlurmOptions {
  const options: Record<string, unknown> = { ...fromFile };
  for (const [key, field] of Object.entries(SLURM_FIELDS)) {
    const raw = values[field.flag.slice(2)];
    if (raw === undefined) continue;
    const value = Array.isArray(raw) ? raw : key === 'requeueOnTimeLimit' ? raw === 'true' || (raw === 'false' ? false : raw) : /^\d+$/.test(raw as string) ? Number(raw) : raw;
    const problem = field.check(value);
    if (problem) throw new UsageError(`${field.flag} must be ${problem} (got '${raw}')`);
    options[key] = Array.isArray(value) ? [...((options[key] as string[] | undefined) ?? []), ...value] : value;
  }
  return options as SlurmOptions;
}

function status(sweep: Sweep, args: string[]): number {
  parse(args, {});
  const submissions = readSubmissions(sweep);
  const reachable = submissions.length > 0 && commandAnswers('squeue', ['-h', '-o', '%i', '-j', submissions.at(-1)!.jobId]);
  const queue = reachable ? queueState(submissions) : new Map();
  const states = sweep.runs.map((r) => runState(sweep, r, queue.get(r.index), reachable));
  console.log(`sweep ${sweep.name} (${sweep.file}) → ${sweep.runDir}${submissions.length ? `; Slurm jobs ${submissions.map((s) => s.jobId).join(', ')}${reachable ? '' : ' (squeue not reachable)'}` : ''}`);
  console.log(formatStatus(states));
  return states.some((s) => s.state === 'failed') ? 1 : 0;
}

function commandAnswers(cmd: string, args: string[]): boolean {
  try {
    execFileSync(cmd, args, { stdio: 'ignore', timeout: 30_000 });
    return true;
  } catch (err) {
    // squeue exits 1 for a job id the controller has forgotten: it still answered.
    return (err as { status?: number }).status === 1;
  }
}

async function report(sweep: Sweep, args: string[]): Promise<number> {
  const values = parse(args, { baseline: { type: 'string' }, metric: { type: 'string' }, out: { type: 'string' } });
  const metric = values.metric as string | undefined;
  if (metric !== undefined && !(metric in REPORT_METRICS)) throw new UsageError(`--metric must be one of ${Object.keys(REPORT_METRICS).join(', ')}`);
  const baseline = values.baseline as string | undefined;
  if (baseline !== undefined && !sweep.runs.some((r) => r.recipe.model.attention.name === baseline)) {
    throw new UsageError(`--baseline ${baseline}: no run of the sweep uses that attention`);
  }
  const outDir = (values.out as string | undefined) ?? path.join('reports', `sweep-${sweep.name}`);
  const { buildReport } = await import('../sweep/report.ts');
  const result = await buildReport(sweep, { outDir, baseline, metric: metric as ReportMetric | undefined });
  console.log(`sweep ${sweep.name}: ${result.groups.length} groups from ${sweep.runs.length - result.missing.length} finished runs; wrote:\n${result.files.map((f) => `  ${f}`).join('\n')}`);
  return 0;
}

try {
  process.exitCode = await main(process.argv.slice(2));
} catch (err) {
  if (err instanceof SweepError) {
    console.error(err.message);
    process.exitCode = 2;
  } else if (err instanceof UsageError) {
    console.error(`sweep: ${err.message}\n\n${HELP}`);
    process.exitCode = 2;
  } else {
    console.error(`sweep: ${(err as Error).message}`);
    if (process.env.SLAYFORMER_DEBUG) console.error((err as Error).stack);
    process.exitCode = 1;
  }
}
