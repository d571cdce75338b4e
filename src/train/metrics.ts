// Run folders and metric records. A run folder `<train.runDir>/<name>-<YYYYMMDD-HHMMSS>/` holds
//   .slayformer-run  the marker that makes it a run folder (a random run id, see src/store/run-folder.ts)
//   config.json    the resolved recipe (rewritten when the run is resumed)
//   env.json       where it came from and ran: the git commit (and whether the tree was dirty), the versions of
//                  Node, tfjs and the backend (TensorFlow's, on the tensorflow backend), the CPU, memory, command line,
//                  start time, and the data paths both absolute and relative to the run folder (a moved run folder
//                  still finds data that moved with it); each resume appends its own entry under `resumes`
//   metrics.jsonl  one JSON object per record (MetricRecord), the source of truth for curves (validation adds bpb and acc)
//   log.txt        the progress lines and warnings printed during the run, each line after its ISO time
//   wandb.json     the fixed W&B run id/project/entity and upload status (see src/train/wandb.ts)
//   summary.json   written by finish(), with the process's peak resident memory (peak_rss_bytes)
// Progress lines go to stdout, warnings to stderr; on a terminal, with a live progress bar below them (progress-bar.ts).
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import type { Recipe } from '../recipe/schema.ts';
import { ENV_FILE, LOG_FILE, METRICS_FILE, RUN_CONFIG_FILE, SUMMARY_FILE } from '../store/layout.ts';
import { AUTO_PREFIX } from '../store/resolve.ts';
import { assertRunFolder, markRunFolder } from '../store/run-folder.ts';
import { ProgressBar } from './progress-bar.ts';
import type { StepProgress } from './progress-bar.ts';
import {
  newWandbRunId,
  readWandbInfo,
  toWandbConfig,
  wandbDecision,
  WandbSink,
  WANDB_INFO_FILE,
  writeWandbInfo,
  type WandbRunInfo,
} from './wandb.ts';

export interface MetricRecord {
  step: number;
  tokens: number;
  split: 'train' | 'val';
  loss: number;
  ppl: number;
  lr: number;
  grad_norm: number | null;
  tokens_per_s: number;
  elapsed_s: number;
  /** Validation: bits per byte. */
  bpb?: number;
  /** Validation: top-1 accuracy over the loss's tokens (next-token for GPT, masked-token for BERT). */
  acc?: number;
  epoch_fraction?: number;
  /** Train, tensorflow backend: values and bytes the last step read back into JavaScript (backend/readback.ts). */
  readback_values?: number;
  readback_bytes?: number;
}

const REQUIRED_NUMBERS = ['step', 'tokens', 'loss', 'ppl', 'lr', 'tokens_per_s', 'elapsed_s'] as const;

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
}

/** The replay command for a run folder, as printed to the user. */
export function replayCommand(dir: string): string {
  const relative = path.relative(process.cwd(), dir);
  const shown = relative === '' ? '.' : relative.startsWith('..') ? dir : relative;
  return `npm run wandb:replay -- ${/\s/.test(shown) ? JSON.stringify(shown) : shown}`;
}

export class RunLogger {
  readonly dir: string;
  private records = 0;
  private sink: WandbSink | null = null;
  private finished = false;
  private readonly echo: boolean;
  /** The terminal's progress bar, from the first progress() on (only when echoing to a terminal). */
  private bar: ProgressBar | null = null;

  private constructor(dir: string, private readonly options: RunLoggerOptions) {
    this.dir = dir;
    this.echo = options.echo ?? true;
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
    }
    const logger = new RunLogger(dir, opts);
    const kept = opts.resumeDir ? logger.recordsToKeep(opts.resumeStep, opts.finishing ?? false) : [];
    // A resumed run keeps its W&B id; until finish() confirms an upload, the folder is 'pending'.
    const stored = fs.existsSync(path.join(dir, WANDB_INFO_FILE)) ? readWandbInfo(dir) : newWandbInfo(recipe, dir);
    const env = await environmentRecord(dir, recipe, opts.resumeDir ? opts.resumeStep ?? null : undefined);

    writeJson(path.join(dir, RUN_CONFIG_FILE), recipe);
    writeJson(path.join(dir, ENV_FILE), env);
    if (opts.resumeDir) fs.writeFileSync(path.join(dir, METRICS_FILE), kept.map((r) => JSON.stringify(r) + '\n').join(''));
    const info: WandbRunInfo = { ...stored, status: 'pending', reason: undefined };
    writeWandbInfo(dir, info);

    const decision = wandbDecision(recipe.wandb);
    if (decision.enabled) {
      logger.sink = new WandbSink(info, toWandbConfig(recipe), {
        onReady: (url) => logger.line(`W&B run: ${url}`),
        onProblem: (reason) =>
          logger.warn(`W&B: ${reason}. Training goes on; the metrics are kept in ${path.join(dir, METRICS_FILE)}; upload them later with: ${replayCommand(dir)}`),
      });
      // A resumed run re-sends the kept records first, so the W&B history has the same lines as the JSONL.
      for (const record of kept) logger.sink.log(record);
    } else if (recipe.wandb.enabled === true || process.env.WANDB_MODE === 'offline') {
      logger.line(`W&B off (${decision.reason}); to upload this run later: ${replayCommand(dir)}`);
    }
    return logger;
  }

  /** Appends one record to metrics.jsonl (synchronously, so a crash loses nothing) and forwards it to W&B. */
  log(record: MetricRecord): void {
    checkRecord(record, 'RunLogger.log');
    fs.appendFileSync(path.join(this.dir, METRICS_FILE), JSON.stringify(record) + '\n');
    this.sink?.log(record);
    this.records += 1;
  }

  /** A progress line: stdout (above the progress bar, on a terminal) and log.txt. */
  line(text: string): void {
    if (this.bar) this.bar.log(text);
    else if (this.echo) process.stdout.write(text + '\n');
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
    fs.appendFileSync(path.join(this.dir, LOG_FILE), text.split('\n').map((line) => `${time} ${line}\n`).join(''));
  }

  /** After each step: on a terminal (stdout.isTTY), the live progress bar; elsewhere nothing (the lines suffice). */
  progress(p: StepProgress): void {
    if (!this.bar && this.echo && process.stdout.isTTY) this.bar = new ProgressBar(p.totalSteps);
    this.bar?.update(p);
  }

  /** Removes the progress bar, if any (at the end of training, or when it fails). */
  endProgress(): void {
    this.bar?.stop();
    this.bar = null;
  }

  /** Writes summary.json and flushes/finishes W&B (never throws for W&B problems). Idempotent. */
  async finish(summary: Record<string, unknown>): Promise<void> {
    if (this.finished) return;
    this.finished = true;
    this.endProgress();
    // maxRSS is in KiB: the peak of the whole process, replica threads included (not a GPU's memory).
    const peakRss = process.resourceUsage().maxRSS * 1024;
    // Written aside and renamed: summary.json marks a run done (sweeps, initFrom auto:, compare), so whoever sees it
    // exists must find it whole.
    const file = path.join(this.dir, SUMMARY_FILE);
    writeJson(`${file}.tmp`, { ...summary, records: this.records, peak_rss_bytes: peakRss, finished_at: new Date().toISOString() });
    fs.renameSync(`${file}.tmp`, file);
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
    const kept = resumeStep === undefined ? records : records.filter((r) => r.step < resumeStep || (r.step === resumeStep && !(finishing && r.split === 'val')));
    this.records = kept.length;
    return kept;
  }
}

export interface ReplayOptions {
  /** Send to this project/entity instead of the one in wandb.json (then stored there). */
  project?: string;
  entity?: string | null;
  /** Seconds to wait for the final flush (default 120). */
  timeoutS?: number;
}

/** @wandb/sdk 0.5.1 sends at most 10 000 history lines per upload and, at finish, uploads only once more:
 *  a replay therefore hands it the records in chunks of 5 000, one upload interval apart. */
const REPLAY_CHUNK = 5000;

/**
 * Uploads a run folder (config.json + metrics.jsonl) to its W&B run, as identified by wandb.json: line i of
 * metrics.jsonl becomes history line i, so replaying a folder twice (or after a partial live upload) rewrites
 * the same lines and creates no duplicate run. Throws (naming the folder) when the upload fails.
 */
export async function replayToWandb(runDir: string, opts: ReplayOptions = {}): Promise<{ records: number; url?: string }> {
  const dir = path.resolve(runDir);
  const configFile = path.join(dir, RUN_CONFIG_FILE);
  if (!fs.existsSync(configFile) || !fs.existsSync(path.join(dir, METRICS_FILE))) {
    throw new Error(`${dir}: not a run folder (expected ${RUN_CONFIG_FILE} and ${METRICS_FILE})`);
  }
  const records = readMetrics(dir);
  const recipe = JSON.parse(fs.readFileSync(configFile, 'utf8')) as Recipe;
  const stored = fs.existsSync(path.join(dir, WANDB_INFO_FILE)) ? readWandbInfo(dir) : newWandbInfo(recipe, dir);
  const info: WandbRunInfo = { ...stored, project: opts.project ?? stored.project, entity: opts.entity !== undefined ? opts.entity : stored.entity };
  writeWandbInfo(dir, info);

  const sink = new WandbSink(info, toWandbConfig(recipe));
  if (await sink.started()) {
    for (let start = 0; start < records.length; start += REPLAY_CHUNK) {
      if (start > 0) await sleep(sink.uploadIntervalMs() + 500); // let the SDK's upload loop send the previous chunk
      for (const record of records.slice(start, start + REPLAY_CHUNK)) sink.log(record);
    }
  }
  const result = await sink.finish((opts.timeoutS ?? 120) * 1000);
  writeWandbInfo(dir, { ...info, status: result.ok ? 'synced' : 'incomplete', url: result.url, reason: result.reason });
  if (!result.ok) throw new Error(`${dir}: W&B replay failed: ${result.reason}`);
  return { records: records.length, url: result.url };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Reads and checks every record of a run folder's metrics.jsonl (errors name the file and line). */
export function readMetrics(runDir: string): MetricRecord[] {
  const file = path.join(runDir, METRICS_FILE);
  const text = fs.readFileSync(file, 'utf8');
  const records: MetricRecord[] = [];
  text.split('\n').forEach((line, i) => {
    if (line.trim() === '') return;
    let record: unknown;
    try {
      record = JSON.parse(line);
    } catch {
      throw new Error(`${file}:${i + 1}: not a JSON object: ${line.slice(0, 80)}`);
    }
    checkRecord(record, `${file}:${i + 1}`);
    records.push(record as MetricRecord);
  });
  return records;
}

/** Throws unless `record` has every required field with the right type (NaN/Infinity read back as null). */
export function checkRecord(record: unknown, where: string): asserts record is MetricRecord {
  const r = record as Record<string, unknown>;
  const fail = (problem: string) => {
    throw new Error(`${where}: metric record ${problem} (got ${JSON.stringify(record)})`);
  };
  if (typeof record !== 'object' || record === null) fail('must be an object');
  if (r.split !== 'train' && r.split !== 'val') fail(`field split must be "train" or "val"`);
  for (const key of REQUIRED_NUMBERS) {
    // A diverged loss is NaN, which JSON writes as null: accepted, so the record is kept rather than lost.
    if (typeof r[key] !== 'number' && !(r[key] === null && key !== 'step' && key !== 'tokens')) fail(`field ${key} must be a number`);
  }
  if (!Number.isInteger(r.step) || (r.step as number) < 0) fail('field step must be an integer ≥ 0');
  if (typeof r.grad_norm !== 'number' && r.grad_norm !== null) fail('field grad_norm must be a number or null');
  for (const key of ['bpb', 'acc', 'epoch_fraction']) {
    if (r[key] !== undefined && typeof r[key] !== 'number' && r[key] !== null) fail(`field ${key} must be a number`);
  }
}

function newWandbInfo(recipe: Recipe, dir: string): WandbRunInfo {
  return {
    id: newWandbRunId(),
    project: recipe.wandb.project,
    entity: recipe.wandb.entity,
    name: recipe.wandb.runName ?? path.basename(dir),
    status: 'pending',
  };
}

/** `<parent>/<name>-<YYYYMMDD-HHMMSS>` (UTC), with -2, -3, … if two runs start in the same second. */
export function makeRunDir(parent: string, name: string): string {
  fs.mkdirSync(parent, { recursive: true });
  const stamp = new Date().toISOString().replace(/[-:]/g, '').replace('T', '-').slice(0, 15);
  const base = path.resolve(parent, `${name.replace(/[^A-Za-z0-9._-]/g, '_')}-${stamp}`);
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

const REPO_ROOT = path.resolve(import.meta.dirname, '..', '..');

/** The commit of the slayformer checkout this process runs from, and whether its tree differs from it. */
function gitSource(): { commit: string | null; dirty: boolean | null; reason?: string } {
  const git = (...args: string[]) => execFileSync('git', ['-C', REPO_ROOT, ...args], { encoding: 'utf8', timeout: 10_000, stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    const commit = git('rev-parse', 'HEAD').trim();
    return { commit, dirty: git('status', '--porcelain').trim() !== '' };
  } catch (err) {
    return { commit: null, dirty: null, reason: `not a git checkout, or git is missing (${(err as Error).message.split('\n')[0]})` };
  }
}

/**
 * Versions of the TensorFlow.js packages and of the running backend; TensorFlow's own on the tensorflow backend.
 * tfjs is imported here, not at the top: readers of run folders (compare, replay) import this file and need no tfjs.
 */
async function backendVersions(): Promise<Record<string, unknown>> {
  const tf = await import('@tensorflow/tfjs');
  const backend = tf.engine().backendName ?? null;
  const versions: Record<string, string | null> = { ...tf.version };
  try {
    versions['tfjs-backend-wasm'] = requireFromHere('@tensorflow/tfjs-backend-wasm/package.json').version;
  } catch {
    versions['tfjs-backend-wasm'] = null;
  }
  // tfjs-node's backend carries its libtensorflow binding, whose TF_Version is TensorFlow's version string.
  const binding = backend === 'tensorflow' ? (tf.engine().backend as unknown as { binding?: { TF_Version?: string } }).binding : undefined;
  return { name: backend, tensorflow: binding?.TF_Version ?? null, versions };
}
const requireFromHere = createRequire(import.meta.url);

/** An external path as recorded in env.json: absolute, and relative to the run folder. */
function recordedPath(runDir: string, file: string | null) {
  return file === null ? null : { absolute: file, fromRun: path.relative(runDir, file) };
}

/** Where and how a process runs: Node, the machine, the command line, the git source and the backend's versions. */
export async function processEnvironment(): Promise<Record<string, unknown>> {
  const cpus = os.cpus();
  return {
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    hostname: os.hostname(),
    cpus: cpus.length,
    cpuModel: cpus[0]?.model ?? null,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    argv: process.argv.slice(1),
    cwd: process.cwd(),
    startedAt: new Date().toISOString(),
    git: gitSource(),
    backend: await backendVersions(),
  };
}

async function environment(runDir: string, recipe: Recipe): Promise<Record<string, unknown>> {
  return {
    ...(await processEnvironment()),
    paths: {
      run: runDir,
      dataset: recordedPath(runDir, recipe.data.dataset),
      tokenizer: recordedPath(runDir, recipe.data.tokenizer),
      initFrom: recordedPath(runDir, recipe.initFrom === null || recipe.initFrom.startsWith(AUTO_PREFIX) ? null : path.resolve(recipe.initFrom)),
    },
  };
}

/** env.json of a new run; a resume (resumedAtStep defined) keeps the first session's and appends its own. */
async function environmentRecord(runDir: string, recipe: Recipe, resumedAtStep?: number | null): Promise<Record<string, unknown>> {
  const file = path.join(runDir, ENV_FILE);
  const current = await environment(runDir, recipe);
  let previous: Record<string, unknown> | null = null;
  if (resumedAtStep !== undefined) {
    try {
      previous = JSON.parse(fs.readFileSync(file, 'utf8'));
    } catch {
      previous = null; // missing or damaged: this session's environment stands alone
    }
  }
  const resumes = Array.isArray(previous?.resumes) ? previous.resumes : [];
  return previous ? { ...previous, resumes: [...resumes, { ...current, resumedAtStep }] } : current;
}

function writeJson(file: string, value: unknown): void {
  fs.writeFileSync(file, JSON.stringify(value, null, 2) + '\n');
}
