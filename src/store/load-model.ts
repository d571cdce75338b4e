// Loads a trained model for evaluation, generation or export from what the command names (resolve.ts: a run's
// final/ folder, a checkpoint, a run folder or a Hugging Face folder). The files are read and checked as
// model-folder.ts reads them (clear errors naming the file) before the model is built; the tensors are copied by name
// (load-weights.ts). A Hugging Face folder names no dataset: its recipe's data.dataset is empty (eval asks for --data).
import path from 'node:path';
import { TextTokenizer } from '../data/tokenizer.ts';
import { readHfFolder, TOKENIZER_FILE as HF_TOKENIZER_FILE } from '../hf/folder.ts';
import { createLanguageModel, type LanguageModel } from '../model/lm.ts';
import type { Recipe } from '../recipe/schema.ts';
import { loadWeights } from './load-weights.ts';
import { hfModelFolder, readModelFolder } from './model-folder.ts';
import { parseRecipe } from './recipes.ts';
import { HF_PREFIX, resolveModelSource } from './resolve.ts';

export interface LoadedModel {
  /** The model folder the weights came from (absolute). */
  dir: string;
  model: LanguageModel;
  recipe: Recipe;
  /** The safetensors header metadata (tokenizer_sha256, step, …). */
  metadata: Record<string, string>;
}

/**
 * Builds the model the folder `spec` names was saved from (the config in the safetensors header; recipe.json's model
 * section and the saved embedding's vocabulary as a fallback) and loads every parameter and buffer by name. Dropout
 * is irrelevant here: evaluation and decoding run without it.
 */
export async function loadModel(spec: string): Promise<LoadedModel> {
  const source = resolveModelSource('load', spec);
  if (source.format === 'hf') return loadHfModel(source.dir);
  const folder = await readModelFolder(source.dir);
  const model = createLanguageModel(folder.config, 'zeros'); // every tensor is loaded next
  try {
    loadWeights(model, folder);
  } catch (err) {
    model.dispose();
    throw new Error(`model folder ${folder.dir}: ${(err as Error).message}`);
  }
  return { dir: folder.dir, model, recipe: folder.recipe, metadata: folder.metadata };
}

/** The model a Hugging Face folder's config.json describes, its weights, and a recipe with its tokenizer.json and the model's full context as the sequence length. */
async function loadHfModel(dir: string): Promise<LoadedModel> {
  const hf = await readHfFolder(dir);
  if (hf.fresh.length > 0) {
    throw new Error(
      `${dir} holds a bare ${hf.config.architecture ?? hf.config.modelType} without its language-model head (${hf.fresh.join(', ')}): ` +
        `finetune it first (initFrom: ${HF_PREFIX}${dir} initialises the head)`,
    );
  }
  const config = { ...hf.config.model, dropout: 0, seed: hf.config.seed };
  const model = createLanguageModel(config, 'zeros'); // every tensor is loaded next (a missing one is an error)
  const source = hfModelFolder(hf);
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
      data: { dataset: dir, tokenizer: hf.tokenizer?.path ?? path.join(dir, HF_TOKENIZER_FILE), seqLen: config.maxSeqLen },
    }),
    hf.config.file,
  );
  recipe.data.dataset = '';
  return { dir, model, recipe, metadata: source.metadata };
}

/**
 * The tokenizer of a loaded model: `override` or its recipe's data.tokenizer, refused when it is not
 * the one the model was trained with (sha256) or its vocabulary differs from the model's.
 */
export async function loadModelTokenizer(loaded: LoadedModel, override?: string): Promise<TextTokenizer> {
  const { dir, model, recipe, metadata } = loaded;
  const file = override ?? recipe.data.tokenizer;
  const tokenizer = await TextTokenizer.load(file);
  if (metadata.tokenizer_sha256 && metadata.tokenizer_sha256 !== tokenizer.sha256) {
    throw new Error(
      `${file} is not the tokenizer ${dir} was trained with (sha256 ${tokenizer.sha256.slice(0, 12)}… vs ${metadata.tokenizer_sha256.slice(0, 12)}…)`,
    );
  }
  if (tokenizer.vocabSize !== model.config.vocabSize) {
    throw new Error(`${file} has ${tokenizer.vocabSize} tokens but the model of ${dir} has a vocabulary of ${model.config.vocabSize}`);
  }
  return tokenizer;
}
