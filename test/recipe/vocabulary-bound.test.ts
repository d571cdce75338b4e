// The vocabulary bound (2²⁰ rows of an embedding table, docs/bounds.md) holds at every entrance, in the same words:
// tokenizer training, a recipe's model (training and --dry-run, from the tokenizer it names) and a saved model.
// Before, only loading a saved model applied it: a 1.1M-token tokenizer trained a model that eval then refused.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { BOUNDS } from '../../src/core/bounds.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { checkVocabSize } from '../../src/data/train-tokenizer.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';
import { checkModelConfig } from '../../src/store/model-check.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { planRun } from '../../src/train/plan.ts';
import { makeTempDir } from '../fixtures/data.ts';

const dir = makeTempDir('vocabulary-bound');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const OVER = BOUNDS.embeddingRows.max + 1;
/** The words every entrance uses after its own key. */
const beyond = (value: number, min = 1) => `must be an integer ≥ ${min}, ≤ ${BOUNDS.embeddingRows.max} (got ${value}; the bound: ${BOUNDS.embeddingRows.why})`;

const recipeFor = (tokenizer: string) =>
  parseRecipe(`data: {dataset: ${JSON.stringify(path.join(dir, 'no-data'))}, tokenizer: ${JSON.stringify(tokenizer)}}\nwandb: {enabled: false}`, 'vocab.yaml');

/** A Unigram tokenizer.json of `size` tokens (its vocabulary an array: the cheapest to write and parse). */
function unigramTokenizer(file: string, size: number): string {
  const vocab = Array.from({ length: size }, (_, id) => `["t${id}",-1]`).join(',');
  fs.writeFileSync(file, `{"version":"1.0","model":{"type":"Unigram","unk_id":0,"vocab":[${vocab}]},"pre_tokenizer":{"type":"Whitespace"}}`);
  return file;
}

describe('a vocabulary beyond 2²⁰ tokens', () => {
  it('is refused by tokenizer training (--vocab) before it reads anything', () => {
    expect(() => checkVocabSize(OVER)).toThrow(`the vocabulary size (--vocab) ${beyond(OVER, 259)}`);
    expect(() => checkVocabSize(3_000_000)).toThrow(`the vocabulary size (--vocab) ${beyond(3_000_000, 259)}`);
    expect(() => checkVocabSize(258)).toThrow(`the vocabulary size (--vocab) must be an integer ≥ 259, ≤ ${BOUNDS.embeddingRows.max} (got 258)`);
    // Within the bound, the native trainer's own limit still applies.
    expect(() => checkVocabSize(40_000)).toThrow(/above 30000, the fixed limit of the native tokenizers trainer/);
  });

  it("is refused for a recipe's model, naming the tokenizer, as for a saved model", () => {
    const recipe = recipeFor('tok.json');
    expect(() => modelConfigFromRecipe(recipe, OVER)).toThrow(`the vocabulary ${beyond(OVER)}`);
    const saved = { ...modelConfigFromRecipe(recipe, 1000), vocabSize: OVER };
    expect(() => checkModelConfig(saved, 'final/model.safetensors')).toThrow(`vocabSize ${beyond(OVER)}`);
  });

  it('fails loading such a tokenizer, and so train and train --dry-run (planRun), before the native library builds it', async () => {
    const tokenizer = unigramTokenizer(path.join(dir, 'huge.json'), OVER);
    await expect(TextTokenizer.load(tokenizer)).rejects.toThrow(`the vocabulary of ${tokenizer} ${beyond(OVER)}`);
    await expect(planRun(recipeFor(tokenizer))).rejects.toThrow(`the vocabulary of ${tokenizer} ${beyond(OVER)}`);
    const atTheBound = unigramTokenizer(path.join(dir, 'small.json'), 1000);
    expect((await TextTokenizer.load(atTheBound)).vocabSize).toBe(1000);
  });
});
