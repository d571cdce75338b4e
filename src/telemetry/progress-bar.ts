// The live progress bar of a training run on a terminal (cli-progress): one line at the bottom of the screen, redrawn
// in place, with the run's progress lines printed above it. Only the terminal sees it: log.txt and the piped output
// of a run keep their plain lines (RunLogger decides, from stdout.isTTY).
import cliProgress from 'cli-progress';

export interface StepProgress {
  step: number;
  totalSteps: number;
  /** Share of the epoch's batches read so far (0–1). */
  epochFraction: number;
  /** The loss of the step just taken (null for a dropped NaN step). */
  loss: number | null;
}

export class ProgressBar {
  private readonly bars: cliProgress.MultiBar;
  private readonly bar: cliProgress.SingleBar;

  constructor(totalSteps: number, stream: NodeJS.WriteStream = process.stdout) {
    // No gracefulExit: the trainer's own SIGINT/SIGTERM handlers save a checkpoint, and must stay the only ones.
    this.bars = new cliProgress.MultiBar({
      stream,
      format: 'step {value}/{total} {bar} {percentage}% | epoch {epoch}% | loss {loss} | ETA {eta_formatted}',
      barsize: 30,
      hideCursor: false,
      clearOnComplete: true,
      etaBuffer: 50,
    }, cliProgress.Presets.shades_classic);
    this.bar = this.bars.create(totalSteps, 0, { epoch: '0.0', loss: '—' });
  }

  update(p: StepProgress): void {
    this.bar.update(p.step, { epoch: (100 * p.epochFraction).toFixed(1), loss: p.loss === null ? '—' : p.loss.toFixed(4) });
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
