// data.documentMask from a recipe, end to end (docs/data.md, "Documents kept apart"): a tiny GPT run trains and
// validates with its documents kept apart — its evaluation before any step differs from the same model's without the
// option, so the document ids reach evaluation as well as the steps — and the recipe refuses it for BERT. (The xla
// executor's run with it: test/train/xla-run.test.ts.)
import * as tf from '@tensorflow/tfjs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import type { MetricRecord } from '../../src/store/run-record.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { composedFormsKey } from '../../src/backend/fused-kernels.ts';
import { shapesKey } from '../../src/train/compiled-step.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';
import { testBackend } from '../helpers/backend.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

let dir: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-document-mask-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('data.documentMask', () => {
  it('a tiny GPT run trains and validates with documents kept apart, and its evaluation differs from the run without', async () => {
    // Short documents, so that every 32-token window packs several.
    const docs = syntheticDocuments(200, 2);
    const data = join(dir, 'data');
    await writeDataset(data, { train: [docs.slice(0, 180)], validation: [docs.slice(180)] }, 50);
    const tokenizer = join(dir, 'tokenizer.json');
    await trainByteLevelBpeFromTexts(docs.slice(0, 180), 300, tokenizer);
    const recipeText = `
model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2, attention: { name: slay, options: { prfFeatures: 4, anchors: 4, chunkSize: 8 } } }
data: { dataset: ${data}, tokenizer: ${tokenizer}, seqLen: 32, shuffleBuffer: 8 }
train: { batchSize: 4, lr: 1e-2, warmupSteps: 2, evalInterval: 10, evalTokens: 256, logInterval: 5, runDir: ${join(dir, 'runs')}, seed: 3, maxTokens: 1280 }
`;
    const run = async (documentMask: boolean) => {
      const records: MetricRecord[] = [];
      const recipe = parseRecipe(recipeText, join(dir, 'tiny.yaml'), [`--data.documentMask=${documentMask}`]);
      expect(recipe.data.documentMask).toBe(documentMask);
      const result = await runTraining(recipe, {
        logger: { dir: join(dir, 'runs', `mask-${documentMask}`), log: (r) => records.push(r), line: () => {}, finish: async () => {} },
      });
      return { result, val: records.filter((r) => r.split === 'val'), train: records.filter((r) => r.split === 'train') };
    };
    const masked = await run(true);
    const plain = await run(false);
    expect(masked.result.steps).toBe(10);
    expect(masked.val.map((r) => r.step)).toEqual([0, 10]);
    for (const r of [...masked.train, ...masked.val]) expect(Number.isFinite(r.loss)).toBe(true);
    expect(masked.val[1].loss).toBeLessThan(masked.val[0].loss);
    // Same initial model, same tokens: only the documents kept apart change the step-0 evaluation.
    expect(plain.val[0].tokens).toBe(masked.val[0].tokens);
    expect(Math.abs(plain.val[0].loss - masked.val[0].loss)).toBeGreaterThan(1e-4);
  });

  it('program keys name the document tensors only when present: keys of other batches stay those of compiled folders', () => {
    const model = createLanguageModel(tinyGptConfig({ vocabSize: 11, maxSeqLen: 4, dModel: 8, seed: 1 }));
    const batch = { batchSize: 2, seqLen: 4, inputIds: new Int32Array(8).fill(1), labels: new Int32Array(8).fill(2) };
    const plain = model.lossInputs(batch)!;
    const masked = model.lossInputs({ ...batch, documentIds: Int32Array.from([0, 0, 1, 1, 0, 1, 1, 1]) })!;
    const suffix = composedFormsKey();
    expect(shapesKey(plain)).toBe(`2x4,8,-,-,-${suffix}`); // the five fields keys had before data.documentMask
    expect(shapesKey(masked)).toBe(`2x4,8,-,-,-,2x4,2x4${suffix}`);
    tf.dispose([...Object.values(plain), ...Object.values(masked)].filter((t): t is tf.Tensor => t instanceof tf.Tensor));
    model.dispose();
  });

  it('is refused for BERT, naming the key', () => {
    const recipe = `
model: { kind: bert, dModel: 16, numLayers: 1, numHeads: 2 }
data: { dataset: ${dir}, tokenizer: ${join(dir, 'tokenizer.json')}, documentMask: true }
train: { runDir: ${join(dir, 'runs')} }
`;
    expect(() => parseRecipe(recipe, join(dir, 'bert.yaml'))).toThrow(/data\.documentMask applies to GPT packing/);
  });
});
