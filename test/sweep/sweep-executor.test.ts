// The executor extension point: a toy executor, registered the way a new one is added (registerSweepExecutor), takes its
// settings from a sweep file's section and its flag, is handed only the runs that are not done, and `sweep status`
// (setStatus, what the command prints) shows its queue; a guard it claims records its task in the run's
// attempt. No training: the toy "submits" by writing its own queue file, and the guard's worker is a small script that
// leaves what a finished run leaves (a run folder with summary.json). The built-in Slurm executor is reached the same
// way from a guard: its array task is named in the attempt and, stopped at its request, requeued.
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { executorSettings, runOnExecutor } from '../../src/cli/executor-options.ts';
import type { SweepExecutor, SweepExecutorQueue } from '../../src/sweep/sweep-executor.ts';
import { executorNamed, registerSweepExecutor } from '../../src/sweep/executor-registry.ts';
import type { RunSet, SetRun } from '../../src/sweep/run-set.ts';
import { executorFolder, readAttempt } from '../../src/sweep/set-files.ts';
import { loadSweep, SweepError } from '../../src/sweep/spec.ts';
import { setStatus } from '../../src/sweep/status.ts';
import { runGuarded } from '../../src/sweep/guard.ts';

const dir = mkdtempSync(join(tmpdir(), 'sweep-executor-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** What the toy was asked, in order. */
const asked: { runs: string[]; settings: Record<string, unknown> }[] = [];
const queueFile = (set: RunSet) => join(executorFolder(set, 'toy'), 'queue.json');

const toy: SweepExecutor = {
  name: 'toy',
  description: 'queues the runs in a file of its own',
  settings: {
    batch: { flag: '--toy-batch', help: 'runs per batch', check: (v) => (Number.isInteger(v) && (v as number) >= 1 ? null : 'an integer ≥ 1') },
  },
  submits: true,
  async run(set: RunSet, pending: SetRun[], settings: Record<string, unknown>) {
    asked.push({ runs: pending.map((r) => r.name), settings });
    mkdirSync(executorFolder(set, 'toy'), { recursive: true });
    writeFileSync(queueFile(set), JSON.stringify(pending.map((r) => r.index)));
    return { kind: 'submitted', what: 'toy batch 1', runs: pending.length, file: queueFile(set) };
  },
  preview: (_set, pending) => pending.map((r) => r.name).join('\n'),
  queue(set: RunSet): SweepExecutorQueue | null {
    if (!existsSync(queueFile(set))) return null;
    const indices = JSON.parse(readFileSync(queueFile(set), 'utf8')) as number[];
    return {
      header: 'toy batch 1',
      reachable: true,
      tasks: new Map(indices.map((i) => [i, { task: `toy task ${i}`, phase: 'waiting', detail: `toy ${i} queued` }])),
    };
  },
  currentTask: () => (process.env.TOY_TASK ? `toy task ${process.env.TOY_TASK}` : null),
};
registerSweepExecutor(toy);

const recipe = join(dir, 'base.yaml');
writeFileSync(recipe, 'model: { dModel: 16, numHeads: 2 }\ndata: { dataset: data/x, tokenizer: data/t.json, seqLen: 16 }\ntrain: { batchSize: 4 }\n');

function sweepFile(name: string, section: string): string {
  const file = join(dir, `${name}.yaml`);
  writeFileSync(file, `recipe: ${recipe}\nrunDir: ${join(dir, name)}\ngrid: { train.seed: [1, 2, 3] }\n${section}\n`);
  return file;
}

/** A run folder as a finished run leaves it (summary.json marks it done). */
const WORKER = join(dir, 'worker.mjs');
writeFileSync(
  WORKER,
  `import { mkdirSync, writeFileSync } from 'node:fs';
const [folder] = process.argv.slice(2);
mkdirSync(folder, { recursive: true });
writeFileSync(folder + '/summary.json', JSON.stringify({ headline: 'toy finished' }));
console.log('toy worker done');
`,
);

describe('a registered executor', () => {
  it('takes its settings from its section of the sweep file, checked by its table', () => {
    expect(loadSweep(sweepFile('settings', 'toy: { batch: 2 }')).executorSettings.toy).toEqual({ batch: 2 });
    expect(() => loadSweep(sweepFile('bad', 'toy: { batch: 0, bacth: 1 }'))).toThrow(SweepError);
    expect(() => loadSweep(sweepFile('bad', 'toy: { batch: 0, bacth: 1 }'))).toThrow(
      /toy\.batch must be an integer ≥ 1 \(got 0\)[\s\S]*unknown key toy\.bacth; allowed: batch/,
    );
    // Its flag on top of the file's; another executor's flag is refused rather than ignored.
    const sweep = loadSweep(sweepFile('flags', 'toy: { batch: 2 }'));
    expect(executorSettings(toy, sweep.executorSettings.toy, { 'toy-batch': '5' })).toEqual({ batch: 5 });
    expect(() => executorSettings(toy, {}, { cores: '2' })).toThrow('--cores is a setting of the local executor, not of toy');
    expect(() => registerSweepExecutor({ ...toy, name: 'toy2' })).toThrow('executors toy and toy2 both take --toy-batch');
    expect(executorNamed('toy')).toBe(toy);
  });

  it('is handed the runs that are not done, and status shows its queue; a task it claims records its task', async () => {
    const sweep = loadSweep(sweepFile('runs', 'toy: { batch: 2 }'));
    const [first, second, third] = sweep.runs;
    mkdirSync(join(sweep.runDir, `${first.name}-20260101-000000`), { recursive: true });
    writeFileSync(join(sweep.runDir, `${first.name}-20260101-000000`, 'summary.json'), JSON.stringify({ headline: 'done before' }));

    const outcome = await runOnExecutor(sweep, { executor: 'toy', 'toy-batch': '4' }, { nothingLeft: 'nothing left' });
    expect(outcome).toEqual({ kind: 'submitted', what: 'toy batch 1', runs: 2, file: queueFile(sweep) });
    expect(asked).toEqual([{ runs: [second.name, third.name], settings: { batch: 4 } }]);

    const status = setStatus(sweep, 'sweep');
    expect(status.text.split('\n')[0]).toBe(`sweep ${sweep.name} (${sweep.file}) → ${sweep.runDir}; toy batch 1`);
    expect(status.states.map((s) => [s.run.name, s.state, s.detail])).toEqual([
      [first.name, 'done', 'done before'],
      [second.name, 'pending', `toy ${second.index} queued`],
      [third.name, 'pending', `toy ${third.index} queued`],
    ]);

    // The guard of run 1, as the toy's task: the worker finishes the run; the attempt names the toy's task.
    process.env.TOY_TASK = String(second.index);
    try {
      const sink = { write: () => true } as unknown as NodeJS.WritableStream;
      const result = await runGuarded(
        sweep,
        second,
        () => ({ args: [WORKER, join(sweep.runDir, `${second.name}-20260101-000001`)], banner: 'starting' }),
        sink,
        sink,
      );
      expect(result).toMatchObject({ action: 'trained', exitCode: 0 });
    } finally {
      delete process.env.TOY_TASK;
    }
    expect(readAttempt(sweep, second)).toMatchObject({ outcome: 'done', task: { executor: 'toy', name: `toy task ${second.index}` } });
    expect(readFileSync(join(sweep.runDir, '_sweep', 'logs', `${second.name}.log`), 'utf8')).toContain(`starting (toy task ${second.index})`);
    expect(setStatus(sweep, 'sweep').states[1]).toMatchObject({ state: 'done', detail: 'toy finished' });

    // Every run done: a submitting executor is not called again.
    mkdirSync(join(sweep.runDir, `${third.name}-20260101-000000`), { recursive: true });
    writeFileSync(join(sweep.runDir, `${third.name}-20260101-000000`, 'summary.json'), JSON.stringify({ headline: 'done' }));
    expect(await runOnExecutor(sweep, { executor: 'toy' }, { nothingLeft: 'nothing left' })).toBeNull();
    expect(asked).toHaveLength(1);
  });
});

describe('the slurm executor, through the registry', () => {
  it('names its array task in the attempt and requeues a task it asked to stop (a fake scontrol records the call)', async () => {
    const sweep = loadSweep(sweepFile('requeue', ''));
    const run = sweep.runs[0];
    const bin = join(dir, 'bin');
    mkdirSync(bin, { recursive: true });
    writeFileSync(join(bin, 'scontrol'), `#!/bin/sh\necho "$@" > ${join(dir, 'scontrol-args')}\n`);
    chmodSync(join(bin, 'scontrol'), 0o755);
    // The worker says it is ready, then waits to be stopped (SIGTERM ends it: exit 143).
    const waiter = join(dir, 'waiter.mjs');
    writeFileSync(waiter, `console.log('ready');\nsetInterval(() => {}, 1000);\n`);
    const saved = { ...process.env };
    Object.assign(process.env, { SLURM_ARRAY_JOB_ID: '41', SLURM_ARRAY_TASK_ID: '0', PATH: `${bin}:${process.env.PATH}` });
    const err: string[] = [];
    try {
      // SIGUSR1 is what the batch shell gets before the time limit; sent once the worker runs.
      const out = {
        write: (chunk: Buffer) => (String(chunk).includes('ready') && process.kill(process.pid, 'SIGUSR1'), true),
      } as unknown as NodeJS.WritableStream;
      const sink = { write: (chunk: Buffer | string) => (err.push(String(chunk)), true) } as unknown as NodeJS.WritableStream;
      const result = await runGuarded(sweep, run, () => ({ args: [waiter], banner: 'starting' }), out, sink);
      expect(result).toMatchObject({ action: 'trained', exitCode: 143 });
    } finally {
      for (const key of ['SLURM_ARRAY_JOB_ID', 'SLURM_ARRAY_TASK_ID', 'PATH']) {
        if (saved[key] === undefined) delete process.env[key];
        else process.env[key] = saved[key];
      }
    }
    expect(readAttempt(sweep, run)).toMatchObject({ outcome: 'stopped', task: { executor: 'slurm', name: 'Slurm task 41_0' } });
    expect(readFileSync(join(dir, 'scontrol-args'), 'utf8')).toBe('requeue 41_0\n');
    expect(err.join('')).toContain('sweep: requeued Slurm task 41_0; it resumes from its checkpoint');
  });
});

describe("a run's bookkeeping files", () => {
  it('are never written through a symbolic link planted at their name: the guard refuses it, naming it, before the worker starts', async () => {
    const sweep = loadSweep(sweepFile('linked', ''));
    const [run] = sweep.runs;
    const victim = join(dir, 'victim.txt');
    const sink = { write: () => true } as unknown as NodeJS.WritableStream;
    const folder = join(sweep.runDir, `${run.name}-20260101-000001`);
    for (const kind of ['logs', 'attempts'] as const) {
      writeFileSync(victim, "not the sweep's");
      const link = join(sweep.runDir, '_sweep', kind, `${run.name}.${kind === 'logs' ? 'log' : 'json'}`);
      mkdirSync(join(sweep.runDir, '_sweep', kind), { recursive: true });
      symlinkSync(victim, link);
      await expect(runGuarded(sweep, run, () => ({ args: [WORKER, folder], banner: 'starting' }), sink, sink)).rejects.toThrow(
        `${link} is a symbolic link where slayformer keeps a file of its own: nothing is written through it (remove the link)`,
      );
      expect(readFileSync(victim, 'utf8')).toBe("not the sweep's");
      expect(existsSync(folder)).toBe(false); // the worker did not start
      rmSync(link);
    }
  });
});

describe('the local executor, beside another process running the same set', () => {
  it('counts a run whose guard left it to another process (exit 0, not done) as running elsewhere, not as done now', async () => {
    // The guard of run 0 finishes it; the guard of run 1 finds it locked by another process (as runGuarded answers
    // when a second `paper` command started after the first one's check) and exits 0 without finishing it.
    const guard = join(dir, 'toy-guard.mjs');
    writeFileSync(
      guard,
      `import { mkdirSync, writeFileSync } from 'node:fs';
const [runDir, index] = process.argv.slice(2);
if (index === '1') {
  console.log('unit-1: running already (pid 4242 on this host, since then)');
} else {
  mkdirSync(runDir + '/unit-0-20260101-000000', { recursive: true });
  writeFileSync(runDir + '/unit-0-20260101-000000/summary.json', '{}');
}
`,
    );
    const runDir = join(dir, 'two-commands');
    const set: RunSet = {
      file: 'toy set',
      name: 'toy',
      runDir,
      executorSettings: {},
      guard: [guard, runDir],
      runs: [0, 1].map((index) => ({ index, name: `unit-${index}`, cores: 1, requestedCpus: 1 })),
    };
    let printed = '';
    const out = { write: (chunk: string) => ((printed += chunk), true) } as unknown as NodeJS.WritableStream;
    const outcome = await executorNamed('local').run(set, set.runs, { cores: 2 }, { out });
    expect(outcome).toMatchObject({ kind: 'ran', done: ['unit-0'], elsewhere: ['unit-1'], failed: [], stopped: [], skipped: [] });
    expect(printed).toContain('elsewhere unit-1: unit-1: running already (pid 4242 on this host, since then)');
  });
});
