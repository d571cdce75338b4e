// npm run check:gpu [-- <recipe.yaml>] [--steps N] [--cpu]
// End-to-end check of a GPU host: the GPU build of the native backend loads, TensorFlow sees the
// GPU, its numbers agree with the cpu backend, and the recipe's model trains its first steps (on
// random tokens at the recipe's batch shape, so no dataset is needed) as TensorFlow functions with
// and without XLA and op by op: tokens/s, the values read back into JavaScript per step, and the
// process's peak memory on the device (nvidia-smi; TensorFlow's pool grows on demand, so what it
// holds is its high-water mark).
import { existsSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
// The modules that load TensorFlow.js are imported when the command runs, so that --help answers at once.
import { readBuildStamp, SETUP_COMMAND } from '../backend/native-build.ts';
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
  const [
    { formatChecks, verifyTensorflow },
    { graphDevice },
    { tensorflowInfo },
    { TextTokenizer },
    { countParameters, createLanguageModel },
    { loadRecipe },
    { modelConfigFromRecipe },
    { measureThroughput },
    { GPT2_VOCAB_SIZE },
    { resolveExecutionPlan },
    { currentDevice },
  ] = await Promise.all([
    import('../backend/tensorflow-check.ts'),
    import('../backend/tf-graph.ts'),
    import('../backend/tensorflow.ts'),
    import('../data/tokenizer.ts'),
    import('../model/lm.ts'),
    import('../store/recipes.ts'),
    import('../recipe/model-config.ts'),
    import('../train/throughput.ts'),
    import('../train/plan.ts'),
    import('../train/execution-plan.ts'),
    import('../backend/current.ts'),
  ]);

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
  if (!gpu && !values.cpu)
    throw new CheckFailed(`TensorFlow found no GPU. ${describeDriver()}; CUDA libraries linked from ${build.cudaLibraryDirs.length} nvidia-* folders`);
  console.log(`    ${gpu ? 'TensorFlow runs on the GPU' : 'no GPU (accepted: --cpu)'}; ${describeDriver()}`);

  console.log(`[4/4] ${recipeFile}: ${steps} training steps on random tokens`);
  const recipe = loadRecipe(recipeFile);
  const haveTokenizer = existsSync(recipe.data.tokenizer);
  const vocab = haveTokenizer ? (await TextTokenizer.load(recipe.data.tokenizer)).vocabSize : GPT2_VOCAB_SIZE;
  const config = modelConfigFromRecipe(recipe, vocab);
  const model = createLanguageModel(config);
  try {
    const vocabNote = haveTokenizer ? '' : ` (${recipe.data.tokenizer} not found: GPT-2's vocabulary of ${GPT2_VOCAB_SIZE.toLocaleString('en-US')} assumed)`;
    console.log(
      `    ${config.kind} ${config.attention.name}, ${countParameters(config).total.toLocaleString('en-US')} parameters${vocabNote}, batch ${recipe.train.batchSize}×${recipe.data.seqLen}, on ${graphDevice()}`,
    );
    // The first step of a shape records it and builds its function: a warm-up step of its own.
    for (const [label, graph, xla] of [
      ['TensorFlow functions', true, false],
      ['functions + XLA', true, true],
      ['op by op', false, false],
    ] as const) {
      const plan = resolveExecutionPlan({ graph, xla: xla ? 'on' : 'off' }, currentDevice(), null, model);
      const r = await measureThroughput(model, { batchSize: recipe.train.batchSize, seqLen: recipe.data.seqLen, warmup: 2, steps, plan });
      console.log(
        `    ${label.padEnd(20)} ${r.msPerStep.toFixed(0)} ms per step, ${Math.round(r.tokensPerSecond).toLocaleString('en-US')} tokens/s, loss ${r.lastLoss.toFixed(3)}, ${r.readbackValues} values (${r.readbackBytes} bytes) read back per step`,
      );
      if (!Number.isFinite(r.lastLoss)) throw new CheckFailed('the loss is not finite');
    }
    console.log(`    peak memory: ${peakMemory(graphDevice())}`);
  } finally {
    model.dispose();
  }
  console.log('check:gpu: ok');
}

/**
 * nvidia-smi's one-line view of the driver and GPUs, when it is there, and whether the driver runs
 * CUDA 12 programs (the TensorFlow wheel's CUDA): its header names the newest CUDA the driver supports.
 */
function describeDriver(): string {
  const smi = spawnSync('nvidia-smi', ['--query-gpu=name,driver_version,memory.total', '--format=csv,noheader'], { encoding: 'utf8' });
  if (smi.error || smi.status !== 0) return 'nvidia-smi not found or failing (is the NVIDIA driver installed?)';
  const header = spawnSync('nvidia-smi', [], { encoding: 'utf8' }).stdout ?? '';
  const cuda = /CUDA Version:\s*(\d+)\.(\d+)/.exec(header);
  const support = !cuda
    ? 'the CUDA version the driver supports is unknown'
    : Number(cuda[1]) >= 12
      ? `the driver supports CUDA ${cuda[1]}.${cuda[2]}, so it runs the wheel's CUDA 12`
      : `the driver supports CUDA ${cuda[1]}.${cuda[2]} only: the wheel's CUDA 12 needs a newer driver (≥ 525)`;
  return `nvidia-smi: ${smi.stdout.trim().split('\n').join('; ')}; ${support}`;
}

/** This process's memory on the GPU (nvidia-smi), or on a CPU device (`device`, where the graphs run) its peak resident set. */
function peakMemory(device: string): string {
  const apps = spawnSync('nvidia-smi', ['--query-compute-apps=pid,used_memory', '--format=csv,noheader,nounits'], { encoding: 'utf8' });
  const mine =
    apps.status === 0
      ? apps.stdout
          .split('\n')
          .map((l) => l.split(',').map((x) => x.trim()))
          .find(([pid]) => pid === String(process.pid))
      : undefined;
  const rss = `${Math.round(process.resourceUsage().maxRSS / 1024).toLocaleString('en-US')} MB peak resident on the host`;
  return mine ? `${Number(mine[1]).toLocaleString('en-US')} MiB on the GPU (TensorFlow's pool, grown on demand); ${rss}` : `${rss} (no GPU memory: ${device})`;
}

await runCommand(COMMAND, main);
