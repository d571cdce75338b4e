// npm run check:gpu [-- <recipe.yaml>] [--steps N] [--cpu]
// End-to-end check of a GPU host: the GPU build of the native backend loads, TensorFlow sees the
// GPU, its numbers agree with the cpu backend, and the recipe's model trains its first steps (on
// random tokens at the recipe's batch shape, so no dataset is needed), with tokens/s.
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { formatChecks, verifyTensorflow } from '../backend/tensorflow-check.ts';
import { readBuildStamp, SETUP_COMMAND } from '../backend/native-build.ts';
import { tensorflowInfo } from '../backend/tensorflow.ts';
import { TextTokenizer } from '../data/tokenizer.ts';
import { countParameters, createLanguageModel } from '../model/lm.ts';
import { loadRecipe } from '../train/recipe.ts';
import { measureThroughput } from '../train/throughput.ts';
import { GPT2_VOCAB_SIZE, modelConfigFromRecipe } from '../train/trainer.ts';
import { runCommand, type ParsedCommand } from './command.ts';

const DEFAULT_RECIPE = 'recipes/gpu/gpt2-small-softmax.yaml';
const COMMAND = {
  name: 'check:gpu',
  usage: '[recipe.yaml] [options]',
  description: `End-to-end check of a GPU host: the GPU build of the native backend loads, TensorFlow sees the GPU, its
numbers agree with the cpu backend, and the recipe's model (default ${DEFAULT_RECIPE}) trains a few
steps on random tokens at the recipe's batch shape (no dataset needed), with tokens/s.`,
  options: {
    steps: { type: 'string', value: 'N', default: '5', number: { integer: true, min: 1 }, help: 'timed steps after 2 warm-up steps' },
    cpu: { type: 'boolean', help: 'accept a CPU build (checks everything but the GPU; for trying the command without one)' },
  },
  positionals: { max: 1, name: 'recipe.yaml' },
} as const;

class CheckFailed extends Error {}

async function main({ values, positionals }: ParsedCommand<typeof COMMAND.options>): Promise<void> {
  const steps = values.steps;
  const recipeFile = positionals[0] ?? DEFAULT_RECIPE;

  console.log('[1/4] the native backend');
  const build = readBuildStamp();
  if (!build) throw new CheckFailed(`the native backend is not built: run \`${SETUP_COMMAND} -- --gpu\``);
  console.log(`    TensorFlow ${build.tensorflow}, ${build.gpu ? 'GPU' : 'CPU'} build of ${build.builtAt}`);
  if (!build.gpu && !values.cpu) throw new CheckFailed(`this is a CPU build: run \`${SETUP_COMMAND} -- --gpu --force\` (or pass --cpu to check it anyway)`);

  console.log('[2/4] numbers against the cpu backend');
  const checks = await verifyTensorflow();
  for (const line of formatChecks(checks)) console.log(line);
  if (checks.some((c) => !c.ok)) throw new CheckFailed('the backend computes differently from the cpu backend (see above)');

  console.log('[3/4] the GPU');
  const { gpu } = tensorflowInfo();
  if (!gpu && !values.cpu) throw new CheckFailed(`TensorFlow found no GPU. ${describeDriver()}; CUDA libraries linked from ${build.cudaLibraryDirs.length} nvidia-* folders`);
  console.log(`    ${gpu ? 'TensorFlow runs on the GPU' : 'no GPU (accepted: --cpu)'}; ${describeDriver()}`);

  console.log(`[4/4] ${recipeFile}: ${steps} training steps on random tokens`);
  const recipe = loadRecipe(recipeFile);
  const haveTokenizer = existsSync(recipe.data.tokenizer);
  const vocab = haveTokenizer ? (await TextTokenizer.load(recipe.data.tokenizer)).vocabSize : GPT2_VOCAB_SIZE;
  const config = modelConfigFromRecipe(recipe, vocab);
  const model = createLanguageModel(config);
  try {
    const r = await measureThroughput(model, { batchSize: recipe.train.batchSize, seqLen: recipe.data.seqLen, warmup: 2, steps, replicas: 1 });
    const vocabNote = haveTokenizer ? '' : ` (${recipe.data.tokenizer} not found: GPT-2's vocabulary of ${GPT2_VOCAB_SIZE.toLocaleString('en-US')} assumed)`;
    console.log(`    ${config.kind} ${config.attention.name}, ${countParameters(config).total.toLocaleString('en-US')} parameters${vocabNote}, batch ${recipe.train.batchSize}×${recipe.data.seqLen}`);
    console.log(`    ${r.msPerStep.toFixed(0)} ms per step, ${Math.round(r.tokensPerSecond).toLocaleString('en-US')} tokens/s, loss ${r.lastLoss.toFixed(3)}`);
    if (!Number.isFinite(r.lastLoss)) throw new CheckFailed('the loss is not finite');
  } finally {
    model.dispose();
  }
  console.log('check:gpu: ok');
}

/** nvidia-smi's one-line view of the driver and GPUs, when it is there. */
function describeDriver(): string {
  const smi = spawnSync('nvidia-smi', ['--query-gpu=name,driver_version,memory.total', '--format=csv,noheader'], { encoding: 'utf8' });
  if (smi.error || smi.status !== 0) return 'nvidia-smi not found or failing (is the NVIDIA driver installed?)';
  return `nvidia-smi: ${smi.stdout.trim().split('\n').join('; ')}`;
}

await runCommand(COMMAND, main);
