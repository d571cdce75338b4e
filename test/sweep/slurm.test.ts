// The Slurm executor on a real single-host cluster (Debian's slurm-wlm and munge, started by scripts/slurm-local.sh in a
// temporary folder): a job array of the tiny sweep runs to the end and the report is built; a task interrupted twice,
// by the time-limit warning (USR1 to the batch shell: checkpoint, then the guard requeues it) and by a requeue
// (what preemption does), resumes each time and ends at an uninterrupted run's final loss. Skipped, with the reason
// in the suite's name, where Slurm is not installed or cannot start. Without a cluster: every sweep field that reaches
// the sbatch script, fed the usual shell-injection strings, is refused naming the field or lands in the script as
// one line of an expected shape that bash and sbatch read back as the value given.
import { execFileSync, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { renderSbatchScript } from '../../src/sweep/slurm.ts';
import type { SlurmOptions } from '../../src/sweep/slurm.ts';
import { loadSweep } from '../../src/sweep/spec.ts';
import { TSX_IMPORT } from '../../src/tsx-import.ts';
import { killChildren, makeCorpus, oneLongerRun, pollFor, sweepCli, waitForFiles, writeTinySweep } from './fixtures.ts';
import type { Corpus } from './fixtures.ts';
import { startLocalSlurm } from '../helpers/slurm.ts';

const SETUP = 'bash scripts/slurm-local.sh install';
const cluster = startLocalSlurm('sweep-slurm');
const { dir: clusterDir, available, reason, env } = cluster;

let corpus: Corpus;
beforeAll(async () => {
  if (available) corpus = await makeCorpus(clusterDir);
});
afterAll(() => {
  killChildren();
  cluster.stop();
});

const slurm = (cmd: string, args: string[]) => execFileSync(cmd, args, { env, encoding: 'utf8' });
const runFolders = (runDir: string) =>
  existsSync(runDir)
    ? readdirSync(runDir)
        .filter((e) => e !== '_sweep')
        .sort()
    : [];
const summary = (dir: string) => JSON.parse(readFileSync(join(dir, 'summary.json'), 'utf8')) as { val_loss: number; steps: number };
const checkpointSteps = (dir: string) =>
  existsSync(join(dir, 'checkpoints'))
    ? readdirSync(join(dir, 'checkpoints'))
        .filter((c) => existsSync(join(dir, 'checkpoints', c, 'COMPLETE')))
        .map((c) => Number(c.slice(5)))
    : [];

async function submit(file: string, extra: string[] = []): Promise<string> {
  const cli = sweepCli(['run', file, '--executor', 'slurm', '--time', '15:00', ...extra], env);
  expect(await cli.exited, cli.output()).toEqual({ code: 0, signal: null });
  return /submitted job array (\d+)/.exec(cli.output())![1];
}

describe.skipIf(!available)(available ? 'slurm executor' : `slurm executor (skipped: ${reason}; set up with: ${SETUP})`, () => {
  it('runs a job array of the tiny sweep to the end, shows it in status, and builds the report', async () => {
    const runDir = join(clusterDir, 'runs-array');
    const file = writeTinySweep(join(clusterDir, 'array.yaml'), corpus, runDir);
    const job = await submit(file, ['--only', '0,1,2']);
    const script = readFileSync(join(runDir, '_sweep', 'slurm', readdirSync(join(runDir, '_sweep', 'slurm')).find((f) => f.endsWith('.sbatch'))!), 'utf8');
    expect(script).toMatch(/^#SBATCH --array=0-2$/m);
    expect(script).toMatch(/^#SBATCH --requeue$/m);
    expect(script).toMatch(/^#SBATCH --signal=B:USR1@120$/m);
    expect(script).toMatch(/^#SBATCH --time=15:00$/m);
    expect(script).toMatch(/^exec node --import file:\/\/\S+\/tsx\/dist\/loader\.mjs \S+src\/cli\/sweep\.ts guard \S+array\.yaml "\$SLURM_ARRAY_TASK_ID"$/m);

    await waitForFiles(
      'three finished runs',
      runDir,
      300_000,
      () => runFolders(runDir).filter((f) => existsSync(join(runDir, f, 'summary.json'))).length === 3,
    );
    expect(runFolders(runDir).map((f) => f.replace(/-\d{8}-\d{6}(-\d+)?$/, ''))).toEqual(['slay-seed1', 'softmax-seed1', 'softmax-seed2']);
    for (const f of runFolders(runDir)) expect(summary(join(runDir, f)).steps).toBe(24);
    for (const index of [0, 1, 2]) expect(existsSync(join(runDir, '_sweep', 'slurm', `${job}_${index}.out`))).toBe(true);

    const status = sweepCli(['status', file], env);
    await pollFor('the tasks to leave the queue', 60_000, () => !slurm('squeue', ['-h', '-r', '-j', job, '-o', '%T']).includes('RUNNING'));
    await status.exited;
    expect(status.output()).toMatch(new RegExp(`Slurm jobs ${job}`));
    expect(status.output()).toMatch(/0\s+softmax-seed1\s+done/);
    expect(status.output()).toMatch(/3\s+slay-seed2\s+pending\s+not started/);

    const outDir = join(clusterDir, 'report');
    const report = sweepCli(['report', file, '--out', outDir], env);
    expect(await report.exited, report.output()).toEqual({ code: 0, signal: null });
    expect(readFileSync(join(outDir, 'report.md'), 'utf8')).toMatch(/\| softmax \| \(baseline\) \|.* \| 2 \| 1, 2 \| softmax \|/);
    expect(existsSync(join(outDir, 'compare', 'val-loss.svg'))).toBe(true);
  }, 900_000);

  it("resumes after the time-limit warning and after a requeue, to an uninterrupted run's final loss", async () => {
    const referenceDir = join(clusterDir, 'runs-reference');
    const reference = sweepCli(['guard', writeTinySweep(join(clusterDir, 'reference.yaml'), corpus, referenceDir, oneLongerRun), '0']);
    const runDir = join(clusterDir, 'runs-requeued');
    const file = writeTinySweep(join(clusterDir, 'requeued.yaml'), corpus, runDir, oneLongerRun);
    const task = `${await submit(file)}_0`;
    const folder = () => runFolders(runDir)[0];
    const newestCheckpoint = () => (folder() ? Math.max(0, ...checkpointSteps(join(runDir, folder()))) : 0);

    const log = () => readFileSync(join(runDir, '_sweep', 'logs', 'requeued.log'), 'utf8');
    const diagnose = () =>
      `log:\n${log()}\nslurmctld.log:\n${readFileSync(join(clusterDir, 'cluster', 'slurmctld.log'), 'utf8')
        .split('\n')
        .slice(-15)
        .join('\n')}`;

    // 1. What --signal=B:USR1@120 does before the time limit: USR1 to the batch shell (the guard) only.
    await waitForFiles('a first checkpoint', runDir, 180_000, () => newestCheckpoint() > 0);
    slurm('scancel', ['--batch', '--signal=USR1', task]);
    // The requeued task starts again after the local cluster's credential lifetime (20 s; Slurm's default is 120 s).
    await waitForFiles('the first resume', runDir, 180_000, () => /resuming from step \d+/.test(log()) && log().includes('resumed from'), diagnose);
    expect(log()).toMatch(/requeued: stopped \(exit 143\)/);

    // 2. A requeue (as preemption does it): Slurm signals every process of the job, the trainer saves and stops.
    const resumedAt = Number(/resuming from step (\d+)/.exec(log())![1]);
    await waitForFiles('a checkpoint after the resume', runDir, 180_000, () => newestCheckpoint() > resumedAt, diagnose);
    slurm('scontrol', ['requeue', task]);
    await waitForFiles('the run to finish', runDir, 300_000, () => existsSync(join(runDir, folder(), 'summary.json')), diagnose);

    expect(runFolders(runDir)).toHaveLength(1);
    expect(log().match(/resuming from step \d+ in \S+ \(Slurm task \d+_0\)/g)).toHaveLength(2);
    expect(await reference.exited).toEqual({ code: 0, signal: null });
    const got = summary(join(runDir, folder()));
    const want = summary(join(referenceDir, runFolders(referenceDir)[0]));
    expect(got.steps).toBe(want.steps);
    expect(Math.abs(got.val_loss - want.val_loss)).toBeLessThanOrEqual(1e-6 * want.val_loss);
  }, 900_000);
});

describe('values that reach the sbatch script (no cluster needed)', () => {
  const work = mkdtempSync(join(tmpdir(), 'sweep-inject-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));
  const recipe = join(work, 'base.yaml');
  writeFileSync(recipe, 'model: { dModel: 16, numHeads: 2 }\ndata: { dataset: data/x, tokenizer: data/t.json, seqLen: 16 }\ntrain: { batchSize: 4 }\n');
  const INJECTIONS = [
    'x\ntouch pwned\n#',
    'x\r\ntouch pwned',
    '$(touch pwned)',
    '`touch pwned`',
    'x;touch pwned',
    'x && touch pwned',
    "x'; touch pwned; '",
    'x"; touch pwned; "',
    'x # touch pwned',
    'x\\',
    'x\\\ntouch pwned',
    'x\u0000y',
    '%j',
    'x y',
  ];
  let count = 0;

  /** A sweep file with `edit` applied (values written as JSON strings, which YAML reads as they are). */
  function sweepWith(edit: { name?: string; runDir?: string; slurm?: Record<string, unknown> }) {
    const file = join(work, `s${count++}.yaml`);
    const lines = [`recipe: ${JSON.stringify(recipe)}`, `runDir: ${JSON.stringify(edit.runDir ?? join(work, 'runs'))}`, 'grid: { train.seed: [1, 2] }'];
    if (edit.name !== undefined) lines.push(`name: ${JSON.stringify(edit.name)}`);
    if (edit.slurm) lines.push(`slurm: ${JSON.stringify(edit.slurm)}`);
    writeFileSync(file, lines.join('\n') + '\n');
    return file;
  }

  /** sbatch's reading of a `#SBATCH` line (Slurm's _get_argument): whitespace splits, quotes group, '\' escapes, '#' ends. */
  function sbatchArguments(rest: string): string[] {
    const out: string[] = [];
    let i = 0;
    while (i < rest.length) {
      while (i < rest.length && /\s/.test(rest[i])) i++;
      if (i >= rest.length) break;
      let arg = '';
      let quote: string | null = null;
      for (; i < rest.length && (quote !== null || !/\s/.test(rest[i])); i++) {
        const c = rest[i];
        if (c === '\\') arg += rest[++i] ?? '';
        else if (quote !== null) c === quote ? (quote = null) : (arg += c);
        else if (c === '"' || c === "'") quote = c;
        else if (c === '#') return [...out, arg];
        else arg += c;
      }
      expect(quote, `unmatched quote in #SBATCH${rest}`).toBeNull();
      out.push(arg);
    }
    return out;
  }

  /** What bash passes to `node` when it runs the script (a fake node on PATH records its arguments), in a folder of its own. */
  function runWithBash(script: string): { args: string[]; files: string[] } {
    const sandbox = join(work, `bash${count++}`);
    mkdirSync(join(sandbox, 'bin'), { recursive: true });
    writeFileSync(join(sandbox, 'bin', 'node'), '#!/bin/sh\nprintf \'%s\\0\' "$@" > "$ARGS_FILE"\n');
    chmodSync(join(sandbox, 'bin', 'node'), 0o755);
    writeFileSync(join(sandbox, 'job.sbatch'), script);
    const argsFile = join(sandbox, 'args');
    const r = spawnSync('bash', ['job.sbatch'], {
      cwd: sandbox,
      encoding: 'utf8',
      env: { PATH: `${join(sandbox, 'bin')}:/usr/bin:/bin`, ARGS_FILE: argsFile, SLURM_ARRAY_TASK_ID: '1' },
    });
    expect(r.status, r.stderr).toBe(0);
    const args = readFileSync(argsFile, 'utf8').split('\0').slice(0, -1);
    return { args, files: readdirSync(sandbox).filter((f) => !['bin', 'job.sbatch', 'args'].includes(f)) };
  }

  /**
   * Every line is one of the script's shapes; each #SBATCH line is one sbatch argument `--name[=value]` with the value
   * the options say; setup lines are the given ones; bash runs the guard command with exactly the expected arguments.
   */
  function checkScript(script: string, expect_: { directives: Record<string, string>; setup: string[]; file: string }) {
    const lines = script.split('\n');
    expect(lines.at(-1)).toBe('');
    const seen: Record<string, string> = {};
    let execLines = 0;
    for (const line of lines.slice(0, -1)) {
      if (line === '#!/bin/bash' || line === 'export SLAYFORMER_SWEEP_NO_REQUEUE=1' || expect_.setup.includes(line)) continue;
      if (line.startsWith('#SBATCH ')) {
        const args = sbatchArguments(line.slice('#SBATCH'.length));
        expect(args, line).toHaveLength(1);
        const [, name, value] = /^(--[a-z-]+)(?:=(.*))?$/s.exec(args[0]) ?? [];
        expect(name, line).toBeDefined();
        seen[name] = value ?? '';
        continue;
      }
      if (line.startsWith('# ')) continue; // a comment: bash and sbatch ignore it
      expect(line, 'the exec line').toMatch(/^exec node --import (\S+|'[^']*') (\S+|'[^']*') guard ([^\s'"]+|('[^']*'|\\')+) "\$SLURM_ARRAY_TASK_ID"$/);
      execLines++;
    }
    expect(execLines).toBe(1);
    for (const [name, value] of Object.entries(expect_.directives)) expect(seen[name], name).toBe(value);
    if (expect_.setup.length > 0) return; // setup lines are shell code by design: not run here
    const ran = runWithBash(script);
    expect(ran.files, 'files the script created').toEqual([]);
    expect(ran.args.slice(0, 2)).toEqual(['--import', TSX_IMPORT]); // tsx by its absolute URL: any job folder works
    expect(ran.args.slice(3)).toEqual(['guard', resolve(expect_.file), '1']);
  }

  /** Renders the script, or returns the error (which must name `field`). */
  function renderOrRefuse(
    field: RegExp,
    render: () => { script: string; file: string; directives: Record<string, string>; setup?: string[] },
  ): 'refused' | 'rendered' {
    let out: ReturnType<typeof render>;
    try {
      out = render();
    } catch (err) {
      expect((err as Error).message).toMatch(field);
      expect((err as Error).message.split('\n').length).toBeLessThanOrEqual(3);
      return 'refused';
    }
    checkScript(out.script, { directives: out.directives, setup: out.setup ?? [], file: out.file });
    return 'rendered';
  }

  it('runDir: a newline is refused naming runDir; other strings reach --output quoted, as the folder they name', () => {
    const outcomes = INJECTIONS.map((value) =>
      renderOrRefuse(/runDir/, () => {
        const runDir = join(work, value);
        const file = sweepWith({ runDir });
        const sweep = loadSweep(file);
        return {
          script: renderSbatchScript(sweep, [0, 1], {}, '/work/project'),
          file,
          directives: { '--output': join(runDir, '_sweep', 'slurm', '%A_%a.out') },
        };
      }),
    );
    expect(outcomes[0]).toBe('refused'); // the case: "out\ntouch pwned\n#"
    expect(outcomes.filter((o) => o === 'rendered').length).toBeGreaterThan(5);
  });

  it('the sweep name, the sweep file and the working folder', () => {
    for (const value of INJECTIONS) {
      renderOrRefuse(/name/, () => {
        const file = sweepWith({ name: value });
        return { script: renderSbatchScript(loadSweep(file), [0], {}, '/w'), file, directives: { '--job-name': value } };
      });
      const sweep = loadSweep(sweepWith({}));
      const file = join(work, `sweep ${value}.yaml`);
      // The guard command names the sweep file (as loadSweep writes it).
      renderOrRefuse(/sweep file/, () => ({
        script: renderSbatchScript({ ...sweep, file, guard: [...sweep.guard.slice(0, -1), file] }, [0], {}, '/w'),
        file,
        directives: {},
      }));
      renderOrRefuse(/working folder|--chdir/, () => ({
        script: renderSbatchScript(sweep, [0], {}, `/w/${value}`),
        file: sweep.file,
        directives: { '--chdir': `/w/${value}` },
      }));
    }
  });

  it('every slurm option, from the sweep file and given directly', () => {
    const words: (keyof SlurmOptions)[] = ['partition', 'time', 'gpus', 'gpusPerTask', 'mem'];
    for (const value of INJECTIONS) {
      for (const key of words) {
        const flag = { partition: '--partition', time: '--time', gpus: '--gpus', gpusPerTask: '--gpus-per-task', mem: '--mem' }[key as string]!;
        renderOrRefuse(new RegExp(`slurm\\.${key}`), () => {
          const file = sweepWith({ slurm: { [key]: value } });
          return {
            script: renderSbatchScript(loadSweep(file), [0], loadSweep(file).executorSettings.slurm as SlurmOptions, '/w'),
            file,
            directives: { [flag]: value },
          };
        });
        const sweep = loadSweep(sweepWith({}));
        renderOrRefuse(new RegExp(`slurm\\.${key}`), () => ({
          script: renderSbatchScript(sweep, [0], { [key]: value }, '/w'),
          file: sweep.file,
          directives: { [flag]: value },
        }));
      }
      for (const key of ['cpusPerTask', 'maxParallel', 'signalSeconds', 'requeueOnTimeLimit', 'nodes', 'tasksPerNode'] as const) {
        const sweep = loadSweep(sweepWith({}));
        renderOrRefuse(new RegExp(`slurm\\.${key}`), () => ({
          script: renderSbatchScript(sweep, [0], { [key]: value } as SlurmOptions, '/w'),
          file: sweep.file,
          directives: {},
        }));
      }
      // Extra sbatch options: --name=value, the value quoted for sbatch.
      renderOrRefuse(/slurm\.sbatch/, () => {
        const file = sweepWith({ slurm: { sbatch: [`--comment=${value}`] } });
        return {
          script: renderSbatchScript(loadSweep(file), [0], loadSweep(file).executorSettings.slurm as SlurmOptions, '/w'),
          file,
          directives: { '--comment': value },
        };
      });
      renderOrRefuse(/slurm\.sbatch/, () => {
        const sweep = loadSweep(sweepWith({}));
        return { script: renderSbatchScript(sweep, [0], { sbatch: [value] }, '/w'), file: sweep.file, directives: {} };
      });
      // Setup lines are shell code as written (the documented purpose): each stays one line of the script.
      renderOrRefuse(/slurm\.setup/, () => {
        const file = sweepWith({ slurm: { setup: [value] } });
        return {
          script: renderSbatchScript(loadSweep(file), [0], loadSweep(file).executorSettings.slurm as SlurmOptions, '/w'),
          file,
          directives: {},
          setup: [value],
        };
      });
    }
  });
});
