// The Slurm executor: one sbatch job array per submission, array index = the run's index in the sweep, every task
// running the same command as the local executor (`sweep task <file> <index>`). Queue state comes from squeue (and
// sacct where accounting is on); what each task did is recorded by the task itself (see task.ts).
//
// Signals. The script `exec`s the task, so the task is the batch shell: `--signal=B:USR1@<s>` reaches only it, some
// seconds before the time limit, and it asks the trainer to checkpoint (SIGTERM) and then requeues the array task, which
// resumes from that checkpoint. scancel, requeue and preemption signal every process of the job, the trainer included,
// so the task passes nothing on then (a second SIGTERM would make the trainer quit without its checkpoint). USR1 rather
// than TERM for the warning is what tells the two cases apart.
//
// Script text. Every value is refused or quoted before it reaches the script, so that each line is one of the
// shapes renderSbatchScript writes: values of `#SBATCH` lines (a comment to bash, options to sbatch) are words of a
// safe alphabet or double-quoted as sbatch's own parser reads them (`\` escapes `"`, `\` and `#`, which ends an
// argument even inside quotes in older Slurm versions); the task command is quoted for bash (task.ts); control
// characters (a newline would start a shell line of its own) are refused everywhere. `setup` lines are the one
// exception by design: shell code, run as written, one line each.
import { execFileSync } from 'node:child_process';
import { appendFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import type { RunSet } from './run-set.ts';
import { sweepPaths, taskCommand } from './task.ts';

import { CONTROL, SAFE_WORD, SLURM_FIELDS } from './options.ts';
import type { SlurmOptions } from './options.ts';

export { SLURM_FIELDS };
export type { SlurmOptions };

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
    const field = SLURM_FIELDS[key as keyof SlurmOptions];
    const problem = field ? field.check(value) : 'not a Slurm option';
    if (problem) problems.push(`slurm.${key} must be ${problem} (got ${JSON.stringify(value)})`);
  }
  const outputDir = sweepPaths(sweep).slurm;
  const values = [['the sweep file', sweep.file], ['the working folder (--chdir)', cwd], ['runDir', outputDir], ['the sweep name', sweep.name], ...sweep.task.map((arg) => ['the task command', arg])];
  for (const [what, text] of values) {
    if (CONTROL.test(text)) problems.push(`${what} ${JSON.stringify(text)} holds a control character (a newline would start a line of its own in the sbatch script)`);
  }
  // Slurm replaces %A, %j, … in --output (and %% by %): a '%' of the folder's own would change the path.
  if (outputDir.includes('%')) problems.push(`runDir ${JSON.stringify(sweep.runDir)} holds '%', which Slurm reads as a pattern in --output`);
  if (problems.length > 0) throw new Error(`cannot write the sbatch script of ${JSON.stringify(sweep.file)}:\n  ${problems.join('\n  ')}`);
}

/** The sbatch script of an array over `indices` (runs of the set). Paths are absolute; the job runs in `cwd`. */
export function renderSbatchScript(sweep: RunSet, indices: number[], options: SlurmOptions, cwd: string): string {
  checkScriptValues(sweep, options, cwd);
  const paths = sweepPaths(sweep);
  const cpus = options.cpusPerTask ?? Math.max(...sweep.runs.filter((r) => indices.includes(r.index)).map((r) => r.slurmCpus));
  const directives = [
    `--job-name=${sbatchValue(sweep.name)}`,
    `--array=${compressIndices(indices)}${options.maxParallel ? `%${options.maxParallel}` : ''}`,
    `--output=${sbatchValue(path.join(paths.slurm, '%A_%a.out'))}`,
    `--chdir=${sbatchValue(cwd)}`,
    '--requeue',
    `--signal=B:USR1@${options.signalSeconds ?? DEFAULT_SIGNAL_SECONDS}`,
    `--cpus-per-task=${cpus}`,
    ...(options.partition ? [`--partition=${options.partition}`] : []),
    ...(options.time ? [`--time=${options.time}`] : []),
    ...(options.gpus !== undefined ? [`--gpus=${options.gpus}`] : []),
    ...(options.mem ? [`--mem=${options.mem}`] : []),
    ...(options.sbatch ?? []).map(directive),
  ];
  const command = taskCommand(sweep, '"$SLURM_ARRAY_TASK_ID"', { shell: true, node: 'node' });
  return [
    '#!/bin/bash',
    `# Generated for ${sweep.file}: one array task per run (the array index is the run's index in`,
    '# the sweep). Each task runs the same command as the local executor; a requeued or preempted task resumes from',
    '# its last checkpoint. USR1 before the time limit: checkpoint, then requeue (see src/sweep/slurm.ts).',
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
export function submitSweep(sweep: RunSet, indices: number[], options: SlurmOptions, cwd = process.cwd()): Submission {
  const paths = sweepPaths(sweep);
  mkdirSync(paths.slurm, { recursive: true });
  const stamp = new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  const script = path.join(paths.slurm, `${sweep.name}-${stamp}.sbatch`);
  writeFileSync(script, renderSbatchScript(sweep, indices, options, cwd), { mode: 0o755 });
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
  appendFileSync(path.join(paths.slurm, 'jobs.jsonl'), JSON.stringify(submission) + '\n');
  return submission;
}

export function readSubmissions(sweep: Pick<RunSet, 'runDir'>): Submission[] {
  const file = path.join(sweepPaths(sweep).slurm, 'jobs.jsonl');
  if (!existsSync(file)) return [];
  return readFileSync(file, 'utf8').split('\n').filter((l) => l.trim() !== '').map((l, i) => {
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
 * skipped: the tasks' own records still tell what happened.
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
export const ACTIVE_STATES = new Set(['PENDING', 'CONFIGURING', 'RUNNING', 'COMPLETING', 'REQUEUED', 'REQUEUE_HOLD', 'REQUEUE_FED', 'RESIZING', 'SUSPENDED', 'STOPPED', 'SIGNALING', 'STAGE_OUT']);
