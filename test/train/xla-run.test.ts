// Whole runs with train.executor xla (docs/xla.md): a run stopped after a checkpoint and resumed ends equal to the
// uninterrupted one (Performer's projection redrawn every 2 steps, dropout on: buffers and masks must follow); and
// `npm run compile` + training from the compiled programs in a process where TensorFlow's native backend cannot
// load gives the same losses as recording them here. Needs the native backend and `npm run setup:xla`.
import { spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { isXlaSetUp, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { readMetrics } from '../../src/telemetry/records.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import type { Recipe } from '../../src/recipe/schema.ts';
import { TrainingStopped, type StopRequest } from '../../src/train/stop.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { makeTinySetup, stopAfter, tinyRecipeText, type TinySetup } from './checkpoint-fixtures.ts';

const available = isTensorflowSetUp() && isXlaSetUp();
if (!available) console.log(`[xla-run] skipped: needs the tensorflow backend and ${XLA_SETUP_COMMAND}`);

let dir: string;
let setup: TinySetup;

async function train(recipe: Recipe, opts: { resume?: string; stop?: StopRequest; resumeDir?: string; resumeStep?: number } = {}) {
  const logger = await RunLogger.create(recipe, { echo: false, resumeDir: opts.resumeDir, resumeStep: opts.resumeStep });
  try {
    await runTraining(recipe, { logger, resume: opts.resume, stop: opts.stop });
    return { dir: logger.dir, error: null };
  } catch (err) {
    return { dir: logger.dir, error: err as Error };
  }
}

const losses = (run: string) => readMetrics(run).map((r) => `${r.split}@${r.step} ${r.loss.toFixed(5)}`);

describe.skipIf(!available)('training runs with the xla executor', () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
    dir = await mkdtemp(join(tmpdir(), 'slay-xla-run-'));
    setup = await makeTinySetup(dir);
  });
  afterAll(async () => {
    if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('stop after step 5 + resume from its checkpoint reproduces the uninterrupted run', async () => {
    const text = tinyRecipeText(setup, join(dir, 'runs'), { executor: 'xla' }).replace('backend: cpu', 'backend: tensorflow');
    const recipe = parseRecipe(text, join(dir, 'tiny.yaml'));
    const full = await train(recipe);
    expect(full.error).toBeNull();
    const stopped = await train(recipe, { stop: stopAfter(5) });
    expect(stopped.error).toBeInstanceOf(TrainingStopped);
    const stop = stopped.error as TrainingStopped;
    const resumed = await train(recipe, { resume: stop.checkpointDir, resumeDir: stopped.dir, resumeStep: 5 });
    expect(resumed.error).toBeNull();
    expect(losses(stopped.dir)).toEqual(losses(full.dir));
    expect(existsSync(join(stopped.dir, 'final', 'model.safetensors'))).toBe(true);
  });

  it('npm run compile, then a run from the compiled programs with no TensorFlow backend, equals the recorded run', async () => {
    const recipeFile = join(dir, 'compiled.yaml');
    // Dropout off: the recorded run and the compiled one then draw nothing, and their losses must agree.
    await writeFile(recipeFile, tinyRecipeText(setup, join(dir, 'runs-compiled'), { executor: 'xla' }).replace('dropout: 0.1', 'dropout: 0').replace('backend: cpu', 'backend: tensorflow'));
    const programs = join(dir, 'programs');
    const node = (args: string[], env: Record<string, string> = {}) => spawnSync(process.execPath, ['--import', 'tsx', ...args], { encoding: 'utf8', env: { ...process.env, ...env } });
    const compiled = node(['src/cli/compile.ts', recipeFile, '--out', programs]);
    expect(compiled.status, compiled.stderr).toBe(0);
    expect(readdirSync(programs)).toContain('manifest.json');
    const recorded = await train(parseRecipe(await import('node:fs').then((fs) => fs.readFileSync(recipeFile, 'utf8')), recipeFile));
    expect(recorded.error).toBeNull();
    // The child cannot load the native backend (its package is hidden) and runs on cpu, from the programs alone.
    const run = node(['--require', './test/helpers/no-tfjs-node.cjs', 'src/cli/train.ts', recipeFile, '--backend', 'cpu'], { SLAYFORMER_XLA_PROGRAMS: programs });
    expect(run.status, run.stderr + run.stdout).toBe(0);
    expect(run.stdout).toMatch(/train\.executor xla: steps as XLA programs on jax .* programs compiled ahead of time/);
    const runs = readdirSync(join(dir, 'runs-compiled')).map((d) => join(dir, 'runs-compiled', d)).filter((d) => d !== recorded.dir);
    expect(runs).toHaveLength(1);
    expect(losses(runs[0])).toEqual(losses(recorded.dir));
  });
});
