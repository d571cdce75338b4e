// The plan of a run before it trains: the check of a recipe's model section, and what --dry-run prints and `sweep plan`
// reads (model, parameters, tokens per epoch, steps, a memory estimate); with the recipe's stream options and planned
// batches, which training uses too.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { SPLITS, listShards } from '../data/dataset.ts';
import { estimateEpoch } from '../data/epoch.ts';
import type { EpochEstimate } from '../data/epoch.ts';
import type { StreamOptions } from '../data/stream-options.ts';
import { TextTokenizer } from '../data/tokenizer.ts';
import { countParameters } from '../model/lm.ts';
import type { LanguageModelConfig } from '../model/lm.ts';
import { validateTransformerConfig } from '../model/transformer.ts';
import { attentionIsQuadratic } from '../model/attention/index.ts';
import { modelConfigFromRecipe } from '../recipe/model-config.ts';
import type { RunSections } from '../recipe/schema.ts';
import { resolveWarmup } from './schedule.ts';

/** Checks the model part of a recipe without building anything (errors name the recipe key). */
export function validateRecipeModel(recipe: RunSections): void {
  validateTransformerConfig({ ...modelConfigFromRecipe(recipe, 1), causal: recipe.model.kind === 'gpt' });
}

/**
 * Memory estimate in bytes (float32 everywhere):
 *   parameters + gradients + AdamW m and v       16·P   (+4·P for the accumulated gradient if gradAccum > 1)
 *   activations kept for backward, per layer     B·L·(18·d + 2·mlpRatio·d)·4   (norms, q/k/v, attention out, MLP)
 *   + quadratic mechanisms (registry)            B·H·L²·3·4                    (scores, weights, mask product)
 *   + LM head                                    B·L·V·3·4                     (logits, softmax, gradient)
 * Linear mechanisms' chunk states are not counted (small next to the rest for chunk ≤ 128).
 */
export function estimateMemory(config: LanguageModelConfig, parameters: number, batchSize: number, seqLen: number, gradAccum: number) {
  const bytes = 4;
  const state = parameters * bytes * (gradAccum > 1 ? 5 : 4);
  const tokens = batchSize * seqLen;
  const quadratic = attentionIsQuadratic(config.attention.name);
  const perLayer =
    tokens * (18 * config.dModel + 2 * config.mlpRatio * config.dModel) * bytes + (quadratic ? batchSize * config.numHeads * seqLen * seqLen * 3 * bytes : 0);
  const headRows = config.kind === 'bert' ? Math.ceil(tokens * 0.15) : tokens;
  const activations = perLayer * config.numLayers + headRows * config.vocabSize * 3 * bytes;
  return { state, activations, total: state + activations };
}

export interface RunPlan {
  modelConfig: LanguageModelConfig;
  vocabSource: string;
  parameters: { total: number; byGroup: Record<string, number> };
  epoch: EpochEstimate | null;
  datasetNote: string | null;
  /** Why the run will refuse its dataset (a split it cannot resolve, e.g. no validation split), with the fix; null if it will not. */
  datasetRefusal: string | null;
  totalSteps: number | null;
  tokensPerStep: number;
  memory: ReturnType<typeof estimateMemory>;
  /** What the run would warn about at its start (a warm-up too long for its steps). */
  warnings: string[];
}

/** Assumed when the tokenizer file is absent (dry runs of GPU recipes on a machine without the data). */
export const GPT2_VOCAB_SIZE = 50257;

/** Batches the run reads: one epoch, or fewer when train.maxTokens ends it sooner. */
export function plannedBatches(recipe: RunSections, epochBatches: number): number {
  const { batchSize } = recipe.train;
  const budget = recipe.train.maxTokens;
  if (budget === null) return epochBatches;
  return Math.min(epochBatches, Math.ceil(budget / (batchSize * recipe.data.seqLen)));
}

/** What --dry-run prints: no training, and the dataset and tokenizer may be missing. */
export async function planRun(recipe: RunSections): Promise<RunPlan> {
  let vocabSize = GPT2_VOCAB_SIZE;
  let vocabSource = `tokenizer not found at ${recipe.data.tokenizer}: assuming GPT-2's vocabulary of ${GPT2_VOCAB_SIZE}`;
  let tokenizer: TextTokenizer | null = null;
  if (existsSync(recipe.data.tokenizer)) {
    tokenizer = await TextTokenizer.load(recipe.data.tokenizer);
    vocabSize = tokenizer.vocabSize;
    vocabSource = `from ${recipe.data.tokenizer}`;
  }
  const modelConfig = modelConfigFromRecipe(recipe, vocabSize);
  const parameters = countParameters(modelConfig);
  let epoch: RunPlan['epoch'] = null;
  let datasetNote: string | null = null;
  const datasetFound = existsSync(datasetRoot(recipe.data.dataset));
  const datasetRefusal = datasetFound ? await splitRefusal(recipe.data.dataset) : null;
  if (!datasetFound) {
    datasetNote = 'dataset not found: tokens per epoch unknown';
  } else if (datasetRefusal !== null) {
    datasetNote = 'the run will refuse this dataset (the error below): tokens per epoch unknown';
  } else if (!tokenizer) {
    datasetNote = 'tokenizer not found: tokens per epoch unknown';
  } else {
    try {
      epoch = await estimateEpoch({ ...streamOptions(recipe, tokenizer), split: 'train' });
    } catch (err) {
      datasetNote = `dataset could not be read (${(err as Error).message}): tokens per epoch unknown`;
    }
  }
  const { batchSize, gradAccum } = recipe.train;
  const tokensPerStep = batchSize * gradAccum * recipe.data.seqLen;
  let totalSteps: number | null = null;
  if (epoch) totalSteps = Math.ceil(plannedBatches(recipe, epoch.batches) / gradAccum);
  else if (recipe.train.maxTokens !== null) totalSteps = Math.ceil(recipe.train.maxTokens / tokensPerStep);
  const memory = estimateMemory(modelConfig, parameters.total, batchSize, recipe.data.seqLen, gradAccum);
  const warmupWarning = totalSteps === null ? null : resolveWarmup(recipe.train, totalSteps).warning;
  return {
    modelConfig,
    vocabSource,
    parameters,
    epoch,
    datasetNote,
    datasetRefusal,
    totalSteps,
    tokensPerStep,
    memory,
    warnings: warmupWarning ? [warmupWarning] : [],
  };
}

/** Why a run would refuse the dataset: the first split it reads (train, validation) that does not resolve; null when both do. */
async function splitRefusal(dataset: string): Promise<string | null> {
  try {
    for (const split of SPLITS) await listShards(dataset, split);
    return null;
  } catch (err) {
    return (err as Error).message;
  }
}

/** The folder part of a dataset path that may end in a glob. */
function datasetRoot(dataset: string): string {
  const parts = dataset.split(path.sep);
  const firstGlob = parts.findIndex((p) => /[*?[]/.test(p));
  return firstGlob < 0 ? dataset : parts.slice(0, firstGlob).join(path.sep) || path.sep;
}

/** The batch stream a recipe reads (each caller adds its split and cursor): training, validation, eval, the epoch estimate. */
export function streamOptions(recipe: RunSections, tokenizer: TextTokenizer): Omit<StreamOptions, 'split' | 'cursor'> {
  return {
    dataset: recipe.data.dataset,
    textColumn: recipe.data.textColumn,
    tokenizer,
    kind: recipe.model.kind,
    seqLen: recipe.data.seqLen,
    batchSize: recipe.train.batchSize,
    seed: recipe.train.seed,
    shuffleBuffer: recipe.data.shuffleBuffer,
    readAhead: recipe.data.readAhead,
    mlmProbability: recipe.data.mlmProbability,
    documentMask: recipe.data.documentMask,
  };
}
