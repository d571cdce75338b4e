// What fits a terminal: the progress line of a run and the live bar below it are never wider than the terminal, lose
// their least important fields first and never a part of one; log.txt keeps every field.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { fitFields, joinFields, progressFields, ProgressBar, type LineField } from '../../src/telemetry/progress-bar.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { TRAINING_SUMMARY } from '../helpers/run-record.ts';

/** A terminal of `columns` columns that keeps what is written to it. */
class FakeTerminal extends Writable {
  readonly isTTY = true;
  written = '';
  constructor(readonly columns: number) {
    super();
  }
  override _write(chunk: Buffer | string, _encoding: string, done: () => void): void {
    this.written += chunk.toString();
    done();
  }
}

// eslint-disable-next-line no-control-regex
const CONTROL = /\x1b\[[0-9;?]*[A-Za-z]|\x1b[78]/g;
/** What each row of the terminal was given between two returns to its first column (escape sequences removed). */
function rows(written: string): string[] {
  // eslint-disable-next-line no-control-regex
  return written.split(/\n|\r|\x1b\[\d*G|\x1b\[\d*K/).map((row) => row.replace(CONTROL, ''));
}

const STEP = { step: 120, totalSteps: 250, epochFraction: 0.48, loss: 5.34561, lr: 1e-3, gradNorm: 1.2421, tokensPerS: 12345.6, etaS: 90 };

describe('the progress line', () => {
  const fields = progressFields(STEP);
  const full = joinFields(fields);

  it('holds every field for log.txt and piped output', () => {
    expect(full).toBe('step 120/250 | epoch 48.0% | loss 5.3456 | ppl 209.69 | lr 1.00e-3 | grad 1.242 | 12,346 tok/s | ETA 1m30s');
  });

  it('at 80 columns drops the least important fields whole and keeps step, loss, tokens/s and ETA', () => {
    const fitted = fitFields(fields, 79);
    expect(fitted.length).toBeLessThanOrEqual(79);
    expect(fitted).toBe('step 120/250 | loss 5.3456 | grad 1.242 | 12,346 tok/s | ETA 1m30s');
    // Narrower: grad and then tokens/s go; every field left is one of the line's, in its order.
    for (let width = 20; width <= 120; width++) {
      const line = fitFields(fields, width);
      const kept = line.split(' | ');
      expect(
        kept.every((field) => fields.some((f) => f.text === field)),
        line,
      ).toBe(true);
      expect(kept).toEqual(fields.map((f) => f.text).filter((text) => kept.includes(text)));
      if (width >= 'step 120/250'.length) expect(line.length, line).toBeLessThanOrEqual(width);
      expect(kept[0]).toBe('step 120/250');
    }
    expect(fitFields(fields, 50)).toBe('step 120/250 | loss 5.3456 | ETA 1m30s');
    expect(fitFields(fields, 200)).toBe(full);
  });

  it('a field wider than the terminal is kept whole (the terminal wraps it), never cut', () => {
    const wide: LineField[] = [
      { text: 'x'.repeat(30), rank: 0 },
      { text: 'y', rank: 1 },
    ];
    expect(fitFields(wide, 10)).toBe('x'.repeat(30));
  });
});

describe('the live bar', () => {
  for (const columns of [80, 60, 40]) {
    it(`at ${columns} columns fits the terminal, drops the epoch, then the drawing, then the ETA, and leaves the terminal's line wrapping on`, async () => {
      const terminal = new FakeTerminal(columns);
      const bar = new ProgressBar(250, terminal as unknown as NodeJS.WriteStream);
      bar.update({ step: 120, totalSteps: 250, epochFraction: 0.48, loss: 5.34561 });
      bar.log(fitFields(progressFields(STEP), columns - 1)); // printed above the bar, which is redrawn below it
      bar.stop();
      // Turning the terminal's wrapping off (ESC [?7l) makes it overwrite the last column with whatever passes it.
      expect(terminal.written).not.toContain('\x1b[?7l');
      const drawn = rows(terminal.written).filter((row) => /^step 120\/250 (?:[█░]+ )?48% /.test(row));
      expect(drawn.length).toBeGreaterThan(0);
      for (const row of drawn) {
        expect(row.length, row).toBeLessThan(columns);
        // At 40 columns the ETA goes too: the loss is kept longest.
        expect(row).toMatch(columns >= 60 ? /\| loss 5\.3456 \| ETA \S+$/ : /^step 120\/250 48% \| loss 5\.3456$/);
      }
      if (columns === 80) expect(drawn[0]).toMatch(/^step 120\/250 [█░]{10,30} 48% \| epoch 48\.0% \| loss 5\.3456 \| ETA \S+$/);
    });
  }
});

describe('RunLogger on a terminal', () => {
  let tmp: string;
  beforeEach(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'progress-line-'));
  });
  afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

  it('prints the progress line fitted to the terminal and keeps every field in log.txt', async () => {
    const recipe = parseRecipe(`data: {dataset: d, tokenizer: t.json}\ntrain: {runDir: ${JSON.stringify(tmp)}}\nwandb: {enabled: false}`, 'tiny.yaml');
    const terminal = new FakeTerminal(80);
    const logger = await RunLogger.create(recipe, { terminal: terminal as unknown as NodeJS.WriteStream });
    const fields = progressFields(STEP);
    logger.line(joinFields(fields), fields);
    logger.line('a plain line');
    await logger.finish(TRAINING_SUMMARY);
    expect(terminal.written).toBe(`${fitFields(fields, 79)}\na plain line\n`);
    expect(fs.readFileSync(path.join(logger.dir, 'log.txt'), 'utf8')).toContain(` ${joinFields(fields)}\n`);
  });
});
