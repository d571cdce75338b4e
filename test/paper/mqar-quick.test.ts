// `npm run paper -- mqar --quick` end to end on the test grid (SLAYFORMER_MQAR_TEST_GRID: two units of a few steps, wasm):
// every unit trained through the sweep machinery's local executor (a guard and a worker process each), the results file
// with the state sizes, the paired difference and the accuracy-against-state plot, and a second run that trains nothing.
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TEST_GRID_VARIABLE } from '../../src/paper/mqar.ts';
import type { ExperimentResults } from '../../src/paper/results.ts';
import { killStartedClis, startCli } from '../helpers/cli.ts';

describe('npm run paper -- mqar --quick (test grid)', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(path.join(tmpdir(), 'paper-mqar-'));
  });
  afterAll(async () => {
    killStartedClis();
    await rm(dir, { recursive: true, force: true });
  });
  const paper = (...args: string[]) =>
    startCli('src/cli/paper.ts', ['mqar', '--quick', '--backend', 'wasm', '--runs', path.join(dir, 'runs'), '--out', path.join(dir, 'out'), ...args], {
      ...process.env,
      [TEST_GRID_VARIABLE]: '1',
    });

  it('trains every unit, writes the results with the state sizes and the plot, and trains nothing the second time', async () => {
    const first = paper('--cores', '2');
    expect(await first.exited, first.output()).toEqual({ code: 0, signal: null });
    expect(first.output()).toMatch(/2 units done now, 0 done before, 0 stopped, 0 failed/);
    const out = path.join(dir, 'out');
    const results = JSON.parse(readFileSync(path.join(out, 'mqar-quick.json'), 'utf8')) as ExperimentResults;
    expect(results.units.map((u) => u.name)).toEqual(['softmax-T32-kv2-d16-seed1', 'linear-elu-T32-kv2-d16-seed1']);
    for (const unit of results.units) {
      expect(unit.error).toBeNull();
      expect(unit.values[0]).toBeGreaterThanOrEqual(0);
      expect(unit.values[0]).toBeLessThanOrEqual(1);
      expect(unit.extra.best_lr).toBe(3e-3);
    }
    expect(results.units[0].extra.state_floats).toBe(2 * 32 * 16);
    expect(results.units[1].extra.state_floats).toBe(16 * 17);
    expect(results.cells.map((c) => [c.table, c.row, c.column])).toEqual([
      ['T = 32, 2 key–value pairs', 'softmax', 'd_model 16'],
      ['T = 32, 2 key–value pairs', 'linear-elu', 'd_model 16'],
    ]);
    expect(results.differences).toMatchObject([{ row: 'linear-elu', baseline: 'softmax', n: 1, metric: null }]);
    const markdown = readFileSync(path.join(out, 'mqar-quick.md'), 'utf8');
    expect(markdown).toContain('| regenerate | `npm run paper -- mqar --quick --backend wasm` |');
    expect(markdown).toContain(
      '**The paper prints no numbers to set beside ours: 0 of 1 paired differences separated from 0 (0 above, 0 below), 1 without two pairs done**',
    );
    expect(markdown).toContain('### State size per layer (floats)');
    expect(markdown).toContain('](mqar-quick/against-state_floats-1.svg)');
    expect(readFileSync(path.join(out, 'mqar-quick', 'against-state_floats-1.svg'), 'utf8')).toMatch(/^<svg/);

    const again = paper();
    expect(await again.exited, again.output()).toEqual({ code: 0, signal: null });
    expect(again.output()).toMatch(/0 units done now, 2 done before/);
    const runDir = path.join(dir, 'runs', 'mqar-v1-wasm-quick');
    expect(existsSync(runDir)).toBe(true);
    expect(readdirSync(runDir).filter((e) => e !== '_sweep')).toHaveLength(2);
  });
});
