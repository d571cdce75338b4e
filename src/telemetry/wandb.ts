// Weights & Biases sink: the official @wandb/sdk run in a worker thread (src/telemetry/wandb-worker.mjs), so that
// no W&B failure can stop training. The run folder's metrics.jsonl stays the source of truth; `wandb.json`
// in the folder fixes the W&B run id, so `npm run wandb:replay -- <run folder>` re-sends the same lines to
// the same run instead of creating a duplicate.
// History rows: one per optimizer step (the step's train and val records merged), at W&B step = the optimizer
// step, with `tokens` defined as the x-axis of every measured metric (the run config's `_wandb.m`, which is
// what the Python client's define_metric writes; the JS SDK has no define_metric).
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Worker } from 'node:worker_threads';
import { writeOwnFile } from '../core/own-file.ts';
import type { Recipe, WandbSection } from '../recipe/schema.ts';
import { METRICS_FILE, RUN_CONFIG_FILE } from '../store/layout.ts';
import { RunFolder } from '../store/run-folder.ts';
import type { MetricRecord } from '../store/run-record.ts';
import { METRIC_FIELD_ROLES, scalarRow } from './record-scalars.ts';
import type { TelemetrySink } from './sink.ts';

/** Identity of the W&B run of one run folder (stored as `<run folder>/wandb.json`). */
export interface WandbRunInfo {
  id: string;
  project: string;
  entity: string | null;
  name: string;
  /** 'pending': not uploaded (yet); 'synced': every record uploaded; 'incomplete': an upload failed. */
  status: 'pending' | 'synced' | 'incomplete';
  url?: string;
  reason?: string;
}

export const WANDB_INFO_FILE = 'wandb.json';

/** W&B run ids: 8 characters of [a-z0-9], like the SDK's own. */
function newWandbRunId(): string {
  const alphabet = 'abcdefghijklmnopqrstuvwxyz0123456789';
  return [...randomBytes(8)].map((b) => alphabet[b % alphabet.length]).join('');
}

export function readWandbInfo(runDir: string): WandbRunInfo {
  const file = path.join(runDir, WANDB_INFO_FILE);
  try {
    return JSON.parse(fs.readFileSync(file, 'utf8')) as WandbRunInfo;
  } catch (err) {
    throw new Error(`${file}: cannot read the W&B run info (${(err as Error).message})`);
  }
}

export function writeWandbInfo(runDir: string, info: WandbRunInfo): void {
  writeOwnFile(path.join(runDir, WANDB_INFO_FILE), JSON.stringify(info, null, 2) + '\n');
}

/**
 * Whether a run sends its records to W&B now. `auto` = when WANDB_API_KEY is set. WANDB_MODE=disabled turns
 * W&B off; WANDB_MODE=offline keeps only the JSONL (the JS SDK has no offline mode: it would still call the
 * API at init and then drop the history), to be replayed later: no wandb/offline-run-* folder is written
 * (offlineModeLine).
 */
export function wandbDecision(settings: WandbSection, env: NodeJS.ProcessEnv = process.env): { enabled: boolean; reason: string } {
  if (settings.enabled === false) return { enabled: false, reason: 'wandb.enabled is false' };
  if (env.WANDB_MODE === 'disabled') return { enabled: false, reason: 'WANDB_MODE=disabled' };
  if (env.WANDB_MODE === 'offline') return { enabled: false, reason: 'WANDB_MODE=offline' };
  if (settings.enabled === 'auto' && !env.WANDB_API_KEY) return { enabled: false, reason: 'WANDB_API_KEY is not set' };
  return { enabled: true, reason: settings.enabled === true ? 'wandb.enabled is true' : 'WANDB_API_KEY is set' };
}

/** One metric record as W&B history fields: its scalar row (record-scalars.ts), whose names TensorBoard's tags share. */
export const toWandbRow = scalarRow;

/**
 * define_metric as the Python client stores it in the run config (`_wandb.m`: MetricRecord protos keyed by
 * field number — 1 name, 5 one-based index of the step metric, 6 options as the numbers of the flags set:
 * 1 step_sync, 3 defined): `tokens` is a defined metric and the x-axis of every measurement of both splits.
 */
function wandbMetricDefinitions(): Record<string, unknown>[] {
  const measured = Object.entries(METRIC_FIELD_ROLES)
    .filter(([, role]) => role === 'measured')
    .map(([field]) => field);
  const keys = ['train', 'val'].flatMap((split) => measured.map((field) => `${split}/${field}`));
  return [{ 1: 'tokens', 6: [3] }, ...keys.map((name) => ({ 1: name, 5: 1, 6: [1] }))];
}

/** The resolved recipe as W&B config, in the wire format of the Python client ({section: {value}}), with the metric definitions. */
export function toWandbConfig(recipe: unknown): Record<string, { value: unknown }> {
  const sections = Object.entries(recipe as Record<string, unknown>).map(([key, value]) => [key, { value }]);
  return { ...Object.fromEntries(sections), _wandb: { value: { m: wandbMetricDefinitions() } } };
}

export interface WandbSinkResult {
  ok: boolean;
  url?: string;
  reason?: string;
}

export interface WandbSinkOptions {
  /** Called once, on the first problem (init failed, an upload failed, the worker died). */
  onProblem?(reason: string): void;
  /** Called when the run is created, with its URL. */
  onReady?(url: string): void;
}

/**
 * Streams history rows to one W&B run. Never throws: `log` only posts a message to the worker, and every
 * failure is reported once through `onProblem` and in the result of `finish`.
 */
export class WandbSink {
  private readonly worker: Worker;
  private state: 'starting' | 'ready' | 'failed' | 'finished' = 'starting';
  private problem: string | null = null;
  private url: string | undefined;
  private finished: Promise<WandbSinkResult> | null = null;
  private readyAt = 0;
  /** What the SDK printed while the run was being created (why init failed, when it does). */
  private initErrors: string[] = [];
  private startWaiters: ((ok: boolean) => void)[] = [];
  private onFinished: (() => void) | null = null;
  /** The row of the latest optimizer step, held until a record of a later step (or finish) completes it. */
  private pending: { step: number; row: Record<string, number> } | null = null;

  constructor(
    info: Pick<WandbRunInfo, 'id' | 'project' | 'entity' | 'name'>,
    config: Record<string, unknown>,
    private readonly options: WandbSinkOptions = {},
  ) {
    const init = { id: info.id, project: info.project, entity: info.entity ?? undefined, name: info.name, config };
    this.worker = new Worker(new URL('./wandb-worker.mjs', import.meta.url), {
      workerData: { sdkUrl: import.meta.resolve('@wandb/sdk'), init },
      env: { ...process.env }, // WANDB_API_KEY, WANDB_BASE_URL, … as they are now
    });
    // The worker must not hold the process open if training ends without finish(); finish() re-refs it.
    this.worker.unref();
    this.worker.on('message', (msg: { type: string; url?: string; reason?: string; text?: string }) => {
      if (msg.type === 'ready') {
        this.state = 'ready';
        this.readyAt = Date.now();
        this.url = msg.url;
        this.settleStart(true);
        this.options.onReady?.(msg.url ?? '');
      } else if (msg.type === 'failed' || msg.type === 'crashed') {
        this.fail(msg.reason ?? 'unknown error');
      } else if (msg.type === 'sdk-error') {
        if (this.state === 'starting') this.initErrors.push(msg.text ?? '');
        else this.report(`upload failed: ${msg.text}`);
      } else if (msg.type === 'finished') {
        this.state = 'finished';
        this.onFinished?.();
      }
    });
    this.worker.on('error', (err) => this.fail(err.message));
    this.worker.on('exit', () => {
      if (this.state !== 'finished') this.state = 'failed';
      this.settleStart(false);
      this.onFinished?.();
    });
  }

  /** Resolves true once the W&B run exists, false if it could not be created. */
  started(): Promise<boolean> {
    if (this.state !== 'starting') return Promise.resolve(this.state !== 'failed');
    this.worker.ref(); // the caller waits on the worker
    return new Promise((resolve) => this.startWaiters.push(resolve));
  }

  /** The SDK's current upload interval: every 2 s for its first 30 s, 10 s until 150 s, then 30 s. */
  uploadIntervalMs(): number {
    const elapsed = (Date.now() - this.readyAt) / 1000;
    return elapsed < 30 ? 2000 : elapsed < 150 ? 10_000 : 30_000;
  }

  /** The SDK gave up (init failed or it crashed): report once, stop the worker; finish() then resolves. */
  private fail(reason: string): void {
    if (this.state === 'failed') return;
    const during = this.state === 'starting' ? 'init failed' : 'the W&B client crashed';
    this.state = 'failed';
    this.report(`${during}: ${[reason, ...this.initErrors].join('; ')}`);
    this.settleStart(false);
    void this.worker.terminate(); // its 'exit' event ends a pending finish()
  }

  private settleStart(ok: boolean): void {
    if (this.startWaiters.length === 0) return;
    if (!this.finished) this.worker.unref();
    for (const resolve of this.startWaiters.splice(0)) resolve(ok);
  }

  /**
   * Adds one record to the history row of its optimizer step. A step's rows are merged (its train record,
   * then its validation record) and sent when a later step begins or at finish: one history line per step,
   * at W&B step = the optimizer step. Lines are numbered in order from 0, so a replay of the same records
   * rewrites the same lines. Records come in order of step (metrics.jsonl is written so).
   */
  log(record: MetricRecord): void {
    if (this.state === 'failed' || this.state === 'finished') return;
    if (this.pending && this.pending.step === record.step) {
      Object.assign(this.pending.row, toWandbRow(record));
      return;
    }
    this.flush();
    this.pending = { step: record.step, row: toWandbRow(record) };
  }

  private flush(): void {
    if (this.pending && this.state !== 'failed' && this.state !== 'finished') this.worker.postMessage({ type: 'log', ...this.pending });
    this.pending = null;
  }

  /** Flushes and marks the run complete; gives up after `timeoutMs` (the SDK retries for up to 30 minutes). */
  finish(timeoutMs = 60_000, exitCode = 0): Promise<WandbSinkResult> {
    this.finished ??= new Promise<WandbSinkResult>((resolve) => {
      const done = () => {
        clearTimeout(timer);
        this.onFinished = null;
        void this.worker.terminate();
        const ok = this.state === 'finished' && this.problem === null;
        resolve({ ok, url: this.url, reason: this.problem ?? (ok ? undefined : 'the W&B client stopped early') });
      };
      const timer = setTimeout(() => {
        this.report(`no answer from W&B within ${Math.round(timeoutMs / 1000)} s at finish`);
        done();
      }, timeoutMs);
      this.onFinished = done;
      if (this.state === 'failed' || this.state === 'finished') return done();
      this.flush();
      this.worker.ref();
      this.worker.postMessage({ type: 'finish', code: exitCode });
    });
    return this.finished;
  }

  private report(reason: string): void {
    if (this.problem !== null) return;
    this.problem = reason;
    this.options.onProblem?.(reason);
  }
}

/**
 * The W&B run of a run folder as a telemetry sink (sink.ts): the records as history rows (a resumed run re-sends the
 * ones it keeps first, so W&B's history has the lines metrics.jsonl has), and at close the upload's outcome in
 * wandb.json. `onReady` and `onProblem` are WandbSink's.
 */
export class WandbTelemetrySink implements TelemetrySink {
  private readonly stream: WandbSink;

  constructor(
    private readonly runDir: string,
    info: WandbRunInfo,
    recipe: Recipe,
    private readonly finishTimeoutS: number,
    options: WandbSinkOptions,
  ) {
    this.stream = new WandbSink(info, toWandbConfig(recipe), options);
  }

  start(kept: readonly MetricRecord[]): void {
    for (const record of kept) this.stream.log(record);
  }

  record(record: MetricRecord): void {
    this.stream.log(record);
  }

  async close(): Promise<void> {
    const result = await this.stream.finish(this.finishTimeoutS * 1000);
    const info = readWandbInfo(this.runDir);
    writeWandbInfo(this.runDir, { ...info, status: result.ok ? 'synced' : 'incomplete', url: result.url, reason: result.ok ? undefined : result.reason });
  }
}

/**
 * What a run says at its start under WANDB_MODE=offline. The Python client would write wandb/offline-run-* (its
 * internal protobuf log) for `wandb sync`; this trainer writes none (docs/training.md), and says so, with the command
 * that uploads the run folder instead.
 */
export function offlineModeLine(runDir: string): string {
  return (
    'W&B offline (WANDB_MODE=offline): nothing is sent and no wandb/offline-run-* folder is written, so `wandb sync` has nothing to upload; ' +
    `the run's ${METRICS_FILE} is kept: upload it to W&B later with: ${replayCommand(runDir)}`
  );
}

/** The replay command for a run folder, as printed to the user. */
export function replayCommand(dir: string): string {
  const relative = path.relative(process.cwd(), dir);
  const shown = relative === '' ? '.' : relative.startsWith('..') ? dir : relative;
  return `npm run wandb:replay -- ${/\s/.test(shown) ? JSON.stringify(shown) : shown}`;
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
  const run = RunFolder.at(dir);
  if (!run.has(RUN_CONFIG_FILE) || !run.has(METRICS_FILE)) {
    throw new Error(`${dir}: not a run folder (expected ${RUN_CONFIG_FILE} and ${METRICS_FILE})`);
  }
  const records = run.metrics();
  const recipe = run.config() as unknown as Recipe;
  const stored = fs.existsSync(path.join(dir, WANDB_INFO_FILE)) ? readWandbInfo(dir) : newWandbInfo(recipe.wandb, dir);
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

/** A new W&B identity for the run folder `dir`: a fresh id, the recipe's project, entity and run name. */
export function newWandbInfo(wandb: WandbSection, dir: string): WandbRunInfo {
  return {
    id: newWandbRunId(),
    project: wandb.project,
    entity: wandb.entity,
    name: wandb.runName ?? path.basename(dir),
    status: 'pending',
  };
}
