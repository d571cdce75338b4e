// The Slurm executor (sweep-executor.ts): one sbatch job array per submission, array index = the run's index in the set,
// every array task running the run's guard, the command the local executor starts (`sweep guard <file> <index>` for a
// sweep). Queue state comes from squeue (and sacct where accounting is on); what each attempt did is recorded by the
// guard (guard.ts). Its files: `_sweep/slurm/` (the scripts, jobs.jsonl, the tasks' output).
//
// Signals. The script `exec`s the guard, so the guard is the batch shell: `--signal=B:USR1@<s>` reaches only it, some
// seconds before the time limit, and it asks the trainer to checkpoint (SIGTERM) and then requeues the array task, which
// resumes from that checkpoint. scancel, requeue and preemption signal every process of the job, the trainer included,
// so the guard passes nothing on then (a second SIGTERM would make the trainer quit without its checkpoint). USR1 rather
// than TERM for the warning is what tells the two cases apart.
//
// Units of several tasks (`nodes`, `tasksPerNode`): the batch shell is still the one guard (one lock, one log,
// one attempt), and it starts the worker (the trainer, or a paper unit's worker) under `srun --kill-on-bad-exit=1
// --distribution=block`, one per Slurm task, each finding its rank in Slurm's variables (src/backend/cluster-env.ts),
// where `train.executor: auto` is `collective`; sets whose runs run in one process (RunSet.multiTask unset) refuse
// them. On the time-limit warning the guard does not signal srun (srun ends its step with SIGKILL on a SIGTERM, so no
// checkpoint would be written) but the step's tasks, `scancel --signal=TERM <job>`, which leaves the batch shell
// alone: rank 0 saves a checkpoint after its step and exits, srun ends the others, the guard requeues the array task
// (a paper unit's ranks end at once and the unit runs again from the start).
// scancel, requeue and preemption reach srun too, which kills the ranks at once: the unit resumes from its newest
// complete checkpoint, in general the last periodic one (docs/distributed.md).
//
// Script text. Every value is refused or quoted before it reaches the script, so that each line is one of the
// shapes renderSbatchScript writes: values of `#SBATCH` lines (a comment to bash, options to sbatch) are words of a
// safe alphabet or double-quoted as sbatch's own parser reads them (`\` escapes `"`, `\` and `#`, which ends an
// argument even inside quotes in older Slurm versions); the guard command is quoted for bash (set-files.ts); control
// characters (a newline would start a shell line of its own) are refused everywhere. `setup` lines are the one
// exception by design: shell code, run as written, one line each.
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { BOUNDS, MAX_RANKS } from '../core/bounds.ts';
import { appendOwnFile, writeOwnFile } from '../core/own-file.ts';
import type { SweepExecutor, SweepExecutorQueue, SweepExecutorSetting, QueuedTask, WorkerLauncher } from './sweep-executor.ts';
import type { RunSet } from './run-set.ts';
import { executorFolder, guardCommand } from './set-files.ts';
import { makeFolders } from '../core/folders.ts';

const NAME = 'slurm';

export interface SlurmOptions {
  partition?: string;
  time?: string;
  gpus?: number | string;
  /** Nodes per run (sbatch --nodes); with tasksPerNode, a unit of nodes × tasksPerNode tasks, one rank each. */
  nodes?: number;
  /** Slurm tasks (ranks) per node (sbatch --ntasks-per-node). */
  tasksPerNode?: number;
  /** GPUs per Slurm task (sbatch --gpus-per-task): one GPU per rank. */
  gpusPerTask?: number | string;
  mem?: string;
  cpusPerTask?: number;
  /** At most this many array tasks at once (`--array=…%N`). */
  maxParallel?: number;
  /** Seconds before the time limit at which the guard has the run checkpoint (and requeues the task). */
  signalSeconds?: number;
  /** After that checkpoint, requeue the array task so that it goes on (default true). */
  requeueOnTimeLimit?: boolean;
  /** Extra sbatch options, one per line, e.g. `--account=lab` or `--constraint=a100`. */
  sbatch?: string[];
  /** Shell lines the array task runs before the guard, e.g. `module load nodejs/20`. */
  setup?: string[];
}

/** Characters an sbatch option value may hold unquoted (and a shell word too). */
const SAFE_WORD = /^[A-Za-z0-9._:,+@%=/-]+$/;
/** C0 controls and DEL: a newline or carriage return would split a line of the script. */
const CONTROL = /[\u0000-\u001f\u007f]/;
const word = (v: unknown) => (typeof v === 'string' && SAFE_WORD.test(v) ? null : 'a word of letters, digits and . _ : , + @ % = / -');
/**
 * The counts a script may ask Slurm for (docs/bounds.md): every one has a largest value, so that a typo is refused naming
 * its setting instead of reaching the script (a count past 2⁵³ reached it rounded to a double, from 10²¹ on as 1e+21).
 */
const COUNT_LIMITS = {
  /** A run's GPUs in all: one per rank of the most ranks a run may have. */
  gpus: MAX_RANKS,
  /** 4× the 16 GPUs of the largest nodes; a rank uses one. */
  gpusPerTask: 64,
  /** Over 5× the 768 hardware threads of the largest two-socket nodes. */
  cpusPerTask: 4096,
  /** Array tasks at once: a set has at most this many runs. */
  maxParallel: BOUNDS.sweepRuns.max,
  /** Slurm's own limit on the time of --signal. */
  signalSeconds: 65_535,
} as const;
const countUpTo = (max: number) => (v: unknown) => (Number.isInteger(v) && (v as number) >= 1 && (v as number) <= max ? null : `an integer from 1 to ${max}`);
const rankCount = countUpTo(MAX_RANKS);
/** `2`, `a100:2`, or a comma-separated list of such (`a100:2,v100:1`), each count from 1 to `max`. */
const gpuCount = (max: number) => (v: unknown) => {
  const counts =
    typeof v === 'number'
      ? [v]
      : typeof v === 'string' && /^[\w.-]+:\d+(,[\w.-]+:\d+)*$|^\d+$/.test(v)
        ? v.split(',').map((g) => Number(g.split(':').pop()))
        : null;
  return counts?.every((n) => countUpTo(max)(n) === null) ? null : `a GPU count from 1 to ${max}, or type:count (e.g. a100:1)`;
};
const oneLine = (l: unknown) => typeof l === 'string' && l.trim() !== '' && !CONTROL.test(l);
const lines = (v: unknown) => (Array.isArray(v) && v.every(oneLine) ? null : 'a list of one-line strings without control characters');
/** Extra sbatch options: `--name` or `--name=value` each (the value is quoted for sbatch, see the top of this file). */
const options = (v: unknown) =>
  Array.isArray(v) && v.every((o) => oneLine(o) && /^--[A-Za-z][A-Za-z0-9-]*(=|$)/.test(o as string))
    ? null
    : 'a list of sbatch options --name or --name=value (the value as it is, unquoted), without control characters';

/** Each setting's check (null = valid, else what it must be), its command-line flag and its help. */
const SLURM_SETTINGS: Record<keyof SlurmOptions, SweepExecutorSetting> = {
  partition: { check: word, flag: '--partition', help: 'partition (queue)' },
  time: { check: word, flag: '--time', help: 'time limit per run (its array task), e.g. 24:00:00 or 2-00:00:00' },
  gpus: { check: gpuCount(COUNT_LIMITS.gpus), flag: '--gpus', help: 'GPUs per run (all its tasks together), e.g. 1 or a100:1' },
  nodes: { check: rankCount, flag: '--nodes', help: 'nodes per run (default 1); more than one task per run: one rank each, under srun (docs/distributed.md)' },
  tasksPerNode: { check: rankCount, flag: '--tasks-per-node', help: 'Slurm tasks per node, each a rank of the run (default 1; the tensorflow backend)' },
  gpusPerTask: { check: gpuCount(COUNT_LIMITS.gpusPerTask), flag: '--gpus-per-task', help: 'GPUs per Slurm task (rank), e.g. 1 or h100:1' },
  mem: { check: word, flag: '--mem', help: 'memory per node (of a run), e.g. 64G' },
  cpusPerTask: {
    check: countUpTo(COUNT_LIMITS.cpusPerTask),
    flag: '--cpus-per-task',
    help: "CPU cores per Slurm task (default: the run's data-parallel replicas)",
  },
  maxParallel: { check: countUpTo(COUNT_LIMITS.maxParallel), flag: '--max-parallel', help: 'at most this many tasks at once' },
  signalSeconds: {
    check: countUpTo(COUNT_LIMITS.signalSeconds),
    flag: '--signal-seconds',
    help: 'checkpoint this many seconds before the time limit (default 120)',
  },
  requeueOnTimeLimit: {
    check: (v) => (typeof v === 'boolean' ? null : 'true or false'),
    flag: '--requeue-on-time-limit',
    type: 'boolean',
    help: 'requeue a task stopped by its time limit (default true)',
  },
  sbatch: { check: options, flag: '--sbatch', type: 'list', help: 'an extra sbatch option (repeatable), e.g. --sbatch=--account=lab' },
  setup: { check: lines, flag: '--setup', type: 'list', help: 'a shell line the array task runs before the guard (repeatable), e.g. "module load nodejs"' },
};

export const slurmExecutor: SweepExecutor = {
  name: NAME,
  description: `one sbatch job array, one task per run that is not done; every task runs the run's
guard, the command the local executor starts, so a requeued or preempted task resumes from its checkpoint.
Settings from the file's slurm: section or the options below; --dry-run prints the sbatch script
instead of submitting it.`,
  settings: SLURM_SETTINGS,
  submits: true,
  async run(set, pending, settings) {
    const submission = submitSweep(
      set,
      pending.map((r) => r.index),
      settings as SlurmOptions,
    );
    return { kind: 'submitted', what: `job array ${submission.jobId}`, runs: pending.length, file: submission.script };
  },
  preview: (set, pending, settings, cwd) =>
    renderSbatchScript(
      set,
      pending.map((r) => r.index),
      settings as SlurmOptions,
      cwd,
    ),
  queue: slurmQueue,
  currentTask: () => {
    const job = currentSlurmJob();
    return job ? `Slurm task ${job}` : null;
  },
  workerLauncher: unitLauncher,
  requeue: requeueSelf,
};

const DEFAULT_SIGNAL_SECONDS = 120;

/** An sbatch option value as sbatch's parser reads it back: as it is when it is a safe word, else double-quoted. */
function sbatchValue(value: string): string {
  return SAFE_WORD.test(value) ? value : `"${value.replace(/[\\"#]/g, '\\$&')}"`;
}

/** `--name=value` with the value quoted for sbatch. */
function directive(option: string): string {
  const eq = option.indexOf('=');
  return eq < 0 ? option : `${option.slice(0, eq)}=${sbatchValue(option.slice(eq + 1))}`;
}

/** Throws unless every value that reaches the script is acceptable (see the top of this file); errors name the field. */
function checkScriptValues(sweep: RunSet, options: SlurmOptions, cwd: string): void {
  const problems: string[] = [];
  for (const [key, value] of Object.entries(options)) {
    const field = SLURM_SETTINGS[key as keyof SlurmOptions];
    const problem = field ? field.check(value) : 'not a Slurm option';
    if (problem) problems.push(`slurm.${key} must be ${problem} (got ${JSON.stringify(value)})`);
  }
  const outputDir = executorFolder(sweep, NAME);
  const values = [
    ['the sweep file', sweep.file],
    ['the working folder (--chdir)', cwd],
    ['runDir', outputDir],
    ['the sweep name', sweep.name],
    ...sweep.guard.map((arg) => ['the guard command', arg]),
  ];
  for (const [what, text] of values) {
    if (CONTROL.test(text))
      problems.push(`${what} ${JSON.stringify(text)} holds a control character (a newline would start a line of its own in the sbatch script)`);
  }
  // Slurm replaces %A, %j, … in --output (and %% by %): a '%' of the folder's own would change the path.
  if (outputDir.includes('%')) problems.push(`runDir ${JSON.stringify(sweep.runDir)} holds '%', which Slurm reads as a pattern in --output`);
  problems.push(...unitProblems(sweep, options));
  if (problems.length > 0) throw new Error(`cannot write the sbatch script of ${JSON.stringify(sweep.file)}:\n  ${problems.join('\n  ')}`);
}

/** Slurm tasks per run: nodes × tasks per node. */
function unitTasks(options: SlurmOptions): number {
  return (options.nodes ?? 1) * (options.tasksPerNode ?? 1);
}

/** What is wrong with the unit's shape as a whole (each setting alone passed its check), naming the settings. */
function unitProblems(sweep: Pick<RunSet, 'file' | 'multiTask' | 'oneProcessReason'>, options: SlurmOptions): string[] {
  const problems: string[] = [];
  if (options.gpus !== undefined && options.gpusPerTask !== undefined)
    problems.push('slurm.gpus and slurm.gpusPerTask both given: give one (gpus counts all GPUs of a run, gpusPerTask those of each Slurm task)');
  if (rankCount(options.nodes ?? 1) || rankCount(options.tasksPerNode ?? 1)) return problems; // named by their own checks
  const tasks = unitTasks(options);
  if (tasks > MAX_RANKS)
    problems.push(`slurm.nodes × slurm.tasksPerNode must be at most ${MAX_RANKS} ranks (got ${options.nodes ?? 1} × ${options.tasksPerNode ?? 1} = ${tasks})`);
  else if (tasks > 1 && !sweep.multiTask)
    problems.push(
      `slurm.nodes × slurm.tasksPerNode = ${tasks} tasks per run, but each run of ${sweep.file} runs in one process` +
        `: ${sweep.oneProcessReason ?? "only training runs (a sweep's, a paper experiment's on the tensorflow backend) span several tasks"}`,
    );
  return problems;
}

/** The sbatch script of an array over `indices` (runs of the set). Paths are absolute; the job runs in `cwd`. */
export function renderSbatchScript(sweep: RunSet, indices: number[], options: SlurmOptions, cwd: string): string {
  checkScriptValues(sweep, options, cwd);
  const cpus = options.cpusPerTask ?? Math.max(...sweep.runs.filter((r) => indices.includes(r.index)).map((r) => r.requestedCpus));
  const directives = [
    `--job-name=${sbatchValue(sweep.name)}`,
    `--array=${compressIndices(indices)}${options.maxParallel ? `%${options.maxParallel}` : ''}`,
    `--output=${sbatchValue(path.join(executorFolder(sweep, NAME), '%A_%a.out'))}`,
    `--chdir=${sbatchValue(cwd)}`,
    '--requeue',
    `--signal=B:USR1@${options.signalSeconds ?? DEFAULT_SIGNAL_SECONDS}`,
    `--cpus-per-task=${cpus}`,
    ...(options.partition ? [`--partition=${options.partition}`] : []),
    ...(options.time ? [`--time=${options.time}`] : []),
    ...(options.gpus !== undefined ? [`--gpus=${options.gpus}`] : []),
    // Given as a pair, so that the array task's SLURM_NTASKS says how many ranks the task starts (unitLauncher).
    ...(options.nodes !== undefined || options.tasksPerNode !== undefined
      ? [`--nodes=${options.nodes ?? 1}`, `--ntasks-per-node=${options.tasksPerNode ?? 1}`]
      : []),
    ...(options.gpusPerTask !== undefined ? [`--gpus-per-task=${options.gpusPerTask}`] : []),
    ...(options.mem ? [`--mem=${options.mem}`] : []),
    ...(options.sbatch ?? []).map(directive),
  ];
  const command = guardCommand(sweep, '"$SLURM_ARRAY_TASK_ID"', { shell: true, node: 'node' });
  return [
    '#!/bin/bash',
    `# Generated for ${sweep.file}: one array task per run (the array index is the run's index in`,
    "# the sweep). Each task runs the run's guard, as the local executor does; a requeued or preempted task resumes from",
    '# its last checkpoint. USR1 before the time limit: checkpoint, then requeue (see src/sweep/slurm.ts).',
    ...(unitTasks(options) > 1 ? [`# ${unitTasks(options)} Slurm tasks per run: the guard starts the trainer under srun, one rank per Slurm task.`] : []),
    ...directives.map((d) => `#SBATCH ${d}`),
    ...(options.requeueOnTimeLimit === false ? ['export SLAYFORMER_SWEEP_NO_REQUEUE=1'] : []),
    ...(options.setup ?? []),
    `exec ${command}`,
    '',
  ].join('\n');
}

/** 0,1,2,5,7,8 → "0-2,5,7-8". */
export function compressIndices(indices: number[]): string {
  const sorted = [...new Set(indices)].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < sorted.length; ) {
    let j = i;
    while (j + 1 < sorted.length && sorted[j + 1] === sorted[j] + 1) j++;
    parts.push(i === j ? String(sorted[i]) : `${sorted[i]}-${sorted[j]}`);
    i = j + 1;
  }
  return parts.join(',');
}

export interface Submission {
  jobId: string;
  indices: number[];
  script: string;
  submittedAt: string;
}

/** Writes the script, submits it with sbatch and records the job in `_sweep/slurm/jobs.jsonl`. */
function submitSweep(sweep: RunSet, indices: number[], options: SlurmOptions, cwd = process.cwd()): Submission {
  const folder = executorFolder(sweep, NAME);
  makeFolders(folder);
  const stamp = new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  const script = path.join(folder, `${sweep.name}-${stamp}.sbatch`);
  writeOwnFile(script, renderSbatchScript(sweep, indices, options, cwd), 0o755);
  let out: string;
  try {
    out = execFileSync('sbatch', ['--parsable', script], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`sbatch ${script} failed: ${(e.stderr || e.message).trim()}`);
  }
  const jobId = out.trim().split(';')[0];
  if (!/^\d+$/.test(jobId)) throw new Error(`sbatch ${script}: unexpected answer ${JSON.stringify(out.trim())}`);
  const submission: Submission = { jobId, indices, script, submittedAt: new Date().toISOString() };
  appendOwnFile(path.join(folder, 'jobs.jsonl'), JSON.stringify(submission) + '\n');
  return submission;
}

function readSubmissions(sweep: Pick<RunSet, 'runDir'>): Submission[] {
  const file = path.join(executorFolder(sweep, NAME), 'jobs.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l, i) => {
      try {
        return JSON.parse(l) as Submission;
      } catch {
        throw new Error(`${file}:${i + 1}: not a JSON object`);
      }
    });
}

/** What Slurm says about one array task. */
export interface QueueEntry {
  jobId: string;
  /** `<array job>_<index>`, as scontrol and scancel take it. */
  taskId: string;
  state: string;
  /** squeue's reason (pending jobs) or sacct's exit code. */
  detail: string;
  /** From squeue (the job is known to the controller and not finished) or sacct (accounting). */
  source: 'squeue' | 'sacct';
}

/**
 * The newest queue entry of each run index across the sweep's submissions: squeue first (pending, running,
 * requeued…), then sacct for tasks squeue no longer lists. Commands that are missing or fail (no accounting) are
 * skipped: the guards' own records still tell what happened.
 */
export function queueState(submissions: Submission[], run: (cmd: string, args: string[]) => string | null = runQuiet): Map<number, QueueEntry> {
  const out = new Map<number, QueueEntry>();
  for (const { jobId } of submissions) {
    const listed = new Map<number, QueueEntry>();
    const squeue = run('squeue', ['-h', '-r', '-j', jobId, '-o', '%i|%T|%r']);
    for (const entry of parseQueueLines(squeue ?? '', jobId, 'squeue')) listed.set(entry.index, entry);
    const sacct = run('sacct', ['-n', '-X', '-P', '-j', jobId, '-o', 'JobID,State,ExitCode']);
    for (const entry of parseQueueLines(sacct ?? '', jobId, 'sacct')) if (!listed.has(entry.index)) listed.set(entry.index, entry);
    for (const [index, entry] of listed) out.set(index, entry); // later submissions win
  }
  return out;
}

/** Lines `<job>_<index>|STATE|detail` of squeue -o '%i|%T|%r' or sacct -P -o JobID,State,ExitCode. */
export function parseQueueLines(text: string, jobId: string, source: QueueEntry['source']): (QueueEntry & { index: number })[] {
  const out: (QueueEntry & { index: number })[] = [];
  for (const line of text.split('\n')) {
    const [id, state, detail = ''] = line.trim().split('|');
    const match = /^(\d+)_(\d+)$/.exec(id ?? '');
    if (!match || match[1] !== jobId || !state) continue;
    // sacct writes "CANCELLED by 0"; the first word is the state.
    out.push({ index: Number(match[2]), jobId, taskId: id, state: state.split(' ')[0], detail, source });
  }
  return out;
}

function runQuiet(cmd: string, args: string[]): string | null {
  try {
    return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'], timeout: 30_000 });
  } catch {
    return null;
  }
}

/** Slurm states in which a task still holds (or will get) an allocation. */
const ACTIVE_STATES = new Set([
  'PENDING',
  'CONFIGURING',
  'RUNNING',
  'COMPLETING',
  'REQUEUED',
  'REQUEUE_HOLD',
  'REQUEUE_FED',
  'RESIZING',
  'SUSPENDED',
  'STOPPED',
  'SIGNALING',
  'STAGE_OUT',
]);
/** Slurm states after which a task holds nothing and was not a success. */
const FAILED_STATES = new Set(['FAILED', 'OUT_OF_MEMORY', 'NODE_FAIL', 'BOOT_FAIL', 'DEADLINE', 'TIMEOUT', 'CANCELLED', 'PREEMPTED']);

/**
 * The set's tasks as status sees them (null before the first submission). A task squeue lists as active is running or
 * waiting; one squeue or sacct reports ended in a failed state is failed.
 */
function slurmQueue(set: RunSet): SweepExecutorQueue | null {
  const submissions = readSubmissions(set);
  if (submissions.length === 0) return null;
  const reachable = commandAnswers('squeue', ['-h', '-o', '%i', '-j', submissions.at(-1)!.jobId]);
  return queueView(submissions, reachable ? queueState(submissions) : new Map(), reachable);
}

export function queueView(submissions: Submission[], entries: Map<number, QueueEntry>, reachable: boolean): SweepExecutorQueue {
  return {
    header: `Slurm jobs ${submissions.map((s) => s.jobId).join(', ')}${reachable ? '' : ' (squeue not reachable)'}`,
    reachable,
    tasks: new Map([...entries].map(([index, entry]) => [index, queuedTask(entry)])),
  };
}

function queuedTask(entry: QueueEntry): QueuedTask {
  const task = `Slurm task ${entry.taskId}`;
  const where = `Slurm ${entry.taskId} ${entry.state}`;
  const listed = entry.source === 'squeue' && ACTIVE_STATES.has(entry.state);
  if (listed && entry.state !== 'PENDING' && entry.state !== 'REQUEUED') return { task, phase: 'running', detail: where };
  if (listed) return { task, phase: 'waiting', detail: `${where}${entry.detail && entry.detail !== 'None' ? ` (${entry.detail})` : ''}` };
  if (FAILED_STATES.has(entry.state)) return { task, phase: 'failed', detail: `${where} (${entry.detail})` };
  return { task, phase: 'ended', detail: where };
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

/** `<array job>_<index>` inside a Slurm array task, else null. */
function currentSlurmJob(): string | null {
  const { SLURM_ARRAY_JOB_ID: job, SLURM_ARRAY_TASK_ID: task } = process.env;
  return job && task ? `${job}_${task}` : null;
}

/**
 * In an array task of several Slurm tasks (SLURM_NTASKS > 1, from the script's --nodes and --ntasks-per-node) of a set
 * whose runs can span them (RunSet.multiTask): the trainer runs under srun, one rank per task. srun is given the CPUs
 * per task (since Slurm 22.05 it does not take them from the batch job) and each rank's TensorFlow thread pools are
 * capped to them, as `train --processes` does.
 */
function unitLauncher(set: RunSet): WorkerLauncher | null {
  const { SLURM_NTASKS: tasks, SLURM_CPUS_PER_TASK: cpus, SLURM_JOB_ID: job } = process.env;
  // A set whose runs run in one process (a paper experiment that does not train) stays so even when an extra
  // `--sbatch=--ntasks=N` gave its array task several Slurm tasks.
  if (!set.multiTask || !currentSlurmJob() || !job || !(Number(tasks) > 1)) return null;
  const threads = cpus && /^\d+$/.test(cpus) ? cpus : null;
  return {
    prefix: ['srun', '--kill-on-bad-exit=1', '--distribution=block', ...(threads ? [`--cpus-per-task=${threads}`] : [])],
    env: threads ? { TF_NUM_INTRAOP_THREADS: threads, TF_NUM_INTEROP_THREADS: threads } : {},
    stop(log) {
      // The step's tasks, not srun (see the top of this file); without --batch or --full scancel leaves the batch shell alone.
      try {
        execFileSync('scancel', ['--signal=TERM', job], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000 });
      } catch (e) {
        log.write(`sweep: scancel --signal=TERM ${job} failed (${(e as Error).message.split('\n')[0]}); the ranks go on until the time limit\n`);
      }
    },
  };
}

/** In a Slurm array task stopped by the time-limit warning: put the task back in the queue, to resume. */
function requeueSelf(err: NodeJS.WritableStream): void {
  const job = currentSlurmJob();
  if (!job || process.env.SLAYFORMER_SWEEP_NO_REQUEUE) return;
  try {
    execFileSync('scontrol', ['requeue', job], { stdio: ['ignore', 'pipe', 'pipe'], timeout: 30_000 });
    err.write(`sweep: requeued Slurm task ${job}; it resumes from its checkpoint\n`);
  } catch (e) {
    err.write(`sweep: scontrol requeue ${job} failed (${(e as Error).message.split('\n')[0]}); submit the sweep again to resume\n`);
  }
}
