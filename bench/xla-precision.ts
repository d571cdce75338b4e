// train.precision on the xla executor (docs/xla.md, "Mixed precision"): every attention mechanism at a tiny GPT
// shape trained for --steps in fp32 and in bf16 from the same initial weights on the same batches (rows of
// arithmetic progressions mod the vocabulary, so attention has something to learn): steps whose loss or gradient
// norm was not finite (the update skipped), the losses at the start and the end, the largest relative difference
// of the two loss curves (averaged over windows of 50 steps), and ms per step of each. Records the programs on the
// tensorflow backend (npm run setup:tensorflow, npm run setup:xla).
//   node --import tsx bench/xla-precision.ts [--steps 1000] [--attention NAME,…] [--json FILE]
import * as fs from 'node:fs';
import { currentDevice } from '../src/backend/current.ts';
import { initBackend } from '../src/backend/start.ts';
import { parseOrExit } from '../src/cli/command.ts';
import { Rng } from '../src/core/rng.ts';
import { attentionNames } from '../src/model/attention/index.ts';
import { createLanguageModel, type LanguageModelConfig, type ModelBatch } from '../src/model/lm.ts';
import { AdamW } from '../src/train/optimizer.ts';
import { startStepExecutor } from '../src/train/step-executors/index.ts';
import { resolveExecutionPlan } from '../src/train/execution-plan.ts';

const COMMAND = {
  name: 'bench:xla-precision',
  usage: '[options]',
  description: 'Every attention mechanism trained in fp32 and bf16 on the xla executor: non-finite steps, losses, ms per step.',
  options: {
    steps: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '1000', help: 'steps per mechanism and precision' },
    attention: { type: 'string', value: 'NAMES', help: 'comma-separated mechanisms (default: all)' },
    json: { type: 'string', value: 'FILE', help: 'also write the rows as JSON' },
  },
} as const;

const BATCH = 4;
const SEQ = 32;
const VOCAB = 128;
const WINDOW = 50;

const config = (attention: string): LanguageModelConfig => ({
  kind: 'gpt',
  vocabSize: VOCAB,
  maxSeqLen: SEQ,
  dModel: 32,
  numLayers: 2,
  numHeads: 2,
  mlpRatio: 4,
  dropout: 0,
  bias: true,
  seed: 5,
  attention: { name: attention, options: {} },
});

/** Rows a, a+b, a+2b, … mod VOCAB (a, b drawn per row); each position's label is the next token. */
function progressionBatch(rng: Rng): ModelBatch {
  const inputIds = new Int32Array(BATCH * SEQ);
  const labels = new Int32Array(BATCH * SEQ);
  for (let r = 0; r < BATCH; r++) {
    const [a, b] = [rng.int(VOCAB), 1 + rng.int(7)];
    for (let j = 0; j < SEQ; j++) {
      inputIds[r * SEQ + j] = (a + b * j) % VOCAB;
      labels[r * SEQ + j] = (a + b * (j + 1)) % VOCAB;
    }
  }
  return { batchSize: BATCH, seqLen: SEQ, inputIds, labels };
}

async function train(attention: string, precision: 'fp32' | 'bf16', steps: number) {
  const model = createLanguageModel(config(attention));
  const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
  const plan = resolveExecutionPlan({ executor: 'xla', precision }, currentDevice(), null, model);
  const executor = await startStepExecutor({ plan, model, optimizer });
  try {
    const rng = new Rng(9);
    const losses: number[] = [];
    const ms: number[] = [];
    let nonFinite = 0;
    for (let s = 0; s < steps; s++) {
      const batch = progressionBatch(rng);
      const t0 = performance.now();
      const r = await executor.step([batch], { lr: 3e-3, clip: 1, dropoutSeed: null });
      ms.push(performance.now() - t0);
      if (!r.applied || !Number.isFinite(r.loss) || !Number.isFinite(r.gradNorm)) nonFinite++;
      losses.push(r.loss);
    }
    const timed = ms.slice(Math.min(10, steps - 1)).sort((a, b) => a - b);
    return { losses, nonFinite, msPerStep: timed[Math.floor(timed.length / 2)] };
  } finally {
    await executor.close();
    optimizer.dispose();
    model.dispose();
  }
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const windows = (xs: number[]) => Array.from({ length: Math.ceil(xs.length / WINDOW) }, (_, i) => mean(xs.slice(i * WINDOW, (i + 1) * WINDOW)));

const { values } = parseOrExit(COMMAND, process.argv.slice(2));
await initBackend('tensorflow', { quiet: true });
const mechanisms = values.attention ? values.attention.split(',') : attentionNames();
const rows = [];
console.log(`bench:xla-precision: ${values.steps} steps of ${BATCH}×${SEQ} tokens, GPT d=32, 2 layers, vocabulary ${VOCAB}`);
console.log(
  '| mechanism | non-finite steps fp32 / bf16 | loss first 50 | loss last 50 fp32 / bf16 | largest relative gap (50-step means) | ms/step fp32 / bf16 |',
);
console.log('| --- | ---: | ---: | ---: | ---: | ---: |');
for (const attention of mechanisms) {
  const fp32 = await train(attention, 'fp32', values.steps);
  const bf16 = await train(attention, 'bf16', values.steps);
  const [a, b] = [windows(fp32.losses), windows(bf16.losses)];
  const gap = Math.max(...a.map((x, i) => Math.abs(b[i] - x) / Math.abs(x)));
  const row = { attention, steps: values.steps, fp32: { ...fp32, losses: a }, bf16: { ...bf16, losses: b }, gap };
  rows.push(row);
  console.log(
    `| ${attention} | ${fp32.nonFinite} / ${bf16.nonFinite} | ${a[0].toFixed(3)} | ${a.at(-1)!.toFixed(3)} / ${b.at(-1)!.toFixed(3)} | ${gap.toExponential(1)} | ${fp32.msPerStep.toFixed(1)} / ${bf16.msPerStep.toFixed(1)} |`,
  );
}
if (values.json) fs.writeFileSync(values.json, JSON.stringify(rows, null, 1) + '\n');
