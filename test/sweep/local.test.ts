// The local executor for real: the shipped tiny sweep on a small corpus through the sweep CLI (child processes,
// wasm backend). Runs go two at a time on two cores, re-running skips finished runs, a failing run does not stop
// the others and shows up in status with its last log line, and a Ctrl-C'd sweep resumes to the same final loss as
// an uninterrupted run.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readMetrics } from '../../src/store/run-record.ts';
import { killChildren, makeCorpus, oneLongerRun, sweepCli, waitForFiles, writeTinySweep } from './fixtures.ts';
import type { Corpus } from './fixtures.ts';

let dir: string;
let corpus: Corpus;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'sweep-local-'));
  corpus = await makeCorpus(dir);
});
afterAll(async () => {
  killChildren();
  await rm(dir, { recursive: true, force: true });
});

const runFolders = (runDir: string) =>
  existsSync(runDir)
    ? readdirSync(runDir)
        .filter((e) => e !== '_sweep')
        .sort()
    : [];
const summary = (runDir: string, folder: string) =>
  JSON.parse(readFileSync(join(runDir, folder, 'summary.json'), 'utf8')) as { val_loss: number; steps: number };

describe('local executor', () => {
  it('runs every run as its own process, as many at once as the cores allow, and skips finished runs when run again', async () => {
    const runDir = join(dir, 'runs-tiny');
    const file = writeTinySweep(join(dir, 'tiny.yaml'), corpus, runDir);
    const first = sweepCli(['run', file, '--cores', '2']);
    expect(await first.exited, first.output()).toEqual({ code: 0, signal: null });
    const out = first.output();
    const folders = runFolders(runDir);
    expect(folders.map((f) => f.replace(/-\d{8}-\d{6}(-\d+)?$/, ''))).toEqual(['slay-seed1', 'slay-seed2', 'softmax-seed1', 'softmax-seed2']);
    for (const folder of folders) expect(summary(runDir, folder).steps).toBe(24);
    // Each run has one replica: two start at once on two cores, the third waits for one of them to finish.
    const events = out
      .split('\n')
      .filter((l) => /^(start|done) /.test(l))
      .map((l) => l.split(/\s+/).slice(0, 2).join(' ').replace(/:$/, ''));
    expect(events.slice(0, 2)).toEqual(['start softmax-seed1', 'start softmax-seed2']);
    expect(events[2]).toMatch(/^done softmax-seed[12]$/);
    expect(events.filter((e) => e.startsWith('done'))).toHaveLength(4);
    expect(out).toMatch(/4 done now, 0 done before, 0 stopped, 0 failed/);

    const status = sweepCli(['status', file]);
    expect(await status.exited).toEqual({ code: 0, signal: null });
    expect(status.output()).toMatch(/4 runs: 4 done/);
    expect(status.output()).toMatch(/softmax-seed1\s+done\s+val loss \d\.\d{4} after 24 steps/);

    const again = sweepCli(['run', file]);
    expect(await again.exited).toEqual({ code: 0, signal: null });
    expect(again.output()).toMatch(/4 runs, 4 done already, 0 to run/);
    // A run's guard, by name: done already. `task`, the guard's name in older versions (which Slurm jobs queued then
    // still run), does the same.
    for (const command of ['guard', 'task']) {
      const guard = sweepCli([command, file, 'softmax-seed1']);
      expect(await guard.exited, guard.output()).toEqual({ code: 0, signal: null });
      expect(guard.output()).toMatch(/^softmax-seed1: done already \(\S+softmax-seed1-\d{8}-\d{6}(-\d+)?\)$/m);
    }
    expect(runFolders(runDir)).toEqual(folders);

    const outDir = join(dir, 'report-tiny');
    const report = sweepCli(['report', file, '--out', outDir]);
    expect(await report.exited, report.output()).toEqual({ code: 0, signal: null });
    const markdown = readFileSync(join(outDir, 'report.md'), 'utf8');
    expect(markdown).toMatch(/\| softmax \| \(baseline\) \| \| \| \d\.\d{4} ± \d\.\d{4} \| 2 \| 1, 2 \| softmax \|/);
    expect(markdown).toMatch(
      /\| slay \| [+−]\d\.\d{4} \[[+−]\d\.\d{4}, [+−]\d\.\d{4}\] \| [\d.<\s]+ \| [012]\/2 \| \d\.\d{4} ± \d\.\d{4} \| 2 \| 1, 2 \| slay \|/,
    );
    expect(existsSync(join(outDir, 'compare', 'val-loss.svg'))).toBe(true);
    // --baseline none: no pairing, as compare's.
    const unpaired = sweepCli(['report', file, '--out', join(dir, 'report-none'), '--baseline', 'none']);
    expect(await unpaired.exited, unpaired.output()).toEqual({ code: 0, signal: null });
    expect(readFileSync(join(dir, 'report-none', 'report.md'), 'utf8')).not.toContain('Δ vs');
  }, 900_000);

  it('goes on when a run fails, and status shows the failure with its last log line', async () => {
    const runDir = join(dir, 'runs-failing');
    const file = writeTinySweep(join(dir, 'failing.yaml'), corpus, runDir, (sweep) => {
      sweep.grid = { 'model.attention': ['softmax'] };
      sweep.cases = [{ label: 'broken', 'data.textColumn': 'nope' }, { label: 'fine' }];
    });
    const run = sweepCli(['run', file, '--cores', '2']);
    expect(await run.exited).toEqual({ code: 1, signal: null });
    expect(run.output()).toMatch(/FAILED broken \(exit 1\): train: .*nope/);
    expect(run.output()).toMatch(/1 done now, 0 done before, 0 stopped, 1 failed/);
    expect(runFolders(runDir).some((f) => f.startsWith('fine-') && existsSync(join(runDir, f, 'summary.json')))).toBe(true);
    const status = sweepCli(['status', file]);
    expect(await status.exited).toEqual({ code: 1, signal: null });
    expect(status.output()).toMatch(/0\s+broken\s+failed\s+exit 1: train: .*nope/);
    expect(status.output()).toMatch(/1\s+fine\s+done/);
  }, 900_000);

  it('refuses to start when a dataset or tokenizer is missing, naming it and the runs that need it', async () => {
    const file = writeTinySweep(
      join(dir, 'missing.yaml'),
      { data: join(dir, 'no-such-data'), tokenizer: corpus.tokenizer },
      join(dir, 'runs-missing'),
      (sweep) => {
        sweep.cases = [{ label: 'a' }, { label: 'b', 'data.tokenizer': join(dir, 'no-such-tokenizer.json') }];
      },
    );
    const run = sweepCli(['run', file]);
    expect(await run.exited).toEqual({ code: 2, signal: null });
    expect(run.output()).toContain(`${file}: data.dataset ${join(dir, 'no-such-data')} does not exist (needed by every run)`);
    expect(run.output()).toContain(
      `${file}: data.tokenizer ${join(dir, 'no-such-tokenizer.json')} does not exist (needed by b-softmax-seed1, b-softmax-seed2, b-slay-seed1, b-slay-seed2)`,
    );
    expect(existsSync(join(dir, 'runs-missing'))).toBe(false);
  });

  it("stops on Ctrl-C with a checkpoint, and a re-run resumes to an uninterrupted run's final loss", async () => {
    const referenceDir = join(dir, 'runs-reference');
    const reference = sweepCli(['guard', writeTinySweep(join(dir, 'reference.yaml'), corpus, referenceDir, oneLongerRun), '0']);
    const runDir = join(dir, 'runs-interrupted');
    const file = writeTinySweep(join(dir, 'interrupted.yaml'), corpus, runDir, oneLongerRun);
    const run = sweepCli(['run', file]);
    const checkpoints = () =>
      runFolders(runDir).flatMap((f) => (existsSync(join(runDir, f, 'checkpoints')) ? readdirSync(join(runDir, f, 'checkpoints')) : []));
    await waitForFiles('the first checkpoint', dir, 120_000, () => checkpoints().some((c) => c.startsWith('step-')));
    run.process.kill('SIGINT');
    expect(await run.exited).toEqual({ code: 130, signal: null });
    expect(run.output()).toMatch(/stop\s+interrupted: .*resume with/);
    const [folder] = runFolders(runDir);
    expect(existsSync(join(runDir, folder, 'summary.json'))).toBe(false);
    const status = sweepCli(['status', file]);
    await status.exited;
    expect(status.output()).toMatch(/interrupted\s+stopped\s+stopped \(exit 143\); resumes from step \d+/);

    const resumed = sweepCli(['run', file]);
    expect(await resumed.exited, resumed.output()).toEqual({ code: 0, signal: null });
    expect(runFolders(runDir)).toEqual([folder]); // the same run folder, continued
    expect(readFileSync(join(runDir, '_sweep', 'logs', 'interrupted.log'), 'utf8')).toMatch(/resuming from step \d+[\s\S]*resumed from .*step-\d+ at step \d+/);
    expect(await reference.exited).toEqual({ code: 0, signal: null });
    const [referenceFolder] = runFolders(referenceDir);
    const got = summary(runDir, folder);
    const want = summary(referenceDir, referenceFolder);
    expect(got.steps).toBe(want.steps);
    expect(Math.abs(got.val_loss - want.val_loss)).toBeLessThanOrEqual(1e-6 * want.val_loss);
    const losses = (d: string) =>
      readMetrics(d)
        .filter((r) => r.split === 'train')
        .map((r) => r.loss);
    const a = losses(join(runDir, folder));
    const b = losses(join(referenceDir, referenceFolder));
    expect(a).toHaveLength(b.length);
    a.forEach((loss, i) => expect(Math.abs(loss - b[i])).toBeLessThanOrEqual(1e-6 * b[i]));
  }, 900_000);
});
