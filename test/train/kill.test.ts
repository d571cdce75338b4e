// Crash safety and signals with the real train CLI in a child process (tiny recipe, cpu backend, a checkpoint
// every step): SIGKILL during checkpoint saves leaves the previous checkpoint loadable, `--resume auto` continues
// from it, and the run killed four times ends with the same metrics.jsonl as an uninterrupted run. SIGTERM
// finishes the step, saves, exits 143 and prints the command that resumes.
// Synchronisation is by events, not the clock, so that a busy machine cannot make a kill land after the run ended:
// the test waits for the child's line about a saved checkpoint, then watches its checkpoints folder (fs.watch) and
// freezes the child with SIGSTOP the moment a save creates its temporary folder, looks at the folder while nothing
// moves, and then kills it.
import { existsSync, readdirSync, watch } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { CHECKPOINTS_DIR } from '../../src/store/layout.ts';
import { COMPLETE_MARKER } from '../../src/core/atomic-folder.ts';
import { listCheckpoints } from '../../src/store/run-folder.ts';
import { loadCheckpoint, restoreCheckpoint } from '../../src/store/checkpoint.ts';
import { readMetrics, SPEED_FIELDS } from '../../src/store/run-record.ts';
import type { MetricRecord } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { loadRecipe } from '../../src/store/recipes.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';
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
/** Saves a round may freeze its child at before it kills it anyway: four rounds stay well before the last step (24). */
const SAVES_PER_ROUND = 4;
const SAVED_LINE = /^checkpoint step (\d+) saved in /m;

/** The starts of checkpoint saves in `dir` (a save first creates its `.step-NNNNNN.tmp-<pid>` folder), as events. */
function watchSaveStarts(dir: string, exited: Promise<unknown>) {
  let wake: (() => void) | null = null;
  let pending = 0;
  const watcher = watch(dir, (_event, name) => {
    if (!name?.startsWith('.step-') || !name.includes('.tmp-')) return;
    pending++;
    wake?.();
  });
  return {
    /** Resolves at the next save start (or at once for one seen since the last call); rejects if the child exits first. */
    async next(): Promise<void> {
      while (pending === 0) {
        await Promise.race([
          new Promise<void>((resolve) => (wake = resolve)),
          exited.then(() => Promise.reject(new Error(`the child exited while a checkpoint save was awaited in ${dir}`))),
        ]);
      }
      pending = 0;
    },
    close: () => watcher.close(),
  };
}

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

/** The records without what measures speed: a resumed run repeats the rest exactly. */
function comparable(records: MetricRecord[]) {
  return records.map((record) => Object.fromEntries(Object.entries(record).filter(([key]) => !(SPEED_FIELDS as readonly string[]).includes(key))));
}

async function referenceRun(recipeFile: string): Promise<MetricRecord[]> {
  const recipe = loadRecipe(recipeFile);
  const logger = await RunLogger.create(recipe, { echo: false });
  await runTraining(recipe, { logger });
  return readMetrics(logger.dir);
}

describe('train CLI under SIGKILL and SIGTERM', () => {
  it('SIGKILL during checkpoint saves (4 times) never breaks the last complete checkpoint; --resume auto finishes the run exactly', async () => {
    const runs = join(dir, 'runs-kill');
    const recipeFile = await writeTinyRecipe(join(dir, 'tiny.yaml'), setup, runs, TRAIN);
    const vocabSize = (await TextTokenizer.load(setup.tokenizer)).vocabSize;
    let caughtDuringSave = 0;
    const killedAt: number[] = [];
    // Four kills, and more (up to ten, within the run's 24 steps) until one has landed mid-save: on a busy host
    // the ~1 ms poll can miss a few-ms save several times in a row.
    // Four rounds, each killed once; within a round the child is frozen at the start of each save until one is caught
    // in progress (a save takes a few ms of writes and fsyncs), at most SAVES_PER_ROUND times.
    for (let round = 0; round < 4; round++) {
      const child = startCli(TRAIN_CLI, round === 0 ? [recipeFile] : [recipeFile, '--resume', 'auto']);
      const before = round === 0 ? 0 : listCheckpoints(runFolders(runs)[0]).at(-1)!.step;
      // A checkpoint saved by this process: its checkpoints folder exists and can be watched.
      for (let from = 0; ; ) {
        const { match, end } = await child.waitForOutput(SAVED_LINE, from);
        if (Number(match[1]) > before) break;
        from = end;
      }
      child.process.kill('SIGSTOP');
      const runDir = runFolders(runs)[0];
      const saves = watchSaveStarts(join(runDir, CHECKPOINTS_DIR), child.exited);
      try {
        for (let tries = 1; ; tries++) {
          child.process.kill('SIGCONT');
          await saves.next();
          child.process.kill('SIGSTOP'); // nothing moves now, and the run cannot end before the kill
          const caught = saveInProgress(runDir);
          if (caught || tries === SAVES_PER_ROUND) {
            caughtDuringSave += caught ? 1 : 0;
            break;
          }
        }
      } finally {
        saves.close();
      }
      child.process.kill('SIGKILL');
      const exit = await child.exited;
      expect(exit.signal, child.output()).toBe('SIGKILL');
      expect(runFolders(runs).length).toBe(1); // resumes continue in the same run folder
      killedAt.push(await assertLoadable(runDir, vocabSize));
    }
    // Killed mid-save at least once (usually all four: the watcher sees a save start within a fraction of a
    // millisecond on an idle machine, and each round tries up to four saves).
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
    // The progress line of step 3: the run has 24 steps, so the signal lands mid-run.
    await child.waitForOutput(/^step 3\/24 \|/m);
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
    const reference = await referenceRun(
      await writeTinyRecipe(join(dir, 'tiny-term-ref.yaml'), setup, join(dir, 'runs-term-ref'), {
        ...TRAIN,
        checkpointInterval: 5,
        logInterval: 3,
        dataParallel: 2,
      }),
    );
    expect(comparable(readMetrics(runFolders(runs)[0]))).toEqual(comparable(reference));
  }, 120_000);
});
