import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { createAttention } from '../../src/model/attention/index.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { checkRecord, type MetricRecord } from '../../src/store/run-record.ts';
import { recordScalars } from '../../src/telemetry/tensorboard.ts';
import { toWandbRow } from '../../src/telemetry/wandb.ts';
import { attentionHealth, HEALTH_POSITIONS, measureEstimatorHealth } from '../../src/train/estimator-health.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { testBackend } from '../helpers/backend.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';

let dir: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-health-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** numpy's default quantile: linear between the two nearest ranks. */
function numpyQuantile(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  const at = p * (s.length - 1);
  const lo = Math.floor(at);
  return s[lo] + (s[Math.ceil(at)] - s[lo]) * (at - lo);
}

const randomRows = (rng: Rng, n: number, scale: number) => Array.from({ length: n }, () => rng.normal() * scale);

/**
 * Performer's health written out in float64 from its projection ω: φ_j(x̃) = m^(−1/2) exp(ω_jᵀx̃ − ‖x̃‖²/2) and
 * κ = exp(q̃ᵀk̃), x̃ = d^(−1/4)x, with nothing shared with the code under test.
 */
function performerReference(omega: number[][][], q: number[][][], k: number[][][], v: number[][][], causal: boolean) {
  const [heads, d, m] = [omega.length, omega[0].length, omega[0][0].length];
  const tilde = (x: number[]) => x.map((a) => a * d ** -0.25);
  const phi = (h: number, x: number[]) => {
    const xt = tilde(x);
    const sq = xt.reduce((a, b) => a + b * b, 0);
    return Array.from({ length: m }, (_, j) => Math.exp(xt.reduce((a, b, i) => a + b * omega[h][i][j], 0) - sq / 2) / Math.sqrt(m));
  };
  const kernelErrors: number[] = [];
  const outputErrors: number[] = [];
  const ratios: number[] = [];
  for (let h = 0; h < heads; h++) {
    for (let i = 0; i < q[h].length; i++) {
      const keys = causal ? i + 1 : k[h].length;
      const exact: number[] = [];
      const estimate: number[] = [];
      for (let j = 0; j < keys; j++) {
        const qt = tilde(q[h][i]);
        const kt = tilde(k[h][j]);
        exact.push(Math.exp(qt.reduce((a, b, c) => a + b * kt[c], 0)));
        const pq = phi(h, q[h][i]);
        const pk = phi(h, k[h][j]);
        estimate.push(pq.reduce((a, b, c) => a + b * pk[c], 0));
      }
      const norm = (xs: number[]) => Math.sqrt(xs.reduce((a, b) => a + b * b, 0));
      kernelErrors.push(norm(exact.map((e, j) => estimate[j] - e)) / norm(exact));
      const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
      ratios.push(sum(estimate) / sum(exact));
      const out = (w: number[]) => v[h][0].map((_, c) => sum(w.map((wj, j) => wj * v[h][j][c])) / sum(w));
      const y = out(exact);
      const yHat = out(estimate);
      outputErrors.push(norm(y.map((yc, c) => yHat[c] - yc)) / norm(y));
    }
  }
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
  return {
    kernelError: mean(kernelErrors),
    outputError: mean(outputErrors),
    denominatorMin: Math.min(...ratios),
    denominatorP01: numpyQuantile(ratios, 0.01),
    denominatorP50: numpyQuantile(ratios, 0.5),
  };
}

describe('estimator health of one layer', () => {
  for (const causal of [true, false]) {
    it(`Performer (${causal ? 'causal' : 'bidirectional'}): errors and denominator quantiles equal a float64 computation on fixed q, k, v`, () => {
      const [heads, length, d] = [2, 9, 4];
      const attention = createAttention('performer', { numHeads: heads, headDim: d, causal, seed: 5, features: 6 });
      const rng = new Rng(11);
      const make = (scale: number) => tf.tensor4d(randomRows(rng, heads * length * d, scale), [1, heads, length, d]);
      const [q, k, v] = [make(1.5), make(1.5), make(1)];
      const health = attentionHealth(attention.kernel!, q, k, v, causal);
      const expected = performerReference(
        attention.buffers[0].arraySync() as number[][][],
        (q.arraySync() as number[][][][])[0],
        (k.arraySync() as number[][][][])[0],
        (v.arraySync() as number[][][][])[0],
        causal,
      );
      // float32 features against float64 ones: agreement to float32 rounding.
      for (const key of Object.keys(expected) as (keyof typeof expected)[]) expect(health[key]).toBeCloseTo(expected[key], 4);
      // Six random features are a poor estimate: the measure sees it.
      expect(health.kernelError).toBeGreaterThan(0.05);
      expect(health.denominatorMin).toBeLessThanOrEqual(health.denominatorP01);
      expect(health.denominatorP01).toBeLessThanOrEqual(health.denominatorP50);
      tf.dispose([q, k, v]);
      attention.dispose();
    });
  }

  it('an estimate far below a kernel beyond float32 (large logits) is measured from the row-stabilised features, not lost to overflow', () => {
    const attention = createAttention('performer', { numHeads: 1, headDim: 4, causal: true, seed: 2, features: 64 });
    const rng = new Rng(3);
    const q = tf.tensor4d(randomRows(rng, 5 * 4, 30), [1, 1, 5, 4]);
    const health = attentionHealth(attention.kernel!, q, q, q, true);
    // exp(q̃ᵀq̃) ~ e^1000: the features' estimate is all but 0 beside it, and the measures say so.
    expect(health.kernelError).toBeCloseTo(1, 6);
    expect(health.denominatorMin).toBeGreaterThanOrEqual(0);
    expect(health.denominatorMin).toBeLessThan(1e-6);
    expect(Number.isFinite(health.outputError)).toBe(true);
    q.dispose();
    attention.dispose();
  });

  // Each mechanism's declared kernel is what its features estimate: the mean of φ(q)ᵀφ(k) over draws (seeds) lands
  // near exp(logKernel). SLAY's estimator has a heavy tail (positive features of √(2s)·û, worst at its largest node s_r), hence more draws and few nodes.
  for (const [name, options, draws, tolerance] of [
    ['performer', { features: 1024, orthogonal: false }, 16, 0.06],
    ['darkformer', { features: 1024, orthogonal: false }, 16, 0.06],
    ['schoenbat', { features: 1024 }, 4, 0.05],
    ['slay', { poly: 'exact', prfFeatures: 1024, quadratureNodes: 1 }, 40, 0.06],
    ['slay', { poly: 'laplace-only', prfFeatures: 1024, quadratureNodes: 1 }, 40, 0.06],
    ['slay', { poly: 'anchor', prfFeatures: 256, anchors: 64, quadratureNodes: 1 }, 40, 0.1],
  ] as const) {
    it(`${name} ${JSON.stringify(options)}: the features' mean over ${draws} draws is the declared kernel`, () => {
      const rows = [
        [0.5, -0.3, 0.8, 0.1],
        [-0.2, 0.9, 0.3, 0.4],
        [0.7, 0.2, -0.5, 0.3],
      ];
      const x = tf.tensor4d(rows.flat(), [1, 1, 3, 4]);
      const mean = rows.map(() => rows.map(() => 0));
      let exact: number[][] = [];
      for (let seed = 0; seed < draws; seed++) {
        const attention = createAttention(name, { numHeads: 1, headDim: 4, causal: false, seed, ...options });
        const kernel = attention.kernel!;
        const { features, shift } = kernel.features(x);
        const phi = (features.arraySync() as number[][][][])[0][0];
        const logScale = shift ? (shift.arraySync() as number[][][][])[0][0].map((r) => r[0]) : rows.map(() => 0);
        for (const [i, pi] of phi.entries()) {
          for (const [j, pj] of phi.entries()) mean[i][j] += (pi.reduce((a, b, f) => a + b * pj[f], 0) * Math.exp(logScale[i] + logScale[j])) / draws;
        }
        const inputs = kernel.kernelInputs(x);
        const rowsIn = (inputs.arraySync() as number[][][][])[0][0].map((r) => Float64Array.from(r));
        exact = rowsIn.map((a) => rowsIn.map((b) => Math.exp(kernel.logKernel(a, b))));
        tf.dispose([features, shift, inputs]);
        attention.dispose();
      }
      for (const [i, row] of exact.entries()) for (const [j, value] of row.entries()) expect(Math.abs(mean[i][j] / value - 1)).toBeLessThan(tolerance);
      x.dispose();
    });
  }
});

describe('estimator health of a model', () => {
  for (const [kind, attention] of [
    ['gpt', 'performer'],
    ['gpt', 'darkformer'],
    ['bert', 'slay'],
    ['bert', 'schoenbat'],
  ] as const) {
    it(`${kind} ${attention}: one health per layer, no tensor left behind, and none for a mechanism without a kernel estimate`, () => {
      const config = { kind, vocabSize: 23, maxSeqLen: 80, dModel: 8, numLayers: 2, numHeads: 2, mlpRatio: 2, dropout: 0, bias: true, seed: 1 };
      const model = createLanguageModel({ ...config, attention: { name: attention, options: {} } });
      const rng = new Rng(4);
      const seqLen = 80;
      const batch = {
        batchSize: 2,
        seqLen,
        inputIds: Int32Array.from({ length: 2 * seqLen }, () => rng.int(23)),
        labels: new Int32Array(2 * seqLen),
        // BERT: padding after the 70th token of the first row.
        attentionMask: kind === 'bert' ? Float32Array.from({ length: 2 * seqLen }, (_, i) => (i < 70 || i >= seqLen ? 1 : 0)) : undefined,
      };
      measureEstimatorHealth(model, batch);
      const before = tf.memory().numTensors;
      const health = measureEstimatorHealth(model, batch)!;
      expect(tf.memory().numTensors).toBe(before);
      expect(health).toHaveLength(2);
      for (const layer of health) for (const value of Object.values(layer)) expect(Number.isFinite(value)).toBe(true);
      expect(HEALTH_POSITIONS).toBeLessThan(seqLen);
      model.dispose();
      const softmax = createLanguageModel({ ...config, attention: { name: 'softmax', options: {} } });
      expect(measureEstimatorHealth(softmax, batch)).toBeNull();
      softmax.dispose();
    });
  }
});

describe('train.estimatorHealth', () => {
  it('a run with it writes each validation record’s estimator_health, one value per layer; a mechanism without a kernel estimate is refused', async () => {
    const docs = syntheticDocuments(200, 5);
    const data = join(dir, 'data');
    await writeDataset(data, { train: [docs.slice(0, 180)], validation: [docs.slice(180)] }, 50);
    const tokenizer = join(dir, 'tokenizer.json');
    await trainByteLevelBpeFromTexts(docs.slice(0, 180), 300, tokenizer);
    const recipeText = (attention: string) => `
model: { kind: gpt, dModel: 16, numLayers: 2, numHeads: 2, attention: { name: ${attention}, options: { features: 8 } } }
data: { dataset: ${data}, tokenizer: ${tokenizer}, seqLen: 16, shuffleBuffer: 0 }
train: { batchSize: 2, lr: 1e-2, warmupSteps: 1, evalInterval: 2, evalTokens: 64, logInterval: 2, runDir: ${join(dir, 'runs')}, seed: 3, estimatorHealth: true }
`;
    const recipe = parseRecipe(recipeText('performer'), join(dir, 'health.yaml'), ['--train.maxTokens=128']);
    const result = await runTraining(recipe);
    const records = readFileSync(join(result.runDir, 'metrics.jsonl'), 'utf8')
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l) as MetricRecord);
    const val = records.filter((r) => r.split === 'val');
    expect(val.length).toBeGreaterThanOrEqual(2);
    for (const r of val) {
      expect(Object.keys(r.estimator_health!).sort()).toEqual(['denominator_min', 'denominator_p01', 'denominator_p50', 'kernel_error', 'output_error']);
      for (const values of Object.values(r.estimator_health!)) {
        expect(values).toHaveLength(2);
        for (const value of values) expect(Number.isFinite(value)).toBe(true);
      }
    }
    expect(records.filter((r) => r.split === 'train').every((r) => r.estimator_health === undefined)).toBe(true);
    const elu = parseRecipe(recipeText('linear-elu').replace('options: { features: 8 }', 'options: {}'), join(dir, 'elu.yaml'), ['--train.maxTokens=128']);
    await expect(runTraining(elu)).rejects.toThrow(/train\.estimatorHealth: attention 'linear-elu' declares no kernel estimate/);
  });
});

describe('estimator_health in a metric record', () => {
  const record = {
    step: 2,
    tokens: 64,
    split: 'val',
    loss: 5,
    ppl: Math.exp(5),
    lr: 0.01,
    grad_norm: null,
    tokens_per_s: 10,
    elapsed_s: 1,
    estimator_health: {
      kernel_error: [0.5, 0.25],
      output_error: [0.1, 0.2],
      denominator_min: [-0.5, null],
      denominator_p01: [0.1, 0.2],
      denominator_p50: [0.9, 1],
    },
  };

  it('W&B and TensorBoard get one scalar per measure and layer; a null (NaN) is left out', () => {
    const row = toWandbRow(record as MetricRecord);
    expect(row['val/estimator_health/kernel_error/layer1']).toBe(0.25);
    expect(row['val/estimator_health/denominator_min/layer0']).toBe(-0.5);
    expect('val/estimator_health/denominator_min/layer1' in row).toBe(false);
    expect(Object.keys(row).filter((k) => k.includes('estimator_health'))).toHaveLength(9);
    expect(recordScalars(record as MetricRecord)['val/estimator_health/output_error/layer0']).toBe(0.1);
  });

  it('is checked when metrics.jsonl is read: a measure that is not a list of numbers is an error naming it', () => {
    expect(() => checkRecord(record, 'm:1')).not.toThrow();
    const bad = { ...record, estimator_health: { ...record.estimator_health, output_error: 0.1 } };
    expect(() => checkRecord(bad, 'm:1')).toThrow(/m:1: metric record field estimator_health\.output_error must be a list of numbers, one per layer/);
  });
});
