// Ctrl-C as a terminal sends it: `npm run train -- <recipe>` is started in its own process group and SIGINT
// goes to the whole group (npm, its shell and the trainer at once). The trainer must finish its step, save a
// complete checkpoint and print the command that resumes; that command must finish the run.
import { spawn } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import type { ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { COMPLETE_MARKER } from '../../src/core/atomic-folder.ts';
import { listCheckpoints } from '../../src/store/run-folder.ts';
import { readMetrics } from '../../src/store/run-record.ts';
import { waitForOutput } from '../helpers/cli.ts';
import { makeTinySetup, writeTinyRecipe } from '../train/checkpoint-fixtures.ts';
import type { TinySetup } from '../train/checkpoint-fixtures.ts';

let dir: string;
let setup: TinySetup;
const groups: number[] = [];
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'slay-ctrl-c-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  for (const pid of groups) {
    try {
      process.kill(-pid, 'SIGKILL');
    } catch {
      // the group has already exited
    }
  }
  await rm(dir, { recursive: true, force: true });
});

interface Started {
  pid: number;
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** `npm run <args>` from the repository root, leading its own process group as a terminal's foreground job does. */
function npmRun(args: string[], detached: boolean): Started {
  const child = spawn('npm', ['run', '--silent', ...args], { cwd: process.cwd(), detached, stdio: ['ignore', 'pipe', 'pipe'] });
  if (detached) groups.push(child.pid!);
  let text = '';
  child.stdout.on('data', (d) => (text += d));
  child.stderr.on('data', (d) => (text += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('close', (code, signal) => resolve({ code, signal })),
  );
  return { pid: child.pid!, child, output: () => text, exited };
}

describe('Ctrl-C under npm run train', () => {
  it('SIGINT to the process group saves a complete checkpoint, prints the resume command, and the resume finishes the run', async () => {
    const runs = join(dir, 'runs');
    // Steps of 16×16 tokens take a few hundred ms on the cpu backend: the signal lands while a step
    // computes, which is when a relaying parent (tsx's CLI) gives up on the trainer and kills it.
    const recipe = await writeTinyRecipe(join(dir, 'tiny.yaml'), setup, runs, {
      batchSize: 16,
      maxTokens: 2048,
      logInterval: 1,
      checkpointInterval: 100,
      evalInterval: 100,
    });
    const train = npmRun(['train', '--', recipe], true);
    // The progress line of step 2 of 8: the signal lands mid-run, while the next step computes.
    await waitForOutput(train.child, train.output, /^step 2\/8 \|/m);
    const runDir = readdirSync(runs).map((e) => join(runs, e))[0];
    expect(runDir, train.output()).toBeDefined();
    process.kill(-train.pid, 'SIGINT');
    const exit = await train.exited;
    // npm re-raises the signal its script ended with; the trainer itself exits 130.
    expect(exit.code === 130 || exit.signal === 'SIGINT', `${JSON.stringify(exit)}\n${train.output()}`).toBe(true);
    const match = /stopped by SIGINT after step (\d+); checkpoint saved in (\S+)\nresume with: (npm run train -- .+)\n/.exec(train.output());
    expect(match, train.output()).not.toBeNull();
    const [, step, checkpoint, command] = match!;
    expect(existsSync(join(checkpoint, COMPLETE_MARKER))).toBe(true);
    expect(listCheckpoints(runDir!).map((c) => c.step)).toContain(Number(step));
    expect(Number(step)).toBeLessThan(8); // stopped early: the run has 8 steps

    const resumed = npmRun(command.replace(/^npm run /, '').split(' '), false);
    const done = await resumed.exited;
    expect(done.code, resumed.output()).toBe(0);
    expect(resumed.output()).toMatch(new RegExp(`resumed from .*step-${step.padStart(6, '0')} at step ${step}`));
    expect(existsSync(join(runDir!, 'final', 'model.safetensors'))).toBe(true);
    const trainSteps = readMetrics(runDir!)
      .filter((r) => r.split === 'train')
      .map((r) => r.step);
    expect(trainSteps).toEqual([1, 2, 3, 4, 5, 6, 7, 8]); // every step logged once, none lost or repeated
  }, 120_000);
});
