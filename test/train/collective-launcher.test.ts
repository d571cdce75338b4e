// The --processes launcher's life and its ranks' (src/cli/launch.ts, src/core/launcher-channel.ts): killed with
// SIGKILL, it leaves no rank behind (rank 0 saves a checkpoint first); SIGHUP ends the run as SIGTERM does; a Ctrl-C
// before rank 0 trains, and a rank 0 that hangs, are reported for what they are.
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { LAUNCHER_FD_ENV } from '../../src/core/launcher-channel.ts';
import { loadCheckpoint } from '../../src/store/checkpoint.ts';
import { killStartedClis, startCli } from '../helpers/cli.ts';
import { makeTinySetup, writeTinyRecipe } from './checkpoint-fixtures.ts';
import { TRAIN } from './collective-fixtures.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';

let dir: string;
let setup: TinySetup;
const ranksStarted: number[] = [];

beforeAll(async () => {
  if (!isTensorflowSetUp()) return;
  dir = await mkdtemp(join(tmpdir(), 'slay-launcher-'));
  setup = await makeTinySetup(dir);
});
afterEach(() => {
  killStartedClis();
  // Ranks are not the test's children: a failed test must not leave them running.
  for (const pid of ranksStarted.splice(0)) if (isRunning(pid)) process.kill(pid, 'SIGKILL');
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/** Whether `pid` runs: a zombie (ended, not yet reaped by the process that adopted it) does not. */
function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    if (existsSync('/proc/self')) return false;
  }
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * Waits until none of `pids` runs. Orphaned ranks are not this process's children: their end sends no event here,
 * so their existence is polled, with a bound far above the seconds a rank takes to save and exit on a busy machine.
 */
async function waitUntilEnded(pids: number[], boundS = 300): Promise<void> {
  const deadline = performance.now() + boundS * 1000;
  while (pids.some(isRunning)) {
    if (performance.now() > deadline) throw new Error(`still running after ${boundS} s: ${pids.filter(isRunning).join(', ')}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** Starts `npm run train -- <recipe> --backend tensorflow --processes 2`; resolves with the ranks' pids once printed. */
async function startRun(recipe: string, ownProcessGroup = false) {
  const run = startCli(TRAIN, [recipe, '--backend', 'tensorflow', '--processes', '2', '--model.dropout=0'], process.env, { ownProcessGroup });
  const started = await run.waitForOutput(/^\[train\] 2 processes \(pids (\d+), (\d+)\)/m);
  const pids = [Number(started.match[1]), Number(started.match[2])];
  ranksStarted.push(...pids);
  return { run, pids, end: started.end };
}

const longRun = (name: string) =>
  writeTinyRecipe(join(dir, `${name}.yaml`), setup, join(dir, `runs-${name}`), {
    maxTokens: 64_000,
    logInterval: 1,
    checkpointInterval: 1000,
    evalInterval: 0,
  });

describe.skipIf(!isTensorflowSetUp())('the --processes launcher and its ranks', () => {
  it('kill -9 of the launcher: rank 0 saves a checkpoint after its step, and every rank ends', async () => {
    const { run, pids, end } = await startRun(await longRun('kill-launcher'));
    await run.waitForOutput(/^step 3\/\d+ \|/m, end);
    process.kill(run.process.pid!, 'SIGKILL');
    // Rank 0 wrote to the launcher's output, which is this test's: it goes on saying what it does.
    const gone = await run.waitForOutput(new RegExp(`^train: the launcher \\(pid ${run.process.pid}\\) is gone: finishing the current step`, 'm'), end);
    const stopped = await run.waitForOutput(/stopped by SIGTERM after step (\d+); checkpoint saved in (\S+)\n/, gone.end);
    await waitUntilEnded(pids);
    const checkpoint = await loadCheckpoint(stopped.match[2]);
    expect(checkpoint.state.step).toBe(Number(stopped.match[1]));
    expect(run.output()).not.toMatch(/^done: /m);
  });

  it('kill -9 of the launcher before the ranks train: every rank ends, having written nothing', async () => {
    const runs = join(dir, 'runs-kill-early');
    const recipe = await writeTinyRecipe(join(dir, 'kill-early.yaml'), setup, runs, { joinTimeout: 60 });
    const { run, pids } = await startRun(recipe);
    process.kill(run.process.pid!, 'SIGKILL');
    await run.exited; // rank 0 holds this test's pipes: they close when it ends
    await waitUntilEnded(pids);
    // Rank 0 stops as it reads the channel's end; or, if it was already waiting for rank 1 in the join (which blocks
    // its thread), when the join fails.
    expect(run.output()).toMatch(/^train: (the launcher \(pid \d+\) is gone before training began|rank 0: rank 1 .* did not join)/m);
    expect(existsSync(runs)).toBe(false);
  });

  it('SIGHUP of the launcher ends the run as SIGTERM does: one checkpoint, every rank ends, status 129', async () => {
    const { run, pids, end } = await startRun(await longRun('hangup'));
    await run.waitForOutput(/^step 3\/\d+ \|/m, end);
    process.kill(run.process.pid!, 'SIGHUP');
    expect((await run.exited).code, run.output()).toBe(129);
    const text = run.output();
    expect(text.match(/^checkpoint step \d+ saved/gm), text).toHaveLength(1);
    const stopped = /stopped by SIGHUP after step (\d+); checkpoint saved in (\S+)\n/.exec(text);
    expect(stopped, text).not.toBeNull();
    expect(text).toMatch(/\nresume with: npm run train -- .* --processes 2 --resume /);
    // The launcher waits for its ranks: they have ended when it has.
    for (const pid of pids) expect(isRunning(pid)).toBe(false);
    expect((await loadCheckpoint(stopped![2])).state.step).toBe(Number(stopped![1]));
  });

  it('Ctrl-C before rank 0 trains: the run says that nothing was saved, exit status 130', async () => {
    const runs = join(dir, 'runs-early');
    const recipe = await writeTinyRecipe(join(dir, 'early.yaml'), setup, runs);
    // The signal follows the launcher's first line at once; a rank takes seconds to load TensorFlow.
    const { run, pids } = await startRun(recipe, true);
    process.kill(-run.process.pid!, 'SIGINT');
    expect((await run.exited).code, run.output()).toBe(130);
    expect(run.output()).toMatch(
      new RegExp(`^train: SIGINT ended rank 0 \\(pid ${pids[0]}\\) before training began: nothing was saved; the other ranks were stopped$`, 'm'),
    );
    for (const pid of pids) expect(isRunning(pid)).toBe(false);
    expect(existsSync(runs)).toBe(false);
  });

  it('a rank 0 that hangs is named as the failure, not the rank that found it silent', async () => {
    const { run, pids, end } = await startRun(await longRun('hung'));
    await run.waitForOutput(/^step 3\/\d+ \|/m, end);
    process.kill(pids[0], 'SIGSTOP');
    const exit = await run.exited;
    expect(exit.code, run.output()).toBe(1);
    expect(run.output()).toMatch(
      new RegExp(`^train: rank 0 of 2 \\(pid ${pids[0]}\\) does not answer: rank 1 \\(pid ${pids[1]}\\) found it silent and exited with status 1`, 'm'),
    );
    expect(run.output()).toMatch(/^\[rank 1\] .*rank 0 \(127\.0\.0\.1:\d+\) does not answer/m);
    expect(run.output()).not.toMatch(/^train: rank 1 of 2 .* exited with status 1; the other ranks were stopped/m);
    for (const pid of pids) expect(isRunning(pid)).toBe(false);
  });
});

describe('the launcher channel of a rank', () => {
  it('is refused, naming the variable, when no launcher made it', async () => {
    for (const [value, why] of [
      ['7', /SLAYFORMER_LAUNCHER_FD=7: expected 3 \(set by the --processes launcher only\)/],
      ['3', /SLAYFORMER_LAUNCHER_FD=3, but descriptor 3 is no pipe from a launcher \(.*\): only the --processes launcher sets it/],
    ] as const) {
      const run = startCli(TRAIN, ['recipes/demo/gpt-softmax.yaml', '--dry-run'], { ...process.env, [LAUNCHER_FD_ENV]: value });
      expect((await run.exited).code, run.output()).toBe(2);
      expect(run.output()).toMatch(why);
    }
  });
});
