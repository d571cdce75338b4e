// What a training run shows on a terminal: its progress lines, fitted to the terminal's width, and the live progress
// bar (cli-progress): one line at the bottom of the screen, redrawn in place, with the lines printed above it. Only the
// terminal sees the fitting and the bar: log.txt and the piped output of a run keep whole lines (RunLogger decides,
// from the stream's isTTY). docs/training.md "Logs" says which fields go first.
import cliProgress from 'cli-progress';

export interface StepProgress {
  step: number;
  totalSteps: number;
  /** Share of the epoch's batches read so far (0–1). */
  epochFraction: number;
  /** The loss of the step just taken (null for a dropped NaN step). */
  loss: number | null;
}

/** One field of a line; a narrow terminal drops the fields of highest `rank` first (0 is kept longest). */
export interface LineField {
  text: string;
  rank: number;
}

const SEPARATOR = ' | ';
/** Columns a string takes (code points: the fields hold no wide or combining characters). */
const columnsOf = (text: string) => [...text].length;

/** The whole line, every field: what log.txt and piped output get. */
export function joinFields(fields: readonly LineField[]): string {
  return fields.map((f) => f.text).join(SEPARATOR);
}

/**
 * The line in at most `width` columns: fields are dropped whole, the highest rank first (of equal ranks the rightmost),
 * until it fits; the others keep their order. The last field left is kept even when wider (the terminal wraps it).
 */
export function fitFields(fields: readonly LineField[], width: number): string {
  const kept = [...fields];
  while (kept.length > 1 && columnsOf(joinFields(kept)) > width) {
    let drop = 0;
    for (let i = 1; i < kept.length; i++) if (kept[i].rank >= kept[drop].rank) drop = i;
    kept.splice(drop, 1);
  }
  return joinFields(kept);
}

/** "1m30s", "2h05m", "?" for an unknown (infinite or NaN) time. */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds)) return '?';
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  return h > 0 ? `${h}h${String(m).padStart(2, '0')}m` : `${m}m${String(s % 60).padStart(2, '0')}s`;
}

/** What a progress line reports: the logging window that ends at `step`. */
export interface ProgressNumbers {
  step: number;
  totalSteps: number;
  epochFraction: number;
  loss: number;
  lr: number;
  gradNorm: number;
  tokensPerS: number;
  etaS: number;
  /** Model FLOPs utilisation (0–1), null where the device's peak is not known. */
  mfu?: number | null;
}

/**
 * The progress line's fields in the order printed. Kept longest: where the run is, its loss, when it ends and how fast
 * it goes; then the gradient norm (instability shows there first), the epoch (the step already says how far), the
 * learning rate (the schedule fixes it) and the perplexity (exp of the loss).
 */
export function progressFields(p: ProgressNumbers): LineField[] {
  return [
    { text: `step ${p.step}/${p.totalSteps}`, rank: 0 },
    { text: `epoch ${(100 * p.epochFraction).toFixed(1)}%`, rank: 5 },
    { text: `loss ${p.loss.toFixed(4)}`, rank: 1 },
    { text: `ppl ${Math.exp(p.loss).toFixed(2)}`, rank: 7 },
    { text: `lr ${p.lr.toExponential(2)}`, rank: 6 },
    { text: `grad ${p.gradNorm.toFixed(3)}`, rank: 4 },
    { text: `${Math.round(p.tokensPerS).toLocaleString('en-US')} tok/s`, rank: 3 },
    { text: `ETA ${formatDuration(p.etaS)}`, rank: 2 },
    ...(p.mfu == null ? [] : [{ text: `MFU ${(100 * p.mfu).toFixed(1)}%`, rank: 8 }]),
  ];
}

/** The bar's drawing: at most this many cells, and none when fewer than the minimum fit beside the fields. */
const BAR_CELLS = 30;
const MIN_BAR_CELLS = 10;

interface BarPayload {
  epoch: string;
  loss: string;
}

/**
 * The bar's line in `maxWidth - 1` columns (the last column is left free: a line that fills it makes some terminals
 * wrap before the next redraw): `step 120/250 ████░░░░ 48% | epoch 12.3% | loss 5.3456 | ETA 1m30s`; the epoch goes
 * first, then the drawing shrinks to the room left and goes, then the ETA and the loss.
 */
function formatBar(_options: unknown, params: { progress: number; eta: number; value: number; total: number; maxWidth: number }, payload: BarPayload): string {
  const width = params.maxWidth - 1;
  const head = `step ${params.value}/${params.total}`;
  const fields: LineField[] = [
    { text: `${head} ${Math.floor(params.progress * 100)}%`, rank: 0 },
    { text: `epoch ${payload.epoch}%`, rank: 3 },
    { text: `loss ${payload.loss}`, rank: 1 },
    { text: `ETA ${formatDuration(params.eta)}`, rank: 2 },
  ];
  const line = fitFields(fields, width);
  const cells = Math.min(BAR_CELLS, width - columnsOf(line) - 1);
  if (cells < MIN_BAR_CELLS) return line;
  const done = Math.round(Math.min(1, Math.max(0, params.progress)) * cells);
  return `${head} ${'█'.repeat(done)}${'░'.repeat(cells - done)}${line.slice(head.length)}`;
}

export class ProgressBar {
  private readonly bars: cliProgress.MultiBar;
  private readonly bar: cliProgress.SingleBar;

  constructor(totalSteps: number, stream: NodeJS.WriteStream = process.stdout) {
    // No gracefulExit: the trainer's own SIGINT/SIGTERM handlers save a checkpoint, and must stay the only ones.
    // linewrap: true leaves the terminal's own wrapping on; cli-progress would turn it off (ESC [?7l), and a line
    // wider than the terminal (a long path, a warning) would then be cut, its last column overwritten by the rest.
    this.bars = new cliProgress.MultiBar({
      stream,
      format: formatBar as unknown as cliProgress.GenericFormatter,
      linewrap: true,
      hideCursor: false,
      clearOnComplete: true,
      etaBuffer: 50,
    });
    this.bar = this.bars.create(totalSteps, 0, { epoch: '0.0', loss: '—' } satisfies BarPayload);
  }

  update(p: StepProgress): void {
    this.bar.update(p.step, { epoch: (100 * p.epochFraction).toFixed(1), loss: p.loss === null ? '—' : p.loss.toFixed(4) } satisfies BarPayload);
  }

  /** Prints `text` above the bar at once. */
  log(text: string): void {
    this.bars.log(`${text}\n`);
    this.bars.update();
  }

  /** Removes the bar (and its redraw timer, which would keep the process alive). */
  stop(): void {
    this.bars.stop();
  }
}
