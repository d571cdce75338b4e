// Where a moved run folder's data now is: the recipe's data paths, corrected from the paths env.json recorded
// (telemetry/environment.ts). Resume and model loading read a run's recipe through it.
import fs from 'node:fs';
import path from 'node:path';
import { ENV_FILE } from '../telemetry/environment.ts';
import type { Recipe } from './recipe.ts';

/**
 * `recipe` with data.dataset and data.tokenizer pointing where they are now for a run folder that may have moved:
 * a recorded absolute path that no longer exists is replaced by its run-relative form from env.json when that one
 * exists. Returns the recipe unchanged when nothing moved (or the run has no env.json).
 */
export function relocateRecipePaths(recipe: Recipe, runDir: string): Recipe {
  let paths: Record<string, { absolute?: unknown; fromRun?: unknown } | null> | undefined;
  try {
    paths = JSON.parse(fs.readFileSync(path.join(runDir, ENV_FILE), 'utf8')).paths;
  } catch {
    return recipe;
  }
  const moved = (key: 'dataset' | 'tokenizer', current: string): string => {
    const recorded = paths?.[key];
    if (fs.existsSync(current) || typeof recorded?.fromRun !== 'string') return current;
    const candidate = path.resolve(runDir, recorded.fromRun);
    return fs.existsSync(candidate) ? candidate : current;
  };
  return { ...recipe, data: { ...recipe.data, dataset: moved('dataset', recipe.data.dataset), tokenizer: moved('tokenizer', recipe.data.tokenizer) } };
}
