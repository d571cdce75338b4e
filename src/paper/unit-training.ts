// What the experiments whose units are ordinary training runs share: a unit's recipe (a shipped recipe with the
// unit's settings, run inside the unit's folder, checked like any recipe file), and its curves once it has trained.
import fs from 'node:fs';
import path from 'node:path';
import { parseYaml } from '../recipe/load.ts';
import type { Recipe } from '../recipe/schema.ts';
import { METRICS_FILE } from '../store/layout.ts';
import { parseRecipe } from '../store/recipes.ts';
import { RunFolder } from '../store/run-folder.ts';
import { runTraining } from '../train/trainer.ts';
import type { UnitContext } from './protocol.ts';

export interface Curves {
  train: { step: number; loss: number }[];
  val: { step: number; loss: number; acc: number | null }[];
}

/** The training and validation curves of a run folder's metrics.jsonl. */
function readCurves(runDir: string): Curves {
  const run = RunFolder.at(runDir);
  const records = run.metrics();
  const curves: Curves = {
    train: records.filter((r) => r.split === 'train').map((r) => ({ step: r.step, loss: r.loss })),
    val: records.filter((r) => r.split === 'val').map((r) => ({ step: r.step, loss: r.loss, acc: r.acc ?? null })),
  };
  if (curves.val.length === 0) throw new Error(`${run.file(METRICS_FILE)}: no validation record`);
  return curves;
}

/**
 * The recipe of a unit: `file` with the unit's settings (dotted keys; a mapping such as the attention options
 * replaces the recipe's whole), run inside the unit's folder `dir`.
 */
export function unitRecipe(file: string, settings: Record<string, unknown>, dir: string): Recipe {
  const { value, errors } = parseYaml(fs.readFileSync(file, 'utf8'));
  if (errors.length > 0) throw new Error(`${file}: ${errors.join('; ')}`);
  const root = value as Record<string, unknown>;
  for (const [key, setting] of Object.entries({ ...settings, 'train.runDir': dir })) {
    const parts = key.split('.');
    let section = root;
    for (const part of parts.slice(0, -1)) section = (section[part] ??= {}) as Record<string, unknown>;
    section[parts[parts.length - 1]] = setting;
  }
  return parseRecipe(JSON.stringify(root), file);
}

export interface TrainedUnit {
  steps: number;
  /** The final model folder, relative to the unit's folder. */
  finalDir: string;
  curves: Curves;
  /** The last validation record (the final evaluation). */
  last: Curves['val'][number];
  /** The first validation record (step 0 where the recipe evaluates before training). */
  first: Curves['val'][number];
}

/**
 * Trains the unit's recipe with the ordinary trainer and reads back its curves; null in a rank other than 0, which
 * trains with rank 0 (the collective step executor) and has no run folder to read.
 */
export async function trainUnit(
  recipe: Recipe,
  context: UnitContext,
  opts: Pick<Parameters<typeof runTraining>[1] & object, 'beforeTraining'> = {},
): Promise<TrainedUnit | null> {
  const result = await runTraining(recipe, opts);
  if (!context.leader) return null;
  const curves = readCurves(result.runDir);
  return {
    steps: result.steps,
    finalDir: path.relative(context.dir, result.finalDir),
    curves,
    last: curves.val[curves.val.length - 1],
    first: curves.val[0],
  };
}
