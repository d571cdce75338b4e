// Copying saved weights into a model by stable tensor name: initFrom (src/train/finetune.ts) and eval, generate and
// export (load-model.ts). Every parameter of the model must come from the source with the same shape, except the
// attention mechanism's own parameters when the mechanism changed (they keep their documented initialisation:
// DARKFormer's M = identity, SchoenbAt's γ = 1, β = 0). Buffers (random projections) load only when the mechanism and
// its options are unchanged; otherwise they come from the new mechanism's own seed. A source tensor with no place in
// the model is an error, except the previous mechanism's own tensors, which are dropped when the mechanism changed.
// A Hugging Face folder's parameters that it does not hold (a bare BertModel's MLM head) keep their initialisation
// and are reported.
import * as tf from '@tensorflow/tfjs';
import { listSome } from '../core/bounds.ts';
import type { NamedArray } from '../hf/safetensors.ts';
import type { LanguageModel, LanguageModelConfig } from '../model/lm.ts';
import { architectureOf } from '../model/transformer.ts';
import type { Architecture } from '../model/transformer.ts';
import type { ModelFolder } from './model-folder.ts';

/** Tensors under blocks.<i>.attn. that are not the q/k/v/out projections belong to the mechanism. */
const MECHANISM_TENSOR = /^blocks\.\d+\.attn\.(?!(q|k|v|out)\.(weight|bias)$)/;

function sameAttention(a: LanguageModelConfig['attention'], b: LanguageModelConfig['attention']): boolean {
  const sorted = (o: Record<string, unknown>) => JSON.stringify(Object.entries(o ?? {}).sort(([x], [y]) => (x < y ? -1 : 1)));
  return a.name === b.name && sorted(a.options) === sorted(b.options);
}

export interface LoadReport {
  loaded: string[];
  /** The new mechanism's parameters left at their initialisation (mechanism changed). */
  initialised: string[];
  /** Buffers drawn from the new mechanism's seed (mechanism or its options changed). */
  redrawn: string[];
  /** The previous mechanism's own tensors, not used. */
  dropped: string[];
  /** Parameters the source does not hold, left at their initialisation (ModelFolder.fresh). */
  fresh: string[];
  mechanismChanged: boolean;
}

/**
 * Copies a model folder's tensors into `model` by name (see the file comment for the rules).
 * Checks everything first and throws one error naming the tensors that cannot be mapped (a few of
 * each kind, and their count); the model is untouched then. `tokenizerSha256`: the run's
 * tokenizer, compared with the checkpoint's.
 */
export function loadWeights(model: LanguageModel, source: ModelFolder, opts: { tokenizerSha256?: string } = {}): LoadReport {
  const where = `initFrom ${source.dir}`;
  const target = model.config;
  if (source.config.numHeads !== undefined && source.config.numHeads !== target.numHeads) {
    throw new Error(
      `${where}: the checkpoint has ${source.config.numHeads} heads per block but model.numHeads is ${target.numHeads} (the q/k/v weights would be split differently)`,
    );
  }
  // Settings that change the function without changing any tensor's shape (absent in older checkpoints: the defaults).
  const sourceArch = architectureOf(source.config);
  const targetArch = model.body.architecture;
  const archDiffers = (Object.keys(sourceArch) as (keyof Architecture)[]).filter((key) => sourceArch[key] !== targetArch[key]);
  if (archDiffers.length > 0) {
    throw new Error(
      `${where}: ${archDiffers.map((key) => `model.${key} is ${JSON.stringify(targetArch[key])} but the checkpoint's model has ${JSON.stringify(sourceArch[key])}`).join('; ')}`,
    );
  }
  const sourceSha = source.metadata.tokenizer_sha256;
  if (opts.tokenizerSha256 && sourceSha && sourceSha !== opts.tokenizerSha256) {
    throw new Error(
      `${where}: the checkpoint was trained with another tokenizer (sha256 ${sourceSha.slice(0, 12)}…) than data.tokenizer (${opts.tokenizerSha256.slice(0, 12)}…): token ids would not match`,
    );
  }
  const mechanismChanged = source.config.attention.name !== target.attention.name;
  const loadBuffers = sameAttention(source.config.attention, target.attention);
  const mechanismParams = new Set(model.body.attention.flatMap((m) => m.trainableVariables.map((v) => v.name)));
  const report: LoadReport = { loaded: [], initialised: [], redrawn: [], dropped: [], fresh: [], mechanismChanged };
  const missing: string[] = [];
  const mismatched: string[] = [];
  const reshaped = new Set<string>();
  const assignments: [tf.Variable, NamedArray][] = [];
  const place = (name: string, variable: tf.Variable) => {
    const saved = source.tensors.get(name);
    if (!saved && source.fresh?.has(name)) report.fresh.push(name);
    else if (!saved) missing.push(name);
    else if (!tf.util.arraysEqual(saved.shape, variable.shape)) {
      mismatched.push(`${name} checkpoint [${saved.shape.join(', ')}] vs model [${variable.shape.join(', ')}]`);
      reshaped.add(name);
    } else {
      assignments.push([variable, saved]);
      report.loaded.push(name);
    }
  };
  for (const [name, variable] of model.parameters()) {
    if (mechanismChanged && mechanismParams.has(name)) report.initialised.push(name);
    else place(name, variable);
  }
  for (const [name, variable] of model.buffers()) {
    if (loadBuffers) place(name, variable);
    else report.redrawn.push(name);
  }
  const used = new Set(report.loaded);
  const unexpected: string[] = [];
  for (const name of source.tensors.keys()) {
    if (used.has(name) || reshaped.has(name)) continue;
    // Same mechanism, other options: its redrawn buffers are replaced too.
    if (MECHANISM_TENSOR.test(name) && (mechanismChanged || (!loadBuffers && model.buffers().has(name)))) report.dropped.push(name);
    else unexpected.push(name);
  }
  const problems = [
    missing.length ? `missing in the checkpoint: ${listSome(missing)}` : '',
    mismatched.length ? `shape differs: ${listSome(mismatched, '; ')}` : '',
    unexpected.length ? `in the checkpoint but not in the model: ${listSome(unexpected)}` : '',
  ].filter(Boolean);
  if (problems.length > 0) {
    throw new Error(
      `${where}: the checkpoint does not fit the model of this recipe (same model.* settings needed, except model.attention and model.dropout):\n  ${problems.join('\n  ')}`,
    );
  }
  for (const [variable, saved] of assignments) tf.tidy(() => variable.assign(tf.tensor(saved.data, saved.shape, 'float32')));
  return report;
}
