// The seed-variance split (train.seed vs model.featureSeed) and compare's estimator-health and seed-variance sections.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { sdRule, type Experiment } from '../../src/paper/protocol.ts';
import { buildResults, cellSeedVariance, resultsMarkdown } from '../../src/paper/results.ts';
import { experimentRunSet, type UnitRecord } from '../../src/paper/run.ts';
import { compareRuns } from '../../src/report/compare.ts';
import { splitSeedVariance, type SeedVarianceSplit } from '../../src/report/seed-variance.ts';

const root = mkdtempSync(join(tmpdir(), 'seed-variance-test-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

describe('splitSeedVariance', () => {
  it('matches the two-way ANOVA estimator worked by hand on a 2 × 3 grid, a repeated cell averaged first', () => {
    // y (rows train.seed 1, 2; columns featureSeed 10, 20, 30) = [[1, 2, 6], [3, 2, 10]]: row means 3, 5; column means
    // 2, 2, 8; grand mean 4. MS_A = 3·(1 + 1)/1 = 6; MS_B = 2·(4 + 4 + 16)/2 = 24; residuals [[0, 1, −1], [0, −1, 1]],
    // MS_E = 4/2 = 2. σ²_A = (6 − 2)/3 = 4/3, σ²_B = (24 − 2)/2 = 11, σ²_E = 2.
    const grid = [
      [1, 2, 6],
      [3, 2, 10],
    ];
    const cells = grid.flatMap((row, a) => row.map((value, b) => ({ weightSeed: a + 1, featureSeed: 10 * (b + 1), value })));
    // Cell (1, 10) run twice, 0 and 2: its mean is the 1 above.
    cells[0] = { ...cells[0], value: 0 };
    cells.push({ weightSeed: 1, featureSeed: 10, value: 2 });
    const split = splitSeedVariance(cells) as SeedVarianceSplit;
    expect(split.weightSeeds).toEqual([1, 2]);
    expect(split.featureSeeds).toEqual([10, 20, 30]);
    expect(split.weights).toBeCloseTo(4 / 3, 12);
    expect(split.features).toBeCloseTo(11, 12);
    expect(split.residual).toBeCloseTo(2, 12);
  });

  it('a component below 0 (its seed outweighed by the noise) is reported as 0 with its raw value kept', () => {
    // [[0, 1], [1, 0]]: no row or column effect, all interaction: MS_A = MS_B = 0, MS_E = 1, σ²_A = σ²_B = −1/2.
    const cells = [
      { weightSeed: 1, featureSeed: 1, value: 0 },
      { weightSeed: 1, featureSeed: 2, value: 1 },
      { weightSeed: 2, featureSeed: 1, value: 1 },
      { weightSeed: 2, featureSeed: 2, value: 0 },
    ];
    const split = splitSeedVariance(cells) as SeedVarianceSplit;
    expect(split).toMatchObject({ weights: 0, features: 0, raw: { weights: -0.5, features: -0.5 } });
    expect(split.residual).toBeCloseTo(1, 12);
  });

  it('says why when the runs do not make a full grid of at least 2 × 2 seeds', () => {
    expect(
      splitSeedVariance([
        { weightSeed: 1, featureSeed: 1, value: 1 },
        { weightSeed: 1, featureSeed: 2, value: 2 },
      ]),
    ).toEqual({
      problem: '1 weight seed × 2 feature seeds: needs ≥ 2 of each',
    });
    const three = [
      { weightSeed: 1, featureSeed: 1, value: 1 },
      { weightSeed: 1, featureSeed: 2, value: 2 },
      { weightSeed: 2, featureSeed: 1, value: 3 },
    ];
    expect(splitSeedVariance(three)).toEqual({ problem: 'not a full grid: no run for (train.seed, model.featureSeed) (2, 2)' });
  });
});

/** A finished run folder whose validation records carry estimator health (2 layers). */
function writeRun(folder: string, seed: number, featureSeed: number | null, finalLoss: number): string {
  const dir = join(root, 'runs', folder);
  mkdirSync(dir, { recursive: true });
  const config = {
    name: 'tiny',
    backend: 'cpu',
    model: { kind: 'gpt', dModel: 32, numLayers: 2, numHeads: 2, attention: { name: 'performer', options: {} }, featureSeed },
    data: { dataset: 'data/x', tokenizer: 't.json', seqLen: 16 },
    train: { batchSize: 2, lr: 1e-3, seed, runDir: 'runs', maxTokens: 2000, estimatorHealth: true },
    wandb: { enabled: false, project: 'p', entity: null, runName: null },
  };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  const lines = [1000, 2000].map((tokens, i) => {
    const loss = i === 1 ? finalLoss : finalLoss + 1;
    const health = {
      kernel_error: [0.3 - 0.1 * i, 0.5],
      output_error: [0.1, 0.2],
      denominator_min: [0.25, -0.5],
      denominator_p01: [0.5, 0.1],
      denominator_p50: [0.9, 0.8],
    };
    return JSON.stringify({
      step: 10 * (i + 1),
      tokens,
      split: 'val',
      loss,
      ppl: Math.exp(loss),
      lr: 1e-3,
      grad_norm: null,
      tokens_per_s: 500,
      elapsed_s: tokens / 500,
      estimator_health: health,
    });
  });
  writeFileSync(join(dir, 'metrics.jsonl'), lines.join('\n') + '\n');
  return dir;
}

describe('compare', () => {
  it('shows each run’s estimator health per layer and splits the seed variance of runs that cross both seeds', async () => {
    const grid = [
      [1, 2],
      [3, 6],
    ];
    const dirs = grid.flatMap((row, a) => row.map((loss, b) => writeRun(`performer-s${a + 1}-f${b + 1}`, a + 1, b + 1, loss)));
    const outDir = join(root, 'report');
    await compareRuns(dirs, { outDir, baseline: null, warn: () => {} });
    const report = readFileSync(join(outDir, 'report.md'), 'utf8');
    expect(report).toContain('## Estimator health');
    expect(report).toContain('## Seed variance: weights and data vs random features');
    const health = readFileSync(join(outDir, 'estimator-health.csv'), 'utf8').trim().split(/\r?\n/);
    expect(health[0]).toBe('run,attention,step,layer,kernel error,output error,denominator min,denominator 1%,denominator 50%');
    // The last health record (step 20) of each run, one row per layer.
    expect(health).toHaveLength(1 + 4 * 2);
    expect(health).toContain('performer-s1-f1,performer,20,1,0.5,0.2,-0.5,0.1,0.8');
    expect(health.find((l) => l.startsWith('performer-s1-f1,performer,20,0,'))?.split(',')[4]).toBe(String(0.3 - 0.1));
    // [[1, 2], [3, 6]]: row means 1.5, 4.5, column means 2, 4, grand 3; MS_A = 2·(2.25 + 2.25) = 9, MS_B = 2·(1 + 1) = 4,
    // residuals ±0.5, MS_E = 1: σ²_A = (9 − 1)/2 = 4, σ²_B = (4 − 1)/2 = 1.5, σ²_E = 1.
    const split = readFileSync(join(outDir, 'seed-variance.csv'), 'utf8').trim().split(/\r?\n/);
    expect(split[1].split(',').slice(0, 2)).toEqual(['performer', '4']);
    expect(split[1].split(',').slice(-3).map(Number)).toEqual([4, 1.5, 1]);
    expect(readFileSync(join(outDir, 'index.html'), 'utf8')).toContain('estimator-health.svg');
  });
});

describe('paper results', () => {
  it('a cell whose units cross seed and featureSeed gets the split, in the results file too', () => {
    // The 2 × 3 grid worked by hand above, one value per unit (a unit's values are averaged: 0 and 2 for the first).
    const grid = [
      [1, 2, 6],
      [3, 2, 10],
    ];
    const units = grid.flatMap((row, a) =>
      row.map((value, b) => ({ name: `s${a + 1}-f${b + 1}`, settings: { seed: a + 1, featureSeed: 10 * (b + 1) }, value })),
    );
    const experiment: Experiment = {
      name: 'split',
      version: 1,
      title: 'Split',
      source: 'none',
      measures: 'loss',
      metric: { name: 'loss', digits: 2 },
      agreement: sdRule(2, 0, 'rule'),
      protocol: {},
      notes: [],
      backend: 'wasm',
      shown: [],
      units: () => units.map(({ name, settings }) => ({ name, settings })),
      cells: () => [{ table: 'T', row: 'r', column: 'c', published: null, units: units.map((u) => u.name) }],
      runUnit: async () => ({ values: [], extra: {}, headline: '' }),
    };
    const records: UnitRecord[] = units.map(({ name, settings, value }, i) => ({
      unit: { name, settings },
      dir: join(root, name),
      env: null,
      failure: null,
      result: {
        experiment: 'split',
        version: 1,
        unit: name,
        outcome: { values: i === 0 ? [0, 2] : [value], extra: {}, headline: '' },
        seconds: 1,
        cpuSeconds: 1,
        startedAt: '2026-01-01T00:00:00Z',
        finishedAt: '2026-01-01T00:00:01Z',
      },
    }));
    const results = buildResults(experimentRunSet(experiment, { quick: false, backend: 'wasm', runsRoot: join(root, 'paper') }), records);
    const split = results.cells[0].seedVariance!;
    expect(split.weights).toBeCloseTo(4 / 3, 12);
    expect(split.features).toBeCloseTo(11, 12);
    expect(split.residual).toBeCloseTo(2, 12);
    expect(resultsMarkdown(results, null)).toContain(
      `| T | r | c | 2 × 3 | ${Math.sqrt(4 / 3).toFixed(3)} | ${Math.sqrt(11).toFixed(3)} | ${Math.sqrt(2).toFixed(3)} |`,
    );
    // Units without a feature seed: no split.
    expect(cellSeedVariance(records.map((r) => ({ ...r, unit: { ...r.unit, settings: { seed: r.unit.settings.seed } } })))).toBeNull();
  });
});
