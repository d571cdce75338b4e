// Loads a trained model for evaluation or generation from a model folder — a run's final/ folder or
// a training checkpoint (both hold model.safetensors + recipe.json) — or from a run folder (its
// final/); Hugging Face folders go to src/hf/load.ts. Copying the tensors by name is finetune.ts's
// loadWeights; this file checks the untrusted files first (clear errors naming the file) and builds the model.
import { existsSync, statSync } from 'node:fs';
import path from 'node:path';
import { TextTokenizer } from '../data/tokenizer.ts';
import { createLanguageModel, type LanguageModel } from '../model/lm.ts';
import { hfFolderOf } from '../hf/folder.ts';
import { loadHfModel } from '../hf/load.ts';
import { COMPLETE_MARKER, readCheckedFiles } from '../core/atomic-folder.ts';
import { FINAL_TOKENIZER_FILE, loadWeights, MODEL_FILE, RECIPE_FILE } from './finetune.ts';
import { runFolderOf } from './checkpoint.ts';
import { relocateRecipePaths } from './metrics.ts';
import { checkSavedModel } from './model-check.ts';
import { parseRecipe } from './recipe.ts';
import type { Recipe } from './recipe.ts';
import { readRunMarker } from './run-folder.ts';
import { decodeSafetensors } from './safetensors.ts';

export interface LoadedModel {
  /** The model folder the weights came from (absolute). */
  dir: string;
  model: LanguageModel;
  recipe: Recipe;
  /** The safetensors header metadata (tokenizer_sha256, step, …). */
  metadata: Record<string, string>;
}

/** `dir` itself if it holds model.safetensors, else `<dir>/final`; errors name what is missing. */
export function resolveModelFolder(dir: string): string {
  const abs = path.resolve(dir);
  if (!statSync(abs, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`checkpoint folder ${abs} does not exist`);
  const candidate = existsSync(path.join(abs, MODEL_FILE)) ? abs : path.join(abs, 'final');
  for (const file of [MODEL_FILE, RECIPE_FILE]) {
    if (!existsSync(path.join(candidate, file))) {
      throw new Error(
        `checkpoint folder ${abs} is incomplete: ${path.join(candidate, file)} does not exist ` +
          `(give a run's final/ folder, a checkpoint folder or a run folder; each model folder holds ${MODEL_FILE} and ${RECIPE_FILE})`,
      );
    }
  }
  // Training checkpoints are marked complete once fully written; final/ is renamed into place whole.
  if (existsSync(path.join(candidate, 'state.json')) && !existsSync(path.join(candidate, COMPLETE_MARKER))) {
    throw new Error(`checkpoint folder ${candidate} is incomplete (no ${COMPLETE_MARKER} marker: the save was interrupted); use an earlier one`);
  }
  return candidate;
}

/**
 * Builds the model the folder was saved from (the config in the safetensors header; recipe.json's model section and
 * the saved embedding's vocabulary as a fallback) and loads every parameter and buffer by name. The files are
 * untrusted: checksums (when the folder's COMPLETE marker has them), the recipe, the config and every tensor's name
 * and shape are checked before the model is built (model-check.ts). Dropout is irrelevant here: evaluation and
 * decoding run without it.
 */
export async function loadModel(dir: string): Promise<LoadedModel> {
  const hfDir = hfFolderOf(dir); // `hf:<folder>`, or a folder whose config.json has a model_type
  if (hfDir) return loadHfModel(hfDir);
  const folder = resolveModelFolder(dir);
  // final/ carries its tokenizer (checked against COMPLETE like the rest), which then replaces the recipe's path: the
  // folder alone is a complete model. Checkpoints and older final/ folders use the recipe's data.tokenizer.
  const ownTokenizer = existsSync(path.join(folder, FINAL_TOKENIZER_FILE));
  const files = await readCheckedFiles(folder, [MODEL_FILE, RECIPE_FILE, ...(ownTokenizer ? [FINAL_TOKENIZER_FILE] : [])]);
  const modelFile = path.join(folder, MODEL_FILE);
  const saved = parseRecipe(files.get(RECIPE_FILE)!.toString('utf8'), path.join(folder, RECIPE_FILE));
  // Only a run folder's env.json (its marker, run-folder.ts) may point the recipe's data paths elsewhere.
  const runDir = path.basename(folder) === 'final' ? (readRunMarker(path.dirname(folder)).marked ? path.dirname(folder) : null) : runFolderOf(folder).runDir;
  const relocated = runDir ? relocateRecipePaths(saved, runDir) : saved;
  const recipe = ownTokenizer ? { ...relocated, data: { ...relocated.data, tokenizer: path.join(folder, FINAL_TOKENIZER_FILE) } } : relocated;
  const { tensors, metadata } = decodeSafetensors(files.get(MODEL_FILE)!, modelFile);
  const config = checkSavedModel({ tensors, metadata }, recipe, modelFile);
  const model = createLanguageModel(config, 'zeros'); // every tensor is loaded next
  try {
    loadWeights(model, { dir: folder, tensors, metadata, config });
  } catch (err) {
    model.dispose();
    throw new Error(`checkpoint folder ${folder}: ${(err as Error).message}`);
  }
  return { dir: folder, model, recipe, metadata };
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
    throw new Error(`${file} is not the tokenizer ${dir} was trained with (sha256 ${tokenizer.sha256.slice(0, 12)}… vs ${metadata.tokenizer_sha256.slice(0, 12)}…)`);
  }
  if (tokenizer.vocabSize !== model.config.vocabSize) {
    throw new Error(`${file} has ${tokenizer.vocabSize} tokens but the model of ${dir} has a vocabulary of ${model.config.vocabSize}`);
  }
  return tokenizer;
}
