// The start measures of src/paper/attention-measures.ts on a small random GPT: its geometry against a float64
// reference computed here from the first layer's queries and keys, Performer's exact kernel being softmax itself,
// whitening's kernel moving away from it, and the model left as it was found. Then darkformer-finetune's notes
// written from made-up measures.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import type { Batch } from '../../src/data/batch.ts';
import { symmetricEigen } from '../../src/model/features/linalg.ts';
import { createLanguageModel, type LanguageModel, type LanguageModelConfig } from '../../src/model/lm.ts';
import { measureStart } from '../../src/paper/attention-measures.ts';
import { measuredNotes } from '../../src/paper/darkformer-finetune.ts';
import type { UnitView } from '../../src/paper/protocol.ts';
import { evaluate } from '../../src/train/evaluate.ts';
import { initializeLayersFromData } from '../../src/train/finetune.ts';
import { testBackend } from '../helpers/backend.ts';

beforeAll(async () => {
  await initBackend(testBackend());
});

const VOCAB = 29;
const SEQ = 12;
const config = (attention: string, options: Record<string, unknown> = {}): LanguageModelConfig => ({
  kind: 'gpt',
  vocabSize: VOCAB,
  maxSeqLen: SEQ,
  dModel: 16,
  numLayers: 2,
  numHeads: 2,
  mlpRatio: 2,
  dropout: 0,
  bias: true,
  attention: { name: attention, options },
  seed: 3,
});

function batches(): Batch[] {
  const rng = new Rng(12);
  return [0, 1].map(() => ({
    kind: 'gpt',
    batchSize: 3,
    seqLen: SEQ,
    tokens: 3 * SEQ,
    bytes: 3 * SEQ,
    inputIds: Int32Array.from({ length: 3 * SEQ }, () => rng.int(VOCAB)),
    labels: Int32Array.from({ length: 3 * SEQ }, () => rng.int(VOCAB)),
  }));
}

/** The same weights in every model (random, large enough that attention is not uniform). */
function withWeights(model: LanguageModel): LanguageModel {
  const rng = new Rng(7);
  for (const v of model.parameters().values()) {
    tf.tidy(() =>
      v.assign(
        tf.tensor(
          Float32Array.from({ length: v.size }, () => 0.3 * rng.normal()),
          v.shape,
        ),
      ),
    );
  }
  return model;
}

describe('measureStart', () => {
  const data = batches();

  it("Performer: geometry of layer 0 as a float64 reference, its exact kernel is softmax's (same accuracy), the model is put back, nothing leaks", async () => {
    const softmax = withWeights(createLanguageModel(config('softmax')));
    const softmaxResult = await evaluate(softmax, data, false);
    // Layer 0's queries and keys do not depend on attention: capture them for the reference.
    const captured: { q: number[][][]; k: number[][][] } = { q: [[], []], k: [[], []] };
    for (const batch of data) {
      tf.tidy(() => {
        softmax.body.forward(tf.tensor2d(batch.inputIds, [batch.batchSize, SEQ], 'int32'), {
          onAttentionInputs: (layer, q, k) => {
            if (layer !== 0) return;
            for (const [label, t] of [
              ['q', q],
              ['k', k],
            ] as const) {
              const a = t.arraySync() as number[][][][];
              a.forEach((b) => b.forEach((head, h) => head.forEach((row) => captured[label][h].push(row))));
            }
          },
        });
      });
    }
    softmax.dispose();
    const performer = withWeights(createLanguageModel(config('performer', { features: 16 })));
    const modules = [...performer.body.attention];
    const before = tf.memory().numTensors;
    const measures = await measureStart(performer, data);
    expect(tf.memory().numTensors).toBe(before);
    expect(performer.body.attention).toEqual(modules);
    performer.body.attention.forEach((m, i) => expect(m).toBe(modules[i]));

    for (const label of ['q', 'k'] as const) {
      for (let h = 0; h < 2; h++) {
        const rows = captured[label][h];
        const d = rows[0].length;
        const mean = Array.from({ length: d }, (_, j) => rows.reduce((s, r) => s + r[j], 0) / rows.length);
        const cov = Array.from({ length: d }, (_, i) =>
          Array.from({ length: d }, (__, j) => rows.reduce((s, r) => s + (r[i] - mean[i]) * (r[j] - mean[j]), 0) / (rows.length - 1)),
        );
        const eigen = symmetricEigen(cov).values;
        const total = eigen.reduce((s, v) => s + v, 0);
        const geometry = (label === 'q' ? measures.queries : measures.keys)[0][h];
        expect(geometry.eigenRatio / (eigen[d - 1] / eigen[0])).toBeCloseTo(1, 3);
        expect(geometry.effectiveRank).toBeCloseTo(Math.exp(-eigen.reduce((s, v) => s + (v / total) * Math.log(v / total), 0)), 4);
        const scale = rows.reduce((s, r) => s + r.reduce((a, x) => a + x * x, 0), 0) / rows.length / Math.sqrt(d);
        expect(geometry.scaleBefore).toBeCloseTo(scale, 4);
        expect(geometry.scaleAfter!).toBeCloseTo(scale, 4); // Performer's x̃ = d^(−1/4)x
      }
    }
    expect(measures.exactKernel!.accuracy).toBe(softmaxResult.accuracy);
    expect(measures.exactKernel!.loss).toBeCloseTo(softmaxResult.loss, 4);
    for (const e of measures.kernelErrorVsSoftmax!) expect(e).toBeLessThan(1e-5);
    for (const [i, e] of measures.featureErrorVsSoftmax!.entries()) {
      expect(e).toBeGreaterThan(1e-3); // 16 random features are not exact
      expect(e).toBeCloseTo(measures.featureErrorVsKernel![i], 4);
    }
    performer.dispose();
  });

  it('DARKFormer whitening: its exact kernel differs from softmax and the scale after the init is the whitened one', async () => {
    const model = withWeights(createLanguageModel(config('darkformer', { features: 16, init: 'whitening' })));
    initializeLayersFromData(model, data, new Set([0, 1]));
    const measures = await measureStart(model, data);
    for (const e of measures.kernelErrorVsSoftmax!) expect(e).toBeGreaterThan(0.01);
    // Whitened (against the calibration pass's own q, k, here the same tokens): E‖x̃‖² ≈ tr(I)/√d + the mean's share.
    const after = measures.queries[0].map((g) => g.scaleAfter!);
    for (const [h, g] of measures.queries[0].entries()) expect(after[h]).not.toBeCloseTo(g.scaleBefore, 1);
    expect(Math.min(...after)).toBeGreaterThan(8 / Math.sqrt(8) - 0.1);
    model.dispose();
  });
});

describe("darkformer-finetune's measured notes", () => {
  const extras: Record<string, Record<string, number>> = {};
  const geometry = {
    q_eig_ratio_min: 300,
    q_eig_ratio_max: 7000,
    k_eig_ratio_min: 250,
    k_eig_ratio_max: 5000,
    q_eff_rank_min: 3.5,
    q_eff_rank_median: 6,
    q_eff_rank_max: 10.6,
    k_eff_rank_min: 4,
    k_eff_rank_max: 9,
    q_scale_before_min: 0.4,
    q_scale_before_max: 4.2,
    k_scale_before_min: 0.5,
    k_scale_before_max: 3,
  };
  for (const seed of [1, 2, 3]) {
    extras[`softmax-all-seed${seed}`] = { ...geometry, acc_start: 0.175, acc_exact_start: 0.175 };
    extras[`performer-all-seed${seed}`] = {
      ...geometry,
      acc_start: 0.17,
      acc_exact_start: 0.175,
      rf_error: 0.41,
      rf_error_kernel: 0.41,
      kernel_error: 0,
      q_scale_after_min: 0.4,
      q_scale_after_max: 4.2,
    };
    extras[`darkformer-whitening-all-seed${seed}`] = {
      ...geometry,
      acc_start: 0.159,
      acc_exact_start: 0.159,
      rf_error: 1.06,
      rf_error_kernel: 0.6,
      kernel_error: 0.9,
      q_scale_after_min: 5.5,
      q_scale_after_max: 8.2,
    };
    extras[`darkformer-variance-optimal-all-seed${seed}`] = {
      ...geometry,
      acc_start: 0.175,
      acc_exact_start: 0.175,
      rf_error: 0.23,
      rf_error_kernel: 0.23,
      kernel_error: 0,
      q_scale_after_min: 0.4,
      q_scale_after_max: 4.2,
    };
  }
  const view: UnitView = { values: () => [], extra: (name, key) => extras[name]?.[key] ?? null };

  it('states the measured geometry, scales, exact against random-feature accuracy and output errors', () => {
    const text = measuredNotes(view, false).join('\n');
    expect(text).toContain('queries and keys are strongly anisotropic');
    expect(text).toContain('eigenvalue ratio of their covariance is 300–7,000 for queries');
    expect(text).toContain('effective rank (exp of the entropy of the normalised eigenvalues) 3.5–10.6');
    expect(text).toContain('DARKFormer (whitening) 5.50–8.20');
    expect(text).toContain('DARKFormer (whitening) 0.1590 exactly, 0.1590 with random features');
    expect(text).toContain("So whitening's step-0 drop (softmax 0.1750 → 0.1590) is 100% the whitened kernel's own");
    expect(text).toContain('Lowest step-0 output error against softmax: DARKFormer (variance-optimal) (0.230); highest: DARKFormer (whitening) (1.060)');
    expect(text).not.toContain('far less anisotropic');
  });

  it('says nothing is measured yet when no finetuning unit has run', () => {
    expect(measuredNotes({ values: () => [], extra: () => null }, false)).toEqual([
      'The start measures (see the protocol) are summarised here once finetuning units have run.',
    ]);
  });
});
