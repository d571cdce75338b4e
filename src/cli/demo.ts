// npm run demo [-- --backend NAME] [--recipe recipes/demo/gpt-softmax.yaml] [--section.key=value …]
//
// From a fresh clone, no network: prepares the State of the Union corpus (data/sotu), trains a
// byte-level BPE tokenizer on its train split (data/tokenizers/sotu-bpe-4096.json), trains a small GPT
// for a few minutes on CPU, and compares its validation loss with the unigram entropy of the corpus.
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
// The modules that load TensorFlow.js are imported when the command runs, so that --help answers at once.
import type { StreamOptions } from '../data/stream-options.ts';
import type { Recipe } from '../recipe/schema.ts';
import type { EvalSampleKind } from '../data/batch.ts';
import { DOCUMENT_ORDER_FILE } from '../data/prepare/document-order.ts';
import { backendOption, startBackend, VERBOSE_OPTION } from './backend-option.ts';
import { isMainModule, runCommand, type ParsedCommand } from './command.ts';

const DEMO_DATASET = 'data/sotu';
const DEMO_TOKENIZER = 'data/tokenizers/sotu-bpe-4096.json';
const DEMO_VOCAB = 4096;
export const DEMO_RECIPE = 'recipes/demo/gpt-softmax.yaml';

/**
 * Cross-entropy (nats/token) of the unigram model of the train labels, add-one smoothed,
 * p(t) = (count_train(t) + 1) / (N_train + V), on the validation labels: the loss of a model that
 * ignores context. Reported on the trainer's evaluation sample (`evalTokens` labels drawn as
 * `sample` draws them, collectEvalBatches) and on the whole validation split.
 */
async function unigramCrossEntropy(
  opts: Omit<StreamOptions, 'split' | 'cursor'>,
  vocabSize: number,
  evalTokens: number,
  sample: EvalSampleKind = 'spread',
): Promise<{ evalNats: number; evalTokens: number; allNats: number; validationTokens: number; trainTokens: number }> {
  const [{ openBatchStream }, { collectEvalBatches }] = await Promise.all([import('../data/stream.ts'), import('../train/evaluate.ts')]);
  const counts = new Float64Array(vocabSize);
  let trainTokens = 0;
  const readLabels = async (split: 'train' | 'validation', visit: (label: number) => void) => {
    const stream = await openBatchStream({ ...opts, split, shuffleBuffer: 0 });
    try {
      for (let batch = await stream.next(); batch; batch = await stream.next()) for (const label of batch.labels) if (label >= 0) visit(label);
    } finally {
      await stream.close();
    }
  };
  await readLabels('train', (label) => {
    counts[label]++;
    trainTokens++;
  });
  const nats = (label: number) => -Math.log((counts[label] + 1) / (trainTokens + vocabSize));
  let allNats = 0;
  let seen = 0;
  await readLabels('validation', (label) => {
    allNats += nats(label);
    seen++;
  });
  let evalNats = 0;
  let scored = 0;
  for (const batch of (await collectEvalBatches(opts, evalTokens, sample)).batches) {
    for (const label of batch.labels) {
      if (label < 0) continue;
      evalNats += nats(label);
      scored++;
    }
  }
  return { evalNats: evalNats / scored, evalTokens: scored, allNats: allNats / seen, validationTokens: seen, trainTokens };
}

function seconds(t0: number): string {
  return `${((performance.now() - t0) / 1000).toFixed(1)} s`;
}

const COMMAND = {
  name: 'demo',
  usage: '[--backend NAME] [--recipe FILE] [--section.key=value …]',
  description: `From a fresh clone, no network: prepares the State of the Union corpus (${DEMO_DATASET}), trains a byte-level BPE
tokenizer on its train split (${DEMO_TOKENIZER}), trains a small GPT for a few minutes on CPU (wasm, or the native
backend once \`npm run setup:tensorflow\` has built it), and compares its validation loss with the unigram entropy of the corpus.`,
  options: {
    backend: backendOption("the recipe's backend"),
    verbose: VERBOSE_OPTION,
    recipe: { type: 'string', value: 'FILE', default: DEMO_RECIPE, help: 'the recipe to train' },
  },
  overrides: true,
} as const;

async function main({ values, overrides }: ParsedCommand<typeof COMMAND.options>): Promise<number> {
  const { backend, recipe: recipeFile } = values;
  const started = performance.now();
  const [
    { prepareDemoCorpus },
    { TextTokenizer },
    { trainTokenizer },
    { loadRecipe },
    { RecipeError },
    { streamOptions, validateRecipeModel },
    { runTraining },
  ] = await Promise.all([
    import('../data/prepare/demo-corpus.ts'),
    import('../data/tokenizer.ts'),
    import('../data/train-tokenizer.ts'),
    import('../store/recipes.ts'),
    import('../recipe/load.ts'),
    import('../train/plan.ts'),
    import('../train/trainer.ts'),
  ]);
  if (existsSync(path.join(DEMO_DATASET, 'dataset_dict.json'))) {
    console.log(`[demo] corpus: ${DEMO_DATASET} present, skipped`);
    if (!existsSync(path.join(DEMO_DATASET, DOCUMENT_ORDER_FILE))) {
      console.log(
        `[demo] warning: ${DEMO_DATASET} was prepared in year order, before prepare wrote documents in a random order (docs/data.md); remove it and ${DEMO_TOKENIZER} to prepare both again`,
      );
    }
  } else {
    const t0 = performance.now();
    const s = await prepareDemoCorpus(DEMO_DATASET);
    console.log(`[demo] corpus: wrote ${s.documents} State of the Union addresses (${(s.bytes / 1e6).toFixed(1)} MB) to ${DEMO_DATASET} in ${seconds(t0)}`);
  }
  if (existsSync(DEMO_TOKENIZER)) {
    console.log(`[demo] tokenizer: ${DEMO_TOKENIZER} present, skipped`);
  } else {
    const t0 = performance.now();
    await mkdir(path.dirname(DEMO_TOKENIZER), { recursive: true });
    await trainTokenizer({ dataset: DEMO_DATASET, vocabSize: DEMO_VOCAB, out: DEMO_TOKENIZER });
    console.log(`[demo] tokenizer: trained a ${DEMO_VOCAB}-token byte-level BPE on the train split → ${DEMO_TOKENIZER} in ${seconds(t0)}`);
  }
  let recipe: Recipe;
  try {
    recipe = loadRecipe(recipeFile, overrides);
    validateRecipeModel(recipe);
  } catch (err) {
    console.error(err instanceof RecipeError ? err.message : `${recipeFile}: ${(err as Error).message}`);
    return 2;
  }
  const device = await startBackend(COMMAND.name, { flag: backend, recipe: recipe.backend }, { verbose: values.verbose });
  const tokenizer = await TextTokenizer.load(recipe.data.tokenizer);
  const t0 = performance.now();
  // The trainer's evaluation sample, drawn as it draws it.
  const unigram = await unigramCrossEntropy(streamOptions(recipe, tokenizer), tokenizer.vocabSize, recipe.train.evalTokens, recipe.train.evalSample);
  console.log(
    `[demo] unigram entropy (train unigram, add-one smoothed): ${unigram.evalNats.toFixed(4)} nats/token on the ${unigram.evalTokens.toLocaleString('en-US')} evaluation tokens, ` +
      `${unigram.allNats.toFixed(4)} on all ${unigram.validationTokens.toLocaleString('en-US')} validation tokens (${seconds(t0)})`,
  );
  console.log(`[demo] training ${recipeFile} on ${device.backend}`);
  const result = await runTraining(recipe);
  const gap = unigram.evalNats - result.finalVal.loss;
  console.log(
    `[demo] final validation loss ${result.finalVal.loss.toFixed(4)} nats/token (ppl ${result.finalVal.ppl.toFixed(2)}, ${result.finalVal.bpb.toFixed(4)} bits/byte) ` +
      `vs unigram entropy ${unigram.evalNats.toFixed(4)} (ppl ${Math.exp(unigram.evalNats).toFixed(2)}) on the same tokens: ${gap >= 0 ? `${gap.toFixed(3)} below` : `${(-gap).toFixed(3)} ABOVE`}`,
  );
  console.log(`[demo] total time ${seconds(started)}; run folder ${result.runDir}`);
  return 0;
}

// Only when run as a script (tests import unigramCrossEntropy).
if (isMainModule(import.meta.url)) await runCommand(COMMAND, main);
