// The run logger: makes a run folder and writes what the run reports into it. A run folder
// `<train.runDir>/<name>-<YYYYMMDD-HHMMSS>/` holds
//   .slayformer-run  the marker that makes it a run folder (a random run id, see src/store/run-folder.ts)
//   config.json    the resolved recipe (rewritten when the run is resumed)
//   env.json       where it came from and ran (environment.ts): the git commit (and whether the tree was dirty), the
//                  versions of Node, tfjs and the backend (TensorFlow's, on the tensorflow backend), the CPU, memory, command line,
//                  start time, and the data paths both absolute and relative to the run folder (a moved run folder
//                  still finds data that moved with it); each resume appends its own entry under `resumes`
//   metrics.jsonl  one JSON object per record (MetricRecord, src/store/run-record.ts), the source of truth for curves (validation
//                  adds bpb and acc)
//   log.txt        the progress lines and warnings printed during the run, each line after its ISO time
//   events.out.tfevents.<seconds>.slayformer   the metric records as TensorBoard events (tensorboard.ts), unless
//                  tensorboard.enabled is false
//   wandb.json     the fixed W&B run id/project/entity and upload status (see src/telemetry/wandb.ts)
//   summary.json   written by finish() (TrainingSummaryRecord, src/store/run-record.ts), with the process's peak
//                  resident memory (peak_rss_bytes)
// Every file is written without following a symbolic link at its name (src/core/own-file.ts): a link planted in a
// shared run folder is refused, naming it, never written through.
// Progress lines go to stdout, warnings to stderr; on a terminal, with a live progress bar below them (progress-bar.ts).
// Records, lines and steps reach the terminal, log.txt, metrics.jsonl, TensorBoard and W&B as a list of sinks (sink.ts),
// made in one place (RunLogger.runSinks); a caller adds its own after them (RunLoggerOptions.sinks).
import fs from 'node:fs';
import path from 'node:path';
import { makeFolders } from '../core/folders.ts';
import { assertNotLink, replaceOwnFile } from '../core/own-file.ts';
import type { Device } from '../backend/device.ts';
import type { Recipe, WandbSection } from '../recipe/schema.ts';
import { ENV_FILE, LOG_FILE, METRICS_FILE, RUN_CONFIG_FILE, SUMMARY_FILE } from '../store/layout.ts';
import { assertRunFolder, markRunFolder, RunFolder, runFolderPrefix } from '../store/run-folder.ts';
import { environmentRecord } from './environment.ts';
import type { LineField, StepProgress } from './progress-bar.ts';
import { checkRecord, writeSummary, type MetricRecord, type TrainingSummary } from '../store/run-record.ts';
import { ConsoleSink, LogFileSink, MetricsJsonlSink, type TelemetrySink } from './sink.ts';
import { assertNoLinkedEventFile, TensorBoardWriter } from './tensorboard.ts';
import {
  newWandbInfo,
  offlineModeLine,
  readWandbInfo,
  replayCommand,
  wandbDecision,
  WandbTelemetrySink,
  WANDB_INFO_FILE,
  writeWandbInfo,
  type WandbRunInfo,
} from './wandb.ts';

export interface RunLoggerOptions {
  /** Parent folder of the new run folder (default recipe.train.runDir). */
  runDir?: string;
  /** Continue this existing run folder instead of making a new one. */
  resumeDir?: string;
  /** With resumeDir: the step of the checkpoint resumed from; records after it (logged before the crash but
   *  not covered by the checkpoint) are dropped so metrics.jsonl stays one consistent history. */
  resumeStep?: number;
  /** With resumeStep: that checkpoint is the run's last step and the run is being finished, which validates at that
   *  step again, so a validation record already logged there is dropped too. */
  finishing?: boolean;
  /** Print progress lines (default true; tests turn it off). */
  echo?: boolean;
  /** Seconds to wait for W&B to flush at finish() (default 60). */
  wandbFinishTimeoutS?: number;
  /** Where progress lines are echoed (default process.stdout); when it is a terminal, lines fit its width and the bar shows. */
  terminal?: NodeJS.WriteStream;
  /** The device the run trains on, for env.json (default: the running backend's). */
  device?: Device;
  /** Sinks of the caller's, after the run's own (runSinks): each gets what they get, a record once metrics.jsonl holds it. */
  sinks?: readonly TelemetrySink[];
}

export class RunLogger {
  readonly dir: string;
  private records = 0;
  /** Where everything goes (sink.ts), built once by runSinks. Training's main thread makes the one logger of a run
   *  (data-parallel replicas log nothing), so one process writes the run's files. */
  private sinks: readonly TelemetrySink[] = [];
  private finished = false;

  private constructor(dir: string) {
    this.dir = dir;
  }

  /**
   * Makes (or, with resumeDir, reopens) the run folder, writes config.json and env.json, starts the sinks (W&B if
   * enabled). A resumed folder must carry the run marker (src/store/run-folder.ts), and everything it holds that a
   * resume reads is read and checked before its first byte changes.
   */
  static async create(recipe: Recipe, opts: RunLoggerOptions = {}): Promise<RunLogger> {
    const dir = opts.resumeDir ? path.resolve(opts.resumeDir) : makeRunDir(opts.runDir ?? recipe.train.runDir, recipe.name);
    if (opts.resumeDir) {
      if (!fs.statSync(dir, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`${dir}: the run folder to resume does not exist`);
      assertRunFolder(dir, 'resume in');
      for (const name of [RUN_CONFIG_FILE, ENV_FILE, METRICS_FILE, LOG_FILE, WANDB_INFO_FILE, SUMMARY_FILE]) assertNotLink(path.join(dir, name));
      assertNoLinkedEventFile(dir);
    }
    const logger = new RunLogger(dir);
    const kept = opts.resumeDir ? logger.recordsToKeep(opts.resumeStep, opts.finishing ?? false) : [];
    // A resumed run keeps its W&B id; until finish() confirms an upload, the folder is 'pending'.
    const stored = fs.existsSync(path.join(dir, WANDB_INFO_FILE)) ? readWandbInfo(dir) : newWandbInfo(recipe.wandb, dir);
    const env = await environmentRecord(dir, recipe, { resumedAtStep: opts.resumeDir ? (opts.resumeStep ?? null) : undefined, device: opts.device });

    writeJson(path.join(dir, RUN_CONFIG_FILE), recipe);
    writeJson(path.join(dir, ENV_FILE), env);
    const info: WandbRunInfo = { ...stored, status: 'pending', reason: undefined };
    writeWandbInfo(dir, info);
    logger.sinks = [...logger.runSinks(recipe, info, opts), ...(opts.sinks ?? [])];
    for (const sink of logger.sinks) sink.start?.(kept);
    const wandbNote = wandbOffNote(recipe.wandb, dir);
    if (wandbNote) logger.line(wandbNote);
    return logger;
  }

  /** The run's own sinks, in the order each gets what is reported: the one place the list is made (sink.ts). */
  private runSinks(recipe: Recipe, info: WandbRunInfo, opts: RunLoggerOptions): TelemetrySink[] {
    const sinks: TelemetrySink[] = [];
    if (opts.echo ?? true) sinks.push(new ConsoleSink(opts.terminal));
    sinks.push(new LogFileSink(this.dir), new MetricsJsonlSink(this.dir, opts.resumeDir !== undefined));
    if (recipe.tensorboard.enabled) sinks.push(new TensorBoardWriter(this.dir));
    if (wandbDecision(recipe.wandb).enabled) {
      sinks.push(
        new WandbTelemetrySink(this.dir, info, recipe, opts.wandbFinishTimeoutS ?? 60, {
          onReady: (url) => this.line(`W&B run: ${url}`),
          onProblem: (reason) =>
            this.warn(
              `W&B: ${reason}. Training goes on; the metrics are kept in ${path.join(this.dir, METRICS_FILE)}; upload them later with: ${replayCommand(this.dir)}`,
            ),
        }),
      );
    }
    return sinks;
  }

  /** Checks one record and hands it to every sink: metrics.jsonl first (synchronously, so a crash loses nothing), TensorBoard, W&B, the caller's. */
  log(record: MetricRecord): void {
    checkRecord(record, 'RunLogger.log');
    for (const sink of this.sinks) sink.record?.(record);
    this.records += 1;
  }

  /**
   * A progress line: stdout (above the progress bar, on a terminal) and log.txt. `fields`, when given, are the line's
   * parts (`text` joins them): a terminal gets as many as fit its width (progress-bar.ts fitFields), log.txt all.
   */
  line(text: string, fields?: readonly LineField[]): void {
    for (const sink of this.sinks) sink.line?.(text, fields);
  }

  /** A warning: stderr (above the progress bar, on a terminal) and log.txt. */
  warn(text: string): void {
    for (const sink of this.sinks) sink.warn?.(text);
  }

  /** After each step: on a terminal (the terminal stream's isTTY), the live progress bar; elsewhere nothing (the lines suffice). */
  progress(p: StepProgress): void {
    for (const sink of this.sinks) sink.progress?.(p);
  }

  /** Removes the progress bar, if any (at the end of training, or when it fails). */
  endProgress(): void {
    for (const sink of this.sinks) sink.flush?.();
  }

  /** Writes summary.json and closes the sinks (W&B flushes and finishes; never throws for W&B problems). Idempotent. */
  async finish(summary: TrainingSummary): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    this.endProgress();
    // maxRSS is in KiB: the peak of the whole process, replica threads included (not a GPU's memory).
    const peakRss = process.resourceUsage().maxRSS * 1024;
    writeSummary(this.dir, { ...summary, records: this.records, peak_rss_bytes: peakRss, finished_at: new Date().toISOString() });
    for (const sink of this.sinks) await sink.close?.();
  }

  /** The records a resume keeps: those up to resumeStep (all if undefined; see `finishing`). */
  private recordsToKeep(resumeStep: number | undefined, finishing: boolean): MetricRecord[] {
    const run = RunFolder.at(this.dir);
    const records = run.has(METRICS_FILE) ? run.metrics() : [];
    const kept =
      resumeStep === undefined ? records : records.filter((r) => r.step < resumeStep || (r.step === resumeStep && !(finishing && r.split === 'val')));
    this.records = kept.length;
    return kept;
  }
}

/** What a run whose records do not go to W&B says about it at its start, when anything (see wandbDecision). */
function wandbOffNote(wandb: WandbSection, dir: string): string | null {
  const decision = wandbDecision(wandb);
  if (decision.enabled) return null;
  if (process.env.WANDB_MODE === 'offline' && wandb.enabled !== false) return offlineModeLine(dir);
  if (wandb.enabled === true || process.env.WANDB_MODE === 'offline') return `W&B off (${decision.reason}); to upload this run later: ${replayCommand(dir)}`;
  return null;
}

/** `<parent>/<name>-<YYYYMMDD-HHMMSS>` (UTC), with -2, -3, … if two runs start in the same second. */
export function makeRunDir(parent: string, name: string): string {
  makeFolders(parent);
  const stamp = new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  const base = path.resolve(parent, `${runFolderPrefix(name)}-${stamp}`);
  for (let n = 1; ; n++) {
    const dir = n === 1 ? base : `${base}-${n}`;
    try {
      fs.mkdirSync(dir);
      markRunFolder(dir);
      return dir;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    }
  }
}

function writeJson(file: string, value: unknown): void {
  replaceOwnFile(file, JSON.stringify(value, null, 2) + '\n');
}
