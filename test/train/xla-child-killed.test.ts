// The jax process of train.executor xla killed while the run goes on (SIGKILL, as the kernel's OOM killer sends it):
// the trainer ends with one error naming the runner and the signal, every checkpoint it listed stays readable, and
// the run resumes from the last one to its end. A checkpoint every step puts the kill in a step or in a save.
// Needs the native backend and `npm run setup:xla`.
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { isXlaSetUp, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { loadCheckpoint } from '../../src/store/checkpoint.ts';
import { killStartedClis, startCli } from '../helpers/cli.ts';
import { makeTinySetup, tinyRecipeText, type TinySetup } from './checkpoint-fixtures.ts';

const available = isTensorflowSetUp() && isXlaSetUp();
if (!available) console.log(`[xla-child-killed] skipped: needs the tensorflow backend and ${XLA_SETUP_COMMAND}`);

let dir: string;
let setup: TinySetup;

/** The pid of the runner.py child of process `parent`. */
function runnerPid(parent: number): number {
  const rows = execFileSync('ps', ['-o', 'pid=,args=', '--ppid', String(parent)], { encoding: 'utf8' })
    .trim()
    .split('\n');
  const row = rows.find((r) => r.includes('runner.py'));
  if (!row) throw new Error(`no runner.py among the children of ${parent}:\n${rows.join('\n')}`);
  return Number(row.trim().split(/\s+/)[0]);
}

describe.skipIf(!available)('the jax process killed mid-run', () => {
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'slay-xla-killed-'));
    setup = await makeTinySetup(dir);
  });
  afterEach(() => killStartedClis());
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('ends the run with an error naming the runner and SIGKILL; the last checkpoint is readable and the run resumes to its end', async () => {
    const recipeFile = join(dir, 'killed.yaml');
    const text = tinyRecipeText(setup, join(dir, 'runs'), { executor: 'xla', maxTokens: 7680, checkpointInterval: 1, keepCheckpoints: 2 });
    await writeFile(recipeFile, text.replace('backend: cpu', 'backend: tensorflow'));
    const run = startCli('src/cli/train.ts', [recipeFile]);
    const first = await run.waitForOutput(/checkpoint step (\d+) saved in \S+ s: (\S+)/);
    // Two checkpoints later: the kill lands while the loop steps and saves, not before it started.
    await run.waitForOutput(/checkpoint step \d+ saved in \S+ s: \S+\n[\s\S]*checkpoint step \d+ saved in/, first.end);
    process.kill(runnerPid(run.process.pid!), 'SIGKILL');
    const { code } = await run.exited;
    const output = run.output();
    expect(code, output).toBe(1);
    expect(output).toMatch(/xla runner \(\S*runner\.py\) exited \(SIGKILL\)/);
    const saved = [...output.matchAll(/checkpoint step (\d+) saved in \S+ s: (\S+)/g)].map((m) => ({ step: Number(m[1]), dir: m[2] }));
    const last = saved.at(-1)!;
    // keepCheckpoints 2: the last two listed are kept, whole.
    for (const { step, dir: checkpoint } of saved.slice(-2)) expect((await loadCheckpoint(checkpoint)).state.step, checkpoint).toBe(step);
    const resumed = startCli('src/cli/train.ts', [recipeFile, '--resume', last.dir]);
    const end = await resumed.exited;
    expect(end.code, resumed.output()).toBe(0);
    expect(resumed.output()).toContain(`resumed from ${last.dir} at step ${last.step}`);
  });
});
