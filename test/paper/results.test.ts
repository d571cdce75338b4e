// The results of a paper experiment from its units' records, on a made-up protocol (no training): the per-cell
// verdict under the stated rule, explanations only where a cell disagrees (an open question where the protocol has
// none), cells without a value, the counts, the provenance lines, and the run set the sweep executors get.
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { judge, sdRule } from '../../src/paper/protocol.ts';
import type { Experiment, UnitOutcome } from '../../src/paper/protocol.ts';
import { pairedOf } from '../../src/paper/paired-claims.ts';
import { buildResults, correctedForFamily, resultsMarkdown, writeResults } from '../../src/paper/results.ts';
import { experimentRunSet, readUnitResult } from '../../src/paper/run.ts';
import type { UnitRecord, UnitResultFile } from '../../src/paper/run.ts';
import { renderSbatchScript } from '../../src/sweep/slurm.ts';

const dir = mkdtempSync(path.join(tmpdir(), 'paper-results-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const rule = sdRule(2, 0.02, '|Δ| ≤ 2·√(sd_paper² + sd_ours²) + 0.02');

describe('judge', () => {
  it('agrees within k·√(sd_paper² + sd_ours²) + slack, not beyond; no verdict without a value or a published number', () => {
    const paper = { mean: 0.5, sd: 0.03, source: 'Table 1' };
    // sd_ours 0.04: tolerance 2·0.05 + 0.02 = 0.12.
    expect(judge(rule, paper, { mean: 0.619, sd: 0.04, n: 3 })).toMatchObject({ verdict: 'agrees' });
    expect(judge(rule, paper, { mean: 0.621, sd: 0.04, n: 3 })).toMatchObject({ verdict: 'disagrees' });
    expect(judge(rule, paper, { mean: 0.621, sd: 0.04, n: 3 }).tolerance).toBeCloseTo(0.12, 12);
    expect(judge(rule, paper, { mean: 0.38, sd: 0.04, n: 3 }).delta).toBeCloseTo(-0.12, 12);
    // One seed: no sd of ours.
    expect(judge(rule, { ...paper, sd: 0 }, { mean: 0.519, sd: null, n: 1 })).toMatchObject({ verdict: 'agrees' });
    expect(judge(rule, { ...paper, sd: 0 }, { mean: 0.521, sd: null, n: 1 })).toMatchObject({ verdict: 'disagrees' });
    expect(judge(rule, paper, { mean: NaN, sd: null, n: 0 })).toEqual({ verdict: 'not run', delta: null, tolerance: null });
    expect(judge(rule, null, { mean: 0.5, sd: null, n: 1 })).toMatchObject({ verdict: 'no published value' });
  });
});

const toy: Experiment = {
  name: 'toy',
  version: 3,
  title: 'Toy',
  source: 'A paper, Table 1',
  measures: 'accuracy',
  metric: { name: 'accuracy', digits: 2 },
  agreement: rule,
  protocol: { steps: '10' },
  notes: ['A note.'],
  backend: 'wasm',
  shown: [{ key: 'loss', paperKey: 'paper_loss', title: 'Loss', digits: 3 }],
  units: () => ['a-s1', 'a-s2', 'b-s1', 'b-s2', 'c-s1', 'd-s1'].map((name) => ({ name, settings: {} })),
  cells: () => [
    { table: 'Table 1', row: 'task', column: 'a', published: { mean: 0.9, sd: 0.01, source: 'Table 1' }, units: ['a-s1', 'a-s2'] },
    {
      table: 'Table 1',
      row: 'task',
      column: 'b',
      published: { mean: 0.5, sd: 0.0, source: 'Table 1' },
      units: ['b-s1', 'b-s2'],
      explanation: { kind: 'protocol-gap', text: 'the paper used another batch' },
    },
    { table: 'Table 1', row: 'other', column: 'a', published: { mean: 0.2, sd: 0.0, source: 'Table 1' }, units: ['c-s1'] },
    {
      table: 'Table 1',
      row: 'other',
      column: 'b',
      published: { mean: 0.2, sd: 0.0, source: 'Table 1' },
      units: ['d-s1'],
      explanation: { kind: 'deliberate', text: 'never used: the cell agrees' },
    },
    { table: 'Extra', row: 'task', column: 'e', published: null, units: ['a-s1'] },
  ],
  runUnit: async () => ({ values: [], extra: {}, headline: '' }),
};

function record(
  name: string,
  values: number[] | null,
  env: Record<string, unknown>,
  opts: { error?: string; failure?: string; start?: number } = {},
): UnitRecord {
  const outcome: UnitOutcome = {
    values: values ?? [],
    extra: { loss: values?.[0] ?? null, paper_loss: 1 },
    headline: 'x',
    ...(opts.error ? { error: opts.error } : {}),
  };
  const start = Date.parse('2026-01-01T00:00:00Z') + (opts.start ?? 0) * 1000;
  const result: UnitResultFile | null =
    values === null
      ? null
      : {
          experiment: 'toy',
          version: 3,
          unit: name,
          outcome,
          seconds: 10,
          cpuSeconds: 9,
          startedAt: new Date(start).toISOString(),
          finishedAt: new Date(start + 10_000).toISOString(),
        };
  return { unit: { name, settings: {} }, dir: result ? path.join(dir, name) : null, result, env: result ? env : null, failure: opts.failure ?? null };
}

const env = {
  git: { commit: '0123456789abcdef0123', dirty: false },
  backend: { name: 'wasm', tensorflow: null, versions: { 'tfjs-core': '4.22.0' } },
  cpuModel: 'Test CPU',
  cpus: 2,
  memoryGiB: 8,
  platform: 'linux-x64',
  node: 'v20',
};

describe('buildResults', () => {
  const set = experimentRunSet(toy, { quick: false, backend: 'wasm', runsRoot: path.join(dir, 'runs') });
  const records = [
    record('a-s1', [0.91], env),
    record('a-s2', [0.89], env, { start: 100 }), // 0.90 ± 0.014: agrees
    record('b-s1', [0.6], env),
    record('b-s2', [0.62], env), // 0.61 vs 0.5: disagrees, protocol gap
    record('c-s1', [0.5], { ...env, git: { commit: 'fedcba9876543210', dirty: true } }), // disagrees, no explanation: open
    record('d-s1', [], env, { error: 'OOM: out of memory' }), // ran, no value
  ];
  const results = buildResults(set, records, new Date('2026-01-02T00:00:00Z'));

  it('gives each cell its verdict, and an explanation only to disagreeing cells (open where none is declared)', () => {
    const cell = (row: string, column: string) => results.cells.find((c) => c.row === row && c.column === column)!;
    expect(cell('task', 'a')).toMatchObject({ verdict: 'agrees', explanation: null, values: [0.91, 0.89] });
    expect(cell('task', 'a').ours.mean).toBeCloseTo(0.9, 12);
    expect(cell('task', 'b')).toMatchObject({ verdict: 'disagrees', explanation: { kind: 'protocol-gap', text: 'the paper used another batch' } });
    expect(cell('other', 'a')).toMatchObject({ verdict: 'disagrees', explanation: { kind: 'open' } });
    expect(cell('other', 'b')).toMatchObject({ verdict: 'not run', explanation: null, error: 'OOM: out of memory' });
    expect(cell('task', 'e')).toMatchObject({ verdict: 'no published value' });
    expect(cell('task', 'a').extra.loss.mean).toBeCloseTo(0.9, 12);
    expect(results.counts).toEqual({
      withPublished: 4,
      agrees: 1,
      disagrees: 2,
      notRun: 1,
      extra: 1,
      disagreementsBy: { deliberate: 0, 'protocol-gap': 1, open: 1 },
    });
  });

  it('names the commits, backends, machines, wall time and the command', () => {
    expect(results.command).toBe('npm run paper -- toy');
    expect(results.provenance).toMatchObject({
      // Two commits: each names the units that ran at it; every unit records its own in the JSON.
      commits: ['0123456789ab: 5 units (a-s1, a-s2, b-s1, …)', 'fedcba987654 (with uncommitted changes): 1 unit (c-s1)'],
      backends: ['wasm, TensorFlow.js 4.22.0'],
      machines: ['Test CPU, 2 cores, 8 GiB, linux-x64, Node v20'],
      wallSeconds: 110,
      unitSeconds: 60,
      cpuSeconds: 54,
      units: { total: 6, done: 6, notDone: 0 },
    });
    expect(results.units.map((u) => [u.name, u.commit])).toContainEqual(['c-s1', 'fedcba987654 (with uncommitted changes)']);
    expect(results.units.find((u) => u.name === 'a-s1')!.commit).toBe('0123456789ab');
    const markdown = resultsMarkdown(results, 'toy/agreement.svg');
    expect(markdown).toContain(
      '**1 of 4 cells with a published value agree with the paper** (2 disagree: 0 by a deliberate difference, 1 by a protocol gap, 1 open; 1 without a value of ours); 1 more cells have no published value.',
    );
    expect(markdown).toContain('| regenerate | `npm run paper -- toy` |');
    expect(markdown).toContain('| wall time | 1 min 50 s from the first unit’s start');
    expect(markdown).toContain('| task | 0.90 ± 0.01 · paper 0.90 ± 0.01 ✓ | 0.61 ± 0.01 · paper 0.50 ± 0.00 ✗ |');
    expect(markdown).toContain('| other | 0.50 · paper 0.20 ± 0.00 ✗ | — (OOM: out of memory) |');
    expect(markdown).toContain('| Table 1 | task × b | 0.61 ± 0.01 | 0.50 ± 0.00 (Table 1) | +0.11 | 0.05 | protocol gap [1] |');
    expect(markdown).toContain('| Table 1 | other × a | 0.50 | 0.20 ± 0.00 (Table 1) | +0.30 | 0.02 | open question [2] |');
    expect(markdown).toContain('1. **protocol gap** (1 cell): the paper used another batch.\n2. **open question** (1 cell): not explained yet.');
    expect(markdown).not.toContain('never used');
    // The shown extra, per results table, with the paper's beside it.
    expect(markdown).toContain('### Loss: Table 1\n\n| | a | b |\n|---|---:|---:|\n| task | 0.900 ± 0.014 · paper 1.000 | 0.610 ± 0.014 · paper 1.000 |');
  });

  it('reports declared paired differences: Δ with its interval, p, which side of 0, or the seeds that would separate it', () => {
    const withDifferences: Experiment = {
      ...toy,
      differences: (view) => {
        const of = (row: string, base: string, read: (unit: string) => number | null | undefined) =>
          pairedOf([1, 2].map((s) => [read(`${row}-s${s}`), read(`${base}-s${s}`)] as const));
        return ['a', 'c'].map((row) => {
          const metric = of(row, 'b', (u) => view.values(u)[0]);
          const loss = of(row, 'b', (u) => view.extra(u, 'loss'));
          return { table: 'Table 1', row, baseline: 'b', n: metric.n, metric: metric.result, extra: { loss: loss.result } };
        });
      },
    };
    const markdown = resultsMarkdown(
      buildResults(experimentRunSet(withDifferences, { quick: false, backend: 'wasm', runsRoot: path.join(dir, 'runs') }), records),
      null,
    );
    // a − b per seed: 0.31, 0.27; mean 0.29, se 0.02, t(0.975, 1) = 12.706: 0.29 ± 0.254; p = 1 − (2/π)·atan(14.5) = 0.044.
    // One test in the family (c has one pair: no test), so its Holm-adjusted p is its p.
    expect(markdown).toContain('### Table 1: each − b\n\n| | pairs | Δ accuracy | p | p (Holm) | Δ loss | separated | seeds to separate |');
    expect(markdown).toContain('| a | 2 | +0.29 (+0.04 … +0.54) | 0.044 | 0.044 | +0.290 (+0.036 … +0.544) | **above** |  |');
    expect(markdown).toContain('| c | 1 | — | — | — | — | — |  |');
    expect(resultsMarkdown(results, null)).not.toContain('## Paired differences');
  });

  it("judges claims and separations after Holm's correction over the experiment's paired tests", () => {
    const claim = (p: number | null, side: 1 | -1) => ({ statement: 's', verdict: 'not run' as const, evidence: 'e', test: { p, side } });
    const difference = (p: number, mean: number) => ({
      table: 'T',
      row: 'r',
      baseline: 'b',
      n: 3,
      metric: { n: 3, mean, sd: 0.1, ci: [mean - 0.01, mean + 0.01] as [number, number], p, t: 1, level: 0.95 },
      extra: {},
    });
    // Raw, 0.03 holds and 0.01 is separated; as a family of three: 0.01·3 = 0.03, 0.03·2 = 0.06, 0.2.
    const { claims, differences } = correctedForFamily([claim(0.03, 1), claim(0.2, -1)], [difference(0.01, -0.5)]);
    expect(claims.map((c) => c.verdict)).toEqual(['not separated', 'not separated']);
    expect(claims[0].evidence).toBe("e; Holm-adjusted p = 0.060 over the experiment's 3 paired tests");
    expect(differences[0].pAdjusted).toBeCloseTo(0.03, 12);
    // Small enough after the correction: the side of the mean decides holds or contradicted; a claim without a p keeps its verdict.
    const strong = correctedForFamily([claim(0.001, 1), claim(0.002, -1), { ...claim(null, 1), verdict: 'holds' }], []);
    expect(strong.claims.map((c) => c.verdict)).toEqual(['holds', 'contradicted', 'holds']);
  });

  it('writes the markdown, the JSON and the plot', async () => {
    const files = await writeResults(results, path.join(dir, 'out'));
    expect(files.map((f) => path.relative(dir, f))).toEqual(['out/toy.md', 'out/toy.json', 'out/toy/agreement.svg']);
    expect(JSON.parse(readFileSync(files[1], 'utf8')).counts.agrees).toBe(1);
    const svg = readFileSync(files[2], 'utf8');
    expect(svg.startsWith('<svg')).toBe(true);
    expect(svg).toContain('1 of 4 agree');
  });

  it("averages the units' validation curves step by step and draws one plot per table that has them", async () => {
    const withCurve = (r: UnitRecord, losses: number[]): UnitRecord => ({
      ...r,
      result: {
        ...r.result!,
        outcome: { ...r.result!.outcome, details: { curves: { train: [], val: losses.map((loss, i) => ({ step: 10 * i, loss, acc: null })) } } },
      },
    });
    const curved = [withCurve(records[0], [5, 4, 3]), withCurve(records[1], [6, 4]), ...records.slice(2)];
    const out = buildResults(set, curved);
    const curve = out.cells.find((c) => c.row === 'task' && c.column === 'a')!.curve!;
    expect(curve.map((p) => [p.step, p.mean, p.n])).toEqual([
      [0, 5.5, 2],
      [10, 4, 2],
      [20, 3, 1],
    ]);
    expect(curve[0].sd).toBeCloseTo(Math.SQRT1_2, 12);
    expect(out.cells.find((c) => c.row === 'task' && c.column === 'b')!.curve).toBeNull();
    const files = await writeResults(out, path.join(dir, 'curves'));
    // Table 1 and Extra both hold a-s1: a plot each.
    expect(files.map((f) => path.relative(dir, f))).toEqual([
      'curves/toy.md',
      'curves/toy.json',
      'curves/toy/agreement.svg',
      'curves/toy/curves-1.svg',
      'curves/toy/curves-2.svg',
    ]);
    expect(readFileSync(files[3], 'utf8')).toContain('task · a');
    expect(readFileSync(files[0], 'utf8')).toContain('## Table 1\n\n| | a | b |');
    expect(readFileSync(files[0], 'utf8')).toContain('![Table 1: validation loss against optimizer steps, mean ± sd over seeds](toy/curves-1.svg)');
  });

  it("writes text from the units' files (errors, env.json strings) as text: no injected heading, link or HTML", () => {
    const hostileEnv = { ...env, cpuModel: 'CPU <script>alert(1)</script>\n# Injected heading', backend: { name: 'wasm](javascript:alert(2))' } };
    const hostile = buildResults(set, [...records.slice(0, 5), record('d-s1', [], hostileEnv, { error: 'boom\n## Injected <img src=x onerror=alert(3)>' })]);
    const markdown = resultsMarkdown(hostile, null);
    expect(markdown).not.toMatch(/(^|[^\\])<(script|img)/m);
    expect(markdown).not.toMatch(/^#+ Injected/m);
    expect(markdown).not.toMatch(/(^|[^\\])\]\(javascript/m);
    expect(markdown).toContain('CPU \\<script\\>alert(1)\\</script\\> # Injected heading, 2 cores');
    expect(markdown).toContain('— (boom ## Injected \\<img src=x onerror=alert(3)\\>)');
  });

  it('counts units that are not done, and marks their cells', () => {
    const partial = buildResults(set, [...records.slice(0, 5), record('d-s1', null, env, { failure: 'failed: killed' })]);
    expect(partial.provenance.units).toEqual({ total: 6, done: 5, notDone: 1 });
    expect(partial.cells.find((c) => c.row === 'other' && c.column === 'b')).toMatchObject({ verdict: 'not run', error: 'failed: killed' });
  });

  it('is a run set whose guard is the paper command, one unit per run, kept apart by version and backend', () => {
    expect(set.runDir).toBe(path.join(dir, 'runs', 'toy-v3-wasm'));
    expect(set.runs.map((r) => [r.index, r.name, r.cores])).toEqual(records.map((r, i) => [i, r.unit.name, 1]));
    expect(experimentRunSet(toy, { quick: true, backend: 'tensorflow', runsRoot: dir }).runs[0].cores).toBe('all');
    const script = renderSbatchScript(set, [0, 2], {}, '/project');
    expect(script).toContain('#SBATCH --array=0,2');
    expect(script.trim().split('\n').at(-1)).toMatch(
      /^exec node --import file:\/\/\S+\/tsx\/dist\/loader\.mjs \S+\/src\/cli\/paper\.ts toy --backend wasm --runs \S+\/runs --guard "\$SLURM_ARRAY_TASK_ID"$/,
    );
  });
});

describe('readUnitResult', () => {
  it("checks a unit's result.json when read: an error names the file and the field", () => {
    const file = path.join(dir, 'result.json');
    const good = {
      experiment: 'toy',
      version: 3,
      unit: 'a-s1',
      seconds: 1,
      cpuSeconds: 1,
      startedAt: '2026-01-01T00:00:00Z',
      finishedAt: '2026-01-01T00:00:01Z',
      outcome: { values: [0.5], extra: { loss: 1, other: null }, headline: 'ok' },
    };
    writeFileSync(file, JSON.stringify(good));
    expect(readUnitResult(file)).toEqual(good);
    const refused: [unknown, string][] = [
      [{}, 'experiment must be a string (got nothing)'],
      [[], 'expected a JSON object'],
      [{ ...good, outcome: { ...good.outcome, values: '12345' } }, 'outcome.values must be a list of numbers (got "12345")'],
      [{ ...good, outcome: { ...good.outcome, values: [1, '2'] } }, 'outcome.values must be a list of numbers'],
      [{ ...good, outcome: { ...good.outcome, extra: { loss: 'x' } } }, 'outcome.extra must map names to numbers or null'],
      [{ ...good, outcome: { ...good.outcome, error: 5 } }, 'outcome.error must be a string (got 5)'],
      [{ ...good, seconds: '1' }, 'seconds must be a number (got "1")'],
      [{ ...good, startedAt: 'yesterday' }, 'startedAt must be a date (got "yesterday")'],
    ];
    for (const [value, problem] of refused) {
      writeFileSync(file, JSON.stringify(value));
      expect(() => readUnitResult(file), problem).toThrow(`${file}: not a unit result: ${problem}`);
    }
    writeFileSync(file, '{"experiment":');
    expect(() => readUnitResult(file)).toThrow(`${file}: not valid JSON`);
  });
});
