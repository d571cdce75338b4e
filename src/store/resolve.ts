// Which folder holds a model: ONE rule for `--resume` (a checkpoint to continue), `initFrom` (weights to start from)
// and eval, generate and export (a model to load), docs/layout.md "Recipe and store":
//   1. `hf:<folder>`, or a folder whose config.json has a model_type (and no recipe.json): that Hugging Face folder
//      (never for --resume: it holds no training state).
//   2. `auto`: --resume takes the newest complete checkpoint of the newest run folder of the recipe's name that has
//      one; `auto:<recipe name>` (initFrom) takes final/ of the newest finished run of that name that is the recipe as
//      written (no model overrides) and trained its recipe's budget (chooseAutoRun).
//   3. A folder holding model.safetensors is the model folder itself; one that is a checkpoint (in checkpoints/, or
//      holding state.json) must be complete (its COMPLETE marker), and --resume wants nothing but a checkpoint.
//   4. Any other folder is a run folder: for a model its final/, else its newest complete checkpoint; for --resume its
//      newest complete checkpoint.
// Relative paths resolve against the working directory; errors name the argument and say what it may be.
import { existsSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import YAML from 'yaml';
import { CONFIG_FILE as HF_CONFIG_FILE, isHfFolder } from '../hf/folder.ts';
import { modelOverrides, nameWithModelOverrides } from '../recipe/run-name.ts';
import { COMPLETE_MARKER } from '../core/atomic-folder.ts';
import { CHECKPOINTS_DIR, FINAL_DIR, MODEL_FILE, RECIPE_FILE, RUN_CONFIG_FILE, STATE_FILE } from './layout.ts';
import { listRunFolders, RunFolder } from './run-folder.ts';

/** `initFrom: hf:<folder>`, `eval hf:<folder>`, …: names a Hugging Face folder explicitly. */
export const HF_PREFIX = 'hf:';
/** `initFrom: auto:<recipe name>` = the newest finished run of that recipe under train.runDir. */
export const AUTO_PREFIX = 'auto:';

/** Who asks: `resume` wants a checkpoint; `initFrom` and `load` (eval, generate, export) want a model. */
export type ModelRole = 'resume' | 'initFrom' | 'load';

const ROLES: Record<ModelRole, { label: (spec: string) => string; give: string }> = {
  resume: { label: (spec) => `--resume ${spec}`, give: "'auto', a run folder or a checkpoint folder" },
  initFrom: { label: (spec) => `initFrom ${spec}`, give: "a run's final/ folder, a checkpoint folder, a run folder, auto:<recipe name> or hf:<folder>" },
  load: { label: (spec) => `checkpoint ${spec}`, give: "a run's final/ folder, a checkpoint folder, a run folder or hf:<folder>" },
};

/** The folder a spec names, its format, and for `auto` which run was chosen and why (null otherwise). */
export type ModelSource = { format: 'slayformer' | 'hf'; dir: string; reason: string | null };

/** Where `auto` looks: train.runDir, and (for --resume) the recipe's name. */
export interface RunsOfRecipe {
  runDir: string;
  recipeName?: string;
}

/** The Hugging Face folder `spec` names (rule 1 above), or null. */
export function hfFolderOf(spec: string): string | null {
  if (spec.startsWith(HF_PREFIX)) return path.resolve(spec.slice(HF_PREFIX.length));
  const dir = path.resolve(spec);
  // This project's model folders hold recipe.json, and a run folder's config.json is a recipe (no model_type). Weights
  // beside a config.json that is not JSON (cut short) are a damaged Hugging Face folder: reading it names that file.
  if (existsSync(path.join(dir, RECIPE_FILE))) return null;
  return isHfFolder(dir) || (existsSync(path.join(dir, MODEL_FILE)) && unreadableJson(path.join(dir, HF_CONFIG_FILE))) ? dir : null;
}

/** Whether `file` exists but does not parse as JSON. */
function unreadableJson(file: string): boolean {
  if (!existsSync(file)) return false;
  try {
    JSON.parse(readFileSync(file, 'utf8'));
    return false;
  } catch {
    return true;
  }
}

/** The folder `spec` names for `role` (the rules at the top of this file). */
export function resolveModelSource(role: ModelRole, spec: string, runs?: RunsOfRecipe): ModelSource {
  const label = ROLES[role].label(spec);
  const give = `give ${ROLES[role].give}`;
  const hfDir = hfFolderOf(spec);
  if (hfDir) {
    if (role === 'resume') throw new Error(`${label}: ${hfDir} is a Hugging Face folder, which holds no training state; ${give}`);
    return { format: 'hf', dir: hfDir, reason: null };
  }
  if (runs && role === 'resume' && spec === 'auto' && runs.recipeName !== undefined) {
    return { format: 'slayformer', dir: newestRunCheckpoint(label, runs.runDir, runs.recipeName), reason: null };
  }
  if (runs && role === 'initFrom' && spec.startsWith(AUTO_PREFIX)) return chooseAutoRun(spec.slice(AUTO_PREFIX.length), runs.runDir);
  const dir = path.resolve(spec);
  if (!statSync(dir, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`${label}: no such folder (${give})`);
  if (existsSync(path.join(dir, MODEL_FILE))) {
    const checkpoint = existsSync(path.join(dir, STATE_FILE)) || path.basename(path.dirname(dir)) === CHECKPOINTS_DIR;
    if (checkpoint && !existsSync(path.join(dir, COMPLETE_MARKER))) {
      throw new Error(`${label}: the checkpoint ${dir} is incomplete (no ${COMPLETE_MARKER} marker: its writer was interrupted); use an earlier one`);
    }
    if (!checkpoint && role === 'resume') throw new Error(`${label}: ${dir} is a model folder without training state (no ${STATE_FILE}); ${give}`);
    return { format: 'slayformer', dir, reason: null };
  }
  const final = path.join(dir, FINAL_DIR);
  if (role !== 'resume' && existsSync(path.join(final, MODEL_FILE))) return { format: 'slayformer', dir: final, reason: null };
  const newest = RunFolder.at(dir).checkpoints().at(-1);
  if (newest) return { format: 'slayformer', dir: newest.dir, reason: null };
  const holds = role === 'resume' ? 'complete checkpoint' : `${MODEL_FILE}, ${FINAL_DIR}/ or complete checkpoint`;
  throw new Error(`${label}: ${dir} holds no ${holds}; ${give}`);
}

/** `--resume auto`: the newest complete checkpoint of the newest run folder of `name` that has one (folders of failed starts are passed over). */
function newestRunCheckpoint(label: string, runDir: string, name: string): string {
  const runs = listRunFolders(runDir, name);
  if (runs.length === 0) throw new Error(`${label}: no run folder of recipe '${name}' in ${path.resolve(runDir)}`);
  for (const run of runs.reverse()) {
    const newest = RunFolder.at(run).checkpoints().at(-1);
    if (newest) return newest.dir;
  }
  throw new Error(
    `${label}: none of the ${runs.length} run folders of '${name}' in ${path.resolve(runDir)} has a complete checkpoint; name a checkpoint folder instead`,
  );
}

interface FinishedRun {
  entry: string;
  /** What the run was asked to train (its config.json's train.maxTokens; null = one epoch), when readable. */
  budget: number | null | undefined;
  /** What its recipe file asks for (train.maxTokens; null = one epoch), when the file named in env.json is readable. */
  recipeBudget: { file: string; maxTokens: number | null } | undefined;
  tokens: number | undefined;
  valLoss: number | undefined;
  /** Why the run is not the recipe `auto:` names (another recorded name, model overrides), or null. */
  mismatch: string | null;
}

/** train.maxTokens of a recipe mapping: a number, null (one epoch, the default), or undefined when malformed. */
function maxTokensOf(recipe: Record<string, unknown> | undefined): number | null | undefined {
  const train = recipe?.train;
  if (train === undefined || train === null) return null;
  if (typeof train !== 'object') return undefined;
  const value = (train as Record<string, unknown>).maxTokens;
  return value === undefined || value === null ? null : typeof value === 'number' ? value : undefined;
}

/** The recipe file a run was started from (the .yaml argument recorded in its env.json) and its train.maxTokens. */
function recipeFileBudget(run: RunFolder): FinishedRun['recipeBudget'] {
  const env = run.env({ unreadable: () => {} });
  const argv = Array.isArray(env?.argv) ? env.argv.filter((a): a is string => typeof a === 'string') : [];
  const recipeArg = argv.slice(1).find((a) => /\.ya?ml$/.test(a));
  if (!recipeArg || typeof env?.cwd !== 'string') return undefined;
  const file = path.resolve(env.cwd, recipeArg);
  let parsed: unknown;
  try {
    parsed = YAML.parse(readFileSync(file, 'utf8'));
  } catch {
    return undefined;
  }
  const maxTokens = maxTokensOf(typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, unknown>) : undefined);
  const relative = path.relative(process.cwd(), file);
  return maxTokens === undefined ? undefined : { file: relative.startsWith('..') ? file : relative, maxTokens };
}

/**
 * Why run folder `folder` of `name` is not a run of that recipe as written, or null: its config.json names another
 * recipe (a folder copied or renamed by hand), or its command line (env.json argv) overrode model keys that its name
 * does not carry (a run folder of a version that did not yet name runs after their model overrides, or one named
 * with --name; src/recipe/run-name.ts).
 */
function recipeMismatch(run: RunFolder, name: string): string | null {
  const recorded = run.config({ unreadable: () => {} })?.name;
  if (typeof recorded === 'string' && recorded !== name) return `its ${RUN_CONFIG_FILE} names the recipe '${recorded}'`;
  const env = run.env({ unreadable: () => {} });
  const argv = Array.isArray(env?.argv) ? env.argv.filter((a): a is string => typeof a === 'string').slice(1) : [];
  // The command line as typed: `--model.key value` or `--model.key=value`.
  const given = argv.flatMap((arg, i) => (arg.startsWith('--model.') ? [arg.includes('=') ? arg : `${arg}=${argv[i + 1] ?? ''}`] : []));
  const changed = modelOverrides(given);
  // A name that carries the overrides (gpt-softmax+attention=performer) is the recipe as written with them.
  if (changed.length === 0 || name.endsWith(nameWithModelOverrides('', given))) return null;
  return `trained with ${changed.map(({ key, value }) => `--${key}=${value}`).join(' ')}, which changes the model`;
}

/** Whether a finished run trained at least its recipe file's budget (a run shortened with --train.maxTokens did not). */
function trainedFullBudget(run: FinishedRun): boolean | undefined {
  if (run.budget === undefined || run.recipeBudget === undefined) return undefined;
  const wanted = run.recipeBudget.maxTokens;
  if (wanted === null) return run.budget === null;
  return run.budget === null || run.budget >= wanted;
}

const tokensText = (n: number | null | undefined) => (n === null ? 'one epoch' : n === undefined ? '? tokens' : `${n.toLocaleString('en-US')} tokens`);

function describeRun(run: FinishedRun): string {
  const loss = run.valLoss === undefined ? '' : `, final val loss ${run.valLoss.toFixed(4)}`;
  return `${run.entry} (${tokensText(run.tokens)}${loss})`;
}

/**
 * `auto:<name>`: final/ of the newest finished run `<runDir>/<name>-<timestamp>` that is the recipe as written (its
 * config.json names `<name>` and its command line overrode no model key, recipeMismatch: another model must never
 * stand in; none is an error naming each run's mismatch) and trained its recipe's budget, i.e. was not shortened with
 * a train.maxTokens override below what its recipe file (recorded in env.json) asks for: a short smoke run must not
 * silently stand in for the real one. When none did (or it cannot be told), the newest such run, and the reason says
 * so. The reason names the run, its tokens and loss, and the newer runs passed over and why.
 */
function chooseAutoRun(name: string, runDir: string): ModelSource {
  const spec = `${AUTO_PREFIX}${name}`;
  const finished: FinishedRun[] = listRunFolders(runDir, name)
    .filter((folder) => existsSync(path.join(folder, FINAL_DIR, MODEL_FILE)))
    .reverse() // newest first
    .map((folder) => {
      const run = RunFolder.at(folder);
      // A broken file tells nothing of the run: read as absent.
      const summary = run.summary({ unreadable: () => {} });
      const config = run.config({ unreadable: () => {} });
      return {
        entry: path.basename(folder),
        budget: config ? maxTokensOf(config) : undefined,
        recipeBudget: recipeFileBudget(run),
        tokens: summary?.tokens,
        valLoss: summary?.val_loss,
        mismatch: recipeMismatch(run, name),
      };
    });
  if (finished.length === 0) {
    throw new Error(
      `initFrom ${spec}: no finished run of '${name}' (a folder ${name}-<timestamp>/${FINAL_DIR}/${MODEL_FILE}) under ${runDir}; train it first, e.g. npm run train -- recipes/demo/${name}.yaml`,
    );
  }
  // Another model is never a stand-in: runs that are not the recipe as written are passed over, and none is an error.
  const asWritten = finished.filter((run) => run.mismatch === null);
  if (asWritten.length === 0) {
    throw new Error(
      `initFrom ${spec}: none of the ${finished.length} finished runs of '${name}' is the recipe as written: ${finished.map((run) => `${run.entry}: ${run.mismatch}`).join('; ')}; ` +
        `train it without model overrides (npm run train -- recipes/demo/${name}.yaml) or name a run folder in initFrom`,
    );
  }
  const full = asWritten.findIndex((run) => trainedFullBudget(run) !== false);
  const chosen = asWritten[full === -1 ? 0 : full];
  const dir = path.join(runDir, chosen.entry, FINAL_DIR);
  const shortened = (run: FinishedRun) =>
    `${describeRun(run)}: trained ${tokensText(run.budget)}, less than the ${tokensText(run.recipeBudget?.maxTokens)} of ${run.recipeBudget?.file}`;
  const passedOver = (run: FinishedRun) => (run.mismatch === null ? shortened(run) : `${describeRun(run)}: ${run.mismatch}`);
  let reason: string;
  if (full === -1) {
    reason = `initFrom ${spec}: none of the ${asWritten.length} finished runs of '${name}' trained its recipe's budget; using the newest, ${shortened(chosen)}`;
  } else {
    const known = trainedFullBudget(chosen) === true;
    reason =
      `initFrom ${spec}: using ${describeRun(chosen)}, the newest finished run of '${name}'` +
      (known
        ? ` that trained its recipe's budget (${tokensText(chosen.recipeBudget!.maxTokens)} in ${chosen.recipeBudget!.file})`
        : ' (its recipe file is not readable: budget not checked)');
  }
  const newer = finished.slice(0, finished.indexOf(chosen));
  if (newer.length > 0) reason += `; passed over the newer ${newer.map(passedOver).join('; ')}`;
  return { format: 'slayformer', dir, reason };
}
