// Telemetry sinks: where what a run reports goes. One interface, TelemetrySink; the run logger (run-logger.ts) builds
// the run's list in one place (runSinks) and hands each sink every record, line and step in the list's order:
//   ConsoleSink        progress lines on stdout, warnings on stderr, the progress bar on a terminal (progress-bar.ts)
//   LogFileSink        log.txt: every line and warning after its time
//   MetricsJsonlSink   metrics.jsonl: the records, the run's source of truth (src/store/run-record.ts)
//   TensorBoardWriter  the records as TensorBoard events (tensorboard.ts)
//   WandbTelemetrySink the records as W&B history rows (wandb.ts)
// A sink implements the methods it takes; a caller's own sinks (RunLoggerOptions.sinks, the trainer's
// TrainOptions.sinks) come after the run's, so a record reaches them once metrics.jsonl holds it.
import path from 'node:path';
import { appendOwnFile, replaceOwnFile } from '../core/own-file.ts';
import { LOG_FILE, METRICS_FILE } from '../store/layout.ts';
import type { MetricRecord } from '../store/run-record.ts';
import { fitFields, ProgressBar, type LineField, type StepProgress } from './progress-bar.ts';

export interface TelemetrySink {
  /** Before anything else: the records a resumed run keeps ([] for a new run); a sink that holds a history writes it from them. */
  start?(kept: readonly MetricRecord[]): void;
  /** One checked metric record; records come in order of step. */
  record?(record: MetricRecord): void;
  /** A progress line; `fields`, when given, are its parts (`text` joins them), for a terminal to fit to its width. */
  line?(text: string, fields?: readonly LineField[]): void;
  warn?(text: string): void;
  /** After each step. */
  progress?(p: StepProgress): void;
  /** Ends what is live on screen (the progress bar): at the end of training, and when it fails. */
  flush?(): void;
  /** The run finished (summary.json is written): sends what is held. Never throws for a remote service's problems. */
  close?(): Promise<void>;
}

/** The terminal: lines above the progress bar, which shows only when `terminal` is one (its isTTY). */
export class ConsoleSink implements TelemetrySink {
  private bar: ProgressBar | null = null;

  constructor(private readonly terminal: NodeJS.WriteStream = process.stdout) {}

  line(text: string, fields?: readonly LineField[]): void {
    const shown = fields && this.terminal.isTTY ? fitFields(fields, (this.terminal.columns || 80) - 1) : text;
    if (this.bar) this.bar.log(shown);
    else this.terminal.write(shown + '\n');
  }

  warn(text: string): void {
    if (this.bar) this.bar.log(`warning: ${text}`);
    else process.stderr.write(`warning: ${text}\n`);
  }

  progress(p: StepProgress): void {
    if (!this.bar && this.terminal.isTTY) this.bar = new ProgressBar(p.totalSteps, this.terminal);
    this.bar?.update(p);
  }

  flush(): void {
    this.bar?.stop();
    this.bar = null;
  }
}

/** log.txt: each line after its time (ISO 8601, UTC), whole (a terminal's line may be fitted; this one is not). */
export class LogFileSink implements TelemetrySink {
  private readonly file: string;

  constructor(runDir: string) {
    this.file = path.join(runDir, LOG_FILE);
  }

  line(text: string): void {
    this.append(text);
  }

  warn(text: string): void {
    this.append(`warning: ${text}`);
  }

  private append(text: string): void {
    const time = new Date().toISOString();
    appendOwnFile(
      this.file,
      text
        .split('\n')
        .map((line) => `${time} ${line}\n`)
        .join(''),
    );
  }
}

/**
 * metrics.jsonl: one record a line, appended synchronously so that a crash loses nothing. A resumed run's file is
 * replaced whole by the records it keeps (written aside and renamed: compare and eval may be reading it meanwhile).
 */
export class MetricsJsonlSink implements TelemetrySink {
  private readonly file: string;

  constructor(
    runDir: string,
    private readonly resumed: boolean,
  ) {
    this.file = path.join(runDir, METRICS_FILE);
  }

  start(kept: readonly MetricRecord[]): void {
    if (this.resumed) replaceOwnFile(this.file, kept.map((r) => JSON.stringify(r) + '\n').join(''));
  }

  record(record: MetricRecord): void {
    appendOwnFile(this.file, JSON.stringify(record) + '\n');
  }
}
