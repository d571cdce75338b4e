// The architecture options Hugging Face BERT needs, against float64 references: the exact (erf) GELU
// and its gradient, LayerNorm with BERT's ε, and the post-LN block structure; the options are model
// settings that checkpoints, resumes and finetunes respect.
import { perturbParameters } from '../helpers/perturb.ts';
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { createLanguageModel, type LanguageModelConfig } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { geluErf, layerNorm } from '../../src/model/layers.ts';
import { checkResumeCompatible, type LoadedCheckpoint } from '../../src/store/checkpoint.ts';
import { loadWeights } from '../../src/store/load-weights.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { type Recipe } from '../../src/recipe/schema.ts';

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

/** Φ(x) by Simpson's rule on the normal density (2,000 intervals: error far below 1e-12), independent of any erf. */
function normalCdf(x: number): number {
  const n = 2000;
  const h = x / n;
  const density = (t: number) => Math.exp((-t * t) / 2) / Math.sqrt(2 * Math.PI);
  let sum = density(0) + density(x);
  for (let i = 1; i < n; i++) sum += (i % 2 ? 4 : 2) * density(i * h);
  return 0.5 + (sum * h) / 3;
}

const rng = new Rng(12);
const xs = [...Array.from(rng.normalArray(40), (v) => 2.5 * v), -7, -3, -1e-3, 0, 1e-3, 3, 7];

describe('architecture options', () => {
  it('gelu-erf is x·Φ(x) with derivative Φ(x) + x·φ(x)', () => {
    const y = tf.tidy(() => Array.from(geluErf(tf.tensor1d(xs)).dataSync()));
    const dy = tf.tidy(() =>
      Array.from(
        tf
          .grad((t: tf.Tensor) => tf.sum(geluErf(t)))(tf.tensor1d(xs))
          .dataSync(),
      ),
    );
    xs.forEach((x, i) => {
      expect(Math.abs(y[i] - x * normalCdf(x)), `value at ${x}`).toBeLessThan(2e-6 * Math.max(1, Math.abs(x)));
      const slope = normalCdf(x) + (x * Math.exp((-x * x) / 2)) / Math.sqrt(2 * Math.PI);
      expect(Math.abs(dy[i] - slope), `slope at ${x}`).toBeLessThan(2e-6);
    });
  });

  it('layerNorm uses the ε it is given: BERT’s 1e-12 on rows of tiny variance', () => {
    const d = 6;
    const rows = [Array.from({ length: d }, (_, j) => 1 + 1e-4 * j), Array.from({ length: d }, (_, j) => -3 + 2e-5 * (j % 3))];
    const gain = new Float32Array(d).fill(1);
    const shift = new Float32Array(d);
    for (const eps of [1e-12, 1e-5]) {
      const out = tf.tidy(() => layerNorm(tf.tensor2d(rows), tf.tensor1d(gain), tf.tensor1d(shift), eps).arraySync());
      rows.forEach((row, r) => {
        const mean = row.reduce((a, b) => a + b, 0) / d;
        const variance = row.reduce((a, b) => a + (b - mean) ** 2, 0) / d;
        // float32 rows: the inputs themselves carry ~1e-7 relative error, so compare at 2e-2 of the normalised scale.
        row.forEach((v, j) => expect(Math.abs(out[r][j] - (v - mean) / Math.sqrt(variance + eps)), `ε ${eps}`).toBeLessThan(2e-2));
      });
    }
  });

  it('post-LN blocks without a final LayerNorm: a one-layer model equals LN₂(h + MLP(h)), h = LN₁(e + Attn(e)), e = LN_emb(tok + pos + type₀), in float64', () => {
    const config: LanguageModelConfig = {
      kind: 'bert',
      vocabSize: 11,
      maxSeqLen: 5,
      dModel: 4,
      numLayers: 1,
      numHeads: 1,
      mlpRatio: 2,
      dropout: 0,
      bias: true,
      attention: { name: 'softmax', options: {} },
      seed: 3,
      normPosition: 'post',
      embeddingNorm: true,
      typeVocabSize: 2,
      activation: 'gelu-erf',
      layerNormEps: 1e-12,
    };
    const model = perturbParameters(createLanguageModel(config), 4);
    expect(model.parameters().has('norm.weight')).toBe(false);
    const w = (name: string) => Array.from(model.parameters().get(name)!.dataSync());
    const ids = [3, 1, 10, 7];
    const L = ids.length;
    const d = 4;
    const ln = (x: number[], name: string) => {
      const m = x.reduce((a, b) => a + b, 0) / d;
      const s = x.reduce((a, b) => a + (b - m) ** 2, 0) / d;
      const g = w(`${name}.weight`);
      const b = w(`${name}.bias`);
      return x.map((v, j) => ((v - m) / Math.sqrt(s + 1e-12)) * g[j] + b[j]);
    };
    const dense = (x: number[], name: string, out: number) => {
      const W = w(`${name}.weight`); // [in, out]
      const b = w(`${name}.bias`);
      return Array.from({ length: out }, (_, o) => x.reduce((acc, v, i) => acc + v * W[i * out + o], b[o]));
    };
    const tok = w('embed.tokens.weight');
    const pos = w('embed.positions.weight');
    const type0 = w('embed.types.weight').slice(0, d);
    const e = ids.map((id, t) =>
      ln(
        Array.from({ length: d }, (_, j) => tok[id * d + j] + pos[t * d + j] + type0[j]),
        'embed.norm',
      ),
    );
    const q = e.map((x) => dense(x, 'blocks.0.attn.q', d));
    const k = e.map((x) => dense(x, 'blocks.0.attn.k', d));
    const v = e.map((x) => dense(x, 'blocks.0.attn.v', d));
    const attn = q.map((qi) => {
      const scores = k.map((kj) => qi.reduce((a, b, c) => a + b * kj[c], 0) / Math.sqrt(d));
      const max = Math.max(...scores);
      const p = scores.map((s) => Math.exp(s - max));
      const z = p.reduce((a, b) => a + b, 0);
      return Array.from({ length: d }, (_, c) => p.reduce((a, pj, j) => a + (pj / z) * v[j][c], 0));
    });
    const h = e.map((x, t) =>
      ln(
        dense(attn[t], 'blocks.0.attn.out', d).map((a, j) => a + x[j]),
        'blocks.0.ln1',
      ),
    );
    const y = h.map((x) =>
      ln(
        dense(
          dense(x, 'blocks.0.mlp.fc', 8).map((u) => u * normalCdf(u)),
          'blocks.0.mlp.proj',
          d,
        ).map((a, j) => a + x[j]),
        'blocks.0.ln2',
      ),
    );
    const ours = tf.tidy(() => model.body.forward(tf.tensor2d([ids], undefined, 'int32')).arraySync());
    for (let t = 0; t < L; t++) for (let j = 0; j < d; j++) expect(Math.abs(ours[t][j] - y[t][j])).toBeLessThan(1e-4);
    model.dispose();
  });
});

describe('the options are model settings', () => {
  const recipe = (model: string) => parseRecipe(`model: ${model}\ndata: { dataset: d, tokenizer: t, seqLen: 8 }`, 'arch.yaml');

  it('recipes validate them, naming the key', () => {
    expect(recipe('{ normPosition: post, embeddingNorm: true, typeVocabSize: 2, activation: gelu-erf, layerNormEps: 1e-12 }').model).toMatchObject({
      normPosition: 'post',
      layerNormEps: 1e-12,
    });
    expect(() => recipe('{ normPosition: middle, activation: relu, layerNormEps: 0, typeVocabSize: -1 }')).toThrow(
      /model\.normPosition must be one of pre, post .*\n.*model\.typeVocabSize must be an integer ≥ 0, ≤ 1048576 .*\n.*model\.activation must be one of gelu-tanh, gelu-erf .*\n.*model\.layerNormEps must be a number > 0/,
    );
  });

  it('a resume that changes one is refused naming it; a checkpoint from before they existed resumes with the defaults', () => {
    const base = recipe('{ dModel: 8 }');
    const saved = (r: Recipe) => ({ dir: 'ckpt', recipe: r, state: { tokenizer: { path: 't', sha256: 'x' } } }) as unknown as LoadedCheckpoint;
    expect(() => checkResumeCompatible(saved(base), recipe('{ dModel: 8, activation: gelu-erf }'), 'x')).toThrow(
      /model\.activation: checkpoint "gelu-tanh", recipe "gelu-erf"/,
    );
    const old = structuredClone(base) as unknown as { model: Record<string, unknown> };
    for (const key of ['normPosition', 'embeddingNorm', 'typeVocabSize', 'activation', 'layerNormEps']) delete old.model[key];
    expect(checkResumeCompatible(saved(old as unknown as Recipe), base, 'x')).toEqual([
      'model.normPosition',
      'model.embeddingNorm',
      'model.typeVocabSize',
      'model.activation',
      'model.layerNormEps',
    ]);
  });

  it('initFrom refuses a checkpoint whose activation or ε differs (no tensor shape would tell)', () => {
    const config: LanguageModelConfig = {
      kind: 'gpt',
      vocabSize: 9,
      maxSeqLen: 4,
      dModel: 4,
      numLayers: 1,
      numHeads: 1,
      mlpRatio: 1,
      dropout: 0,
      bias: true,
      attention: { name: 'softmax', options: {} },
      seed: 1,
    };
    const model = createLanguageModel(config);
    const tensors = new Map([...model.parameters()].map(([n, v]) => [n, { shape: v.shape, data: v.dataSync() as Float32Array }]));
    const source = (extra: Partial<LanguageModelConfig>) => ({ dir: 'src', tensors, metadata: {}, config: { ...config, ...extra } });
    expect(loadWeights(model, source({})).loaded).toHaveLength(tensors.size); // an older checkpoint: no option recorded = the defaults
    expect(() => loadWeights(model, source({ activation: 'gelu-erf', layerNormEps: 1e-12 }))).toThrow(
      'initFrom src: model.activation is "gelu-tanh" but the checkpoint\'s model has "gelu-erf"; model.layerNormEps is 0.00001 but the checkpoint\'s model has 1e-12',
    );
    model.dispose();
  });
});
