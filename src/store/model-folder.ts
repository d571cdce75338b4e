// Model folders: a run's final/ and every checkpoint hold model.safetensors (parameters and attention buffers by
// stable name, weights [in, out], the model config in its metadata) and recipe.json (the resolved recipe); final/
// also holds the run's tokenizer.json, so that the folder alone is a complete model. This file writes final/ and
// reads any model folder, checked before anything is built from it (model-check.ts); a Hugging Face folder is read
// into the same shape (src/hf/folder.ts). Which folder a command's argument names is resolve.ts's rule.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import type * as tf from '@tensorflow/tfjs';
import type { TextTokenizer } from '../data/tokenizer.ts';
import { describeImport, readHfConfig, readHfFolder, TOKENIZER_FILE as HF_TOKENIZER_FILE, type HfFolder } from '../hf/folder.ts';
import { decodeSafetensors, encodeSafetensors, readSafetensorsHeader } from '../hf/safetensors.ts';
import type { NamedArray } from '../hf/safetensors.ts';
import type { LanguageModel, LanguageModelConfig } from '../model/lm.ts';
import type { Recipe } from '../recipe/schema.ts';
import { readCheckedFiles, writeFolderAtomically } from '../core/atomic-folder.ts';
import { FINAL_DIR, MODEL_FILE, RECIPE_FILE, TOKENIZER_FILE } from './layout.ts';
import { checkSavedModel } from './model-check.ts';
import { parseRecipe } from './recipes.ts';
import { RunFolder, runFolderOf } from './run-folder.ts';

/** The tensors' values by name (`prefix` + name), read back from the backend. */
export async function namedArrays(tensors: Map<string, tf.Tensor>, prefix = ''): Promise<Map<string, NamedArray>> {
  const out = new Map<string, NamedArray>();
  for (const [name, t] of tensors) out.set(prefix + name, { shape: t.shape, data: (await t.data()) as Float32Array });
  return out;
}

/** Everything a model is saved as: parameters then buffers, by stable name. */
export function modelTensors(model: LanguageModel): Promise<Map<string, NamedArray>> {
  return namedArrays(new Map([...model.parameters(), ...model.buffers()]));
}

/** The metadata of a model.safetensors this project writes: the format, the layout and the model config, plus `extra`. */
export function modelFileHeader(model: LanguageModel, extra: Record<string, string>): Record<string, string> {
  return {
    format: 'slayformer',
    kind: model.kind,
    layout: 'linear weights are [in, out] (x·W)',
    config: JSON.stringify(model.config),
    ...extra,
  };
}

/** What final/ holds besides COMPLETE. */
export const FINAL_FILES = new Set([MODEL_FILE, RECIPE_FILE, TOKENIZER_FILE]);

/**
 * Writes `<runDir>/final/` = model.safetensors (metadata: the model config with its vocabSize, plus `metadata`) +
 * recipe.json (the resolved recipe) + tokenizer.json (a copy of `tokenizer`, the run's) + COMPLETE (their sha256),
 * atomically (src/core/atomic-folder.ts): written aside, fsynced, renamed into place; a previous final/ is replaced
 * only if it holds nothing but those files. A final/ that is a symbolic link is kept beside it, never emptied (`note`
 * says so).
 */
export async function saveFinalModel(
  runDir: string,
  model: LanguageModel,
  recipe: Recipe,
  metadata: Record<string, string> = {},
  tokenizer?: Pick<TextTokenizer, 'path' | 'sha256'>,
  note?: (text: string) => void,
): Promise<string> {
  const files = new Map<string, string | Uint8Array>([
    [MODEL_FILE, encodeSafetensors(await modelTensors(model), modelFileHeader(model, metadata))],
    [RECIPE_FILE, JSON.stringify(recipe, null, 2) + '\n'],
  ]);
  if (tokenizer) {
    const bytes = await readFile(tokenizer.path);
    // The file the run loaded, not one changed on disk since: final/ must hold the tokenizer its model was trained with.
    if (createHash('sha256').update(bytes).digest('hex') !== tokenizer.sha256) {
      throw new Error(
        `${tokenizer.path} changed on disk since the run loaded it (sha256 ${tokenizer.sha256.slice(0, 12)}…): final/ is not written with another tokenizer`,
      );
    }
    files.set(TOKENIZER_FILE, bytes);
  }
  return writeFolderAtomically(runDir, FINAL_DIR, files, FINAL_FILES, note);
}

/** Weights to load into a model by name (load-weights.ts): a model folder's, or a Hugging Face folder's. */
export interface ModelFolder {
  dir: string;
  tensors: Map<string, NamedArray>;
  metadata: Record<string, string>;
  /** The model config the weights were saved with. */
  config: Pick<LanguageModelConfig, 'attention' | 'numHeads'> & Partial<LanguageModelConfig>;
  /** Parameters the source does not hold that keep their initialisation (the MLM head of a bare Hugging Face BertModel). */
  fresh?: ReadonlySet<string>;
}

/** A model folder of this project's, read and checked: its full model config and its recipe. */
export interface SavedModelFolder extends ModelFolder {
  config: LanguageModelConfig;
  /**
   * recipe.json, with data paths relocated for a run folder that moved (run-folder.ts) and, where the folder holds
   * its own tokenizer (final/), data.tokenizer pointing to it.
   */
  recipe: Recipe;
}

/**
 * Reads `<dir>/model.safetensors` and `<dir>/recipe.json` (and final/'s tokenizer.json) and checks them: the checksums
 * of COMPLETE (when the folder has one), the recipe, the saved model config and every tensor (model-check.ts). The
 * one reader of model folders: eval, generate, export and initFrom all read them here.
 */
export async function readModelFolder(dir: string): Promise<SavedModelFolder> {
  for (const file of [MODEL_FILE, RECIPE_FILE]) {
    if (!existsSync(path.join(dir, file))) {
      throw new Error(`model folder ${dir} is incomplete: ${path.join(dir, file)} does not exist (a model folder holds ${MODEL_FILE} and ${RECIPE_FILE})`);
    }
  }
  // Checkpoints and older final/ folders have no tokenizer of their own: they use the recipe's data.tokenizer.
  const ownTokenizer = existsSync(path.join(dir, TOKENIZER_FILE));
  const files = await readCheckedFiles(dir, [MODEL_FILE, RECIPE_FILE, ...(ownTokenizer ? [TOKENIZER_FILE] : [])]);
  const saved = parseSavedRecipe(files.get(RECIPE_FILE)!, path.join(dir, RECIPE_FILE));
  // Only a run folder's env.json (its marker, run-folder.ts) may point the recipe's data paths elsewhere.
  const { runDir } = runFolderOf(dir);
  const relocated = runDir ? { ...saved, data: RunFolder.at(runDir).relocateDataPaths(saved.data) } : saved;
  const recipe = ownTokenizer ? { ...relocated, data: { ...relocated.data, tokenizer: path.join(dir, TOKENIZER_FILE) } } : relocated;
  const modelFile = path.join(dir, MODEL_FILE);
  const { tensors, metadata } = decodeSafetensors(files.get(MODEL_FILE)!, modelFile);
  return { dir, tensors, metadata, config: checkSavedModel({ tensors, metadata }, recipe, modelFile), recipe };
}

/**
 * A model folder's or checkpoint's recipe.json. The project writes it as JSON, so text that is not JSON is a damaged
 * file (cut short by a copy or a full disk), said as such, not a recipe to correct; valid JSON is checked as a recipe.
 */
export function parseSavedRecipe(bytes: Uint8Array, file: string): Recipe {
  const text = Buffer.from(bytes).toString('utf8');
  try {
    JSON.parse(text);
  } catch (err) {
    throw new Error(`${file} is cut short or damaged: not the JSON this project writes there (${(err as Error).message})`);
  }
  return parseRecipe(text, file);
}

/**
 * The metadata of a model folder's model.safetensors (tokenizer_sha256, step, the config …), from its header alone,
 * checked as every read of the file checks it, without its tensors: for readers that ask what a model was trained
 * with (compare: a run's tokenizer), not for loading it (readModelFolder).
 */
export function readModelMetadata(dir: string): Record<string, string> {
  return readSafetensorsHeader(path.join(dir, MODEL_FILE)).metadata;
}

/** A Hugging Face folder read as a model folder (its tokenizer's sha256 as the metadata loadWeights compares). */
export function hfModelFolder(hf: HfFolder): ModelFolder {
  return {
    dir: hf.dir,
    tensors: hf.tensors,
    metadata: hf.tokenizer ? { tokenizer_sha256: hf.tokenizer.sha256 } : {},
    config: hf.config.model,
    fresh: new Set(hf.fresh),
  };
}

/**
 * initFrom's reading of a Hugging Face folder: its vocabulary checked against the run's (data.tokenizer) before any
 * tensor is read, as a model folder, with a line on what it read.
 */
export async function readHfInitFrom(dir: string, vocabSize: number): Promise<{ source: ModelFolder; description: string }> {
  const config = readHfConfig(dir);
  if (config.model.vocabSize !== vocabSize) {
    throw new Error(
      `initFrom ${dir}: the run's tokenizer (data.tokenizer) has ${vocabSize} tokens but ${config.file} has ${config.fields['model.vocabSize']} ${config.model.vocabSize}: ` +
        `use the folder's ${HF_TOKENIZER_FILE}`,
    );
  }
  const hf = await readHfFolder(dir);
  return { source: hfModelFolder(hf), description: describeImport(hf) };
}
