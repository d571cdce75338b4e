// The training loop: one epoch over the training split (or the train.maxTokens budget), AdamW with
// warm-up + decay, global-norm clipping, gradient accumulation (the step itself: step.ts, run by a
// step executor), periodic logging and validation on a fixed token set, checkpoints, and the final save
// (src/store/model-folder.ts). The loop reads top to bottom in runTraining, calling the step executor and so AdamW
// (docs/execution.md); a TrainingRun holds what it needs between steps: counters (a RunState, run-state.ts, which
// checkpoints save and a resume restores), writers, validation and the end of the run.
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createLanguageModel } from '../model/lm.ts';
import type { LanguageModel, LanguageModelConfig } from '../model/lm.ts';
import { deriveSeed } from '../core/rng.ts';
import { TextTokenizer } from '../data/tokenizer.ts';
import { estimateEpoch } from '../data/epoch.ts';
import type { EpochEstimate } from '../data/epoch.ts';
import { openBatchStream } from '../data/stream.ts';
import type { BatchStream } from '../data/stream.ts';
import type { StreamOptions } from '../data/stream-options.ts';
import type { Batch } from '../data/batch.ts';
import { modelConfigFromRecipe } from '../recipe/model-config.ts';
import type { Recipe } from '../recipe/schema.ts';
import { RunLogger } from '../telemetry/run-logger.ts';
import type { TelemetrySink } from '../telemetry/sink.ts';
import { formatDuration, joinFields, progressFields } from '../telemetry/progress-bar.ts';
import type { AdamW, StepResult } from './optimizer.ts';
import { learningRate, resolveWarmup } from './schedule.ts';
import type { ScheduleOptions } from './schedule.ts';
import { collectEvalBatches, evaluate } from './evaluate.ts';
import type { EvalResult, EvalSample } from './evaluate.ts';
import { checkResumeCompatible, CheckpointWriter, loadCheckpoint, removeDeadSaves, restoreCheckpoint } from '../store/checkpoint.ts';
import type { LoadedCheckpoint } from '../store/checkpoint.ts';
import { CURSOR_FILE, FINAL_DIR, MODEL_FILE, SUMMARY_FILE } from '../store/layout.ts';
import type { TrainingSummary } from '../store/run-record.ts';
import { checkModelTensors } from '../store/model-check.ts';
import { saveFinalModel } from '../store/model-folder.ts';
import { lockRunFolder, runFolderOf } from '../store/run-folder.ts';
import { healthRecord, measureEstimatorHealth, type LayerHealth } from './estimator-health.ts';
import { prepareFinetune } from './finetune.ts';
import { plannedBatches, streamOptions } from './plan.ts';
import type { StepExecutor, StepExecutorContext, StepInputs } from './step-executor.ts';
import { RunState } from './run-state.ts';
import { startStepExecutor } from './step-executors/index.ts';
import { planAdamW, resolveExecutionPlan, type ExecutionPlan } from './execution-plan.ts';
import { TrainingStopped, type StopRequest } from './stop.ts';
import { utilisation, utilisationBasis, type UtilisationBasis } from './mfu.ts';
import { currentDevice } from '../backend/current.ts';
import type { Device } from '../backend/device.ts';
import { readback, readSince, type Readback } from '../backend/readback.ts';
import { barrier, checkSameOnEveryRank, currentCluster, type Cluster } from '../backend/collective.ts';

export interface TrainResult {
  runDir: string;
  finalDir: string;
  steps: number;
  tokens: number;
  elapsedS: number;
  finalVal: EvalResult;
  parameters: number;
}

/** What the loop needs from RunLogger (tests pass a recorder); the terminal's progress bar is optional. */
export type TrainLogger = Pick<RunLogger, 'dir' | 'log' | 'line' | 'finish'> & Partial<Pick<RunLogger, 'progress' | 'endProgress'>>;

/** What a run reads before it builds anything: tokenizer, plan of steps, validation batches, the checkpoint to resume. */
interface RunInputs {
  tokenizer: TextTokenizer;
  modelConfig: LanguageModelConfig;
  base: Omit<StreamOptions, 'split' | 'cursor'>;
  epoch: EpochEstimate;
  batchesPlanned: number;
  totalSteps: number;
  /** The validation sample every evaluation of the run reads (train.evalSample). */
  evalSample: EvalSample;
  resumed: LoadedCheckpoint | null;
  /** Recipe keys that differ from the resumed checkpoint's (accepted ones, e.g. train.lr). */
  changedKeys: string[];
}

async function readRunInputs(recipe: Recipe, resume: string | undefined, warn: (message: string) => void): Promise<RunInputs> {
  const tokenizer = await TextTokenizer.load(recipe.data.tokenizer);
  const modelConfig = modelConfigFromRecipe(recipe, tokenizer.vocabSize);
  const base = { ...streamOptions(recipe, tokenizer), onWarning: warn };
  const epoch = await estimateEpoch({ ...base, split: 'train' });
  const batchesPlanned = plannedBatches(recipe, epoch.batches);
  const totalSteps = Math.max(1, Math.ceil(batchesPlanned / recipe.train.gradAccum));
  const evalSample = await collectEvalBatches(base, recipe.train.evalTokens, recipe.train.evalSample);
  const resumed = resume ? await loadCheckpoint(resume) : null;
  const changedKeys = resumed ? checkResumeCompatible(resumed, recipe, tokenizer.sha256) : [];
  if (resumed) {
    checkModelTensors(modelConfig, resumed.weights, path.join(resumed.dir, MODEL_FILE));
    checkNotFinished(resumed, totalSteps);
  }
  return { tokenizer, modelConfig, base, epoch, batchesPlanned, totalSteps, evalSample, resumed, changedKeys };
}

/**
 * A checkpoint at the end of the plan resumes only to finish its run (final validation, final/, summary.json: the
 * process died after the last checkpoint); past the end, or when its run has finished, there is nothing to resume.
 */
function checkNotFinished(resumed: LoadedCheckpoint, totalSteps: number): void {
  const { step } = resumed.state;
  const advice = '(raise train.maxTokens to train longer)';
  if (step > totalSteps) {
    throw new Error(`checkpoint ${resumed.dir} is at step ${step}, past the end of this recipe's ${totalSteps} steps: nothing to resume ${advice}`);
  }
  const summary = resumed.runDir ? path.join(resumed.runDir, SUMMARY_FILE) : null;
  if (step === totalSteps && summary && existsSync(summary) && existsSync(path.join(resumed.runDir!, FINAL_DIR))) {
    throw new Error(
      `checkpoint ${resumed.dir} is at step ${step}, the end of this recipe's ${totalSteps} steps, and its run finished (${summary}): nothing to resume ${advice}`,
    );
  }
}

/** The model, its optimizer and the training stream of a run. */
interface RunParts {
  model: LanguageModel;
  optimizer: AdamW;
  finetune: Awaited<ReturnType<typeof prepareFinetune>>;
  stream: BatchStream;
  /** How the steps run (execution-plan.ts): the backend its command started, the executor, replicas, ranks … */
  plan: ExecutionPlan;
  /** What the plan's step executor starts from. */
  steps: StepExecutorContext;
}

/**
 * Builds the model (initFrom, freeze, or the resumed checkpoint's tensors), the optimizer and the training stream
 * (whose cursor is checked against the dataset). On any failure everything built so far is freed.
 */
async function buildRunParts(recipe: Recipe, inputs: RunInputs, device: Device, cluster: Cluster | null, line: (text: string) => void): Promise<RunParts> {
  const { resumed, tokenizer, base } = inputs;
  const model = createLanguageModel(inputs.modelConfig);
  let optimizer: AdamW | null = null;
  try {
    // initFrom and whitening are skipped on resume: the checkpoint restores every tensor.
    const finetune = await prepareFinetune(model, recipe, {
      tokenizerSha256: tokenizer.sha256,
      calibration: { ...base, split: 'train' },
      line,
      skipInit: resumed !== null,
    });
    const plan = resolveExecutionPlan(recipe.train, device, cluster, model);
    const { beta1, beta2, eps, weightDecay, decayEmbeddings } = recipe.train;
    optimizer = planAdamW(plan, finetune.trainable, { beta1, beta2, eps, weightDecay, decayEmbeddings });
    if (resumed) restoreCheckpoint(resumed, model, optimizer);
    const cursorFile = resumed ? path.join(resumed.dir, CURSOR_FILE) : undefined;
    const stream = await openBatchStream({ ...base, split: 'train', cursor: resumed?.cursor, cursorFile });
    return { model, optimizer, finetune, stream, plan, steps: { plan, model, optimizer, trainable: finetune.trainable } };
  } catch (err) {
    optimizer?.dispose();
    model.dispose();
    throw err;
  }
}

/** Where a run writes: its logger (metrics.jsonl, log.txt, the progress bar) and its checkpoints. */
interface RunWriters {
  logger: TrainLogger;
  checkpoints: CheckpointWriter;
}

/**
 * A run in progress: what runTraining's loop keeps between steps (its counters, a RunState continued from a
 * checkpoint when resuming; its writers; the step executor), the parts of a step around the executor's (beginStep,
 * endStep, logProgress, validate, saveCheckpoint), and the end of the run (finish()).
 */
class TrainingRun {
  readonly state: RunState;
  readonly writers: RunWriters;
  readonly schedule: ScheduleOptions;
  /** How the steps run (step-executor.ts); started by train(), closed by its caller through close(). */
  private executor: StepExecutor | null = null;
  /** What the last step read back from the backend's tensors into JavaScript (tensorflow; readback.ts). */
  private lastReadback: Readback | null = null;
  /** The readback count the log last stated (it is constant for a run: said once, and again only if it changes). */
  private statedReadback: number | null = null;
  /** Steps run by this process (its first step records the step program and builds its function). */
  private stepsInProcess = 0;
  private lastVal: { step: number; loss: number } | null = null;
  /** The model FLOPs per token and the peak its MFU is measured against (rank 0 only: the others log nothing). */
  private utilisation: UtilisationBasis | null = null;
  /** The step of the last checkpoint (the resumed one at first), kept on every rank: each takes part in the next one. */
  private lastCheckpointStep: number | null;

  constructor(
    private readonly recipe: Recipe,
    private readonly inputs: RunInputs,
    private readonly parts: RunParts,
    logger: TrainLogger,
    /** False on ranks other than 0 of a run across processes: they neither evaluate nor write anything. */
    private readonly leader = true,
  ) {
    this.state = new RunState(inputs.resumed?.state);
    this.lastCheckpointStep = inputs.resumed?.state.step ?? null;
    const { lr, minLr, schedule } = recipe.train;
    this.schedule = { lr, minLr, schedule, warmupSteps: resolveWarmup(recipe.train, inputs.totalSteps).steps, totalSteps: inputs.totalSteps };
    const { tokenizer } = inputs;
    const checkpoints = new CheckpointWriter(logger.dir, recipe, { path: tokenizer.path, sha256: tokenizer.sha256 }, inputs.resumed, (t) => logger.line(t));
    this.writers = { logger, checkpoints };
  }

  get parameterCount(): number {
    return [...this.parts.model.parameters().values()].reduce((n, v) => n + v.size, 0);
  }

  /**
   * Starts the step executor (after initFrom and restore: an executor that keeps state elsewhere receives the weights
   * as they now are), states the MFU basis and validates the model before training (step 0; the loaded one when
   * finetuning), so that curves start where training did. A resumed run (step > 0) has that record already.
   */
  async start(): Promise<StepExecutor> {
    const executor = await startStepExecutor(this.parts.steps);
    this.executor = executor;
    const { logger } = this.writers;
    if (this.leader) {
      const { backend, replicas, cluster } = this.parts.plan;
      this.utilisation = await utilisationBasis(this.inputs.modelConfig, this.recipe.data, { device: backend, executor, replicas, cluster });
      const { flopsPerToken, peak } = this.utilisation;
      logger.line(
        `model FLOPs ${(flopsPerToken / 1e6).toFixed(1)} M per trained token (forward and backward; docs/training.md); MFU against ${peak ? `${formatFlops(peak.flopsPerSecond)}: ${peak.source}` : 'no known peak of this device: not logged'}`,
      );
      if (this.state.step === 0 && (this.parts.finetune.initFrom !== null || this.recipe.train.evalInterval > 0)) await this.validate();
    }
    // The first steps of a process build the backend's kernels (and, on tensorflow, the step graph): seconds of silence.
    if (this.state.step < this.inputs.totalSteps) logger.line(`compiling the first steps… (a progress line every ${this.recipe.train.logInterval} steps)`);
    return executor;
  }

  /** Up to train.gradAccum batches of the stream, within the plan. */
  async nextMicroBatches(): Promise<Batch[]> {
    const micro: Batch[] = [];
    while (micro.length < this.recipe.train.gradAccum && this.state.batchesSeen < this.inputs.batchesPlanned) {
      const batch = await this.parts.stream.next();
      if (!batch) break;
      micro.push(batch);
      this.state.batchesSeen++;
    }
    return micro;
  }

  /** The inputs of the next step at learning rate `lr`, and when it began (endStep measures it). */
  beginStep(lr: number, stopRequested: boolean): { inputs: StepInputs; began: { t0: number; readBefore: Readback } } {
    const { recipe, state } = this;
    this.parts.model.onTrainStep(state.step);
    const dropoutSeed = this.inputs.modelConfig.dropout > 0 ? deriveSeed(recipe.train.seed, `dropout/${state.step}`) : null;
    return { inputs: { lr, clip: recipe.train.clip, dropoutSeed, stopRequested }, began: { t0: performance.now(), readBefore: readback() } };
  }

  /** After a step: the skip rule for a NaN/Inf one, the counters it moves, the progress bar. */
  endStep(micro: Batch[], result: StepResult, began: { t0: number; readBefore: Readback }): void {
    const { recipe, parts, state } = this;
    const seconds = (performance.now() - began.t0) / 1000;
    if (parts.plan.backend.native) this.lastReadback = readSince(began.readBefore);
    if (!result.applied) this.dropUpdate(result);
    // The first step of a process records its program and builds its function (backend/tf-graph.ts): say how it ran.
    if (++this.stepsInProcess === 1) {
      const how = this.executor!.describe(micro[0]);
      if (how) this.writers.logger.line(how);
    }
    state.stepped(result, micro.length * recipe.train.batchSize * recipe.data.seqLen, seconds);
    const epochFraction = state.epochFraction(this.inputs.epoch.batches);
    this.writers.logger.progress?.({ step: state.step, totalSteps: this.inputs.totalSteps, epochFraction, loss: result.applied ? result.loss : null });
  }

  /** A NaN/Inf step (nothing was updated): train.nanPolicy and train.nanSkipLimit decide whether the run ends. */
  private dropUpdate(result: StepResult): void {
    const { state } = this;
    const { nanPolicy, nanSkipLimit } = this.recipe.train;
    const what = `step ${state.step + 1}: loss ${result.loss}, gradient norm ${result.gradNorm}`;
    const lastDir = this.writers.checkpoints.lastDir;
    const last = lastDir ? `the last good checkpoint is ${lastDir}` : 'no checkpoint was saved yet';
    if (nanPolicy === 'stop') {
      throw new Error(`training diverged at ${what}; the update was not applied and ${last} (train.nanPolicy: skip drops such updates instead)`);
    }
    state.skipped();
    if (state.consecutiveSkips >= nanSkipLimit) {
      throw new Error(
        `training diverged: ${state.consecutiveSkips} updates in a row were dropped (steps ${state.step + 2 - state.consecutiveSkips}–${state.step + 1}, the last with ${what.slice(what.indexOf(':') + 2)}; ` +
          `train.nanSkipLimit ${nanSkipLimit}); ${last}`,
      );
    }
    this.writers.logger.line(
      `warning: ${what}; update dropped (train.nanPolicy: skip; ${state.skippedSteps} dropped so far, ${state.consecutiveSkips} in a row)`,
    );
  }

  /** The train record and progress line of the logging window that ends at this step. */
  logProgress(lr: number, gradNorm: number): void {
    const { state } = this;
    const { logger } = this.writers;
    const { step, tokens } = state;
    const { totalSteps, epoch } = this.inputs;
    const window = state.takeWindow();
    const loss = window.loss / window.steps;
    const rate = window.tokens / window.seconds;
    const fraction = state.epochFraction(epoch.batches);
    const used = this.utilisation ? utilisation(this.utilisation, rate) : null;
    logger.log({
      step,
      tokens,
      split: 'train',
      loss,
      ppl: Math.exp(loss),
      lr,
      grad_norm: gradNorm,
      tokens_per_s: rate,
      elapsed_s: state.elapsed(),
      epoch_fraction: fraction,
      ...(this.lastReadback ? { readback_values: this.lastReadback.values, readback_bytes: this.lastReadback.bytes } : {}),
      ...(used ? { model_flops_per_s: used.flopsPerSecond, ...(used.mfu === null ? {} : { mfu: used.mfu }) } : {}),
    });
    const eta = ((totalSteps - step) * window.seconds) / window.steps;
    if (this.lastReadback && this.lastReadback.values !== this.statedReadback) {
      this.statedReadback = this.lastReadback.values;
      logger.line(
        `host reads ${this.lastReadback.values} values/step from the device (${this.lastReadback.bytes} bytes; metrics.jsonl: readback_values, readback_bytes)`,
      );
    }
    const fields = progressFields({ step, totalSteps, epochFraction: fraction, loss, lr, gradNorm, tokensPerS: rate, etaS: eta, mfu: used?.mfu ?? null });
    logger.line(joinFields(fields), fields);
  }

  async validate(): Promise<EvalResult> {
    const { state } = this;
    const { logger } = this.writers;
    const { batches, documents } = this.inputs.evalSample;
    const result = this.executor
      ? await this.executor.evaluate(batches, true)
      : await evaluate(this.parts.model, batches, this.parts.plan.gradients === 'recorded', true);
    const health = this.recipe.train.estimatorHealth ? await this.estimatorHealth() : null;
    const { step, tokens, trainSeconds } = state;
    logger.log({
      step,
      tokens,
      split: 'val',
      loss: result.loss,
      ppl: result.ppl,
      lr: learningRate(Math.max(0, step - 1), this.schedule),
      grad_norm: null,
      tokens_per_s: trainSeconds > 0 ? tokens / trainSeconds : 0,
      elapsed_s: state.elapsed(),
      bpb: result.bpb,
      acc: result.accuracy,
      epoch_fraction: state.epochFraction(this.inputs.epoch.batches),
      ...(health ? { estimator_health: healthRecord(health) } : {}),
      ...(result.byPosition
        ? { by_position: result.byPosition.map(({ from, to, loss, tokens }) => ({ from, to, loss: Number.isFinite(loss) ? loss : null, tokens })) }
        : {}),
    });
    this.lastVal = { step, loss: result.loss };
    logger.line(
      `val   step ${step}: loss ${result.loss.toFixed(4)} | ppl ${result.ppl.toFixed(2)} | bpb ${result.bpb.toFixed(4)} | acc ${result.accuracy.toFixed(4)} (${result.tokens} tokens of ${documents} documents)`,
    );
    return result;
  }

  /**
   * Estimator health on the first validation sequence, with the weights as they are now: an executor holding them
   * elsewhere (XLA's child) hands them over first. Across processes every rank holds them already, and the pull would
   * be a collective that only this rank joins.
   */
  private async estimatorHealth(): Promise<LayerHealth[] | null> {
    if (!this.parts.plan.cluster) await this.executor?.pull();
    const health = measureEstimatorHealth(this.parts.model, this.inputs.evalSample.batches[0]);
    if (health) {
      const worst = health.reduce((a, b) => (b.kernelError > a.kernelError ? b : a));
      this.writers.logger.line(
        `estimator health: kernel error ${worst.kernelError.toFixed(3)} (worst layer), denominator ratio min ${Math.min(...health.map((h) => h.denominatorMin)).toFixed(3)}`,
      );
    }
    return health;
  }

  /** Rank 0 writes a checkpoint; every rank calls this at the same steps, since the pull may gather from all of them. */
  async saveCheckpoint(): Promise<void> {
    await this.executor?.pull();
    const { state } = this;
    this.lastCheckpointStep = state.step;
    if (!this.leader) return;
    const valLoss = this.lastVal?.step === state.step ? this.lastVal.loss : null;
    await this.writers.checkpoints.save(this.parts.model, this.parts.optimizer, this.parts.stream.cursor(), state.counters(), valLoss);
  }

  /** What a rank other than 0 returns: it measures and writes nothing. */
  rankResult(): TrainResult {
    const { step, tokens } = this.state;
    const unmeasured = { loss: NaN, ppl: NaN, bpb: NaN, accuracy: NaN, tokens: 0, bytes: 0 };
    return { runDir: '', finalDir: '', steps: step, tokens, elapsedS: this.state.elapsed(), finalVal: unmeasured, parameters: this.parameterCount };
  }

  /** Final validation, the last checkpoint, final/ and summary.json. */
  async finish(): Promise<TrainResult> {
    const { recipe, state } = this;
    const { logger } = this.writers;
    const { step, tokens, trainSeconds } = state;
    if (!this.leader) {
      // Rank 0's last checkpoint and its final weights pull from every rank, as below.
      if (this.lastCheckpointStep !== step) await this.saveCheckpoint();
      await this.executor?.pull();
      return this.rankResult();
    }
    const finalVal = await this.validate();
    if (this.lastCheckpointStep !== step) await this.saveCheckpoint(); // else resumed at the end: that checkpoint is this step's
    await this.executor?.pull();
    const finalDir = await saveFinalModel(
      logger.dir,
      this.parts.model,
      recipe,
      { tokenizer_sha256: this.inputs.tokenizer.sha256, step: String(step), ...this.parts.finetune.metadata },
      this.inputs.tokenizer,
      (text) => logger.line(text),
    );
    const parameters = this.parameterCount;
    const summary: TrainingSummary = {
      steps: step,
      tokens,
      elapsed_s: state.elapsed(),
      train_tokens_per_s: trainSeconds > 0 ? tokens / trainSeconds : 0,
      val_loss: finalVal.loss,
      val_ppl: finalVal.ppl,
      val_bpb: finalVal.bpb,
      val_acc: finalVal.accuracy,
      parameters,
      final: path.relative(logger.dir, finalDir),
      ...this.summaryUtilisation(trainSeconds > 0 ? tokens / trainSeconds : 0),
    };
    await logger.finish(summary);
    logger.line(
      `done: ${step} steps, ${tokens.toLocaleString('en-US')} tokens in ${formatDuration(state.elapsed())} ` +
        `(${Math.round(summary.train_tokens_per_s).toLocaleString('en-US')} tok/s) | final val loss ${finalVal.loss.toFixed(4)} | ppl ${finalVal.ppl.toFixed(2)} | bpb ${finalVal.bpb.toFixed(4)} | acc ${finalVal.accuracy.toFixed(4)} | saved ${finalDir}`,
    );
    return { runDir: logger.dir, finalDir, steps: step, tokens, elapsedS: state.elapsed(), finalVal, parameters };
  }

  /** summary.json's MFU fields: the whole run's rate against the basis (nothing when it has none, as on the other ranks). */
  private summaryUtilisation(tokensPerSecond: number): Partial<TrainingSummary> {
    if (!this.utilisation) return {};
    const { flopsPerToken, peak } = this.utilisation;
    const { mfu } = utilisation(this.utilisation, tokensPerSecond);
    return { model_flops_per_token: flopsPerToken, ...(peak && mfu !== null ? { peak_flops_per_s: peak.flopsPerSecond, mfu } : {}) };
  }

  async close(): Promise<void> {
    this.writers.logger.endProgress?.();
    await this.executor?.close();
    await closeRunParts(this.parts);
  }
}

/**
 * Trains `recipe` from scratch: progress lines and metrics.jsonl through RunLogger, validation every
 * train.evalInterval steps and at the end, final weights in <run>/final/. The backend must already
 * be initialised (initBackend). train.maxTokens counts input tokens (batchSize × seqLen per batch)
 * and is capped at one epoch; tokens/s counts input tokens too (BERT: not only the masked ones).
 * Checkpoints (src/store/checkpoint.ts) every train.checkpointInterval steps and at the end; `resume` continues exactly from
 * one in its own run folder (in a new run folder when the checkpoint is not inside a run; a checkpoint at the plan's
 * last step finishes its run); `stop.signal` set = save a checkpoint after the current step and throw TrainingStopped.
 * Nothing is written, and nothing stays allocated, when a check fails before the first step.
 */
export async function runTraining(recipe: Recipe, opts: TrainOptions = {}): Promise<TrainResult> {
  // Where the run trains, read once here when its command did not hand it over; the plan carries both from here on.
  const device = opts.device ?? currentDevice();
  const cluster = opts.cluster === undefined ? currentCluster() : opts.cluster;
  const leader = isLeader(cluster);
  // config.json, the checkpoints' recipe.json and W&B record the backend that runs, not the recipe's `auto`, and
  // the number of ranks that run, whether --processes, srun or the recipe asked for them.
  recipe = { ...recipe, backend: device.backend, train: { ...recipe.train, processes: cluster?.worldSize ?? 1 } };
  // A resume locks the run folder it continues before reading anything (src/store/run-folder.ts): a second resume of
  // the same run is refused at once, not after it loaded its data. A caller's own logger owns its folder.
  const resumedRun = opts.resume !== undefined && !opts.logger && leader ? runFolderOf(opts.resume).runDir : null;
  const unlocks = resumedRun ? [lockRunFolder(resumedRun)] : [];
  let parts: RunParts | null = null;
  let run: TrainingRun | null = null;
  try {
    // Everything that can refuse the run is checked before its folder exists; lines wait for the logger.
    const lines = deferredLines();
    const inputs = await readRunInputs(recipe, opts.resume, (message) => lines.line(`warning: ${message}`));
    if (cluster) checkSameOnEveryRank(cluster, 'recipe and data fingerprint', runFingerprint(recipe, inputs));
    parts = await buildRunParts(recipe, inputs, device, cluster, lines.line);
    checkEstimatorHealth(recipe, parts.model);
    let logger = opts.logger ?? (leader ? undefined : silentLogger());
    if (!logger) {
      const opened = await openRunLogger(recipe, inputs.resumed, inputs.totalSteps, device, opts.sinks);
      ({ logger } = opened);
      unlocks.push(opened.unlock);
    }
    lines.attach(logger);
    run = new TrainingRun(recipe, inputs, parts, logger, leader);
    logStart(recipe, inputs, parts, logger, run.parameterCount);
    if (opts.beforeTraining && !inputs.resumed && leader) await opts.beforeTraining(parts.model, inputs.evalSample.batches);

    // The loop: learning rate → micro-batches → step → log, validation, checkpoint, until the plan or the data ends.
    const executor = await run.start();
    const { state } = run;
    const { totalSteps } = inputs;
    const { logInterval, evalInterval, checkpointInterval } = recipe.train;
    const due = (interval: number) => interval > 0 && state.step % interval === 0;
    // The stop request as last read: once per step, after the event loop turned (below).
    let requested: NodeJS.Signals | null = null;
    while (state.step < totalSteps) {
      const lr = learningRate(state.step, run.schedule);
      const micro = await run.nextMicroBatches();
      if (micro.length === 0) break; // the epoch ended before the estimate said
      const { inputs: stepInputs, began } = run.beginStep(lr, requested !== null);
      const result = await executor.step(micro, stepInputs);
      run.endStep(micro, result, began);
      if ((due(logInterval) || state.step === totalSteps) && state.window.steps > 0) run.logProgress(lr, result.gradNorm);
      if (leader && due(evalInterval) && state.step < totalSteps) await run.validate();
      // Signal handlers (Ctrl-C) run only when the event loop turns, and on the cpu and wasm backends a step
      // never waits for I/O: give the loop one turn per step, or a stop request is seen only at the end.
      await new Promise((resolve) => setImmediate(resolve));
      // A stop asked for during the last step just lets the run finish (final validation and save follow). Across
      // ranks the step's all-reduce says whether a stop was asked before it, so that every rank checkpoints together.
      requested ??= opts.stop?.signal ?? null;
      const stopping = state.step < totalSteps && (result.stopRequested ?? requested !== null);
      if (stopping || (due(checkpointInterval) && state.step < totalSteps)) await run.saveCheckpoint();
      if (!stopping) continue;
      // Only rank 0 handles signals (src/cli/train.ts), so only its request can have stopped the run.
      if (leader) throw new TrainingStopped(requested!, state.step, run.writers.checkpoints.lastDir!, logger.dir);
      // The others have given their part of the checkpoint and end now, cleanly: one still waiting in a collective
      // would fail as rank 0 leaves, and the launcher could take that failure for the run's end.
      return run.rankResult();
    }

    const result = await run.finish();
    // The other ranks wait here while rank 0 validates and saves, so that no rank's end looks like a failure to the others.
    if (cluster) barrier(cluster);
    return result;
  } finally {
    if (run) await run.close();
    else if (parts) await closeRunParts(parts);
    for (const unlock of unlocks.reverse()) unlock();
  }
}

export interface TrainOptions {
  logger?: TrainLogger;
  /** A checkpoint folder to continue from (see src/store/resolve.ts). */
  resume?: string;
  stop?: StopRequest;
  /** The device its command started (src/cli/backend-option.ts startBackend); else the running backend's. */
  device?: Device;
  /** The cluster its command joined (src/cli/train.ts), null = none; else the one this process joined, if any (backend/collective.ts). */
  cluster?: Cluster | null;
  /**
   * Sees a new run's model after initFrom and the data-dependent init, before step 0, with the validation batches
   * (the experiments' diagnostics, src/paper/attention-measures.ts); it must leave the model as it found it.
   */
  beforeTraining?: (model: LanguageModel, evalBatches: readonly Batch[]) => Promise<void>;
  /** Telemetry sinks of the caller's, after the run's own (src/telemetry/sink.ts). */
  sinks?: readonly TelemetrySink[];
}

/**
 * In a run across processes (backend/collective.ts), rank 0 leads: it alone writes the run folder, logs,
 * evaluates and checkpoints; the other ranks only take part in the steps (docs/distributed.md).
 */
function isLeader(cluster: Cluster | null): boolean {
  return cluster === null || cluster.rank === 0;
}

/** What every rank of a run across processes must agree on: the recipe, the tokenizer, the data as the plan read it, where it resumes. */
function runFingerprint(recipe: Recipe, inputs: RunInputs): string {
  const { train, ...rest } = recipe;
  const { processes: _ranks, joinTimeout: _deadline, ...trainKeys } = train; // how many ranks, and how long they wait to meet, are not the run's
  const data = {
    tokenizer: inputs.tokenizer.sha256,
    epoch: [inputs.epoch.tokens, inputs.epoch.batches],
    eval: inputs.evalSample.batches.length,
    resumedAt: inputs.resumed?.state.step ?? null,
  };
  return createHash('sha256')
    .update(JSON.stringify({ recipe: { ...rest, train: trainKeys }, data }))
    .digest('hex')
    .slice(0, 16);
}

/** train.estimatorHealth needs a mechanism that declares the kernel its features estimate (KernelEstimate). */
function checkEstimatorHealth(recipe: Recipe, model: LanguageModel): void {
  if (!recipe.train.estimatorHealth || model.body.attention.every((a) => a.kernel)) return;
  throw new Error(
    `train.estimatorHealth: attention '${recipe.model.attention.name}' declares no kernel estimate (its exact kernel), so there is nothing to measure; set it to false`,
  );
}

/** The logger of a rank other than 0: it writes nothing (rank 0 keeps the run's one set of logs). */
function silentLogger(): TrainLogger {
  return { dir: '', log: () => {}, line: () => {}, finish: async () => {} };
}

/** A line function whose lines wait until a logger is attached (the run folder does not exist before the checks pass). */
function deferredLines(): { line: (text: string) => void; attach: (logger: TrainLogger) => void } {
  const pending: string[] = [];
  let target: TrainLogger | null = null;
  return {
    line: (text) => (target ? target.line(text) : pending.push(text)),
    attach: (logger) => {
      target = logger;
      for (const text of pending.splice(0)) logger.line(text);
    },
  };
}

/**
 * The run folder: the checkpoint's own when it is inside a run (runTraining locked it already), else a new one, locked
 * for this process here (src/store/run-folder.ts). Returns the logger and the release of the lock taken here.
 */
async function openRunLogger(
  recipe: Recipe,
  resumed: LoadedCheckpoint | null,
  totalSteps: number,
  device: Device,
  sinks?: readonly TelemetrySink[],
): Promise<{ logger: TrainLogger; unlock: () => void }> {
  if (resumed?.runDir) {
    const logger = await RunLogger.create(recipe, {
      resumeDir: resumed.runDir,
      resumeStep: resumed.state.step,
      finishing: resumed.state.step === totalSteps,
      device,
      sinks,
    });
    // What saves killed mid-way left (on a full disk, the space the run needs) goes before the run writes again.
    for (const dir of await removeDeadSaves(resumed.runDir)) logger.line(`removed ${dir}: left by a save whose process died`);
    return { logger, unlock: () => {} };
  }
  const logger = await RunLogger.create(recipe, { device, sinks });
  const unlock = lockRunFolder(logger.dir);
  if (resumed) {
    logger.line(`checkpoint ${resumed.dir} ${resumed.outsideRun}: continuing in the new run folder ${logger.dir}; nothing is written next to the checkpoint`);
  }
  return { logger, unlock };
}

function logStart(recipe: Recipe, inputs: RunInputs, parts: RunParts, logger: TrainLogger, parameterCount: number): void {
  const { modelConfig, totalSteps, epoch, resumed } = inputs;
  const { batchSize, gradAccum } = recipe.train;
  logger.line(
    `model ${modelConfig.kind} ${modelConfig.attention.name}: ${(parameterCount / 1e6).toFixed(2)}M parameters, vocab ${modelConfig.vocabSize}; ` +
      `${totalSteps} steps of ${(batchSize * gradAccum * recipe.data.seqLen).toLocaleString('en-US')} tokens ` +
      `(batchSize ${batchSize} × gradAccum ${gradAccum} × seqLen ${recipe.data.seqLen}; ${describeEpoch(epoch)}); backend ${parts.plan.backend.backend}` +
      (parts.plan.executor === 'replicas' ? `, ${parts.plan.replicas} data-parallel replicas` : ''),
  );
  const evalTokens = inputs.evalSample.batches.reduce((sum, batch) => sum + batch.tokens, 0).toLocaleString('en-US');
  const what =
    recipe.train.evalSample === 'spread'
      ? `${evalTokens} labelled tokens drawn across the validation split`
      : `the validation split's first ${evalTokens} labelled tokens`;
  logger.line(`validation: ${what} (train.evalSample: ${recipe.train.evalSample}), from ${inputs.evalSample.documents.toLocaleString('en-US')} documents`);
  const { warning } = resolveWarmup(recipe.train, totalSteps);
  if (warning) logger.line(`warning: ${warning}`);
  if (resumed) {
    const changed = inputs.changedKeys.length ? ` (recipe keys changed since: ${inputs.changedKeys.join(', ')})` : '';
    const finishing = resumed.state.step === totalSteps ? '; it is the last step of the plan: finishing the run (final validation, final/, summary.json)' : '';
    logger.line(`resumed from ${resumed.dir} at step ${resumed.state.step}${changed}${finishing}`);
  }
}

/** "38.2 TFLOP/s", "95.1 GFLOP/s". */
function formatFlops(flopsPerSecond: number): string {
  return flopsPerSecond >= 1e12 ? `${(flopsPerSecond / 1e12).toFixed(1)} TFLOP/s` : `${(flopsPerSecond / 1e9).toFixed(1)} GFLOP/s`;
}

/** "epoch 1,234 tokens" or, estimated, "epoch ≈ 1,234 tokens, estimated from the first 2,000 documents (5.1 MB) of 812 MB of text". */
export function describeEpoch(epoch: EpochEstimate): string {
  const n = (x: number) => x.toLocaleString('en-US');
  if (epoch.exact) return `epoch ${n(epoch.tokens)} tokens`;
  const mb = (bytes: number) => `${(bytes / 1e6).toFixed(1)} MB`;
  const of = epoch.splitBytes === null ? 'of the split (scaled by rows)' : `of ${mb(epoch.splitBytes)} of text`;
  return `epoch ≈ ${n(epoch.tokens)} tokens, estimated from the first ${n(epoch.sample.documents)} documents (${mb(epoch.sample.bytes)}) ${of}`;
}

async function closeRunParts(parts: RunParts): Promise<void> {
  await parts.stream.close();
  parts.optimizer.dispose();
  parts.model.dispose();
}
