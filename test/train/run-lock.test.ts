// A run folder being trained is locked (src/store/run-folder.ts, the lock a sweep's run takes: src/core/lock-file.ts):
// a second `train --resume` of it is refused naming the holder, before anything in the folder changes; the lock of a
// process that died is taken over. Tiny GPT on the cpu backend (seconds).
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { listCheckpoints, listRunFolders } from '../../src/store/run-folder.ts';
import { TrainingStopped, type StopRequest } from '../../src/train/stop.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { makeTinySetup, tinyRecipeText, type TinySetup } from './checkpoint-fixtures.ts';

let dir: string;
let setup: TinySetup;
beforeAll(async () => {
  await initBackend('cpu', { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-run-lock-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const LOCK = '.slayformer-lock';

describe('the run folder lock', () => {
  it("is held while a run trains; a second resume is refused naming the holder; a dead holder's lock is taken over", async () => {
    const runs = join(dir, 'runs');
    const recipe = parseRecipe(tinyRecipeText(setup, runs), join(dir, 'tiny.yaml'));
    const seen: unknown[] = [];
    // Stops after step 4 (a checkpoint at 3 and at 4), looking at the lock each time the loop asks.
    let reads = 0;
    const stop: StopRequest = {
      get signal() {
        const [run] = listRunFolders(runs, recipe.name);
        seen.push(JSON.parse(readFileSync(join(run, LOCK), 'utf8')).pid);
        return ++reads >= 4 ? 'SIGTERM' : null;
      },
    };
    await expect(runTraining(recipe, { stop })).rejects.toBeInstanceOf(TrainingStopped);
    expect(seen).toEqual([process.pid, process.pid, process.pid, process.pid]);
    const [run] = listRunFolders(runs, recipe.name);
    expect(existsSync(join(run, LOCK))).toBe(false); // released when the run stopped
    const checkpoint = listCheckpoints(run).at(-1)!.dir;

    // Another live process on this host holds it (the test runner's parent stands in): refused, nothing changes.
    const lock = join(run, LOCK);
    writeFileSync(lock, JSON.stringify({ pid: process.ppid, host: hostname(), startedAt: '2026-01-01T00:00:00.000Z' }));
    const metrics = readFileSync(join(run, 'metrics.jsonl'), 'utf8');
    await expect(runTraining(recipe, { resume: checkpoint })).rejects.toThrow(
      `cannot train in ${run}: another process trains it (pid ${process.ppid} on ${hostname()}, since 2026-01-01T00:00:00.000Z; its lock is ${lock}); wait for it to end`,
    );
    expect(readFileSync(join(run, 'metrics.jsonl'), 'utf8')).toBe(metrics);

    // The holder died: its lock is stale, the resume takes it over and finishes the run.
    writeFileSync(lock, JSON.stringify({ pid: 2 ** 22 + 12345, host: hostname(), startedAt: '2026-01-01T00:00:00.000Z' }));
    const result = await runTraining(recipe, { resume: checkpoint });
    expect(result.runDir).toBe(run);
    expect(existsSync(lock)).toBe(false);
    expect(existsSync(join(run, 'summary.json'))).toBe(true);
  });
});
