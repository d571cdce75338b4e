// A saved model checked before anything is built from it. A checkpoint's config is untrusted: a few bytes of it
// (dModel 65536 × 512 layers, or 2²¹ Performer features) would otherwise allocate without bound. So the config is
// validated like a recipe's model section (same keys, types and the bounds table of src/core/bounds.ts), and every
// tensor in the file is compared by name and shape with what that config builds — the attention mechanisms'
// tensors as their registry entries declare them, nothing drawn; since the file's tensors are bounded by its size,
// so is the model.
import * as tf from '@tensorflow/tfjs';
import { BOUNDS, boundProblem, listSome } from '../core/bounds.ts';
import { unfittedImportanceWeights } from '../model/attention/index.ts';
import { attentionTensorShapes, headParameterSpecs } from '../model/lm.ts';
import type { LanguageModelConfig } from '../model/lm.ts';
import { ARCHITECTURE_DEFAULTS, transformerParameterSpecs } from '../model/transformer.ts';
import type { NamedArray } from '../hf/safetensors.ts';
import { modelSectionProblems } from '../recipe/load.ts';
import { modelConfigFromRecipe } from '../recipe/model-config.ts';
import type { RunSections } from '../recipe/schema.ts';

/**
 * The model config of a saved model file — its safetensors metadata 'config' checked like a recipe's model section,
 * or, in files saved before that metadata existed, the recipe's model with the saved embedding's rows as the
 * vocabulary — once the file's tensors are checked against it. The one check that eval, generate and initFrom make.
 */
export function checkSavedModel(
  saved: { tensors: Map<string, NamedArray>; metadata: Record<string, string> },
  recipe: RunSections,
  modelFile: string,
): LanguageModelConfig {
  const { tensors, metadata } = saved;
  let config: LanguageModelConfig;
  if (metadata.config) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(metadata.config);
    } catch (err) {
      throw new Error(`${modelFile}: metadata 'config' is not valid JSON (${(err as Error).message})`);
    }
    config = checkModelConfig(parsed, `${modelFile} (metadata 'config')`);
  } else {
    const embedding = tensors.get('embed.tokens.weight');
    if (embedding?.shape.length !== 2) throw new Error(`${modelFile} has no 'embed.tokens.weight' matrix and no config metadata`);
    config = modelConfigFromRecipe(recipe, embedding.shape[0]);
  }
  checkModelTensors(config, tensors, modelFile);
  return config;
}

/** A model config read from a file, checked like a recipe's model section (errors name `source` and the key). */
export function checkModelConfig(value: unknown, source: string): LanguageModelConfig {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Error(`${source}: the model config must be a JSON object (got ${String(JSON.stringify(value)).slice(0, 80)})`);
  }
  // Models saved before the architecture options existed have none of them: they are GPT-2's (the defaults).
  const c: Record<string, unknown> = { ...ARCHITECTURE_DEFAULTS, ...(value as Record<string, unknown>) };
  // featureSeed is there only when the recipe set it (model-config.ts); absent, it is the recipe's null.
  const problems = modelSectionProblems({ ...c, featureSeed: c.featureSeed ?? null });
  const vocabulary = boundProblem('vocabSize', c.vocabSize, BOUNDS.embeddingRows);
  if (vocabulary) problems.push(vocabulary);
  if (!Number.isSafeInteger(c.seed)) problems.push(`seed must be an integer (got ${JSON.stringify(c.seed)})`);
  if (problems.length > 0) throw new Error(`${source}: the saved model config is not valid:\n  ${problems.join('\n  ')}`);
  return c as unknown as LanguageModelConfig;
}

/**
 * Checks that `tensors` are exactly what a model of `config` holds, by name and shape, without building the model or
 * allocating anything: first the body and head (their shapes follow from the config: this ties dModel, layers and
 * vocabulary to the file's size), then the attention mechanisms' own tensors, as each layer's mechanism declares them
 * for that layer's seed. One error, naming `source`, lists what does not fit (a few names of each kind). Then the values
 * of the one buffer whose range is known, featureLogWeights (performer.ts), against its projection.
 */
export function checkModelTensors(config: LanguageModelConfig, tensors: Map<string, NamedArray>, source: string): void {
  const body = { ...config, causal: config.kind === 'gpt' };
  const specs = new Map([...transformerParameterSpecs(body), ...headParameterSpecs(config)].map((s) => [s.name, s.shape] as const));
  checkShapes(specs, tensors, source, false);
  checkShapes(new Map([...specs, ...attentionTensorShapes(config)]), tensors, source, true);
  const unfitted = unfittedImportanceWeights(tensors).map(({ tensor, problem }) => `${tensor} ${problem}`);
  if (unfitted.length > 0) throw new Error(`${source}: ${listSome(unfitted, '\n  ')}`);
}

/** Throws one error listing the tensors that are missing or of another shape (and, when `complete`, unexpected). */
function checkShapes(expected: Map<string, number[]>, tensors: Map<string, NamedArray>, source: string, complete: boolean): void {
  const missing = [...expected.keys()].filter((name) => !tensors.has(name));
  const unexpected = complete ? [...tensors.keys()].filter((name) => !expected.has(name)) : [];
  const reshaped = [...expected]
    .filter(([name, shape]) => tensors.has(name) && !tf.util.arraysEqual(tensors.get(name)!.shape, shape))
    .map(([name, shape]) => `${name} [${tensors.get(name)!.shape.join(', ')}], the config builds [${shape.join(', ')}]`);
  const problems = [
    missing.length ? `missing: ${listSome(missing)}` : '',
    unexpected.length ? `not in the model: ${listSome(unexpected)}` : '',
    reshaped.length ? `other shape: ${listSome(reshaped)}` : '',
  ].filter(Boolean);
  if (problems.length > 0) throw new Error(`${source}: the tensors do not match the model config:\n  ${problems.join('\n  ')}`);
}
