// `npm run paper -- slay-tasks --quick` for real, as CI runs it: every unit trained through the sweep machinery's
// local executor (a guard and a worker process each, wasm), the results file written, the verdicts those of the stated
// rule on the units' own values, a second run skipping every unit (resumable), status from the run folders.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { publishedAccuracy } from '../../src/paper/slay-tasks.ts';
import type { ExperimentResults } from '../../src/paper/results.ts';
import { killStartedClis, startCli } from '../helpers/cli.ts';

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(path.join(tmpdir(), 'paper-quick-'));
});
afterAll(async () => {
  killStartedClis();
  await rm(dir, { recursive: true, force: true });
});

const paper = (...args: string[]) => startCli('src/cli/paper.ts', ['slay-tasks', '--quick', '--runs', path.join(dir, 'runs'), ...args]);

describe('npm run paper -- slay-tasks --quick', () => {
  it('runs every unit, writes the results with the rule’s verdicts, and runs nothing again the second time', async () => {
    const out = path.join(dir, 'out');
    const first = paper('--out', out, '--cores', '2');
    expect(await first.exited, first.output()).toEqual({ code: 0, signal: null });
    expect(first.output()).toMatch(/9 units done now, 0 done before, 0 stopped, 0 failed/);

    const results = JSON.parse(readFileSync(path.join(out, 'slay-tasks-quick.json'), 'utf8')) as ExperimentResults;
    expect(results.units).toHaveLength(9);
    for (const unit of results.units) {
      expect(unit.error).toBeNull();
      expect(unit.values).toHaveLength(1);
      expect(unit.values[0]).toBeGreaterThanOrEqual(0);
      expect(unit.values[0]).toBeLessThanOrEqual(1);
    }
    // Each verdict recomputed here from the units' accuracies and the paper's number.
    expect(results.cells).toHaveLength(9);
    for (const cell of results.cells) {
      const value = results.units.find((u) => u.name === `${cell.row}-${cell.column}-seed42`)!.values[0];
      const published = publishedAccuracy(cell.row, cell.column)!;
      expect(cell.ours.mean).toBe(value);
      const agrees = Math.abs(value - published.mean) <= 2 * (published.sd ?? 0) + 0.02;
      expect(cell.verdict, `${cell.row} × ${cell.column}`).toBe(agrees ? 'agrees' : 'disagrees');
      if (!agrees) expect(cell.explanation).toMatchObject({ kind: 'deliberate', text: expect.stringMatching(/^--quick trains 50 steps/) });
    }
    expect(results.counts.agrees + results.counts.disagrees).toBe(9);

    const markdown = readFileSync(path.join(out, 'slay-tasks-quick.md'), 'utf8');
    expect(markdown).toContain(`**${results.counts.agrees} of 9 cells with a published value agree with the paper**`);
    expect(markdown).toContain('| regenerate | `npm run paper -- slay-tasks --quick` |');
    expect(markdown).toMatch(/\| commit \| [0-9a-f]{12}/);
    expect(markdown).toMatch(/\| backend \| wasm, TensorFlow\.js \d/);
    expect(markdown).toMatch(/\| wall time \| [\d.]+ (s|min)/);
    expect(existsSync(path.join(out, 'slay-tasks-quick', 'agreement.svg'))).toBe(true);

    const again = paper('--out', out);
    expect(await again.exited, again.output()).toEqual({ code: 0, signal: null });
    expect(again.output()).toMatch(/0 units done now, 9 done before/);
    const runDir = path.join(dir, 'runs', 'slay-tasks-v1-wasm-quick');
    expect(readdirSync(runDir).filter((e) => e !== '_sweep')).toHaveLength(9);

    const status = paper('--status');
    expect(await status.exited).toEqual({ code: 0, signal: null });
    expect(status.output()).toMatch(/copy-softmax-seed42\s+done\s+accuracy [01]\.\d{3}, loss/);
    expect(status.output()).toMatch(/9 runs: 9 done/);
  });
});
