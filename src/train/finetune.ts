// Finetuning: start a run from saved weights (`initFrom`, named as src/store/resolve.ts resolves it), possibly with a
// different attention mechanism, and train only part of the parameters (`train.freeze`, src/recipe/freeze.ts). The
// weights are copied by name as src/store/load-weights.ts does for every loader (its header has the rules); the new
// mechanism's own parameters keep their initialisation, or with a data-dependent init (the mechanism's dataInit:
// DARKFormer's init 'whitening', Performer's and DARKFormer's dataInit 'variance-optimal') an estimate from two
// training batches.
import * as tf from '@tensorflow/tfjs';
import type { LanguageModel, ModelBatch } from '../model/lm.ts';
import { openBatchStream } from '../data/stream.ts';
import type { StreamOptions } from '../data/stream-options.ts';
import { frozenRule, type FreezeSpec } from '../recipe/freeze.ts';
import type { TrainSection } from '../recipe/schema.ts';
import { loadWeights } from '../store/load-weights.ts';
import { readHfInitFrom, readModelFolder, type ModelFolder } from '../store/model-folder.ts';
import { resolveModelSource } from '../store/resolve.ts';

/** Training batches whose queries and keys calibrate the mechanisms' data-dependent init (DARKFormer's whitening). */
export const CALIBRATION_BATCHES = 2;

/** Splits the model's parameters into trained and frozen ones (errors name train.freeze). */
export function partitionParameters(model: LanguageModel, freeze: FreezeSpec): { trainable: Map<string, tf.Variable>; frozen: Map<string, tf.Variable> } {
  const all = model.parameters();
  const mechanism = new Set(model.body.attention.flatMap((m) => m.trainableVariables.map((v) => v.name)));
  const isFrozen = frozenRule(freeze, [...all.keys()], mechanism);
  const trainable = new Map<string, tf.Variable>();
  const frozen = new Map<string, tf.Variable>();
  for (const [name, v] of all) (isFrozen(name) ? frozen : trainable).set(name, v);
  if (trainable.size === 0) throw new Error(`train.freeze ${JSON.stringify(freeze)} freezes every parameter: nothing to train`);
  return { trainable, frozen };
}

/** "blocks.0.attn.x, blocks.1.attn.x" → "blocks.*.attn.x ×2" (log lines stay short for deep models). */
export function groupNames(names: Iterable<string>): string {
  const counts = new Map<string, number>();
  for (const n of names) {
    const key = n.replace(/^blocks\.\d+\./, 'blocks.*.');
    counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return [...counts].map(([k, c]) => (c > 1 ? `${k} ×${c}` : k)).join(', ');
}

/**
 * The mechanisms' data-dependent init (dataInit, model/attention/types.ts) for the given layers: one forward pass
 * over the batches (stacked), each listed layer initialised from its own queries and keys just before that layer's
 * attention runs, so later layers are calibrated on the already initialised earlier ones.
 */
export function initializeLayersFromData(model: LanguageModel, batches: readonly ModelBatch[], layers: ReadonlySet<number>): void {
  if (batches.length === 0) throw new Error('data-dependent init: no calibration batch');
  const seqLen = batches[0].seqLen;
  if (batches.some((b) => b.seqLen !== seqLen)) throw new Error('data-dependent init: calibration batches differ in sequence length');
  const rows = batches.reduce((n, b) => n + b.batchSize, 0);
  const ids = new Int32Array(rows * seqLen);
  const mask = new Float32Array(rows * seqLen);
  let at = 0;
  for (const b of batches) {
    ids.set(b.inputIds, at);
    mask.set(b.attentionMask ?? new Float32Array(b.inputIds.length).fill(1), at);
    at += b.inputIds.length;
  }
  tf.tidy(() => {
    model.body.forward(tf.tensor2d(ids, [rows, seqLen], 'int32'), {
      keyMask: model.kind === 'bert' ? tf.tensor2d(mask, [rows, seqLen]) : undefined,
      onAttentionInputs: (layer, q, k) => {
        if (layers.has(layer)) model.body.attention[layer].dataInit?.initializeFromData(q, k);
      },
    });
  });
}

async function readBatches(options: StreamOptions, count: number): Promise<ModelBatch[]> {
  const stream = await openBatchStream(options);
  try {
    const batches: ModelBatch[] = [];
    while (batches.length < count) {
      const batch = await stream.next();
      if (!batch) break;
      batches.push(batch);
    }
    return batches;
  } finally {
    await stream.close();
  }
}

export interface FinetuneSetup {
  /** Parameters the optimizer updates (all of them without train.freeze). */
  trainable: Map<string, tf.Variable>;
  frozen: Map<string, tf.Variable>;
  /** The model folder the weights came from; null = trained from scratch. */
  initFrom: string | null;
  /** Extra safetensors metadata for the saved model. */
  metadata: Record<string, string>;
}

/**
 * Applies `initFrom` and `train.freeze` to a freshly built model, and the mechanism's data-dependent init (DARKFormer's
 * init 'whitening') to every layer whose initialised tensor did not come from a checkpoint, on CALIBRATION_BATCHES
 * batches of `calibration` (the training split). Reports through `line`.
 */
export async function prepareFinetune(
  model: LanguageModel,
  recipe: { initFrom: string | null; train: Pick<TrainSection, 'freeze' | 'runDir'> },
  opts: {
    tokenizerSha256?: string;
    calibration?: StreamOptions;
    line?: (text: string) => void;
    /** Resuming: the checkpoint restores every tensor, so neither initFrom nor the data-dependent init runs. */
    skipInit?: boolean;
  } = {},
): Promise<FinetuneSetup> {
  const line = opts.line ?? (() => {});
  const metadata: Record<string, string> = {};
  let initFrom: string | null = null;
  let loadedNames = new Set<string>();
  if (recipe.initFrom !== null && !opts.skipInit) {
    const choice = resolveModelSource('initFrom', recipe.initFrom, { runDir: recipe.train.runDir });
    if (choice.reason) line(choice.reason);
    initFrom = choice.dir;
    let source: ModelFolder;
    if (choice.format === 'hf') {
      const hf = await readHfInitFrom(choice.dir, model.config.vocabSize);
      line(`initFrom Hugging Face ${hf.description}`);
      source = hf.source;
    } else source = await readModelFolder(choice.dir);
    const report = loadWeights(model, source, { tokenizerSha256: opts.tokenizerSha256 });
    loadedNames = new Set(report.loaded);
    metadata.init_from = initFrom;
    const from = source.config.attention.name;
    const step = source.metadata.step ? ` (step ${source.metadata.step})` : '';
    const parts = [`loaded ${report.loaded.length} tensors`];
    if (report.initialised.length) parts.push(`new mechanism parameters ${groupNames(report.initialised)}`);
    if (report.fresh.length) parts.push(`initialised fresh ${groupNames(report.fresh)}`);
    if (report.redrawn.length) parts.push(`buffers from the new seed ${groupNames(report.redrawn)}`);
    if (report.dropped.length) parts.push(`dropped ${groupNames(report.dropped)}`);
    line(`initFrom ${initFrom}${step}, attention ${from} → ${model.config.attention.name}: ${parts.join('; ')}`);
  }
  const initLayers = new Set(
    model.body.attention
      .map((m, i) => ({ init: m.dataInit, i }))
      .filter(({ init }) => !opts.skipInit && init && !loadedNames.has(init.fills.variable.name))
      .map(({ i }) => i),
  );
  if (initLayers.size > 0) {
    const { trigger, fills } = model.body.attention[[...initLayers][0]].dataInit!;
    if (!opts.calibration) throw new Error(`model.attention.options.${trigger} needs calibration batches`);
    const batches = await readBatches(opts.calibration, CALIBRATION_BATCHES);
    initializeLayersFromData(model, batches, initLayers);
    line(
      `${model.config.attention.name} ${trigger}: ${fills.label} of ${initLayers.size} layers from the queries and keys of ${batches.length} training batches`,
    );
  }
  const { trainable, frozen } = partitionParameters(model, recipe.train.freeze);
  const freezeText = typeof recipe.train.freeze === 'string' ? recipe.train.freeze : JSON.stringify(recipe.train.freeze);
  if (frozen.size > 0 || initFrom !== null) {
    const count = (m: Map<string, tf.Variable>) => [...m.values()].reduce((n, v) => n + v.size, 0).toLocaleString('en-US');
    line(`train.freeze ${freezeText}: training ${count(trainable)} parameters in ${trainable.size} tensors, ${count(frozen)} frozen in ${frozen.size} tensors`);
    metadata.freeze = freezeText;
  }
  return { trainable, frozen, initFrom, metadata };
}
