// Run states, the Slurm script and queue parsing, and the report's numbers, on fabricated run folders (no training).
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { buildReport } from '../../src/sweep/report.ts';
import { executorFolder, sweepPaths } from '../../src/sweep/set-files.ts';
import { compressIndices, parseQueueLines, queueState, queueView, renderSbatchScript } from '../../src/sweep/slurm.ts';
import type { QueueEntry } from '../../src/sweep/slurm.ts';
import { loadSweep } from '../../src/sweep/spec.ts';
import type { Sweep, SweepRun } from '../../src/sweep/spec.ts';
import { runState, setStatus } from '../../src/sweep/status.ts';
import type { NamedQueue } from '../../src/sweep/status.ts';

const dir = mkdtempSync(join(tmpdir(), 'sweep-state-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const recipe = join(dir, 'base.yaml');
writeFileSync(
  recipe,
  `model: { dModel: 16, numHeads: 2 }\ndata: { dataset: data/x, tokenizer: data/t.json, seqLen: 16 }\ntrain: { batchSize: 4, dataParallel: 2 }\n`,
);
const file = join(dir, 'cmp.yaml');
writeFileSync(
  file,
  `recipe: ${recipe}\nrunDir: ${join(dir, 'runs')}\ngrid:\n  model.attention: [softmax, slay, performer]\n  train.seed: [1, 2, 3]\nreport: { baseline: softmax }\n`,
);
const sweep: Sweep = loadSweep(file);
const run = (name: string): SweepRun => sweep.runs.find((r) => r.name === name)!;
const paths = sweepPaths(sweep);

/** A run folder as the trainer leaves it: config.json, metrics.jsonl, optionally a checkpoint and summary.json. */
function fabricate(name: string, opts: { finalLoss?: number; checkpointStep?: number; stamp?: string } = {}): string {
  const folder = join(sweep.runDir, `${name}-${opts.stamp ?? '20260101-000000'}`);
  mkdirSync(folder, { recursive: true });
  writeFileSync(join(folder, 'config.json'), JSON.stringify(run(name).recipe));
  const loss = opts.finalLoss ?? 6;
  const record = (split: string, l: number) => ({
    step: 10,
    tokens: 640,
    split,
    loss: l,
    ppl: Math.exp(l),
    lr: 1e-3,
    grad_norm: split === 'train' ? 1 : null,
    tokens_per_s: 100,
    elapsed_s: 6.4,
  });
  writeFileSync(
    join(folder, 'metrics.jsonl'),
    `${JSON.stringify(record('train', loss + 0.1))}\n${JSON.stringify({ ...record('val', loss), bpb: loss / 3 })}\n`,
  );
  if (opts.checkpointStep !== undefined) {
    const ckpt = join(folder, 'checkpoints', `step-${String(opts.checkpointStep).padStart(6, '0')}`);
    mkdirSync(ckpt, { recursive: true });
    writeFileSync(join(ckpt, 'COMPLETE'), 'x\n');
  }
  if (opts.finalLoss !== undefined) {
    writeFileSync(
      join(folder, 'summary.json'),
      JSON.stringify({
        steps: 10,
        tokens: 640,
        elapsed_s: 6.4,
        train_tokens_per_s: 100,
        val_loss: loss,
        val_ppl: Math.exp(loss),
        val_bpb: loss / 3,
        parameters: 1000,
      }),
    );
  }
  return folder;
}

function writeState(kind: 'locks' | 'attempts', name: string, value: object): void {
  mkdirSync(paths[kind], { recursive: true });
  writeFileSync(join(paths[kind], `${name}.${kind === 'locks' ? 'lock' : 'json'}`), JSON.stringify(value));
}

/** Slurm's queue (as squeue answered) holding task 7_0 in `state` for every run; no entries: a queue that lists none of them. */
function queue(state: string | null, detail = 'None', source: QueueEntry['source'] = 'squeue', reachable = true): NamedQueue[] {
  const entry: QueueEntry = { jobId: '7', taskId: '7_0', state: state ?? '', detail, source };
  const entries = new Map(state === null ? [] : sweep.runs.map((r) => [r.index, entry]));
  return [{ ...queueView([{ jobId: '7', indices: [], script: '', submittedAt: '' }], entries, reachable), executor: 'slurm' }];
}

describe('run states', () => {
  it('reads done, running, pending, stopped and failed from folders, locks, attempts and the queue', () => {
    fabricate('softmax-seed1', { finalLoss: 5.5 });
    expect(runState(sweep, run('softmax-seed1'), undefined)).toMatchObject({ state: 'done', detail: 'val loss 5.5000 after 10 steps, 100 tok/s' });
    expect(runState(sweep, run('softmax-seed2'), undefined)).toMatchObject({ state: 'pending', detail: 'not started', dir: null });

    // A live local lock (this process) and the last log line.
    fabricate('softmax-seed3', { checkpointStep: 8 });
    writeState('locks', 'softmax-seed3', { pid: process.pid, host: hostname(), task: null, startedAt: 'now' });
    mkdirSync(paths.logs, { recursive: true });
    writeFileSync(join(paths.logs, 'softmax-seed3.log'), '=== start\nstep 8/10 | loss 6.1\n');
    expect(runState(sweep, run('softmax-seed3'), undefined)).toMatchObject({ state: 'running', detail: `pid ${process.pid}: step 8/10 | loss 6.1` });
    // The same lock from a dead process: interrupted, resumable from its checkpoint.
    writeState('locks', 'softmax-seed3', { pid: 2 ** 22 + 12345, host: hostname(), task: null, startedAt: 'then' });
    expect(runState(sweep, run('softmax-seed3'), undefined)).toMatchObject({ state: 'stopped', detail: 'interrupted; resumes from step 8' });

    // Slurm: queued, running, ended by Slurm; the guard's own record of a failure.
    expect(runState(sweep, run('slay-seed1'), queue('PENDING', 'Resources'))).toMatchObject({ state: 'pending', detail: 'Slurm 7_0 PENDING (Resources)' });
    expect(runState(sweep, run('slay-seed1'), queue('RUNNING'))).toMatchObject({ state: 'running', detail: 'Slurm 7_0 RUNNING' });
    fabricate('slay-seed2');
    expect(runState(sweep, run('slay-seed2'), queue('OUT_OF_MEMORY', '0:125', 'sacct'))).toMatchObject({
      state: 'failed',
      detail: 'Slurm 7_0 OUT_OF_MEMORY (0:125); restarts from step 0 (no checkpoint)',
    });
    writeState('attempts', 'slay-seed3', { outcome: 'failed', exitCode: 1, signal: null, lastLine: 'train: out of memory', task: null, endedAt: 'x' });
    expect(runState(sweep, run('slay-seed3'), undefined)).toMatchObject({ state: 'failed', detail: 'exit 1: train: out of memory' });
    writeState('attempts', 'performer-seed1', { outcome: 'stopped', exitCode: 143, signal: null, lastLine: 'resume with …', task: null, endedAt: 'x' });
    expect(runState(sweep, run('performer-seed1'), undefined)).toMatchObject({
      state: 'stopped',
      detail: 'stopped (exit 143); restarts from step 0 (no checkpoint)',
    });
    // A lock taken in a Slurm task that squeue no longer lists is stale.
    writeState('locks', 'performer-seed2', { pid: process.pid, host: 'node17', task: { executor: 'slurm', name: 'Slurm task 7_4' }, startedAt: 'then' });
    expect(runState(sweep, run('performer-seed2'), queue(null)).state).toBe('pending');
    expect(runState(sweep, run('performer-seed2'), queue(null, 'None', 'squeue', false))).toMatchObject({ state: 'running', detail: 'Slurm task 7_4' });
    expect(runState(sweep, run('performer-seed2')).state).toBe('running'); // nothing submitted: Slurm cannot be asked
  });

  it('passes over a dangling link named like a run folder (status, as paper --status, reads on)', () => {
    fabricate('softmax-seed1', { finalLoss: 5.5 });
    symlinkSync(join(dir, 'moved-away'), join(sweep.runDir, 'softmax-seed1-20270101-000000'));
    expect(runState(sweep, run('softmax-seed1'), undefined)).toMatchObject({ state: 'done', detail: 'val loss 5.5000 after 10 steps, 100 tok/s' });
    expect(setStatus(sweep, 'paper').states[0]).toMatchObject({ state: 'done' });
  });
});

describe('slurm pieces', () => {
  it('compresses array indices and parses squeue/sacct lines of its own job only', () => {
    expect(compressIndices([5, 0, 1, 2, 7, 8, 2])).toBe('0-2,5,7-8');
    expect(compressIndices([3])).toBe('3');
    const text = '12_0|RUNNING|None\n12_3|PENDING|Priority\n13_1|RUNNING|None\n12_[4-5]|PENDING|None\n12_2|CANCELLED by 0|0:15\n';
    expect(parseQueueLines(text, '12', 'squeue')).toEqual([
      { index: 0, jobId: '12', taskId: '12_0', state: 'RUNNING', detail: 'None', source: 'squeue' },
      { index: 3, jobId: '12', taskId: '12_3', state: 'PENDING', detail: 'Priority', source: 'squeue' },
      { index: 2, jobId: '12', taskId: '12_2', state: 'CANCELLED', detail: '0:15', source: 'squeue' },
    ]);
    // squeue wins over sacct for a task it lists; later submissions win over earlier ones.
    const fake = (cmd: string, args: string[]) => {
      const job = args[args.indexOf('-j') + 1];
      if (cmd === 'squeue') return job === '21' ? '21_1|RUNNING|None\n' : '';
      return job === '20' ? '20_0|COMPLETED|0:0\n20_1|FAILED|1:0\n' : null;
    };
    const state = queueState(
      [
        { jobId: '20', indices: [0, 1], script: '', submittedAt: '' },
        { jobId: '21', indices: [1], script: '', submittedAt: '' },
      ],
      fake,
    );
    expect(state.get(0)).toMatchObject({ taskId: '20_0', state: 'COMPLETED', source: 'sacct' });
    expect(state.get(1)).toMatchObject({ taskId: '21_1', state: 'RUNNING', source: 'squeue' });
  });

  it('writes one array task per run with the settings, the checkpoint signal and the guard command', () => {
    const script = renderSbatchScript(
      sweep,
      [0, 1, 2, 5],
      { partition: 'gpu', time: '2-00:00:00', gpus: 'a100:1', mem: '64G', maxParallel: 4, sbatch: ['--account=lab'], setup: ['module load nodejs/20'] },
      '/work/project',
    );
    const lines = script.split('\n');
    expect(lines[0]).toBe('#!/bin/bash');
    for (const directive of [
      '--job-name=cmp',
      '--array=0-2,5%4',
      `--output=${join(executorFolder(sweep, 'slurm'), '%A_%a.out')}`,
      '--chdir=/work/project',
      '--requeue',
      '--signal=B:USR1@120',
      '--cpus-per-task=2',
      '--partition=gpu',
      '--time=2-00:00:00',
      '--gpus=a100:1',
      '--mem=64G',
      '--account=lab',
    ])
      expect(lines).toContain(`#SBATCH ${directive}`);
    expect(lines.indexOf('module load nodejs/20')).toBeGreaterThan(lines.findLastIndex((l) => l.startsWith('#SBATCH')));
    // tsx by its absolute URL: the job's folder need not be the project's.
    expect(lines.at(-2)).toMatch(
      new RegExp(
        `^exec node --import file:///\\S+/tsx/dist/loader\\.mjs \\S+/src/cli/sweep\\.ts guard ${file.replace(/[.]/g, '\\.')} "\\$SLURM_ARRAY_TASK_ID"$`,
      ),
    );
    // The command line's --set reaches every guard.
    const withSet = renderSbatchScript(loadSweep(file, ['train.lr=0.003', 'backend=cpu']), [0], {}, '/x').split('\n');
    expect(withSet.at(-2)).toMatch(new RegExp(`guard ${file.replace(/[.]/g, '\\.')} --set train\\.lr=0\\.003 --set backend=cpu "\\$SLURM_ARRAY_TASK_ID"$`));
    expect(renderSbatchScript(sweep, [0], { requeueOnTimeLimit: false, signalSeconds: 300 }, '/x')).toMatch(
      /--signal=B:USR1@300[\s\S]*export SLAYFORMER_SWEEP_NO_REQUEUE=1/,
    );
  });
});

describe('report', () => {
  it('gives mean ± sd per group and the paired difference to the baseline over the seeds both finished', async () => {
    const reportDir = join(dir, 'report');
    const reportSweep: Sweep = { ...sweep, runDir: join(reportDir, 'runs') };
    const losses: Record<string, number[]> = { softmax: [5.3, 5.4, 5.35], slay: [5.32, 5.44, 5.36], performer: [5.5, 5.45] };
    const accuracies: Record<string, number[]> = { softmax: [0.3, 0.31, 0.32], slay: [0.31, 0.3, 0.33], performer: [0.2, 0.25] };
    const make = (name: string, loss: number, acc: number) => {
      const folder = join(reportSweep.runDir, `${name}-20260101-000000`);
      mkdirSync(folder, { recursive: true });
      writeFileSync(join(folder, 'config.json'), JSON.stringify(run(name).recipe));
      writeFileSync(
        join(folder, 'metrics.jsonl'),
        JSON.stringify({
          step: 10,
          tokens: 640,
          split: 'val',
          loss,
          ppl: Math.exp(loss),
          lr: 1e-3,
          grad_norm: null,
          tokens_per_s: 100,
          elapsed_s: 6,
          bpb: 1,
          acc,
        }) + '\n',
      );
      writeFileSync(
        join(folder, 'summary.json'),
        JSON.stringify({
          steps: 10,
          tokens: 640,
          elapsed_s: 6,
          train_tokens_per_s: 100,
          val_loss: loss,
          val_ppl: Math.exp(loss),
          val_bpb: 1,
          val_acc: acc,
          parameters: 1000,
        }),
      );
      // Where a run trained (env.json); the performer runs stand for older folders without one.
      if (!name.startsWith('performer'))
        writeFileSync(join(folder, 'env.json'), JSON.stringify({ backend: { name: name === 'slay-seed3' ? 'tensorflow' : 'wasm' } }));
    };
    for (const [mechanism, values] of Object.entries(losses)) values.forEach((loss, i) => make(`${mechanism}-seed${i + 1}`, loss, accuracies[mechanism][i]));
    const warnings: string[] = [];
    const report = await buildReport(reportSweep, { outDir: join(reportDir, 'out'), warn: (m) => warnings.push(m) });
    expect(report.missing).toEqual(['performer-seed3']);
    expect(warnings.some((w) => w.includes('1 of 9 runs have not finished'))).toBe(true);
    const [softmax, slay, performer] = report.groups;
    expect(softmax.stats.mean).toBeCloseTo(5.35, 12);
    expect(softmax.stats.sd).toBeCloseTo(0.05, 12);
    expect(softmax.paired).toBeNull();
    // slay − softmax per seed: 0.02, 0.04, 0.01 → mean 0.023333, sd 0.015275, t_{0.975,2} = 4.302653.
    expect(slay.paired!.mean).toBeCloseTo(0.07 / 3, 12);
    expect(slay.paired!.sd).toBeCloseTo(Math.sqrt(((0.02 - 0.07 / 3) ** 2 + (0.04 - 0.07 / 3) ** 2 + (0.01 - 0.07 / 3) ** 2) / 2), 12);
    expect(slay.paired!.ci![1] - slay.paired!.mean).toBeCloseTo((4.302653 * slay.paired!.sd!) / Math.sqrt(3), 5);
    expect(slay.paired!.wins).toBe(0);
    // performer: only seeds 1 and 2 pair.
    expect(performer.paired).toMatchObject({ n: 2, wins: 0 });
    expect(performer.paired!.mean).toBeCloseTo((0.2 + 0.05) / 2, 12);
    const markdown = report.files.find((f) => f.endsWith('report.md'))!;
    const text = readFileSync(markdown, 'utf8');
    // The comparison first: Δ with its interval, p, the seeds it won; then the group's own numbers.
    expect(text).toMatch(
      /\| slay \| \+0\.0233 \[−0\.0146, \+0\.0613\] \| 0\.118 \| 0\/3 \| 5\.3733 ± 0\.0611 \| 3 \| 1, 2, 3 \| slay \| 0\.3133 ± 0\.0153 \| 100 ± 0 \| wasm, tensorflow \|\n/,
    );
    expect(text).toMatch(/\| softmax \| \(baseline\) \| \| \| 5\.3500 ± 0\.0500 \| 3 \| .* \| wasm \|\n/);
    expect(text).toMatch(/\| performer \| \+0\.1250 [^\n]* \| 0\/2 \| 5\.4750 ± 0\.0354 \| 2 \| 1, 2 \| performer \|[^\n]* \| — \|\n/);

    // Accuracy as the compared metric: higher is better, so "better on" counts the seeds where it is higher.
    const byAccuracy = await buildReport(reportSweep, { outDir: join(reportDir, 'out-acc'), metric: 'finalValAcc', warn: () => {} });
    expect(byAccuracy.groups[1].paired).toMatchObject({ n: 3, wins: 2 });
    expect(byAccuracy.groups[1].paired!.mean).toBeCloseTo(0.01 / 3, 12);
    const accuracyMarkdown = readFileSync(byAccuracy.files.find((f) => f.endsWith('report.md'))!, 'utf8');
    expect(accuracyMarkdown).toContain(
      '| group | Δ vs softmax (paired mean [95% CI]) | p | better on | final validation top-1 accuracy (mean ± sd) | n | seeds | attention | tokens/s | backend |',
    );
    expect(accuracyMarkdown).toContain('(higher is better)');

    // A sweep file without a report section: the baseline defaults to softmax, as compare's does; 'none' pairs nothing.
    const noSection: Sweep = { ...reportSweep, report: { ...reportSweep.report, baseline: null } };
    const defaulted = await buildReport(noSection, { outDir: join(reportDir, 'out-default'), warn: () => {} });
    expect(defaulted.baseline).toBe('softmax');
    expect(defaulted.groups[1].paired).toMatchObject({ n: 3, baselineGroup: 'softmax' });
    const none = await buildReport(noSection, { outDir: join(reportDir, 'out-none'), baseline: null, warn: () => {} });
    expect(none.baseline).toBeNull();
    expect(none.groups.every((g) => g.paired === null)).toBe(true);
    // The compare report's recipe column names the sweep's group, not a run with its seed (softmax-seed1).
    const groupsCsv = readFileSync(join(reportDir, 'out', 'compare', 'groups.csv'), 'utf8').split('\r\n');
    expect(groupsCsv.filter((line) => /^(softmax|slay|performer),/.test(line)).map((line) => line.split(',').at(-1))).toEqual(['softmax', 'slay', 'performer']);
  });

  it('compares GPT and BERT runs of one sweep in separate compare reports, one per kind, and links both', async () => {
    const bertRecipe = join(dir, 'bert-base.yaml');
    writeFileSync(
      bertRecipe,
      `model: { kind: bert, dModel: 16, numHeads: 2 }\ndata: { dataset: data/x, tokenizer: data/t.json, seqLen: 16 }\ntrain: { batchSize: 4 }\n`,
    );
    const file = join(dir, 'kinds.yaml');
    writeFileSync(
      file,
      `recipe: ${recipe}\nrunDir: ${join(dir, 'kinds', 'runs')}\ncases: [{ label: gpt }, { label: bert, recipe: ${bertRecipe} }]\ngrid:\n  train.seed: [1]\n`,
    );
    const kinds = loadSweep(file);
    for (const r of kinds.runs) {
      const folder = join(kinds.runDir, `${r.name}-20260101-000000`);
      mkdirSync(folder, { recursive: true });
      writeFileSync(join(folder, 'config.json'), JSON.stringify(r.recipe));
      writeFileSync(
        join(folder, 'metrics.jsonl'),
        JSON.stringify({ step: 10, tokens: 640, split: 'val', loss: 5, ppl: Math.exp(5), lr: 1e-3, grad_norm: null, tokens_per_s: 100, elapsed_s: 6, bpb: 1 }) +
          '\n',
      );
      writeFileSync(
        join(folder, 'summary.json'),
        JSON.stringify({ steps: 10, tokens: 640, elapsed_s: 6, train_tokens_per_s: 100, val_loss: 5, val_ppl: Math.exp(5), val_bpb: 1, parameters: 1000 }),
      );
    }
    const out = join(dir, 'kinds', 'out');
    await buildReport(kinds, { outDir: out, warn: () => {} });
    const markdown = readFileSync(join(out, 'report.md'), 'utf8');
    expect(markdown).toMatch(
      /### gpt\n\n!\[Validation loss\]\(compare\/gpt\/val-loss\.svg\)[^]*### bert\n\n!\[Validation loss\]\(compare\/bert\/val-loss\.svg\)/,
    );
    expect(markdown).toContain('[compare/gpt/report.md](compare/gpt/report.md)');
    expect(readFileSync(join(out, 'compare', 'report.md'), 'utf8')).toContain(
      'model kind (causal vs masked LM loss): gpt: gpt-20260101-000000; bert: bert-20260101-000000',
    );
  });
});
