// train.remat on the XLA route (docs/xla.md, "Rematerialisation") on jax: the gradient program recorded with
// rematerialised blocks carries one optimization barrier per block, is its own cache entry, gives the plain program's
// loss and gradients (float32 rounding), and compiles to a lower memory bound than the plain one for a deeper model
// (XLA's compiled sizes are deterministic). Needs the native backend and `npm run setup:xla`; skipped with one line otherwise.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { XlaRunner } from '../../src/backend/xla/runner.ts';
import { isXlaSetUp, runnerPython, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { Rng } from '../../src/core/rng.ts';
import { createLanguageModel, type LanguageModelConfig } from '../../src/model/lm.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { gradientInputs, hostArray, modelTensors, RecordingBook, recordGradientProgram } from '../../src/train/xla-recording.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

const available = isTensorflowSetUp() && isXlaSetUp();
if (!available) console.log(`[xla-remat-run] skipped: needs the tensorflow backend and ${XLA_SETUP_COMMAND}`);

describe.skipIf(!available)('rematerialised gradient programs on jax', () => {
  let dir: string;
  let runner: XlaRunner;
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
    dir = mkdtempSync(join(tmpdir(), 'slay-xla-remat-'));
    runner = (await XlaRunner.start(runnerPython()!)).runner;
  });
  afterAll(async () => {
    await runner?.close();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  /** The gradient program of one batch plain and rematerialised: files, compiled bounds, and their outputs by name. */
  async function bothPrograms(config: LanguageModelConfig, batchSize: number, dropoutSeed: number | null) {
    const model = createLanguageModel(config);
    try {
      const batch = randomBatch(new Rng(3), 'gpt', batchSize, config.maxSeqLen, config.vocabSize);
      const variables = [...model.parameters().values()];
      const total = batchSize * config.maxSeqLen;
      const given = gradientInputs(model, batch, variables, dropoutSeed, total)!;
      const tensors = modelTensors(model);
      await runner.request(
        { op: 'put', names: tensors.map(([n]) => n) },
        tensors.map(([, t]) => hostArray(t)),
      );
      const run = async (remat: boolean) => {
        const entry = new RecordingBook({ remat }, join(dir, 'cache')).get('gradient', given.key, () => ({
          spec: recordGradientProgram(model, batch, variables, dropoutSeed, total),
        }));
        const key = `${config.numLayers}-${remat}`;
        const loaded = await runner.request({ op: 'load', key, base: entry.base });
        const reply = await runner.request(
          { op: 'eval', program: key, names: given.arrays.map(([n]) => n) },
          given.arrays.map(([, a]) => a),
        );
        const outputs = reply.header.sums as Record<string, number | number[]>;
        return { base: entry.base, bound: loaded.header.peakBytes as number, outputs };
      };
      return { plain: await run(false), remat: await run(true) };
    } finally {
      model.dispose();
    }
  }

  it('one barrier per block, a cache entry of its own, and the plain loss and gradients (dropout on)', async () => {
    const config = tinyGptConfig({ numLayers: 2, dropout: 0.1 });
    const { plain, remat } = await bothPrograms(config, 2, 7);
    const barriers = (base: string) => (readFileSync(`${base}.mlir`, 'utf8').match(/stablehlo\.optimization_barrier/g) ?? []).length;
    expect(barriers(remat.base)).toBe(config.numLayers);
    expect(barriers(plain.base)).toBe(0);
    expect(remat.base).not.toBe(plain.base);
    expect(Object.keys(remat.outputs).sort()).toEqual(Object.keys(plain.outputs).sort());
    // Relative to the largest gradient of any tensor: some are zero in exact arithmetic (a key bias under softmax) and noise here.
    const scale = Math.max(...Object.entries(plain.outputs).flatMap(([name, value]) => (name.startsWith('grad:') ? [value].flat().map(Math.abs) : [])));
    expect(Math.abs((remat.outputs.loss as number) - (plain.outputs.loss as number)) / (plain.outputs.loss as number)).toBeLessThan(1e-6);
    let worst = 0;
    for (const [name, value] of Object.entries(plain.outputs)) {
      const [a, b] = [[value].flat(), [remat.outputs[name]].flat()];
      expect(b.length, name).toBe(a.length);
      const gap = Math.max(...a.map((x, i) => Math.abs(x - b[i]))) / scale;
      expect(gap, name).toBeLessThan(1e-5);
      worst = Math.max(worst, gap);
    }
    console.log(`[xla-remat-run] largest difference of an output, relative to the largest gradient: ${worst.toExponential(1)}`);
  });

  it("a 4-layer GPT's gradient program compiles to a lower memory bound with remat", async () => {
    const config = tinyGptConfig({ vocabSize: 512, maxSeqLen: 64, dModel: 64, numLayers: 4, mlpRatio: 4 });
    const { plain, remat } = await bothPrograms(config, 4, null);
    const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(2);
    console.log(`[xla-remat-run] 4 layers, d 64, 4 × 64 tokens: compiled bound ${mib(plain.bound)} MiB plain, ${mib(remat.bound)} MiB with remat`);
    // Parameters and gradients (arguments and outputs, 1.8 MiB) are in both; the activations of three blocks are not.
    expect(remat.bound).toBeLessThan(plain.bound * 0.6);
  });
});
