// The exported folders of standard models load in PyTorch with transformers' own classes
// (AutoModelForCausalLM / AutoModelForMaskedLM, AutoTokenizer) with no missing or unexpected weight,
// and compute our logits (the other mechanisms: pytorch.test.ts).
// Needs a Python with torch and transformers: `npm run setup:transformers` makes one in .venv-hf/
// (or point SLAYFORMER_PYTHON at one); without it the tests are skipped with one line saying so.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { exportHf } from '../../src/store/hf-export.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { saveFinalModel } from '../../src/store/model-folder.ts';
import { syntheticDocuments } from '../data/stream-fixtures.ts';
import { findTransformersPython, runTransformersCheck, TRANSFORMERS_SETUP as SETUP } from '../helpers/python.ts';
import { BERT_DIR, logitsOf, maxAbsDiff, perturb, savedRun } from './fixtures.ts';

const python = findTransformersPython();
if (!python) console.warn(`skipped: the transformers from_pretrained tests need a Python with torch and transformers (set up with: ${SETUP})`);

interface PythonResult {
  class?: string;
  loading?: Record<string, string[]>;
  logits?: number[][][];
  token_ids?: number[][];
}

let dir: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = mkdtempSync(path.join(tmpdir(), 'slay-hf-transformers-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!python)(`transformers from_pretrained on exported folders (needs: ${SETUP})`, () => {
  it('a native GPT (exact GELU, ε 1e-6, our own BPE) and a finetuned BERT load with every weight and give our logits (≤ 1e-4)', async () => {
    const texts = ['The state of the Union is strong.', 'Congress shall make no law, 1789.'];
    await trainByteLevelBpeFromTexts(syntheticDocuments(200, 7), 300, path.join(dir, 'tokenizer.json'));
    const native = (model: string) =>
      parseRecipe(`model: ${model}\ndata: { dataset: d, tokenizer: ${path.join(dir, 'tokenizer.json')}, seqLen: 16 }`, path.join(dir, 'r.yaml'));
    const gpt = await exportHf(
      await savedRun(
        native('{ kind: gpt, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16, activation: gelu-erf, layerNormEps: 1e-6 }'),
        path.join(dir, 'gpt'),
        1,
      ),
      { out: path.join(dir, 'gpt-hf') },
    );
    // The fixture BERT with every weight moved (as a finetune would), saved as a run and exported.
    const imported = await loadModel(`hf:${BERT_DIR}`);
    perturb(imported.model, 3);
    // A finetune's recipe names its dataset (an imported folder's is empty, which a saved recipe may not be).
    const finetuned = { ...imported.recipe, data: { ...imported.recipe.data, dataset: path.join(dir, 'finetune-data') } };
    const bertRun = await saveFinalModel(path.join(dir, 'bert'), imported.model, finetuned, imported.metadata);
    imported.model.dispose();
    const bert = await exportHf(bertRun, { out: path.join(dir, 'bert-hf') });

    const ids = [
      [3, 40, 77, 120, 9, 250, 18, 4],
      [3, 5, 6, 7, 8, 9, 10, 4],
    ];
    const requests = [
      { folder: gpt.out, kind: 'gpt', input_ids: ids, texts },
      { folder: bert.out, kind: 'bert', input_ids: ids, texts },
    ];
    const [gptResult, bertResult] = runTransformersCheck<PythonResult>(python!, dir, requests);

    expect(gptResult.class).toBe('GPT2LMHeadModel');
    expect(bertResult.class).toBe('BertForMaskedLM');
    for (const result of [gptResult, bertResult]) {
      expect(result.loading).toEqual({ missing_keys: [], unexpected_keys: [], mismatched_keys: [], error_msgs: [] });
    }
    for (const [result, folder] of [
      [gptResult, gpt.out],
      [bertResult, bert.out],
    ] as const) {
      const { model } = await loadModel(folder);
      const ours = logitsOf(model, ids);
      model.dispose();
      // Observed 3.9e-7 (GPT) and 6.0e-7 (BERT): float32 summation order.
      expect(maxAbsDiff(ours, result.logits!)).toBeLessThan(1e-4);
      const tokenizer = await TextTokenizer.load(path.join(folder, 'tokenizer.json'));
      expect(result.token_ids).toEqual((await tokenizer.encodeBatch(texts)).map((a) => Array.from(a)));
    }
  });
});
