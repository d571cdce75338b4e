// `npm run compile`: a recipe's step programs written to a folder (docs/xla.md, "Ahead of time"), so that a host with
// Node.js and jax but no TensorFlow trains from them (train.executor xla with $SLAYFORMER_XLA_PROGRAMS). The programs
// are recorded here on the native backend for the recipe's shapes: the training micro-batch (all positions labelled for
// GPT; for BERT every row bucket its masking can give) and every shape of the validation sample, and AdamW's update.
import { TextTokenizer } from '../data/tokenizer.ts';
import { IGNORE_LABEL, createLanguageModel, type ModelBatch } from '../model/lm.ts';
import { modelConfigFromRecipe } from '../recipe/model-config.ts';
import type { RunSections } from '../recipe/schema.ts';
import { collectEvalBatches } from './evaluate.ts';
import { partitionParameters } from './finetune.ts';
import { AdamW } from './optimizer.ts';
import { streamOptions } from './plan.ts';
import { ROW_BUCKET } from './compiled-step.ts';
import {
  evalInputs,
  gradientInputs,
  RecordingBook,
  recordApplyProgram,
  recordEvalProgram,
  recordGradientProgram,
  writeCompiledPrograms,
  type ProgramManifest,
} from './xla-recording.ts';

/** A batch of the recipe's shape with `labelled` labelled positions (the first ones; GPT: all). */
function shapedBatch(kind: 'gpt' | 'bert', batchSize: number, seqLen: number, labelled: number): ModelBatch {
  const n = batchSize * seqLen;
  const inputIds = new Int32Array(n).fill(1);
  const labels = new Int32Array(n).fill(IGNORE_LABEL);
  for (let i = 0; i < labelled; i++) labels[i] = 1;
  return { batchSize, seqLen, inputIds, labels, ...(kind === 'bert' ? { attentionMask: new Float32Array(n).fill(1) } : {}) };
}

/** The run's sections' programs, written to `out` under the recipe's `name`. */
export async function compilePrograms(recipe: RunSections & { name: string }, out: string, log: (line: string) => void): Promise<ProgramManifest> {
  const tokenizer = await TextTokenizer.load(recipe.data.tokenizer);
  const config = modelConfigFromRecipe(recipe, tokenizer.vocabSize);
  const model = createLanguageModel(config);
  const { trainable } = partitionParameters(model, recipe.train.freeze);
  const optimizer = new AdamW(trainable, {
    beta1: recipe.train.beta1,
    beta2: recipe.train.beta2,
    eps: recipe.train.eps,
    weightDecay: recipe.train.weightDecay,
    decayEmbeddings: recipe.train.decayEmbeddings,
  });
  try {
    const { precision, attentionKernel, remat } = recipe.train;
    const book = new RecordingBook({ precision, attentionKernel, remat });
    const variables = [...trainable.values()];
    const { batchSize, gradAccum } = recipe.train;
    const seqLen = recipe.data.seqLen;
    const positions = batchSize * seqLen;
    // GPT labels every position; BERT's masked count varies, padded to ROW_BUCKET rows (compiled-step.ts): every bucket.
    const counts =
      config.kind === 'gpt' ? [positions] : Array.from({ length: Math.ceil(positions / ROW_BUCKET) }, (_, i) => Math.min(positions, (i + 1) * ROW_BUCKET));
    const dropout = config.dropout > 0 ? 1 : null;
    let gradNames: string[] = [];
    for (const labelled of counts) {
      const batch = shapedBatch(config.kind, batchSize, seqLen, labelled);
      const total = labelled * gradAccum;
      const given = gradientInputs(model, batch, variables, dropout, total)!;
      const entry = book.get('gradient', given.key, () => ({ spec: recordGradientProgram(model, batch, variables, dropout, total) }));
      gradNames = entry.outputs.filter((n) => n.startsWith('grad:')).map((n) => n.slice('grad:'.length));
      log(`compile: gradient program for ${given.key.split('|')[0]}`);
    }
    for (const clip of recipe.train.clip > 0 ? [recipe.train.clip] : [0]) {
      book.get('apply', `${gradNames.join(',')}|clip ${clip > 0}`, () => recordApplyProgram(optimizer, model, gradNames, clip));
    }
    log('compile: AdamW update program');
    const sample = await collectEvalBatches(streamOptions(recipe, tokenizer), recipe.train.evalTokens, recipe.train.evalSample);
    const evalShapes = new Map<string, ModelBatch>();
    for (const batch of sample.batches) {
      const given = evalInputs(model, batch);
      if (given && !evalShapes.has(given.key)) evalShapes.set(given.key, batch);
    }
    for (const [key, batch] of evalShapes) {
      book.get('eval', key, () => ({ spec: recordEvalProgram(model, batch) }));
      log(`compile: validation program for ${key.slice('eval|'.length)}`);
    }
    const manifest = writeCompiledPrograms(book, out, recipe.name, model);
    log(`compile: ${manifest.programs.length} programs in ${out}`);
    return manifest;
  } finally {
    optimizer.dispose();
    model.dispose();
  }
}
