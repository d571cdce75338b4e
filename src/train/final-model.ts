// A run's final/ folder: the trained model as safetensors, the resolved recipe and the run's tokenizer, written
// atomically at the end of training; and the named tensors of a model that it (and the Hugging Face export) saves.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { writeFolderAtomically } from '../core/atomic-folder.ts';
import type { TextTokenizer } from '../data/tokenizer.ts';
import type { LanguageModel } from '../model/lm.ts';
import { FINAL_TOKENIZER_FILE } from './finetune.ts';
import type { Recipe } from './recipe.ts';
import { encodeSafetensors, type NamedArray } from './safetensors.ts';

/** Everything the model, state and tensors are saved as: parameters then buffers, by stable name. */
export async function modelTensors(model: LanguageModel): Promise<Map<string, NamedArray>> {
  const out = new Map<string, NamedArray>();
  for (const [name, v] of [...model.parameters(), ...model.buffers()]) {
    out.set(name, { shape: v.shape, data: (await v.data()) as Float32Array });
  }
  return out;
}

/** What final/ holds besides COMPLETE. */
const FINAL_FILES = new Set(['model.safetensors', 'recipe.json', FINAL_TOKENIZER_FILE]);

/**
 * Writes `<runDir>/final/` = model.safetensors (parameters and attention buffers, weights [in, out]; metadata: the
 * model config with its vocabSize, plus `metadata`) + recipe.json (the resolved recipe) + tokenizer.json (a copy of
 * `tokenizer`, the run's, so that final/ alone is a complete model folder for eval, generate and export) + COMPLETE
 * (their sha256), atomically (core/atomic-folder.ts): written aside, fsynced, renamed into place; a previous final/ is
 * replaced only if it holds nothing but those files.
 */
export async function saveFinalModel(
  runDir: string, model: LanguageModel, recipe: Recipe, metadata: Record<string, string> = {}, tokenizer?: Pick<TextTokenizer, 'path' | 'sha256'>,
): Promise<string> {
  const header = {
    format: 'slayformer',
    kind: model.kind,
    layout: 'linear weights are [in, out] (x·W)',
    config: JSON.stringify(model.config),
    ...metadata,
  };
  const files = new Map<string, string | Uint8Array>([
    ['model.safetensors', encodeSafetensors(await modelTensors(model), header)],
    ['recipe.json', JSON.stringify(recipe, null, 2) + '\n'],
  ]);
  if (tokenizer) {
    const bytes = await readFile(tokenizer.path);
    // The file the run loaded, not one changed on disk since: final/ must hold the tokenizer its model was trained with.
    if (createHash('sha256').update(bytes).digest('hex') !== tokenizer.sha256) {
      throw new Error(`${tokenizer.path} changed on disk since the run loaded it (sha256 ${tokenizer.sha256.slice(0, 12)}…): final/ is not written with another tokenizer`);
    }
    files.set(FINAL_TOKENIZER_FILE, bytes);
  }
  return writeFolderAtomically(runDir, 'final', files, FINAL_FILES);
}
