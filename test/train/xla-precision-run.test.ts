// Mixed precision on the XLA route (train.precision, docs/xla.md "Mixed precision") on jax: the exported bf16
// programs take bf16 operands into every matrix product and keep float32 results, AdamW's update stays float32
// (bench/xla-precision-memory.py's bf16-results variant keeps float32 results where docs/xla.md needs them); the
// demo recipe's bf16 losses follow the fp32 ones within the tolerance docs/xla.md states; checkpoints stay float32
// and a run resumes across precisions. Needs the native backend and `npm run setup:xla`; skipped with one line otherwise.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { exportPrograms } from '../../src/backend/xla/program-cache.ts';
import { isXlaSetUp, runnerPython, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { Rng } from '../../src/core/rng.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import type { Recipe } from '../../src/recipe/schema.ts';
import { loadRecipe } from '../../src/store/recipes.ts';
import { readMetrics } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { TrainingStopped, type StopRequest } from '../../src/train/stop.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { gradientInputs, RecordingBook, recordApplyProgram, recordGradientProgram } from '../../src/train/xla-recording.ts';
import { makeTinySetup, stopAfter, type TinySetup } from './checkpoint-fixtures.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

const available = isTensorflowSetUp() && isXlaSetUp();
if (!available) console.log(`[xla-precision-run] skipped: needs the tensorflow backend and ${XLA_SETUP_COMMAND}`);

/**
 * The largest |bf16 − fp32| / fp32 of a logged loss the demo recipe may show in 20 steps (docs/xla.md, "Mixed
 * precision"): 2⁻⁹, one bf16 rounding. Each product's operands are rounded by up to 2⁻⁹ relative, but the loss averages
 * a thousand tokens whose errors are independent, and float32 accumulation adds none: measured 5e-5 (20 steps) here.
 */
const LOSS_TOLERANCE = 2 ** -9;

/** Every matrix product of a StableHLO module as [operand element types, result element type]. */
function products(mlir: string): Array<{ operands: string[]; result: string }> {
  const found = [];
  for (const line of mlir.split('\n')) {
    if (!/stablehlo\.dot(_general)? /.test(line)) continue;
    const types = /: \((tensor<[^>]*>), (tensor<[^>]*>)\) -> (tensor<[^>]*>)/.exec(line);
    expect(types, line).not.toBeNull();
    const element = (t: string) => /x?([a-z]+\d+)>$/.exec(t)![1];
    found.push({ operands: [element(types![1]), element(types![2])], result: element(types![3]) });
  }
  return found;
}

/** The dtype of every tensor of a safetensors file (its JSON header). */
function safetensorsDtypes(file: string): string[] {
  const bytes = readFileSync(file);
  const header = JSON.parse(bytes.subarray(8, 8 + Number(bytes.readBigUInt64LE(0))).toString('utf8')) as Record<string, { dtype?: string }>;
  return Object.entries(header)
    .filter(([name]) => name !== '__metadata__')
    .map(([, t]) => t.dtype!);
}

describe.skipIf(!available)('bf16 programs on jax', () => {
  let dir: string;
  let setup: TinySetup;
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
    dir = mkdtempSync(join(tmpdir(), 'slay-xla-bf16-'));
    setup = await makeTinySetup(dir);
  });
  afterAll(() => {
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it("the gradient program's matrix products take bf16 operands and give float32; AdamW's update has no bf16", () => {
    const model = createLanguageModel({ ...tinyGptConfig(), attention: { name: 'performer', options: { features: 8 } } });
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
    try {
      const cache = join(dir, 'cache');
      const batch = randomBatch(new Rng(3), 'gpt', 2, 16, 61);
      const variables = [...model.parameters().values()];
      const given = gradientInputs(model, batch, variables, null, 32)!;
      const book = new RecordingBook({ precision: 'bf16' }, cache);
      const gradient = book.get('gradient', given.key, () => ({ spec: recordGradientProgram(model, batch, variables, null, 32) }));
      const bf16 = products(readFileSync(`${gradient.base}.mlir`, 'utf8'));
      expect(bf16.length).toBeGreaterThan(4);
      for (const p of bf16) expect(p).toEqual({ operands: ['bf16', 'bf16'], result: 'f32' });
      const meta = JSON.parse(readFileSync(`${gradient.base}.json`, 'utf8'));
      expect(meta).toMatchObject({ precision: 'bf16', bf16Products: bf16.length });
      // The same program in fp32 is another cache entry, with float32 products only.
      const [fp32] = exportPrograms([recordGradientProgram(model, batch, variables, null, 32)], cache);
      expect(fp32.base).not.toBe(gradient.base);
      for (const p of products(readFileSync(`${fp32.base}.mlir`, 'utf8'))) expect(p).toEqual({ operands: ['f32', 'f32'], result: 'f32' });
      const gradNames = gradient.outputs.filter((n) => n.startsWith('grad:')).map((n) => n.slice('grad:'.length));
      const apply = book.get('apply', 'all', () => recordApplyProgram(optimizer, model, gradNames, 1));
      expect(readFileSync(`${apply.base}.mlir`, 'utf8')).not.toContain('bf16');
      expect(JSON.parse(readFileSync(`${apply.base}.json`, 'utf8')).precision).toBe('fp32');
      // bench/xla-precision-memory.py's bf16-results variant (docs/xla.md, "bf16 results"): every product but the
      // loss's logits (read by a gather) and the attention's [numerator, denominator] product (divided by) gets a bf16 result.
      const bench = spawnSync(runnerPython()!, ['bench/xla-precision-memory.py', `${fp32.base}.mlir`], { encoding: 'utf8' });
      expect(bench.status, bench.stderr).toBe(0);
      const rows = bench.stdout.split('\n').filter((l) => l.startsWith(`| ${fp32.hash.slice(0, 12)} |`));
      expect(rows.map((r) => r.split('|')[2].trim())).toEqual(['fp32', 'bf16', 'bf16-results']);
      const [rounded, kept] = rows[2].split('|')[3].split('/').map(Number);
      expect(kept).toBe(2);
      expect(rounded).toBe(bf16.length - kept);
    } finally {
      optimizer.dispose();
      model.dispose();
    }
  });

  describe('the demo recipe (recipes/demo/gpt-slay.yaml) on a small corpus', () => {
    const STEPS = 20;
    const HALF = 10;
    const demo = (precision: 'fp32' | 'bf16'): Recipe =>
      loadRecipe('recipes/demo/gpt-slay.yaml', [
        '--backend=tensorflow',
        `--data.dataset=${setup.data}`,
        `--data.tokenizer=${setup.tokenizer}`,
        '--train.executor=xla',
        `--train.precision=${precision}`,
        `--train.maxTokens=${STEPS * 8 * 128}`,
        '--train.warmupSteps=4',
        '--train.logInterval=5',
        `--train.evalInterval=${HALF}`,
        '--train.evalTokens=1024',
        `--train.checkpointInterval=${HALF}`,
        `--train.runDir=${join(dir, 'runs', precision)}`,
        '--wandb.enabled=false',
      ]);

    async function train(recipe: Recipe, opts: { resume?: string; stop?: StopRequest; resumeDir?: string; resumeStep?: number } = {}) {
      const logger = await RunLogger.create(recipe, { echo: false, resumeDir: opts.resumeDir, resumeStep: opts.resumeStep });
      try {
        await runTraining(recipe, { logger, resume: opts.resume, stop: opts.stop });
        return { dir: logger.dir, error: null };
      } catch (err) {
        return { dir: logger.dir, error: err as Error };
      }
    }
    const losses = (run: string) => new Map(readMetrics(run).map((r) => [`${r.split}@${r.step}`, r.loss]));
    const relative = (a: number, b: number) => Math.abs(a - b) / Math.abs(b);
    const whole: Partial<Record<'fp32' | 'bf16', { dir: string; losses: Map<string, number> }>> = {};

    it(`bf16's losses stay within ${LOSS_TOLERANCE} (relative) of fp32's, and differ from them`, async () => {
      for (const precision of ['fp32', 'bf16'] as const) {
        const run = await train(demo(precision));
        expect(run.error).toBeNull();
        whole[precision] = { dir: run.dir, losses: losses(run.dir) };
      }
      const [fp32, bf16] = [whole.fp32!.losses, whole.bf16!.losses];
      expect([...bf16.keys()]).toEqual([...fp32.keys()]);
      const gap = Math.max(...[...bf16].map(([k, loss]) => relative(loss, fp32.get(k)!)));
      console.log(`[xla-precision-run] demo recipe, ${STEPS} steps: largest relative loss difference bf16 vs fp32 ${gap.toExponential(2)}`);
      expect(gap).toBeLessThan(LOSS_TOLERANCE);
      // Not the same numbers: the products did run in bf16 (the fp32 route is deterministic to the bit).
      expect(gap).toBeGreaterThan(1e-7);
      expect(bf16.get(`train@${STEPS}`)!).toBeLessThan(bf16.get('val@0')! - 1);
    });

    it("a bf16 run's checkpoints and final weights are float32", () => {
      const run = whole.bf16!.dir;
      const folders = [...readdirSync(join(run, 'checkpoints')).map((c) => join(run, 'checkpoints', c)), join(run, 'final')];
      const files = folders.flatMap((f) =>
        readdirSync(f)
          .filter((name) => name.endsWith('.safetensors'))
          .map((name) => join(f, name)),
      );
      expect(files.some((f) => f.endsWith('optimizer.safetensors'))).toBe(true);
      for (const file of files) expect(new Set(safetensorsDtypes(file)), file).toEqual(new Set(['F32']));
    });

    for (const [from, to] of [
      ['fp32', 'bf16'],
      ['bf16', 'fp32'],
    ] as const) {
      it(`a ${from} checkpoint resumes in ${to}: ${from}'s losses up to it, then within ${LOSS_TOLERANCE} of the ${to} run's`, async () => {
        const stopped = await train(demo(from), { stop: stopAfter(HALF) });
        expect(stopped.error).toBeInstanceOf(TrainingStopped);
        const checkpoint = (stopped.error as TrainingStopped).checkpointDir;
        const resumed = await train(demo(to), { resume: checkpoint, resumeDir: stopped.dir, resumeStep: HALF });
        expect(resumed.error).toBeNull();
        const mixed = losses(stopped.dir);
        expect([...mixed.keys()]).toEqual([...whole[to]!.losses.keys()]);
        for (const [k, loss] of mixed) {
          // Up to the checkpoint (its validation included) the run is `from`'s own; after it `to`'s programs continue.
          if (Number(k.split('@')[1]) <= HALF) expect(loss, k).toBe(whole[from]!.losses.get(k));
          else expect(relative(loss, whole[to]!.losses.get(k)!), k).toBeLessThan(LOSS_TOLERANCE);
        }
      });
    }
  });
});
