// Gradient accumulation over k micro-batches gives the same update as one batch of k× rows.
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import type { LanguageModelConfig, ModelBatch } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { trainStep } from '../../src/train/step.ts';
import { concat, makeBatch, SEQ, VOCAB } from './batch-fixtures.ts';

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

async function parametersAfterSteps(
  config: LanguageModelConfig,
  steps: ModelBatch[][],
): Promise<{ params: Map<string, Float32Array>; losses: number[]; norms: number[] }> {
  const model = createLanguageModel(config);
  const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
  const losses: number[] = [];
  const norms: number[] = [];
  for (const micro of steps) {
    const r = await trainStep(model, optimizer, micro, { lr: 1e-2, clip: 0.5, dropoutSeed: null });
    losses.push(r.loss);
    norms.push(r.gradNorm);
  }
  const params = new Map([...model.parameters()].map(([n, v]) => [n, v.dataSync() as Float32Array]));
  optimizer.dispose();
  model.dispose();
  return { params, losses, norms };
}

describe('gradient accumulation', () => {
  for (const kind of ['gpt', 'bert'] as const) {
    it(`${kind}: 3 accumulated micro-batches = one batch of 3× rows (two steps, clipping on)`, async () => {
      const config: LanguageModelConfig = {
        kind,
        vocabSize: VOCAB,
        maxSeqLen: SEQ,
        dModel: 12,
        numLayers: 2,
        numHeads: 2,
        mlpRatio: 2,
        dropout: 0,
        bias: true,
        attention: { name: 'softmax', options: {} },
        seed: 9,
      };
      const rng = new Rng(kind === 'gpt' ? 1 : 2);
      const steps = [0, 1].map(() => [1, 2, 1].map((rows) => makeBatch(kind, rows, rng)));
      const accumulated = await parametersAfterSteps(config, steps);
      const whole = await parametersAfterSteps(
        config,
        steps.map((micro) => [concat(micro)]),
      );
      for (let s = 0; s < 2; s++) {
        expect(accumulated.losses[s]).toBeCloseTo(whole.losses[s], 5);
        expect(accumulated.norms[s]).toBeCloseTo(whole.norms[s], 5);
      }
      expect(accumulated.norms[0]).toBeGreaterThan(0.5); // the clip was active
      let maxDiff = 0;
      let maxMove = 0;
      const initial = createLanguageModel(config);
      for (const [name, values] of whole.params) {
        const other = accumulated.params.get(name)!;
        const start = initial.parameters().get(name)!.dataSync();
        for (let i = 0; i < values.length; i++) {
          maxDiff = Math.max(maxDiff, Math.abs(values[i] - other[i]));
          maxMove = Math.max(maxMove, Math.abs(values[i] - start[i]));
        }
      }
      initial.dispose();
      expect(maxMove).toBeGreaterThan(1e-3); // the parameters did move
      expect(maxDiff).toBeLessThan(2e-5);
    });
  }

  it('a step whose micro-batches hold no labelled token is an error', async () => {
    const config: LanguageModelConfig = {
      kind: 'bert',
      vocabSize: VOCAB,
      maxSeqLen: SEQ,
      dModel: 8,
      numLayers: 1,
      numHeads: 2,
      mlpRatio: 2,
      dropout: 0,
      bias: false,
      attention: { name: 'softmax', options: {} },
      seed: 3,
    };
    const model = createLanguageModel(config);
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0 });
    const empty = { ...makeBatch('bert', 1, new Rng(4)) };
    empty.labels = new Int32Array(SEQ).fill(-100);
    await expect(trainStep(model, optimizer, [empty], { lr: 1e-3, clip: 1, dropoutSeed: null })).rejects.toThrow(/no labelled token/);
    optimizer.dispose();
    model.dispose();
  });
});
