// Timed optimizer steps on random tokens: what bench:train and check:gpu measure. Wall time and the
// process's CPU time (all threads) per step, medians after warm-up steps.
import * as tf from '@tensorflow/tfjs';
import { readback, readSince } from '../backend/readback.ts';
import type { LanguageModel, LanguageModelConfig, ModelBatch } from '../model/lm.ts';
import { IGNORE_LABEL } from '../model/lm.ts';
import { Rng } from '../core/rng.ts';
import { planAdamW, type ExecutionPlan } from './execution-plan.ts';
import { startStepExecutor } from './step-executors/index.ts';

/** The benchmarks' model shape: the reference GPT is vocab 4096, d 128, 4 layers × 4 heads, seq 256 (docs/benchmarks.md). */
export interface BenchShape {
  vocab: number;
  seq: number;
  d: number;
  layers: number;
  heads: number;
}

/** The GPT every throughput benchmark trains (bench:train, bench:paired, bench:versus): GPT-2's layout, no dropout, seed 1. */
export function benchGptConfig(shape: BenchShape, attention: string, options: Record<string, unknown> = {}): LanguageModelConfig {
  const { vocab, seq, d, layers, heads } = shape;
  return {
    kind: 'gpt',
    vocabSize: vocab,
    maxSeqLen: seq,
    dModel: d,
    numLayers: layers,
    numHeads: heads,
    mlpRatio: 4,
    dropout: 0,
    bias: true,
    attention: { name: attention, options },
    seed: 1,
  };
}

/** The benchmarks' AdamW settings (GPT-2-style β2 = 0.95 and decay 0.1). */
export const BENCH_ADAMW = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 } as const;

/** Uniform random tokens; GPT labels every position, BERT about one in seven (its masking rate order). */
export function randomBatch(rng: Rng, kind: LanguageModel['kind'], batchSize: number, seqLen: number, vocab: number): ModelBatch {
  const n = batchSize * seqLen;
  const inputIds = new Int32Array(n);
  const labels = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    inputIds[i] = rng.int(vocab);
    labels[i] = kind === 'gpt' || rng.int(7) === 0 ? rng.int(vocab) : IGNORE_LABEL;
  }
  return { batchSize, seqLen, inputIds, labels, ...(kind === 'bert' ? { attentionMask: new Float32Array(n).fill(1) } : {}) };
}

export interface ThroughputOptions {
  batchSize: number;
  seqLen: number;
  warmup: number;
  steps: number;
  /** How the steps run: executor, replicas, recorded or op by op, XLA JIT, ZeRO-1 shard (resolveExecutionPlan for the model). */
  plan: ExecutionPlan;
  /** Called once after the timed steps with a function that runs one more step (e.g. to profile it). */
  afterTimed?: (step: () => Promise<void>) => Promise<void>;
}

export interface Throughput {
  msPerStep: number;
  cpuMsPerStep: number;
  tokensPerSecond: number;
  tokensPerCpuSecond: number;
  lastLoss: number;
  /** Wall time of the first step, ms: what recording, exporting and compiling the step cost (warm-up included it). */
  firstStepMs: number;
  /** Values and bytes the last timed step read back into JavaScript (tensorflow backend; backend/readback.ts). */
  readbackValues: number;
  readbackBytes: number;
  /** Bytes of AdamW's moments this process keeps (a slice of them when sharded). */
  momentBytes: number;
  /** Bytes of the tensors TensorFlow.js holds after the timed steps (tf.memory: parameters, moments, caches). */
  tensorBytes: number;
}

/** The middle value (the upper one of an even count): what the benchmarks report. */
/** The p-quantile of xs, linear between the two nearest ranks (numpy's default); the median of an even count is the mean of the middle two. */
export function quantile(xs: readonly number[], p: number): number {
  const sorted = [...xs].sort((a, b) => a - b);
  const at = p * (sorted.length - 1);
  const [lo, hi] = [Math.floor(at), Math.ceil(at)];
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - lo);
}

export const median = (xs: readonly number[]) => quantile(xs, 0.5);

/** 'median [lower quartile, upper quartile]' to 3 decimals: how the benchmarks print paired per-round ratios. */
export function medianAndQuartiles(xs: readonly number[]): string {
  const q = (p: number) => quantile(xs, p).toFixed(3);
  return `${q(0.5)} [${q(0.25)}, ${q(0.75)}]`;
}

/** Trains `model` for warmup + steps optimizer steps (AdamW, as a recipe's defaults) and times the last `steps`. */
export async function measureThroughput(model: LanguageModel, o: ThroughputOptions): Promise<Throughput> {
  const { plan } = o;
  const optimizer = planAdamW(plan, model.parameters(), BENCH_ADAMW);
  let executor: Awaited<ReturnType<typeof startStepExecutor>> | null = null;
  try {
    executor = await startStepExecutor({ plan, model, optimizer });
    const running = executor;
    const rng = new Rng(7);
    const step = async () => {
      const batch = randomBatch(rng, model.kind, o.batchSize, o.seqLen, model.config.vocabSize);
      return (await running.step([batch], { lr: 3e-4, clip: 1, dropoutSeed: null })).loss;
    };
    const wall: number[] = [];
    const cpu: number[] = [];
    let lastLoss = NaN;
    let firstStepMs = NaN;
    let read = readback();
    for (let s = 0; s < o.warmup + o.steps; s++) {
      const r0 = readback();
      const t0 = performance.now();
      const c0 = process.cpuUsage();
      lastLoss = await step();
      const used = process.cpuUsage(c0);
      read = readSince(r0);
      if (s === 0) firstStepMs = performance.now() - t0;
      if (s < o.warmup) continue;
      wall.push(performance.now() - t0);
      cpu.push((used.user + used.system) / 1000);
    }
    await o.afterTimed?.(async () => void (await step()));
    const tokens = o.batchSize * o.seqLen;
    const [msPerStep, cpuMsPerStep] = [median(wall), median(cpu)];
    return {
      msPerStep,
      cpuMsPerStep,
      tokensPerSecond: (1000 * tokens) / msPerStep,
      tokensPerCpuSecond: (1000 * tokens) / cpuMsPerStep,
      lastLoss,
      firstStepMs,
      readbackValues: read.values,
      readbackBytes: read.bytes,
      momentBytes: optimizer.momentValues * 4,
      tensorBytes: tf.memory().numBytes,
    };
  } finally {
    await executor?.close();
    optimizer.dispose();
  }
}
