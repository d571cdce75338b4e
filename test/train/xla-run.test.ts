// Whole runs with train.executor xla (docs/xla.md): a run stopped after a checkpoint and resumed ends equal to the
// uninterrupted one (Performer's projection redrawn every 2 steps, dropout on: buffers and masks must follow); and
// `npm run compile` + training from the compiled programs in a process where TensorFlow's native backend cannot
// load gives the same losses as recording them here; Ctrl-C (SIGINT to the whole process group, as a terminal sends
// it, the jax process included) still finishes the step and saves a checkpoint from the device's state; and
// data.documentMask's document ids reach the programs. Needs the native backend and `npm run setup:xla`.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { existsSync, readdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { isXlaSetUp, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { readMetrics } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import type { Recipe } from '../../src/recipe/schema.ts';
import { TrainingStopped, type StopRequest } from '../../src/train/stop.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { waitForOutput } from '../helpers/cli.ts';
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

  it('data.documentMask: the document ids reach the programs — losses equal the functions executor’s, not the unmasked run’s', async () => {
    const run = async (executor: string, documentMask: boolean) => {
      const text = tinyRecipeText(setup, join(dir, 'runs'), { executor })
        .replace('backend: cpu', 'backend: tensorflow')
        .replace('dropout: 0.1', 'dropout: 0')
        .replace('shuffleBuffer: 8 }', `shuffleBuffer: 8, documentMask: ${documentMask} }`);
      const result = await train(parseRecipe(text, join(dir, `mask-${executor}-${documentMask}.yaml`)));
      expect(result.error).toBeNull();
      return losses(result.dir);
    };
    const xla = await run('xla', true);
    expect(xla).toEqual(await run('functions', true));
    // The same tokens with the documents mixed train differently (at step 0 the near-uniform model hides it).
    const unmasked = await run('xla', false);
    expect(xla.at(-1)).not.toEqual(unmasked.at(-1));
  });

  it('train.estimatorHealth measures the weights the jax process trained: the same health as an op-by-op run', async () => {
    const health = async (executor: string) => {
      const text = tinyRecipeText(setup, join(dir, `runs-health-${executor}`), { executor, estimatorHealth: 'true', maxTokens: 512 })
        .replace('backend: cpu', 'backend: tensorflow')
        .replace('dropout: 0.1', 'dropout: 0');
      const run = await train(parseRecipe(text, join(dir, `health-${executor}.yaml`)));
      expect(run.error).toBeNull();
      return readMetrics(run.dir)
        .filter((r) => r.split === 'val')
        .map((r) => ({ step: r.step, kernelError: r.estimator_health!.kernel_error[0], byPosition: r.by_position! }));
    };
    const xla = await health('xla');
    const opByOp = await health('op-by-op');
    expect(xla.map((r) => r.step)).toEqual(opByOp.map((r) => r.step));
    // Trained weights, not the step-0 ones the trainer's own model would still hold without the pull.
    expect(xla.at(-1)!.kernelError).not.toBeCloseTo(xla[0].kernelError, 3);
    xla.forEach((r, i) => expect(r.kernelError).toBeCloseTo(opByOp[i].kernelError, 3));
    // Every validation record's loss by position comes from the jax process's validation program (sum:byPosition).
    xla.forEach((r, i) => {
      expect(r.byPosition.map((b) => [b.from, b.to, b.tokens])).toEqual(opByOp[i].byPosition.map((b) => [b.from, b.to, b.tokens]));
      r.byPosition.forEach((b, j) => expect(b.loss!, `step ${r.step} [${b.from}, ${b.to})`).toBeCloseTo(opByOp[i].byPosition[j].loss!, 4));
    });
  });

  it('npm run compile, then a run from the compiled programs with no TensorFlow backend, equals the recorded run', async () => {
    const recipeFile = join(dir, 'compiled.yaml');
    // Dropout off: the recorded run and the compiled one then draw nothing, and their losses must agree.
    await writeFile(
      recipeFile,
      tinyRecipeText(setup, join(dir, 'runs-compiled'), { executor: 'xla' })
        .replace('dropout: 0.1', 'dropout: 0')
        .replace('backend: cpu', 'backend: tensorflow'),
    );
    const programs = join(dir, 'programs');
    const node = (args: string[], env: Record<string, string> = {}) =>
      spawnSync(process.execPath, ['--import', 'tsx', ...args], { encoding: 'utf8', env: { ...process.env, ...env } });
    const compiled = node(['src/cli/compile.ts', recipeFile, '--out', programs]);
    expect(compiled.status, compiled.stderr).toBe(0);
    expect(readdirSync(programs)).toContain('manifest.json');
    const recorded = await train(parseRecipe(await import('node:fs').then((fs) => fs.readFileSync(recipeFile, 'utf8')), recipeFile));
    expect(recorded.error).toBeNull();
    // The child cannot load the native backend (its package is hidden) and runs on cpu, from the programs alone.
    const run = node(['--require', './test/helpers/no-tfjs-node.cjs', 'src/cli/train.ts', recipeFile, '--backend', 'cpu'], {
      SLAYFORMER_XLA_PROGRAMS: programs,
    });
    expect(run.status, run.stderr + run.stdout).toBe(0);
    expect(run.stdout).toMatch(/train\.executor xla: steps as XLA programs on jax .* programs compiled ahead of time/);
    const runs = readdirSync(join(dir, 'runs-compiled'))
      .map((d) => join(dir, 'runs-compiled', d))
      .filter((d) => d !== recorded.dir);
    expect(runs).toHaveLength(1);
    expect(losses(runs[0])).toEqual(losses(recorded.dir));
    // The loss by position too, from the compiled validation programs alone.
    const byPosition = (run: string) => readMetrics(run).flatMap((r) => (r.by_position ?? []).map((b) => `${r.step} ${b.from}-${b.to} ${b.loss?.toFixed(5)}`));
    expect(byPosition(recorded.dir).length).toBeGreaterThan(0);
    expect(byPosition(runs[0])).toEqual(byPosition(recorded.dir));
  });

  it("Ctrl-C to the process group: the step finishes, the checkpoint holds the jax process's state, exit 130", async () => {
    const recipeFile = join(dir, 'sigint.yaml');
    await writeFile(
      recipeFile,
      tinyRecipeText(setup, join(dir, 'runs-sigint'), { executor: 'xla', maxTokens: 7680, checkpointInterval: 1000 }).replace(
        'backend: cpu',
        'backend: tensorflow',
      ),
    );
    // Its own process group, as a terminal's foreground job: the signal reaches Node and the runner alike.
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/train.ts', recipeFile], { stdio: ['ignore', 'pipe', 'pipe'], detached: true });
    let text = '';
    child.stdout.on('data', (d) => (text += d));
    child.stderr.on('data', (d) => (text += d));
    const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)));
    await waitForOutput(child, () => text, /^step \d+\//m);
    process.kill(-child.pid!, 'SIGINT');
    expect(await exited, text).toBe(130);
    const saved = /checkpoint step (\d+) saved in .*: (\S+)/.exec(text);
    expect(saved, text).not.toBeNull();
    expect(existsSync(join(saved![2], 'optimizer.safetensors'))).toBe(true);
    const resumed = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/train.ts', recipeFile, '--resume', saved![2]], { encoding: 'utf8' });
    expect(resumed.status, resumed.stderr + resumed.stdout).toBe(0);
  });
});
