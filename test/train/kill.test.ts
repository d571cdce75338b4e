// Crash safety and signals with the real train CLI in a child process (tiny recipe, cpu backend, a checkpoint
// every step): SIGKILL during checkpoint saves leaves the previous checkpoint loadable, `--resume auto` continues
// from it, and the run killed four times ends with the same metrics.jsonl as an uninterrupted run. SIGTERM
// finishes the step, saves, exits 143 and prints the command that resumes.
import { existsSync, readdirSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { CHECKPOINTS_DIR, COMPLETE_MARKER, listCheckpoints, loadCheckpoint, restoreCheckpoint } from '../../src/train/checkpoint.ts';
import { readMetrics, RunLogger } from '../../src/train/metrics.ts';
import type { MetricRecord } from '../../src/train/metrics.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { loadRecipe, modelConfigFromRecipe } from '../../src/train/recipe.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { killStartedClis, startCli } from '../helpers/cli.ts';
import { makeTinySetup, writeTinyRecipe } from './checkpoint-fixtures.ts';

const TRAIN_CLI = 'src/cli/train.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';

let dir: string;
let setup: TinySetup;
beforeAll(async () => {
  await initBackend('cpu', { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-kill-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  killStartedClis();
  await rm(dir, { recursive: true, force: true });
});

// 24 steps of 4×16 tokens, a checkpoint after every step.
const TRAIN = { maxTokens: 1536, checkpointInterval: 1, keepCheckpoints: 2 };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

function runFolders(runs: string): string[] {
  return existsSync(runs) ? readdirSync(runs).map((e) => join(runs, e)) : [];
}

/** Entries of <run>/checkpoints that a save in progress leaves: a temporary folder or a step folder without COMPLETE. */
function saveInProgress(runDir: string): boolean {
  const parent = join(runDir, CHECKPOINTS_DIR);
  if (!existsSync(parent)) return false;
  return readdirSync(parent).some((e) => e.startsWith('.') || !existsSync(join(parent, e, COMPLETE_MARKER)));
}

/** The newest complete checkpoint loads and its tensors go into a model built from its recipe. */
async function assertLoadable(runDir: string, vocabSize: number): Promise<number> {
  const newest = listCheckpoints(runDir).at(-1);
  expect(newest, `no complete checkpoint in ${runDir}`).toBeDefined();
  const loaded = await loadCheckpoint(newest!.dir);
  const model = createLanguageModel(modelConfigFromRecipe(loaded.recipe, vocabSize));
  const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
  try {
    restoreCheckpoint(loaded, model, optimizer);
  } finally {
    model.dispose();
    optimizer.dispose();
  }
  expect(loaded.state.step).toBe(newest!.step);
  return newest!.step;
}

function comparable(records: MetricRecord[]) {
  return records.map(({ tokens_per_s: _rate, elapsed_s: _elapsed, ...rest }) => rest);
}

async function referenceRun(recipeFile: string): Promise<MetricRecord[]> {
  const recipe = loadRecipe(recipeFile);
  const logger = await RunLogger.create(recipe, { echo: false });
  await runTraining(recipe, { logger });
  return readMetrics(logger.dir);
}

describe('train CLI under SIGKILL and SIGTERM', () => {
  it('SIGKILL during checkpoint saves (4 times or more) never breaks the last complete checkpoint; --resume auto finishes the run exactly', async () => {
    const runs = join(dir, 'runs-kill');
    const recipeFile = await writeTinyRecipe(join(dir, 'tiny.yaml'), setup, runs, TRAIN);
    const vocabSize = (await TextTokenizer.load(setup.tokenizer)).vocabSize;
    let caughtDuringSave = 0;
    const killedAt: number[] = [];
    // Four kills, and more (up to ten, within the run's 24 steps) until one has landed mid-save: on a busy host
    // the ~1 ms poll can miss a few-ms save several times in a row.
    for (let round = 0; round < 4 || (caughtDuringSave === 0 && round < 10); round++) {
      const child = startCli(TRAIN_CLI, round === 0 ? [recipeFile] : [recipeFile, '--resume', 'auto']);
      // Wait for a first new checkpoint of this process, then kill it the moment a save is seen in progress.
      const before = round === 0 ? 0 : listCheckpoints(runFolders(runs)[0]).at(-1)!.step;
      const deadline = Date.now() + 30_000;
      let runDir: string | undefined;
      let killed = false;
      while (Date.now() < deadline && child.process.exitCode === null) {
        runDir = runFolders(runs)[0];
        const newest = runDir ? listCheckpoints(runDir).at(-1)?.step ?? 0 : 0;
        if (runDir && newest > before && (saveInProgress(runDir) || Date.now() > deadline - 25_000)) {
          caughtDuringSave += saveInProgress(runDir) ? 1 : 0;
          // 0–3 ms later each round, so the kills land in different phases of the save (writing, rename, marker).
          if (round > 0) await sleep(round % 4);
          child.process.kill('SIGKILL');
          killed = true;
          break;
        }
        await sleep(1);
      }
      const exit = await child.exited;
      expect(killed, child.output()).toBe(true);
      expect(exit.signal).toBe('SIGKILL');
      expect(runFolders(runs).length).toBe(1); // resumes continue in the same run folder
      killedAt.push(await assertLoadable(runDir!, vocabSize));
    }
    // Killed mid-save at least once (usually all four; a save takes a few ms and the poll runs every ~1 ms).
    expect(caughtDuringSave).toBeGreaterThanOrEqual(1);
    const last = startCli(TRAIN_CLI, [recipeFile, '--resume', 'auto']);
    const exit = await last.exited;
    expect(exit.code, last.output()).toBe(0);
    expect(last.output()).toMatch(/resumed from .*step-\d{6} at step \d+/);
    const runDir = runFolders(runs)[0];
    expect(existsSync(join(runDir, 'final', 'model.safetensors'))).toBe(true);
    // Leftovers of the killed saves are gone; what remains is the newest 2 plus the best by validation loss.
    expect(readdirSync(join(runDir, CHECKPOINTS_DIR)).filter((e) => e.startsWith('.'))).toEqual([]);
    expect(listCheckpoints(runDir).length).toBeLessThanOrEqual(3);
    console.log(`SIGKILL at checkpoint steps ${killedAt.join(', ')}; ${caughtDuringSave}/${killedAt.length} kills landed during a save`);

    const reference = await referenceRun(recipeFile);
    expect(comparable(readMetrics(runDir))).toEqual(comparable(reference));
  }, 240_000);

  // With 2 data-parallel replicas: the worker threads must not keep the process alive or change the records.
  it('SIGTERM (2 data-parallel replicas): finishes the step, saves a checkpoint, exits 143 and prints the resume command, which completes the run', async () => {
    const runs = join(dir, 'runs-term');
    const recipeFile = await writeTinyRecipe(join(dir, 'tiny-term.yaml'), setup, runs, { ...TRAIN, checkpointInterval: 5, dataParallel: 2 });
    const child = startCli(TRAIN_CLI, [recipeFile, '--train.logInterval=3']);
    const deadline = Date.now() + 30_000;
    while (Date.now() < deadline && child.process.exitCode === null) {
      const runDir = runFolders(runs)[0];
      if (runDir && existsSync(join(runDir, 'metrics.jsonl')) && readMetrics(runDir).some((r) => r.step >= 3)) break;
      await sleep(5);
    }
    child.process.kill('SIGTERM');
    const exit = await child.exited;
    expect(exit.code, child.output()).toBe(143);
    const match = /stopped by SIGTERM after step (\d+); checkpoint saved in (\S+)\nresume with: npm run train -- (.+)\n/.exec(child.output());
    expect(match, child.output()).not.toBeNull();
    const [, step, checkpoint, command] = match!;
    expect(checkpoint).toMatch(new RegExp(`step-${step.padStart(6, '0')}$`));
    expect(command).toBe(`${recipeFile} --train.logInterval=3 --resume ${checkpoint}`);
    await assertLoadable(runFolders(runs)[0], (await TextTokenizer.load(setup.tokenizer)).vocabSize);

    const resumed = startCli(TRAIN_CLI, command.split(' '));
    const done = await resumed.exited;
    expect(done.code, resumed.output()).toBe(0);
    const reference = await referenceRun(await writeTinyRecipe(join(dir, 'tiny-term-ref.yaml'), setup, join(dir, 'runs-term-ref'), { ...TRAIN, checkpointInterval: 5, logInterval: 3, dataParallel: 2 }));
    expect(comparable(readMetrics(runFolders(runs)[0]))).toEqual(comparable(reference));
  }, 120_000);
});
