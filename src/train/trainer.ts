// The training loop: one epoch over the training split (or the train.maxTokens budget), AdamW with
// warm-up + decay, global-norm clipping, gradient accumulation, periodic logging and validation on
// a fixed token set, and a final save of the weights as safetensors.
import { existsSync } from 'node:fs';
import { mkdir, rename, rm, writeFile } from 'node:fs/promises';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { createLanguageModel, countParameters, IGNORE_LABEL } from '../model/lm.ts';
import type { LanguageModel, LanguageModelConfig, ModelBatch } from '../model/lm.ts';
import { deriveSeed } from '../model/rng.ts';
import { validateTransformerConfig } from '../model/transformer.ts';
import { TextTokenizer } from '../data/tokenizer.ts';
import { estimateEpoch, openBatchStream } from '../data/stream.ts';
import type { Batch, StreamOptions } from '../data/stream.ts';
import type { Recipe } from './recipe.ts';
import { RunLogger } from './metrics.ts';
import type { MetricRecord } from './metrics.ts';
import { AdamW, clipByGlobalNorm, disposeFlat, type FlatGradients } from './optimizer.ts';
import { learningRate } from './schedule.ts';
import { collectEvalBatches, evaluate } from './evaluate.ts';
import type { EvalResult } from './evaluate.ts';
import { encodeSafetensors } from './safetensors.ts';
import { checkResumeCompatible, CheckpointWriter, loadCheckpoint, restoreCheckpoint, TrainingStopped } from './checkpoint.ts';
import type { StopRequest } from './checkpoint.ts';
import { prepareFinetune } from './finetune.ts';
import type { NamedArray } from './safetensors.ts';
import { DataParallelGroup, resolveDataParallel } from './data-parallel.ts';

export function modelConfigFromRecipe(recipe: Recipe, vocabSize: number): LanguageModelConfig {
  const m = recipe.model;
  if (m.maxSeqLen < recipe.data.seqLen) {
    throw new Error(`model.maxSeqLen (${m.maxSeqLen}) must be ≥ data.seqLen (${recipe.data.seqLen})`);
  }
  return {
    kind: m.kind,
    vocabSize,
    maxSeqLen: m.maxSeqLen,
    dModel: m.dModel,
    numLayers: m.numLayers,
    numHeads: m.numHeads,
    mlpRatio: m.mlpRatio,
    dropout: m.dropout,
    bias: m.bias,
    attention: m.attention,
    seed: recipe.train.seed,
  };
}

function labelledCount(batch: ModelBatch): number {
  let n = 0;
  for (let i = 0; i < batch.labels.length; i++) if (batch.labels[i] !== IGNORE_LABEL) n++;
  return n;
}

export interface StepResult {
  /** Mean cross-entropy per labelled token over all micro-batches, nats. */
  loss: number;
  /** Global gradient norm before clipping. */
  gradNorm: number;
  /** Labelled tokens in the step. */
  tokens: number;
  /** False when the loss or gradient norm was NaN/Inf: then nothing was updated (not even AdamW's step count). */
  applied: boolean;
}

export interface StepOptions {
  lr: number;
  clip: number;
  dropoutSeed: number | null;
  /** Only these get gradients (train.freeze); default all parameters. */
  trainable?: Map<string, tf.Variable>;
}

/** Labelled tokens over all micro-batches: the divisor of every summed loss in the step. */
export function stepTokens(microBatches: readonly ModelBatch[]): number {
  if (microBatches.length === 0) throw new Error('trainStep: no micro-batch');
  const total = microBatches.reduce((n, b) => n + labelledCount(b), 0);
  if (total === 0) throw new Error('trainStep: the micro-batches hold no labelled token');
  return total;
}

/**
 * Σ_i ∇(lossSum(batch_i, seed_i) / total) over the given batches, and Σ_i lossSum_i / total. The
 * caller owns the returned tensors. Shared by trainStep and by the data-parallel replicas.
 */
export function accumulateGradients(
  model: LanguageModel,
  batches: readonly ModelBatch[],
  seeds: readonly (number | null)[],
  total: number,
  variables: tf.Variable[],
): { grads: Map<string, tf.Tensor>; loss: tf.Scalar } {
  let accumulated: Record<string, tf.Tensor> | null = null;
  let loss: tf.Scalar | null = null;
  try {
    for (let i = 0; i < batches.length; i++) {
      const previous: Record<string, tf.Tensor> | null = accumulated;
      const previousLoss: tf.Scalar | null = loss;
      const out: { value: tf.Scalar; grads: Record<string, tf.Tensor> } = tf.tidy(() => {
        const { value, grads } = tf.variableGrads(() => tf.div(model.lossSum(batches[i], seeds[i]).loss, total) as tf.Scalar, variables);
        if (!previous) return { value, grads };
        const sum: Record<string, tf.Tensor> = {};
        for (const [name, g] of Object.entries(grads)) sum[name] = tf.add(previous[name], g);
        return { value: tf.add(previousLoss!, value) as tf.Scalar, grads: sum };
      });
      if (previous) tf.dispose([...Object.values(previous), previousLoss!]);
      accumulated = out.grads;
      loss = out.value;
    }
  } catch (err) {
    if (accumulated) tf.dispose([...Object.values(accumulated), loss!]);
    throw err;
  }
  if (!accumulated) throw new Error('accumulateGradients: no batch');
  return { grads: new Map(Object.entries(accumulated)), loss: loss! };
}

/**
 * Clips and applies accumulated gradients (their loss = mean over the step's labelled tokens). A
 * NaN/Inf loss or gradient norm is caught before the update, so weights and moments stay as they
 * were. Disposes `grads` and `loss`.
 */
export async function applyGradients(
  optimizer: AdamW,
  grads: Map<string, tf.Tensor>,
  loss: tf.Scalar,
  total: number,
  opts: Pick<StepOptions, 'lr' | 'clip'>,
): Promise<StepResult> {
  let flat: FlatGradients | null = null;
  try {
    flat = optimizer.flatten(grads);
    tf.dispose([...grads.values()]);
    const { values } = flat;
    const norm = tf.tidy(() => clipByGlobalNorm(values, 0).norm);
    const [checkedNorm, checkedLoss] = await Promise.all([norm.data(), loss.data()]);
    norm.dispose();
    if (!Number.isFinite(checkedNorm[0]) || !Number.isFinite(checkedLoss[0])) {
      return { loss: checkedLoss[0], gradNorm: checkedNorm[0], tokens: total, applied: false };
    }
    tf.tidy(() => optimizer.applyGradients({ ...flat!, values: clipByGlobalNorm(values, opts.clip).grad }, opts.lr));
    return { loss: checkedLoss[0], gradNorm: checkedNorm[0], tokens: total, applied: true };
  } finally {
    tf.dispose([...grads.values(), loss]);
    if (flat) disposeFlat(flat);
  }
}

/** Dropout seed of micro-batch i (null = no dropout). */
export const microBatchSeed = (dropoutSeed: number | null, i: number) => (dropoutSeed === null ? null : deriveSeed(dropoutSeed, i));

/**
 * One optimizer step over k micro-batches. Each micro-batch's summed loss is divided by the labelled
 * tokens of ALL k micro-batches, so the accumulated gradient is exactly the gradient of the mean loss
 * over the union — the update of one batch of k× rows (also for BERT, whose micro-batches hold
 * different numbers of labelled tokens). Dropout of micro-batch i uses deriveSeed(dropoutSeed, i).
 */
export async function trainStep(model: LanguageModel, optimizer: AdamW, microBatches: readonly ModelBatch[], opts: StepOptions): Promise<StepResult> {
  const total = stepTokens(microBatches);
  const variables = [...(opts.trainable ?? model.parameters()).values()];
  const seeds = microBatches.map((_, i) => microBatchSeed(opts.dropoutSeed, i));
  const { grads, loss } = accumulateGradients(model, microBatches, seeds, total, variables);
  return applyGradients(optimizer, grads, loss, total, opts);
}

/** Checks the model part of a recipe without building anything (errors name the recipe key). */
export function validateRecipeModel(recipe: Recipe): void {
  validateTransformerConfig({ ...modelConfigFromRecipe(recipe, 1), causal: recipe.model.kind === 'gpt' });
}

/** Everything the model, state and tensors are saved as: parameters then buffers, by stable name. */
export async function modelTensors(model: LanguageModel): Promise<Map<string, NamedArray>> {
  const out = new Map<string, NamedArray>();
  for (const [name, v] of [...model.parameters(), ...model.buffers()]) {
    out.set(name, { shape: v.shape, data: (await v.data()) as Float32Array });
  }
  return out;
}

/**
 * Writes `<runDir>/final/` = model.safetensors (parameters and attention buffers, weights [in, out];
 * metadata: the model config with its vocabSize, plus `metadata`) + recipe.json (the resolved recipe), atomically: a
 * temporary folder renamed into place.
 */
export async function saveFinalModel(runDir: string, model: LanguageModel, recipe: Recipe, metadata: Record<string, string> = {}): Promise<string> {
  const finalDir = path.join(runDir, 'final');
  const tmpDir = path.join(runDir, `.final.tmp-${process.pid}`);
  await rm(tmpDir, { recursive: true, force: true });
  await mkdir(tmpDir, { recursive: true });
  const header = {
    format: 'slayformer',
    kind: model.kind,
    layout: 'linear weights are [in, out] (x·W)',
    config: JSON.stringify(model.config),
    ...metadata,
  };
  await writeFile(path.join(tmpDir, 'model.safetensors'), encodeSafetensors(await modelTensors(model), header));
  await writeFile(path.join(tmpDir, 'recipe.json'), JSON.stringify(recipe, null, 2) + '\n');
  await rm(finalDir, { recursive: true, force: true });
  await rename(tmpDir, finalDir);
  return finalDir;
}

/**
 * Memory estimate in bytes (float32 everywhere):
 *   parameters + gradients + AdamW m and v       16·P   (+4·P for the accumulated gradient if gradAccum > 1)
 *   activations kept for backward, per layer     B·L·(18·d + 2·mlpRatio·d)·4   (norms, q/k/v, attention out, MLP)
 *   + quadratic mechanisms (softmax, yat)        B·H·L²·3·4                    (scores, weights, mask product)
 *   + LM head                                    B·L·V·3·4                     (logits, softmax, gradient)
 * Linear mechanisms' chunk states are not counted (small next to the rest for chunk ≤ 128).
 */
export function estimateMemory(config: LanguageModelConfig, parameters: number, batchSize: number, seqLen: number, gradAccum: number) {
  const bytes = 4;
  const state = parameters * bytes * (gradAccum > 1 ? 5 : 4);
  const tokens = batchSize * seqLen;
  const quadratic = ['softmax', 'yat-spherical'].includes(config.attention.name);
  const perLayer = tokens * (18 * config.dModel + 2 * config.mlpRatio * config.dModel) * bytes +
    (quadratic ? batchSize * config.numHeads * seqLen * seqLen * 3 * bytes : 0);
  const headRows = config.kind === 'bert' ? Math.ceil(tokens * 0.15) : tokens;
  const activations = perLayer * config.numLayers + headRows * config.vocabSize * 3 * bytes;
  return { state, activations, total: state + activations };
}

export interface RunPlan {
  modelConfig: LanguageModelConfig;
  vocabSource: string;
  parameters: { total: number; byGroup: Record<string, number> };
  epoch: { tokens: number; batches: number; exact: boolean } | null;
  datasetNote: string | null;
  totalSteps: number | null;
  tokensPerStep: number;
  memory: ReturnType<typeof estimateMemory>;
}

/** Assumed when the tokenizer file is absent (dry runs of GPU recipes on a machine without the data). */
export const GPT2_VOCAB_SIZE = 50257;

function plannedBatches(recipe: Recipe, epochBatches: number): number {
  const { batchSize } = recipe.train;
  const budget = recipe.train.maxTokens;
  if (budget === null) return epochBatches;
  return Math.min(epochBatches, Math.ceil(budget / (batchSize * recipe.data.seqLen)));
}

/** What --dry-run prints: no training, and the dataset and tokenizer may be missing. */
export async function planRun(recipe: Recipe): Promise<RunPlan> {
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
  if (!existsSync(datasetRoot(recipe.data.dataset))) {
    datasetNote = 'dataset not found: tokens per epoch unknown';
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
  return { modelConfig, vocabSource, parameters, epoch, datasetNote, totalSteps, tokensPerStep, memory };
}

/** The folder part of a dataset path that may end in a glob. */
function datasetRoot(dataset: string): string {
  const parts = dataset.split(path.sep);
  const firstGlob = parts.findIndex((p) => /[*?[]/.test(p));
  return firstGlob < 0 ? dataset : parts.slice(0, firstGlob).join(path.sep) || path.sep;
}

export function streamOptions(recipe: Recipe, tokenizer: TextTokenizer): Omit<StreamOptions, 'split' | 'cursor'> {
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
  };
}

export interface TrainResult {
  runDir: string;
  finalDir: string;
  steps: number;
  tokens: number;
  elapsedS: number;
  finalVal: EvalResult;
  parameters: number;
}

function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0 ? `${h}h${String(m).padStart(2, '0')}m` : `${m}m${String(s % 60).padStart(2, '0')}s`;
}

/** What the loop needs from RunLogger (tests pass a recorder). */
export type TrainLogger = Pick<RunLogger, 'dir' | 'log' | 'line' | 'finish'>;

/**
 * Trains `recipe` from scratch: progress lines and metrics.jsonl through RunLogger, validation every
 * train.evalInterval steps and at the end, final weights in <run>/final/. The backend must already
 * be initialised (initBackend). train.maxTokens counts input tokens (batchSize × seqLen per batch)
 * and is capped at one epoch; tokens/s counts input tokens too (BERT: not only the masked ones).
 * Checkpoints (checkpoint.ts) every train.checkpointInterval steps and at the end; `resume` continues exactly from
 * one in its own run folder; `stop.signal` set = save a checkpoint after the current step and throw TrainingStopped.
 */

export async function runTraining(
  recipe: Recipe,
  opts: { logger?: TrainLogger; /** A checkpoint folder to continue from (see checkpoint.ts resolveResume). */ resume?: string; stop?: StopRequest } = {},
): Promise<TrainResult> {
  const tokenizer = await TextTokenizer.load(recipe.data.tokenizer);
  const modelConfig = modelConfigFromRecipe(recipe, tokenizer.vocabSize);
  const base = streamOptions(recipe, tokenizer);
  const epoch = await estimateEpoch({ ...base, split: 'train' });
  const { batchSize, gradAccum, seed } = recipe.train;
  const seqLen = recipe.data.seqLen;
  const batchesPlanned = plannedBatches(recipe, epoch.batches);
  const totalSteps = Math.max(1, Math.ceil(batchesPlanned / gradAccum));
  const evalBatches = await collectEvalBatches(base, recipe.train.evalTokens);
  const resumed = opts.resume ? await loadCheckpoint(opts.resume) : null;
  const changedKeys = resumed ? checkResumeCompatible(resumed, recipe, tokenizer.sha256) : [];
  if (resumed && resumed.state.step >= totalSteps) {
    throw new Error(`checkpoint ${resumed.dir} is at step ${resumed.state.step}, the end of this recipe's ${totalSteps} steps: nothing to resume (raise train.maxTokens to train longer)`);
  }
  const logger: TrainLogger =
    opts.logger ?? (await RunLogger.create(recipe, resumed ? { resumeDir: resumed.runDir, resumeStep: resumed.state.step } : {}));
  const checkpoints = new CheckpointWriter(logger.dir, recipe, { path: tokenizer.path, sha256: tokenizer.sha256 }, resumed, (t) => logger.line(t));
  const model = createLanguageModel(modelConfig);
  // initFrom and whitening are skipped on resume: the checkpoint restores every tensor.
  const finetune = await prepareFinetune(model, recipe, {
    tokenizerSha256: tokenizer.sha256, calibration: { ...base, split: 'train' }, line: (t) => logger.line(t), skipInit: resumed !== null,
  }).catch((err) => {
    model.dispose();
    throw err;
  });
  const optimizer = new AdamW(finetune.trainable, {
    beta1: recipe.train.beta1,
    beta2: recipe.train.beta2,
    eps: recipe.train.eps,
    weightDecay: recipe.train.weightDecay,
    decayEmbeddings: recipe.train.decayEmbeddings,
  });
  if (resumed) restoreCheckpoint(resumed, model, optimizer);
  const replicas = resolveDataParallel(recipe.train.dataParallel, tf.getBackend(), batchSize);
  const stream = await openBatchStream({ ...base, split: 'train', cursor: resumed?.cursor });
  const schedule = { lr: recipe.train.lr, minLr: recipe.train.minLr, schedule: recipe.train.schedule, warmupSteps: recipe.train.warmupSteps, totalSteps };
  const parameterCount = [...model.parameters().values()].reduce((n, v) => n + v.size, 0);
  logger.line(
    `model ${modelConfig.kind} ${modelConfig.attention.name}: ${(parameterCount / 1e6).toFixed(2)}M parameters, vocab ${modelConfig.vocabSize}; ` +
      `${totalSteps} steps of ${batchSize}×${gradAccum}×${seqLen} tokens (epoch ≈ ${epoch.tokens.toLocaleString('en-US')} tokens${epoch.exact ? '' : ', estimated'}); backend ${tf.getBackend()}` +
      (replicas > 1 ? `, ${replicas} data-parallel replicas` : ''),
  );

  const restored = resumed?.state;
  if (resumed) {
    logger.line(`resumed from ${resumed.dir} at step ${restored!.step}${changedKeys.length ? ` (recipe keys changed since: ${changedKeys.join(', ')})` : ''}`);
  }
  const started = performance.now() - (restored?.elapsedS ?? 0) * 1000;
  let trainSeconds = restored?.trainSeconds ?? 0;
  let tokens = restored?.tokens ?? 0;
  let batchesSeen = restored?.batchesSeen ?? 0;
  let step = restored?.step ?? 0;
  let window = restored ? { ...restored.window } : { loss: 0, steps: 0, tokens: 0, seconds: 0 };
  let skippedSteps = restored?.skippedSteps ?? 0;
  let lastVal: { step: number; loss: number } | null = null;
  const elapsed = () => (performance.now() - started) / 1000;
  const saveCheckpoint = () =>
    checkpoints.save(model, optimizer, stream.cursor(), { step, tokens, batchesSeen, trainSeconds, elapsedS: elapsed(), window, skippedSteps }, lastVal?.step === step ? lastVal.loss : null);

  const validate = async (): Promise<EvalResult> => {
    const result = await evaluate(model, evalBatches);
    const record: MetricRecord = {
      step, tokens, split: 'val', loss: result.loss, ppl: result.ppl, lr: learningRate(Math.max(0, step - 1), schedule),
      grad_norm: null, tokens_per_s: trainSeconds > 0 ? tokens / trainSeconds : 0, elapsed_s: elapsed(), bpb: result.bpb,
      epoch_fraction: batchesSeen / Math.max(1, epoch.batches),
    };
    logger.log(record);
    lastVal = { step, loss: result.loss };
    logger.line(`val   step ${step}: loss ${result.loss.toFixed(4)} | ppl ${result.ppl.toFixed(2)} | bpb ${result.bpb.toFixed(4)} (${result.tokens} tokens)`);
    return result;
  };

  let finalVal: EvalResult;
  let group: DataParallelGroup | null = null;
  try {
    // Started after initFrom and restore: the replicas receive the weights as they now are.
    if (replicas > 1) group = await DataParallelGroup.start(model, replicas);
    if (finetune.initFrom !== null && step === 0) await validate(); // the loaded model before finetuning
    while (step < totalSteps) {
      const micro: Batch[] = [];
      while (micro.length < gradAccum && batchesSeen < batchesPlanned) {
        const batch = await stream.next();
        if (!batch) break;
        micro.push(batch);
        batchesSeen++;
      }
      if (micro.length === 0) break; // the epoch ended before the estimate said
      const lr = learningRate(step, schedule);
      model.onTrainStep(step);
      const t0 = performance.now();
      const stepOptions: StepOptions = {
        lr,
        clip: recipe.train.clip,
        dropoutSeed: modelConfig.dropout > 0 ? deriveSeed(seed, `dropout/${step}`) : null,
        trainable: finetune.trainable,
      };
      const result = group ? await group.step(optimizer, micro, stepOptions) : await trainStep(model, optimizer, micro, stepOptions);
      const seconds = (performance.now() - t0) / 1000;
      if (!result.applied) {
        const what = `step ${step + 1}: loss ${result.loss}, gradient norm ${result.gradNorm}`;
        if (recipe.train.nanPolicy === 'stop') {
          const last = checkpoints.lastDir ? `the last good checkpoint is ${checkpoints.lastDir}` : 'no checkpoint was saved yet';
          throw new Error(`training diverged at ${what}; the update was not applied and ${last} (train.nanPolicy: skip drops such updates instead)`);
        }
        skippedSteps++;
        logger.line(`warning: ${what}; update dropped (train.nanPolicy: skip; ${skippedSteps} dropped so far)`);
      }
      const stepTokens = micro.length * batchSize * seqLen;
      step++;
      tokens += stepTokens;
      trainSeconds += seconds;
      if (result.applied) window = { loss: window.loss + result.loss, steps: window.steps + 1, tokens: window.tokens + stepTokens, seconds: window.seconds + seconds };
      if ((step % recipe.train.logInterval === 0 || step === totalSteps) && window.steps > 0) {
        const loss = window.loss / window.steps;
        const rate = window.tokens / window.seconds;
        const fraction = batchesSeen / Math.max(1, epoch.batches);
        logger.log({
          step, tokens, split: 'train', loss, ppl: Math.exp(loss), lr, grad_norm: result.gradNorm,
          tokens_per_s: rate, elapsed_s: elapsed(), epoch_fraction: fraction,
        });
        const eta = ((totalSteps - step) * window.seconds) / window.steps;
        logger.line(
          `step ${step}/${totalSteps} | epoch ${(100 * fraction).toFixed(1)}% | loss ${loss.toFixed(4)} | ppl ${Math.exp(loss).toFixed(2)} | ` +
            `lr ${lr.toExponential(2)} | grad ${result.gradNorm.toFixed(3)} | ${Math.round(rate).toLocaleString('en-US')} tok/s | ETA ${formatDuration(eta)}`,
        );
        window = { loss: 0, steps: 0, tokens: 0, seconds: 0 };
      }
      if (recipe.train.evalInterval > 0 && step % recipe.train.evalInterval === 0 && step < totalSteps) await validate();
      // Signal handlers (Ctrl-C) run only when the event loop turns, and on the cpu and wasm backends a step
      // never waits for I/O: give the loop one turn per step, or a stop request is seen only at the end.
      await new Promise((resolve) => setImmediate(resolve));
      // A stop asked for during the last step just lets the run finish (final validation and save follow).
      const signal = step < totalSteps ? (opts.stop?.signal ?? null) : null;
      const interval = recipe.train.checkpointInterval;
      if (signal || (interval > 0 && step % interval === 0 && step < totalSteps)) await saveCheckpoint();
      if (signal) throw new TrainingStopped(signal, step, checkpoints.lastDir!, logger.dir);
    }
    finalVal = await validate();
    await saveCheckpoint();
    const finalDir = await saveFinalModel(logger.dir, model, recipe, { tokenizer_sha256: tokenizer.sha256, step: String(step), ...finetune.metadata });
    const summary = {
      steps: step, tokens, elapsed_s: elapsed(), train_tokens_per_s: trainSeconds > 0 ? tokens / trainSeconds : 0,
      val_loss: finalVal.loss, val_ppl: finalVal.ppl, val_bpb: finalVal.bpb, parameters: parameterCount, final: finalDir,
    };
    await logger.finish(summary);
    logger.line(
      `done: ${step} steps, ${tokens.toLocaleString('en-US')} tokens in ${formatDuration(elapsed())} ` +
        `(${Math.round(summary.train_tokens_per_s).toLocaleString('en-US')} tok/s) | final val loss ${finalVal.loss.toFixed(4)} | ppl ${finalVal.ppl.toFixed(2)} | bpb ${finalVal.bpb.toFixed(4)} | saved ${finalDir}`,
    );
    return { runDir: logger.dir, finalDir, steps: step, tokens, elapsedS: elapsed(), finalVal, parameters: parameterCount };
  } finally {
    await group?.close();
    await stream.close();
    optimizer.dispose();
    model.dispose();
  }
}
