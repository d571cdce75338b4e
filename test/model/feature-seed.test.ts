// model.featureSeed: the attention's random features drawn from their own seed, the weights from train.seed.
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { attentionTensorShapes, createLanguageModel, type LanguageModel, type LanguageModelConfig } from '../../src/model/lm.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';
import { checkModelConfig } from '../../src/store/model-check.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { testBackend } from '../helpers/backend.ts';

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

const base = (attention: string): LanguageModelConfig => ({
  kind: 'gpt',
  vocabSize: 19,
  maxSeqLen: 8,
  dModel: 8,
  numLayers: 2,
  numHeads: 2,
  mlpRatio: 2,
  dropout: 0,
  bias: true,
  attention: { name: attention, options: {} },
  seed: 1,
});

/** name → values of the trained parameters, and of the buffers (random features) of every layer. */
function tensors(model: LanguageModel): { weights: Map<string, number[]>; buffers: Map<string, number[]> } {
  const weights = new Map([...model.parameters()].map(([name, v]) => [name, [...v.dataSync()]]));
  const buffers = new Map(model.body.attention.flatMap((a) => a.buffers.map((b) => [b.name, [...b.dataSync()]] as [string, number[]])));
  return { weights, buffers };
}

function build(config: LanguageModelConfig) {
  const model = createLanguageModel(config);
  const out = tensors(model);
  model.dispose();
  return out;
}

describe('model.featureSeed', () => {
  for (const attention of ['performer', 'slay', 'schoenbat']) {
    it(`${attention}: another feature seed redraws the buffers only; another seed with the same feature seed changes the weights only`, () => {
      const a = build({ ...base(attention), featureSeed: 7 });
      const otherFeatures = build({ ...base(attention), featureSeed: 8 });
      const otherWeights = build({ ...base(attention), seed: 2, featureSeed: 7 });
      expect(a.buffers.size).toBeGreaterThan(0);
      expect(otherFeatures.weights).toEqual(a.weights);
      // SchoenbAt's buffer shape is drawn too: compare what both have, and that they differ.
      expect(otherFeatures.buffers).not.toEqual(a.buffers);
      for (const [name, values] of a.buffers)
        if (otherFeatures.buffers.get(name)?.length === values.length) expect(otherFeatures.buffers.get(name)).not.toEqual(values);
      expect(otherWeights.buffers).toEqual(a.buffers);
      for (const [name, values] of a.weights) {
        if (new Set(values).size === 1) continue; // zeros and ones at init (biases, norms, γ and β) are the same for any seed
        expect(otherWeights.weights.get(name), name).not.toEqual(values);
      }
    });
  }

  it('absent, the features come from the seed exactly as before the key existed: featureSeed = seed draws the same', () => {
    const before = build(base('schoenbat'));
    const explicit = build({ ...base('schoenbat'), featureSeed: 1 });
    expect(explicit.buffers).toEqual(before.buffers);
    expect(explicit.weights).toEqual(before.weights);
  });

  it('the tensors declared without building (checkpoint checks) follow the feature seed: SchoenbAt’s drawn shapes', () => {
    for (const featureSeed of [3, 4, 5]) {
      const config = { ...base('schoenbat'), featureSeed };
      const model = createLanguageModel(config);
      const built = new Map(model.body.attention.flatMap((a) => [...a.buffers, ...a.trainableVariables].map((v) => [v.name, v.shape])));
      model.dispose();
      expect(new Map([...attentionTensorShapes(config)])).toEqual(built);
    }
  });

  it('a saved model config holds it when set, and a bad value is an error naming it', () => {
    const config = { ...base('performer'), featureSeed: 5 };
    expect(checkModelConfig(JSON.parse(JSON.stringify(config)), 'saved').featureSeed).toBe(5);
    expect('featureSeed' in checkModelConfig(JSON.parse(JSON.stringify(base('performer'))), 'saved')).toBe(false);
    expect(() => checkModelConfig({ ...config, featureSeed: 1.5 }, 'saved')).toThrow(/saved: [\s\S]*model\.featureSeed must be an integer/);
  });

  it('a recipe without it builds the model config it built before (no featureSeed key); with it, the key', () => {
    const text = 'model: { dModel: 8, numHeads: 2, numLayers: 1, attention: { name: performer } }\ndata: { dataset: d, tokenizer: t.json, seqLen: 8 }\n';
    const file = join(process.cwd(), 'tiny.yaml');
    const plain = modelConfigFromRecipe(parseRecipe(text, file), 50);
    expect('featureSeed' in plain).toBe(false);
    const seeded = modelConfigFromRecipe(parseRecipe(text, file, ['--model.featureSeed=5']), 50);
    expect(seeded.featureSeed).toBe(5);
    expect(seeded.seed).toBe(plain.seed);
  });
});
