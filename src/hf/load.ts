// eval, generate and export on a Hugging Face folder: the model its config.json describes, its weights,
// and a recipe with its tokenizer.json and the model's full context as the sequence length. A Hugging
// Face folder names no dataset: the recipe's data.dataset is empty (eval asks for --data).
import path from 'node:path';
import { createLanguageModel } from '../model/lm.ts';
import { loadWeights } from '../train/finetune.ts';
import type { LoadedModel } from '../train/load-checkpoint.ts';
import { parseRecipe } from '../train/recipe.ts';
import { asModelFolder, HF_PREFIX, readHfFolder, TOKENIZER_FILE } from './folder.ts';

export async function loadHfModel(dir: string): Promise<LoadedModel> {
  const hf = await readHfFolder(dir);
  if (hf.fresh.length > 0) {
    throw new Error(
      `${dir} holds a bare ${hf.config.architecture ?? hf.config.modelType} without its language-model head (${hf.fresh.join(', ')}): ` +
        `finetune it first (initFrom: ${HF_PREFIX}${dir} initialises the head)`,
    );
  }
  const config = { ...hf.config.model, dropout: 0, seed: hf.config.seed };
  const model = createLanguageModel(config, 'zeros'); // every tensor is loaded next (a missing one is an error)
  const source = asModelFolder(hf);
  try {
    loadWeights(model, source);
  } catch (err) {
    model.dispose();
    throw err;
  }
  const recipe = parseRecipe(
    JSON.stringify({
      initFrom: `${HF_PREFIX}${dir}`,
      model: { attention: config.attention },
      data: { dataset: dir, tokenizer: hf.tokenizer?.path ?? path.join(dir, TOKENIZER_FILE), seqLen: config.maxSeqLen },
    }),
    hf.config.file,
  );
  recipe.data.dataset = '';
  return { dir, model, recipe, metadata: source.metadata };
}
