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
import fs from 'node:fs';
import path from 'node:path';
import { makeFolders } from '../core/folders.ts';
import { appendOwnFile, assertNotLink, replaceOwnFile } from '../core/own-file.ts';
import type { Device } from '../backend/device.ts';
import type { Recipe } from '../recipe/schema.ts';
import { ENV_FILE, LOG_FILE, METRICS_FILE, RUN_CONFIG_FILE, SUMMARY_FILE } from '../store/layout.ts';
import { assertRunFolder, markRunFolder, runFolderPrefix } from '../store/run-folder.ts';
import { environmentRecord } from './environment.ts';
import { fitFields, ProgressBar } from './progress-bar.ts';
import type { LineField, StepProgress } from './progress-bar.ts';
import { checkRecord, readMetrics, writeSummary, type MetricRecord, type TrainingSummary } from '../store/run-record.ts';
import { assertNoLinkedEventFile, TensorBoardWriter } from './tensorboard.ts';
import {
  newWandbInfo,
  offlineModeLine,
  readWandbInfo,
  replayCommand,
  toWandbConfig,
  wandbDecision,
  WandbSink,
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
}

export class RunLogger {
  readonly dir: string;
  private records = 0;
  private sink: WandbSink | null = null;
  /** Training's main thread makes the one logger of a run (data-parallel replicas log nothing), so one process writes the event file. */
  private tensorboard: TensorBoardWriter | null = null;
  private finished = false;
  private readonly echo: boolean;
  private readonly terminal: NodeJS.WriteStream;
  /** The terminal's progress bar, from the first progress() on (only when echoing to a terminal). */
  private bar: ProgressBar | null = null;

  private constructor(
    dir: string,
    private readonly options: RunLoggerOptions,
  ) {
    this.dir = dir;
    this.echo = options.echo ?? true;
    this.terminal = options.terminal ?? process.stdout;
  }

  /**
   * Makes (or, with resumeDir, reopens) the run folder, writes config.json and env.json, starts W&B if enabled. A
   * resumed folder must carry the run marker (src/store/run-folder.ts), and everything it holds that a resume reads is read and
   * checked before its first byte changes.
   */
  static async create(recipe: Recipe, opts: RunLoggerOptions = {}): Promise<RunLogger> {
    const dir = opts.resumeDir ? path.resolve(opts.resumeDir) : makeRunDir(opts.runDir ?? recipe.train.runDir, recipe.name);
    if (opts.resumeDir) {
      if (!fs.statSync(dir, { throwIfNoEntry: false })?.isDirectory()) throw new Error(`${dir}: the run folder to resume does not exist`);
      assertRunFolder(dir, 'resume in');
      for (const name of [RUN_CONFIG_FILE, ENV_FILE, METRICS_FILE, LOG_FILE, WANDB_INFO_FILE, SUMMARY_FILE]) assertNotLink(path.join(dir, name));
      assertNoLinkedEventFile(dir);
    }
    const logger = new RunLogger(dir, opts);
    const kept = opts.resumeDir ? logger.recordsToKeep(opts.resumeStep, opts.finishing ?? false) : [];
    // A resumed run keeps its W&B id; until finish() confirms an upload, the folder is 'pending'.
    const stored = fs.existsSync(path.join(dir, WANDB_INFO_FILE)) ? readWandbInfo(dir) : newWandbInfo(recipe, dir);
    const env = await environmentRecord(dir, recipe, { resumedAtStep: opts.resumeDir ? (opts.resumeStep ?? null) : undefined, device: opts.device });

    writeJson(path.join(dir, RUN_CONFIG_FILE), recipe);
    writeJson(path.join(dir, ENV_FILE), env);
    // Replaced whole (not truncated and rewritten): compare and eval may be reading the run meanwhile.
    if (opts.resumeDir) replaceOwnFile(path.join(dir, METRICS_FILE), kept.map((r) => JSON.stringify(r) + '\n').join(''));
    const info: WandbRunInfo = { ...stored, status: 'pending', reason: undefined };
    writeWandbInfo(dir, info);
    if (recipe.tensorboard.enabled) logger.tensorboard = TensorBoardWriter.open(dir, kept);

    const decision = wandbDecision(recipe.wandb);
    if (decision.enabled) {
      logger.sink = new WandbSink(info, toWandbConfig(recipe), {
        onReady: (url) => logger.line(`W&B run: ${url}`),
        onProblem: (reason) =>
          logger.warn(
            `W&B: ${reason}. Training goes on; the metrics are kept in ${path.join(dir, METRICS_FILE)}; upload them later with: ${replayCommand(dir)}`,
          ),
      });
      // A resumed run re-sends the kept records first, so the W&B history has the same lines as the JSONL.
      for (const record of kept) logger.sink.log(record);
    } else if (process.env.WANDB_MODE === 'offline' && recipe.wandb.enabled !== false) {
      logger.line(offlineModeLine(dir));
    } else if (recipe.wandb.enabled === true || process.env.WANDB_MODE === 'offline') {
      logger.line(`W&B off (${decision.reason}); to upload this run later: ${replayCommand(dir)}`);
    }
    return logger;
  }

  /** Appends one record to metrics.jsonl (synchronously, so a crash loses nothing) and the TensorBoard events, and forwards it to W&B. */
  log(record: MetricRecord): void {
    checkRecord(record, 'RunLogger.log');
    appendOwnFile(path.join(this.dir, METRICS_FILE), JSON.stringify(record) + '\n');
    this.tensorboard?.log(record);
    this.sink?.log(record);
    this.records += 1;
  }

  /**
   * A progress line: stdout (above the progress bar, on a terminal) and log.txt. `fields`, when given, are the line's
   * parts (`text` joins them): a terminal gets as many as fit its width (progress-bar.ts fitFields), log.txt all.
   */
  line(text: string, fields?: readonly LineField[]): void {
    const shown = fields && this.terminal.isTTY ? fitFields(fields, (this.terminal.columns || 80) - 1) : text;
    if (this.bar) this.bar.log(shown);
    else if (this.echo) this.terminal.write(shown + '\n');
    this.appendToLog(text);
  }

  /** A warning: stderr (above the progress bar, on a terminal) and log.txt. */
  warn(text: string): void {
    if (this.bar) this.bar.log(`warning: ${text}`);
    else if (this.echo) process.stderr.write(`warning: ${text}\n`);
    this.appendToLog(`warning: ${text}`);
  }

  /** log.txt gets each line after its time (ISO 8601, UTC): when a step ran, how long a validation took. */
  private appendToLog(text: string): void {
    const time = new Date().toISOString();
    appendOwnFile(
      path.join(this.dir, LOG_FILE),
      text
        .split('\n')
        .map((line) => `${time} ${line}\n`)
        .join(''),
    );
  }

  /** After each step: on a terminal (the terminal stream's isTTY), the live progress bar; elsewhere nothing (the lines suffice). */
  progress(p: StepProgress): void {
    if (!this.bar && this.echo && this.terminal.isTTY) this.bar = new ProgressBar(p.totalSteps, this.terminal);
    this.bar?.update(p);
  }

  /** Removes the progress bar, if any (at the end of training, or when it fails). */
  endProgress(): void {
    this.bar?.stop();
    this.bar = null;
  }

  /** Writes summary.json and flushes/finishes W&B (never throws for W&B problems). Idempotent. */
  async finish(summary: TrainingSummary): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    this.endProgress();
    // maxRSS is in KiB: the peak of the whole process, replica threads included (not a GPU's memory).
    const peakRss = process.resourceUsage().maxRSS * 1024;
    writeSummary(this.dir, { ...summary, records: this.records, peak_rss_bytes: peakRss, finished_at: new Date().toISOString() });
    if (!this.sink) return;
    const result = await this.sink.finish((this.options.wandbFinishTimeoutS ?? 60) * 1000);
    const info = readWandbInfo(this.dir);
    if (result.ok) {
      writeWandbInfo(this.dir, { ...info, status: 'synced', url: result.url, reason: undefined });
    } else {
      writeWandbInfo(this.dir, { ...info, status: 'incomplete', url: result.url, reason: result.reason });
    }
  }

  /** The records a resume keeps: those up to resumeStep (all if undefined; see `finishing`). */
  private recordsToKeep(resumeStep: number | undefined, finishing: boolean): MetricRecord[] {
    const file = path.join(this.dir, METRICS_FILE);
    const records = fs.existsSync(file) ? readMetrics(this.dir) : [];
    const kept =
      resumeStep === undefined ? records : records.filter((r) => r.step < resumeStep || (r.step === resumeStep && !(finishing && r.split === 'val')));
    this.records = kept.length;
    return kept;
  }
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
