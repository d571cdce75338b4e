// A saved model checked before anything is built from it. A checkpoint's config is untrusted: a few bytes of it
// (dModel 65536 × 512 layers) would otherwise allocate without bound. So the config is validated like a recipe's
// model section (same keys, types, bounds and size limits), and every tensor in the file is compared by name and
// shape with what that config builds; since the file's tensors are bounded by its size, so is the model.
import * as tf from '@tensorflow/tfjs';
import { createAttention } from '../model/attention/index.ts';
import { headParameterSpecs } from '../model/lm.ts';
import type { LanguageModelConfig } from '../model/lm.ts';
import { ARCHITECTURE_DEFAULTS, attentionSeed, transformerParameterSpecs } from '../model/transformer.ts';
import { modelSectionProblems, MAX_TENSOR_ELEMENTS } from './recipe.ts';
import type { NamedArray } from './safetensors.ts';

/** A model config read from a file, checked like a recipe's model section (errors name `source` and the key). */
export function checkModelConfig(value: unknown, source: string): LanguageModelConfig {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new Error(`${source}: the model config must be a JSON object (got ${String(JSON.stringify(value)).slice(0, 80)})`);
  }
  // Models saved before the architecture options existed have none of them: they are GPT-2's (the defaults).
  const c: Record<string, unknown> = { ...ARCHITECTURE_DEFAULTS, ...(value as Record<string, unknown>) };
  const problems = modelSectionProblems(c);
  if (!Number.isSafeInteger(c.vocabSize) || (c.vocabSize as number) < 1 || (c.vocabSize as number) > MAX_TENSOR_ELEMENTS) {
    problems.push(`vocabSize must be an integer ≥ 1 (got ${JSON.stringify(c.vocabSize)})`);
  }
  if (!Number.isSafeInteger(c.seed)) problems.push(`seed must be an integer (got ${JSON.stringify(c.seed)})`);
  if (problems.length > 0) throw new Error(`${source}: the saved model config is not valid:\n  ${problems.join('\n  ')}`);
  return c as unknown as LanguageModelConfig;
}

/**
 * Checks that `tensors` are exactly what a model of `config` holds, by name and shape, without building the model:
 * first the body and head (their shapes follow from the config: this ties dModel, layers and vocabulary to the
 * file's size), then the attention mechanisms' own tensors, from each layer's mechanism built with that layer's seed and
 * disposed. One error, naming `source`, lists everything that does not fit.
 */
export function checkModelTensors(config: LanguageModelConfig, tensors: Map<string, NamedArray>, source: string): void {
  const body = { ...config, causal: config.kind === 'gpt' };
  const specs = new Map([...transformerParameterSpecs(body), ...headParameterSpecs(config)].map((s) => [s.name, s.shape] as const));
  fit(specs, tensors, source, false);
  fit(new Map([...specs, ...mechanismTensorShapes(config, body.causal)]), tensors, source, true);
}

/**
 * Name → shape of the attention mechanisms' own tensors (trainable and buffers), from each layer's mechanism built
 * with that layer's seed and disposed: some shapes are drawn (SchoenbAt's random Maclaurin features per degree),
 * so one layer's shapes do not stand for another's.
 */
function mechanismTensorShapes(config: LanguageModelConfig, causal: boolean): Map<string, number[]> {
  const out = new Map<string, number[]>();
  for (let i = 0; i < config.numLayers; i++) {
    const scope = `blocks.${i}.attn`;
    const probe = createAttention(config.attention.name, {
      ...config.attention.options,
      numHeads: config.numHeads,
      headDim: config.dModel / config.numHeads,
      causal,
      seed: attentionSeed(config.seed, i),
      scope: `check.${scope}`,
    });
    try {
      for (const v of [...probe.trainableVariables, ...probe.buffers]) out.set(`${scope}${v.name.slice(`check.${scope}`.length)}`, v.shape);
    } finally {
      probe.dispose();
    }
  }
  return out;
}

/** Throws one error listing the tensors that are missing or of another shape (and, when `complete`, unexpected). */
function fit(expected: Map<string, number[]>, tensors: Map<string, NamedArray>, source: string, complete: boolean): void {
  const missing = [...expected.keys()].filter((name) => !tensors.has(name));
  const unexpected = complete ? [...tensors.keys()].filter((name) => !expected.has(name)) : [];
  const reshaped = [...expected]
    .filter(([name, shape]) => tensors.has(name) && !tf.util.arraysEqual(tensors.get(name)!.shape, shape))
    .map(([name, shape]) => `${name} [${tensors.get(name)!.shape.join(', ')}], the config builds [${shape.join(', ')}]`);
  const list = (names: string[]) => names.slice(0, 6).join(', ') + (names.length > 6 ? `, … (${names.length})` : '');
  const problems = [
    missing.length ? `missing: ${list(missing)}` : '',
    unexpected.length ? `not in the model: ${list(unexpected)}` : '',
    reshaped.length ? `other shape: ${list(reshaped)}` : '',
  ].filter(Boolean);
  if (problems.length > 0) throw new Error(`${source}: the tensors do not match the model config:\n  ${problems.join('\n  ')}`);
}
