// Recipes as every command reads them: recipe/load.ts's rules, with the hook through which an initFrom that names a
// Hugging Face folder fixes the model keys (its config.json) and the default data.tokenizer (src/hf/folder.ts).
// recipe/ reads no folder itself; this is where the two meet.
import { hfRecipeSettings } from '../hf/folder.ts';
import { loadRecipeWith, parseRecipeWith, type RecipeHooks } from '../recipe/load.ts';
import type { Recipe } from '../recipe/schema.ts';
import { hfFolderOf } from './resolve.ts';

const HOOKS: RecipeHooks = {
  initFromSettings: (initFrom) => {
    const dir = hfFolderOf(initFrom);
    return dir === null ? null : hfRecipeSettings(dir);
  },
};

/** Reads, validates and resolves a recipe file (recipe/load.ts loadRecipeWith). */
export function loadRecipe(file: string, overrides: string[] = []): Recipe {
  return loadRecipeWith(HOOKS, file, overrides);
}

/** loadRecipe on a string (the file name is used for messages and the default `name`). */
export function parseRecipe(text: string, file: string, overrides: string[] = []): Recipe {
  return parseRecipeWith(HOOKS, text, file, overrides);
}
