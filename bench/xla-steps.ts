// Training steps of the xla executor (docs/xla.md) on seeded random tokens: the per-step losses, median ms per step
// and tokens/s after warm-up, the programs' compile time apart, and the device's peak memory. Two uses:
//   npm run bench:xla -- --model demo|gpt2-small|long [--attention NAME] [--batch N --seq N --grad-accum N]
//                        [--precision fp32|bf16|fp32,bf16] [--attention-kernel composed|fused] --compile --out DIR
//                                                                         record + export the shape's programs here
//                                                                         (tensorflow backend, npm run setup:xla); a
//                                                                         list of precisions records once and writes
//                                                                         DIR/<precision> for each
//   npm run bench:xla -- --model … --programs DIR [--steps 20] [--warmup 3] [--json FILE]
//                                                                         train from them on the cpu backend: no
//                                                                         TensorFlow needed (the GPU archive runs this)
// The model's initial weights are made here from the model's seed (cpu backend), as a run of the recipe would. A step
// is --grad-accum micro-batches of --batch × --seq (the program's shape), summed before AdamW's update.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { ATTENTION_KERNELS, type AttentionKernel, withAttentionBoundary } from '../src/backend/attention-boundary.ts';
import { initBackend } from '../src/backend/start.ts';
import { parseOrExit } from '../src/cli/command.ts';
import { Rng } from '../src/core/rng.ts';
import { attentionNames } from '../src/model/attention/index.ts';
import { createLanguageModel } from '../src/model/lm.ts';
import { AdamW } from '../src/train/optimizer.ts';
import { XlaExecutor, xla } from '../src/train/step-executors/xla.ts';
import { resolveExecutionPlan, XLA_PROGRAMS_ENV, type ExecutionPlan } from '../src/train/execution-plan.ts';
import { randomBatch } from '../src/train/throughput.ts';
import { gpuPeak } from '../src/backend/peak-flops.ts';
import type { XlaPrecision } from '../src/backend/xla/program-cache.ts';
import { modelFlops } from '../src/model/flops.ts';
import { gradientInputs, RecordingBook, recordApplyProgram, recordGradientProgram, writeCompiledPrograms } from '../src/train/xla-recording.ts';
import { XLA_BENCH_MODELS } from './xla-plan.ts';

const COMMAND = {
  name: 'bench:xla',
  usage: '--model NAME (--compile --out DIR | --programs DIR) [options]',
  description: 'Steps of the xla executor on seeded random tokens: losses, ms per step, tokens/s, compile time, peak device memory.',
  options: {
    model: { type: 'string', choices: Object.keys(XLA_BENCH_MODELS), default: 'demo', help: 'the model and batch shape' },
    attention: { type: 'string', choices: attentionNames(), help: "the attention mechanism, with its default options (default: the model's)" },
    batch: { type: 'string', value: 'N', number: { integer: true, min: 1 }, help: "batch size (default: the model's)" },
    seq: { type: 'string', value: 'N', number: { integer: true, min: 2 }, help: "sequence length (default: the model's)" },
    'grad-accum': { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '1', help: 'micro-batches of batch × seq per step' },
    precision: {
      type: 'string',
      default: 'fp32',
      help: "matrix products' precision (train.precision): fp32 or bf16; with --compile also fp32,bf16 (one recording, DIR/<precision> each)",
    },
    'attention-kernel': {
      type: 'string',
      choices: ATTENTION_KERNELS,
      default: 'composed',
      help: "softmax attention in the programs (train.attentionKernel): composed, or fused (the boundary jax fills in; softmax only); a run's must be its programs'",
    },
    compile: { type: 'boolean', help: 'record and export the programs into --out (tensorflow backend)' },
    out: { type: 'string', value: 'DIR', help: 'with --compile: the programs folder to write' },
    programs: { type: 'string', value: 'DIR', help: 'train from this programs folder' },
    steps: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '20', help: 'timed steps' },
    warmup: { type: 'string', value: 'N', number: { integer: true, min: 0 }, default: '3', help: 'steps before timing (the first compiles)' },
    json: { type: 'string', value: 'FILE', help: 'also write the result as JSON' },
  },
} as const;

const LR = 3e-4;
const CLIP = 1;

const { values } = parseOrExit(COMMAND, process.argv.slice(2));
const preset = XLA_BENCH_MODELS[values.model];
const batchSize = values.batch ?? preset.batch;
const seqLen = values.seq ?? preset.seq;
const gradAccum = values['grad-accum'];
const attention = values.attention === undefined ? preset.config.attention : { name: values.attention, options: {} };
const config = { ...preset.config, attention, maxSeqLen: Math.max(preset.config.maxSeqLen, seqLen) };
const precisions = values.precision.split(',');
const badPrecision = precisions.find((p) => p !== 'fp32' && p !== 'bf16');
if (badPrecision !== undefined || precisions.length === 0)
  throw new Error(`bench:xla: --precision '${values.precision}': fp32, bf16 or (with --compile) fp32,bf16`);
if (precisions.length > 1 && !values.compile) throw new Error('bench:xla: several --precision values need --compile (a run trains in one)');
const precision = precisions[0] as XlaPrecision;
const attentionKernel = values['attention-kernel'] as AttentionKernel;
if (attentionKernel === 'fused' && config.attention.name !== 'softmax')
  throw new Error(`bench:xla: --attention-kernel fused is softmax attention's (train.attentionKernel); this run's attention is ${config.attention.name}`);
const shapeText = `${values.model} ${config.attention.name}${attentionKernel === 'fused' ? ' fused' : ''} ${gradAccum > 1 ? `${gradAccum}×` : ''}${batchSize}×${seqLen}`;
const optimizerOptions = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 };

if (values.compile) {
  if (!values.out) throw new Error('bench:xla --compile needs --out DIR');
  await initBackend('tensorflow', { quiet: true });
  const model = createLanguageModel(config);
  const optimizer = new AdamW(model.parameters(), optimizerOptions);
  const batch = randomBatch(new Rng(7), 'gpt', batchSize, seqLen, config.vocabSize);
  const variables = [...model.parameters().values()];
  // The loss divisor is an input of the program: the step's tokens over all its micro-batches.
  const total = gradAccum * batchSize * seqLen;
  const given = gradientInputs(model, batch, variables, null, total)!;
  const started = performance.now();
  // Recorded once (the recording executes the step eagerly, twice: the slow part here) and exported per precision.
  const record = () => recordGradientProgram(model, batch, variables, null, total);
  const spec = attentionKernel === 'fused' ? withAttentionBoundary(record) : record();
  const recordSeconds = (performance.now() - started) / 1000;
  for (const p of precisions as XlaPrecision[]) {
    const exported = performance.now();
    const book = new RecordingBook({ precision: p, attentionKernel });
    const gradient = book.get('gradient', given.key, () => ({ spec }));
    const gradNames = gradient.outputs.filter((n) => n.startsWith('grad:')).map((n) => n.slice('grad:'.length));
    book.get('apply', `${gradNames.join(',')}|clip true`, () => recordApplyProgram(optimizer, model, gradNames, CLIP));
    const out = precisions.length > 1 ? path.join(values.out, p) : values.out;
    writeCompiledPrograms(book, out, `bench:xla ${shapeText} ${p}`, model);
    const exportSeconds = (performance.now() - exported) / 1000;
    console.log(`bench:xla: ${p} programs for ${shapeText} in ${out} (recording ${recordSeconds.toFixed(1)} s, export ${exportSeconds.toFixed(1)} s)`);
  }
} else {
  if (!values.programs) throw new Error('bench:xla needs --programs DIR (or --compile --out DIR)');
  process.env[XLA_PROGRAMS_ENV] = values.programs;
  const device = await initBackend('cpu', { quiet: true });
  const made = performance.now();
  const model = createLanguageModel(config);
  const optimizer = new AdamW(model.parameters(), optimizerOptions);
  const initSeconds = (performance.now() - made) / 1000;
  let plan: ExecutionPlan;
  try {
    plan = resolveExecutionPlan({ executor: 'xla', precision, attentionKernel }, device, null, model);
  } catch (err) {
    throw new Error(`bench:xla: ${(err as Error).message.replace(/^train\.executor xla: /, '')}`);
  }
  const executor = (await xla.create({ plan, model, optimizer })) as XlaExecutor;
  try {
    const rng = new Rng(7);
    const losses: number[] = [];
    const ms: number[] = [];
    for (let s = 0; s < values.warmup + values.steps; s++) {
      const micro = Array.from({ length: gradAccum }, () => randomBatch(rng, 'gpt', batchSize, seqLen, config.vocabSize));
      const t0 = performance.now();
      const r = await executor.step(micro, { lr: LR, clip: CLIP, dropoutSeed: null });
      ms.push(performance.now() - t0);
      losses.push(r.loss);
    }
    const timed = ms.slice(values.warmup).sort((a, b) => a - b);
    const msPerStep = timed[Math.floor(timed.length / 2)];
    const memory = await executor.memory();
    const tokensPerSecond = (1000 * gradAccum * batchSize * seqLen) / msPerStep;
    // MFU against the GPU's datasheet peak (docs/training.md, "Model FLOPs and MFU"); jax's CPU has no peak of ours to
    // measure against here (this process's tfjs backend is not what runs the steps), so none on CPU.
    const flopsPerToken = modelFlops(config, seqLen).perToken;
    const peak = executor.hello.platform === 'cpu' ? null : gpuPeak(executor.hello.device, precision === 'bf16' ? 'bf16' : 'tf32');
    const result = {
      model: values.model,
      attention: config.attention.name,
      attentionKernel,
      batch: batchSize,
      seq: seqLen,
      gradAccum,
      precision,
      parameters: [...model.parameters().values()].reduce((n, v) => n + v.size, 0),
      jax: executor.hello.jax,
      jaxlib: executor.hello.jaxlib,
      platform: executor.hello.platform,
      device: executor.hello.device,
      path: executor
        .describe()
        .replace(/.*loaded as /, '')
        .replace(/; compiling.*/, ''),
      compileSeconds: executor.compileSeconds,
      initSeconds,
      firstStepMs: ms[0],
      msPerStep,
      tokensPerSecond,
      modelFlopsPerToken: flopsPerToken,
      peakFlopsPerSecond: peak?.flopsPerSecond ?? null,
      mfu: peak ? (flopsPerToken * tokensPerSecond) / peak.flopsPerSecond : null,
      peakBytes: memory.peakBytes,
      compiledPeakBytes: memory.compiledPeakBytes ?? null,
      losses,
    };
    console.log(
      `bench:xla ${shapeText} ${precision} on jax ${result.jax} ${result.platform} (${result.device}): ${msPerStep.toFixed(1)} ms/step, ${Math.round(result.tokensPerSecond).toLocaleString('en-US')} tokens/s${result.mfu === null ? '' : ` (MFU ${(100 * result.mfu).toFixed(1)}% of ${peak!.source})`}, compile ${result.compileSeconds.toFixed(1)} s, peak ${memory.peakBytes === null ? 'n/a' : `${(memory.peakBytes / 2 ** 20).toFixed(0)} MiB`}, loss ${losses[0].toFixed(4)} → ${losses.at(-1)!.toFixed(4)}`,
    );
    if (values.json) fs.writeFileSync(values.json, JSON.stringify(result, null, 1) + '\n');
  } finally {
    await executor.close();
    optimizer.dispose();
    model.dispose();
  }
}
