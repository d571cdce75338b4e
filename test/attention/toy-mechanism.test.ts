// Adding a mechanism is one new file plus one registry line: test/fixtures/toy-attention.ts is written as a
// mechanism file is, and the import below is its registry line (src/model/attention/index.ts holds one such line
// per mechanism). With no other edit, the rest of the project takes it up: recipe validation and the recipe docs'
// table, its quadratic declaration in the tensor-size check and the memory estimate, its data-dependent init in a
// new run, training through runTraining, the saved model's shape check, loading back for eval, the freeze rules.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TOY_ATTENTION } from '../fixtures/toy-attention.ts'; // the registry line
import { initBackend } from '../../src/backend/start.ts';
import { createAttention } from '../../src/model/attention/index.ts';
import { evalCheckpoint } from '../../src/cli/eval.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import type { LanguageModelConfig } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { partitionParameters } from '../../src/train/finetune.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { checkModelTensors } from '../../src/store/model-check.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { renderRecipeDocs } from '../../src/recipe/docs.ts';
import { readSafetensors } from '../../src/hf/safetensors.ts';
import { estimateMemory } from '../../src/train/plan.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';
import { testBackend } from '../helpers/backend.ts';
import { randomArray4, relL2, tensor4 } from '../helpers/reference.ts';

let dir: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-toy-mechanism-'));
  const docs = syntheticDocuments(200, 5);
  await writeDataset(join(dir, 'data'), { train: [docs.slice(0, 180)], validation: [docs.slice(180)] }, 50);
  await trainByteLevelBpeFromTexts(docs.slice(0, 180), 300, join(dir, 'tokenizer.json'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const recipeText = (attention: string) => `
model: { kind: gpt, dModel: 16, numLayers: 2, numHeads: 2, maxSeqLen: 32, attention: ${attention} }
data: { dataset: ${join(dir, 'data')}, tokenizer: ${join(dir, 'tokenizer.json')}, seqLen: 16, shuffleBuffer: 8 }
train: { batchSize: 4, lr: 1e-2, warmupSteps: 1, evalInterval: 4, evalTokens: 128, logInterval: 2, runDir: ${join(dir, 'runs')}, seed: 3, maxTokens: 512 }
`;

describe('a mechanism registered by one line', () => {
  it('is a correct mechanism: at τ = 1 it is softmax attention (causal, with a key mask, and decoding a prefix then one position at a time)', () => {
    const before = tf.memory().numTensors;
    const rng = new Rng(4);
    const [q, k, v] = [0, 1, 2].map(() => tensor4(randomArray4(rng, [2, 2, 6, 4])));
    const keyMask = tf.tensor2d([
      [1, 1, 1, 1, 1, 1],
      [0, 1, 1, 0, 1, 1],
    ]);
    for (const causal of [true, false]) {
      const [toy, softmax] = [TOY_ATTENTION, 'softmax'].map((name) => createAttention(name, { numHeads: 2, headDim: 4, causal }));
      expect(
        relL2(
          tf.tidy(() => toy.apply(q, k, v, { keyMask }).arraySync()),
          tf.tidy(() => softmax.apply(q, k, v, { keyMask }).arraySync()),
        ),
      ).toBeLessThan(1e-6);
      if (causal) {
        const whole = tf.tidy(() => toy.apply(q, k, v).arraySync());
        const slice = (t: tf.Tensor4D, from: number, n: number) => tf.slice(t, [0, 0, from, 0], [2, 2, n, 4]) as tf.Tensor4D;
        let state = toy.initState(2, 6);
        const outputs: tf.Tensor4D[] = [];
        for (const [from, n] of [
          [0, 3],
          [3, 1],
          [4, 1],
          [5, 1],
        ]) {
          const inputs = [q, k, v].map((t) => slice(t, from, n));
          const next = toy.step(inputs[0], inputs[1], inputs[2], state, from);
          tf.dispose([...inputs, ...Object.values(state.tensors)]);
          outputs.push(next.out);
          state = next.state;
        }
        expect(
          relL2(
            tf.tidy(() => tf.concat(outputs, 2).arraySync()),
            whole,
          ),
        ).toBeLessThan(1e-6);
        tf.dispose([...outputs, ...Object.values(state.tensors)]);
      }
      toy.dispose();
      softmax.dispose();
    }
    tf.dispose([q, k, v, keyMask]);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('recipes name it and its options are checked; the recipe docs list it', () => {
    const recipe = parseRecipe(recipeText(`{ name: ${TOY_ATTENTION}, options: { temperature: 0.5 } }`), join(dir, 'toy.yaml'));
    expect(recipe.model.attention).toEqual({ name: TOY_ATTENTION, options: { temperature: 0.5, init: 'fixed' } });
    expect(() => parseRecipe(recipeText(`{ name: ${TOY_ATTENTION}, options: { temperature: 0 } }`), join(dir, 'toy.yaml'))).toThrow(
      /model\.attention\.options\.temperature: attention 'toy-tempered-softmax': option 'temperature' must be a number > 0 \(got 0\)/,
    );
    expect(() => parseRecipe(recipeText(`{ name: ${TOY_ATTENTION}, options: { temprature: 2 } }`), join(dir, 'toy.yaml'))).toThrow(
      /unknown key model\.attention\.options\.temprature for attention 'toy-tempered-softmax' \(did you mean model\.attention\.options\.temperature\?\)/,
    );
    expect(renderRecipeDocs()).toContain(
      "| `toy-tempered-softmax` | `init` | `fixed` \\| `calibrated` | `fixed` | 'calibrated': τ from the first training batches |",
    );
  });

  it('its quadratic declaration reaches the tensor-size check and the memory estimate', () => {
    // 8 rows × 8 heads × 8192² scores is more than one tensor holds; a linear mechanism has no such tensor.
    const overrides = ['--model.numHeads=8', '--model.dModel=64', '--model.maxSeqLen=8192', '--data.seqLen=8192', '--train.batchSize=8'];
    const long = (attention: string) => parseRecipe(recipeText(`{ name: ${attention} }`), join(dir, 'long.yaml'), overrides);
    expect(() => long(TOY_ATTENTION)).toThrow(
      /train\.batchSize × model\.numHeads × data\.seqLen² \(the attention scores of a micro-batch\) = 4,294,967,296 elements/,
    );
    expect(long('linear-elu').model.attention.name).toBe('linear-elu');
    const config = (name: string): LanguageModelConfig => ({
      kind: 'gpt',
      vocabSize: 300,
      maxSeqLen: 32,
      dModel: 16,
      numLayers: 2,
      numHeads: 2,
      mlpRatio: 4,
      dropout: 0,
      bias: true,
      attention: { name, options: {} },
      seed: 1,
    });
    const [b, l] = [4, 16];
    const scores = 2 * b * 2 * l * l * 3 * 4; // layers · B·H·L² · (scores, weights, mask product) · float32
    expect(estimateMemory(config(TOY_ATTENTION), 1000, b, l, 1).total - estimateMemory(config('linear-elu'), 1000, b, l, 1).total).toBe(scores);
  });

  it('trains through runTraining (its data-dependent init first), saves, loads back for eval; freeze rules and the shape check know its tensor', async () => {
    const recipe = parseRecipe(recipeText(`{ name: ${TOY_ATTENTION}, options: { init: calibrated } }`), join(dir, 'toy.yaml'));
    const before = tf.memory().numTensors;
    const lines: string[] = [];
    const losses: number[] = [];
    const result = await runTraining(recipe, {
      logger: {
        dir: join(dir, 'runs', 'toy'),
        log: (r) => void (r.split === 'train' && losses.push(r.loss)),
        line: (t) => lines.push(t),
        finish: async () => {},
      },
    });
    expect(lines).toContain(`${TOY_ATTENTION} init 'calibrated': τ of 2 layers from the queries and keys of 2 training batches`);
    expect(result.steps).toBe(8); // 512 tokens / (4 × 16) per step
    expect(losses.length).toBeGreaterThan(1);
    expect(losses.every(Number.isFinite)).toBe(true);
    expect(losses.at(-1)!).toBeLessThan(losses[0]);

    const { tensors, metadata } = await readSafetensors(join(result.finalDir, 'model.safetensors'));
    const temperature = tensors.get('blocks.0.attn.temperature')!;
    expect(temperature.shape).toEqual([2]);
    expect([...temperature.data].every((t) => Number.isFinite(t) && t > 0 && Math.abs(t - 1) > 1e-3)).toBe(true); // calibrated, then trained
    const config = JSON.parse(metadata.config) as LanguageModelConfig;
    tensors.set('blocks.1.attn.temperature', { shape: [3], data: new Float32Array(3) });
    expect(() => checkModelTensors(config, tensors, 'toy.safetensors')).toThrow(/other shape: blocks\.1\.attn\.temperature \[3\], the config builds \[2\]/);

    const evaluated = await evalCheckpoint({ checkpoint: result.finalDir, tokens: recipe.train.evalTokens });
    expect(evaluated.description).toBe(`gpt ${TOY_ATTENTION} (step 8)`);
    expect(evaluated.loss).toBeCloseTo(result.finalVal.loss, 5);
    const loaded = await loadModel(result.finalDir);
    try {
      const { trainable, frozen } = partitionParameters(loaded.model, 'all-but-qkv');
      expect([...trainable.keys()].filter((name) => name.endsWith('.temperature')).sort()).toEqual(['blocks.0.attn.temperature', 'blocks.1.attn.temperature']);
      expect([...frozen.keys()].some((name) => name.startsWith('blocks.0.mlp'))).toBe(true);
    } finally {
      loaded.model.dispose();
    }
    expect(tf.memory().numTensors).toBe(before); // training, evaluation and loading leave no tensor behind
  });
});
