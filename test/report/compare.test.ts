// Run comparison on fabricated run folders: tables, grouping, plots, HTML, bad input.
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync, mkdirSync, existsSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { compareRuns } from '../../src/report/compare.ts';
import { groupCurves, groupRuns } from '../../src/report/groups.ts';
import { loadRun, resolveRunDirs } from '../../src/report/load-runs.ts';
import { csvTable, latexTable } from '../../src/report/table.ts';
import { encodeSafetensors } from '../../src/hf/safetensors.ts';
import { folderSegment, safeJoin } from '../../src/report/safe-path.ts';
import { escapeHtml, escapeMarkdown } from '../../src/core/markdown.ts';
import type { PasskeyCheckpointResult, PasskeyRow } from '../../src/train/passkey.ts';

const root = mkdtempSync(join(tmpdir(), 'compare-test-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

interface FakeRun {
  folder: string;
  attention: string;
  seed: number;
  lr?: number;
  /** Validation losses at tokens 1000, 2000, 3000. */
  val: number[];
  train: number[];
  summary?: Record<string, unknown>;
  /** Learning rate logged at each step (default 1e-3). */
  lrAt?: (step: number) => number;
  /** Recipe keys other than the defaults below. */
  kind?: string;
  dModel?: number;
  tokenizer?: string;
  /** env.json (where the run ran); none by default. */
  env?: Record<string, unknown>;
  /** The parent folder (default <root>/runs). */
  parent?: string;
  /** Tokens per second, which sets elapsed_s (default 500). */
  speed?: number;
  /** Recipe values written as they are into config.json (a tampered file). */
  raw?: { kind?: unknown; evalTokens?: unknown };
  /** Each validation record's by_position (as the trainer logs it), by its index in `val`. */
  valByPosition?: (index: number) => unknown;
}

function recipe(attention: string, seed: number, lr = 1e-3, more: Pick<FakeRun, 'kind' | 'dModel' | 'tokenizer'> = {}) {
  return {
    name: 'tiny',
    backend: 'wasm',
    model: {
      kind: more.kind ?? 'gpt',
      dModel: more.dModel ?? 32,
      numLayers: 1,
      numHeads: 2,
      mlpRatio: 4,
      dropout: 0,
      maxSeqLen: 16,
      bias: true,
      attention: { name: attention, options: {} },
    },
    data: { dataset: 'data/x', textColumn: 'text', tokenizer: more.tokenizer ?? 't.json', seqLen: 16, shuffleBuffer: 0, readAhead: 1, mlmProbability: 0.15 },
    train: { batchSize: 2, lr, seed, runDir: 'runs', maxTokens: 3000 },
    wandb: { enabled: false, project: 'p', entity: null, runName: null },
  };
}

function writeRun(run: FakeRun): string {
  const dir = join(run.parent ?? join(root, 'runs'), run.folder);
  mkdirSync(dir, { recursive: true });
  const config = recipe(run.attention, run.seed, run.lr, run);
  if (run.raw && 'kind' in run.raw) (config.model as Record<string, unknown>).kind = run.raw.kind;
  if (run.raw && 'evalTokens' in run.raw) (config.train as Record<string, unknown>).evalTokens = run.raw.evalTokens;
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config));
  if (run.env) writeFileSync(join(dir, 'env.json'), JSON.stringify(run.env));
  const lines: string[] = [];
  run.val.forEach((loss, i) => {
    const tokens = 1000 * (i + 1);
    const step = 10 * (i + 1);
    const speed = run.speed ?? 500;
    const base = { step, tokens, lr: run.lrAt?.(step) ?? 1e-3, grad_norm: 1, tokens_per_s: speed, elapsed_s: tokens / speed };
    lines.push(JSON.stringify({ ...base, split: 'train', loss: run.train[i], ppl: Math.exp(run.train[i]) }));
    const byPosition = run.valByPosition?.(i);
    lines.push(
      JSON.stringify({
        ...base,
        split: 'val',
        grad_norm: null,
        loss,
        ppl: Math.exp(loss),
        bpb: loss / Math.LN2 / 4,
        acc: 1 - loss / 4,
        ...(byPosition === undefined ? {} : { by_position: byPosition }),
      }),
    );
  });
  writeFileSync(join(dir, 'metrics.jsonl'), lines.join('\n') + '\n');
  if (run.summary) writeFileSync(join(dir, 'summary.json'), JSON.stringify(run.summary));
  return dir;
}

const summaryOf = (valLoss: number, params: number) => ({
  steps: 30,
  tokens: 3000,
  elapsed_s: 6,
  train_tokens_per_s: 520,
  val_loss: valLoss,
  val_ppl: Math.exp(valLoss),
  val_bpb: valLoss / Math.LN2 / 4,
  val_acc: 1 - valLoss / 4,
  parameters: params,
  records: 6,
});

const softmax1 = writeRun({ folder: 'softmax-s1', attention: 'softmax', seed: 1, val: [3, 2.5, 2.2], train: [3.2, 2.6, 2.3], summary: summaryOf(2.2, 12345) });
const softmax2 = writeRun({
  folder: 'softmax-s2',
  attention: 'softmax',
  seed: 2,
  val: [3.1, 2.4, 2.4],
  train: [3.3, 2.5, 2.35],
  summary: summaryOf(2.4, 12345),
});
const slay = writeRun({ folder: 'slay-s1', attention: 'slay', seed: 1, val: [3.5, 3.0, 2.9], train: [3.6, 3.1, 3.0] });

/** Checks that every tag opened is closed in order (enough to catch a truncated or mangled SVG). */
function expectWellFormed(xml: string): void {
  const stack: string[] = [];
  for (const m of xml.matchAll(/<(\/?)([a-zA-Z][\w:-]*)[^>]*?(\/?)>/g)) {
    const [, closing, name, selfClosing] = m;
    if (selfClosing) continue;
    if (closing) expect(stack.pop()).toBe(name);
    else stack.push(name);
  }
  expect(stack).toEqual([]);
}

describe('loadRun', () => {
  it('reads the numbers of a finished run from summary.json and metrics.jsonl', async () => {
    const run = await loadRun(softmax1);
    expect(run).toMatchObject({
      attention: 'softmax',
      kind: 'gpt',
      seed: 1,
      params: 12345,
      tokens: 3000,
      finalValLoss: 2.2,
      bestValLoss: 2.2,
      tokensPerSecond: 520,
      wallSeconds: 6,
      finished: true,
    });
    expect(run.finalValPpl).toBeCloseTo(Math.exp(2.2), 12);
    expect(run.warnings).toEqual([]);
    const second = await loadRun(softmax2);
    expect(second.finalValLoss).toBe(2.4);
    expect(second.bestValLoss).toBe(2.4);
  });

  it('falls back to metrics.jsonl for an unfinished run, with a warning', async () => {
    const run = await loadRun(slay);
    expect(run).toMatchObject({ finished: false, params: null, tokens: 3000, finalValLoss: 2.9, bestValLoss: 2.9, wallSeconds: 6 });
    expect(run.tokensPerSecond).toBeCloseTo(500, 12);
    expect(run.finalValBpb).toBeCloseTo(2.9 / Math.LN2 / 4, 12);
    expect(run.warnings[0]).toMatch(/summary\.json: missing/);
  });
});

describe('compareRuns', () => {
  it('writes the tables, one SVG line per attention, and an HTML page embedding the plots', async () => {
    const outDir = join(root, 'report');
    const warnings: string[] = [];
    const result = await compareRuns(resolveRunDirs([join(root, 'runs')]), { outDir, warn: (m) => warnings.push(m) });
    expect(result.runs.map((r) => r.name)).toEqual(['slay-s1', 'softmax-s1', 'softmax-s2']);
    expect(warnings).toHaveLength(1);
    for (const name of ['report.md', 'index.html', 'runs.json', 'val-loss.svg', 'val-ppl.svg', 'train-loss.svg', 'train-ppl.svg']) {
      expect(existsSync(join(outDir, name)), name).toBe(true);
    }
    const md = readFileSync(join(outDir, 'report.md'), 'utf8');
    expect(md).toContain('| softmax-s1 | softmax | gpt | 1 | 12,345 | 3,000 | 2.2000 | 2.2000 | 9.03 | 0.7935 | 0.4500 | 520 | 6.0 |');
    expect(md).toContain('| slay-s1 (unfinished) | slay | gpt | 1 | — | 3,000 | 2.9000 | 2.9000 | 18.17 | 1.0460 | 0.2750 |');
    // softmax: final val losses 2.2 and 2.4 → 2.3 ± 0.1414; best 2.2 and 2.4 as well; perplexity exp(2.3) = 9.97
    // (the mean of the perplexities, (e^2.2 + e^2.4)/2 = 10.02, would weight the worse seed more).
    // The comparison first (Δ to softmax, the seeds it was lower on); what every group shares is said once above the
    // table, and a count equal over seeds shows no "± 0".
    expect(md).toContain(
      '## Groups\n\nSame for every group: tokens 3,000 · wall s 6.0 · recipe tiny.\n\n| group | Δ final val loss vs softmax \\[95% CI\\] | lower than softmax on | final val loss | n | seeds |',
    );
    expect(md).toContain('| softmax | (baseline) |  | 2.3000 ± 0.1414 | 2 | 1, 2 | 2.3000 ± 0.1414 | 9.97 | 0.8295 ± 0.0510 | 0.4250 ± 0.0354 | 12,345 |');
    expect(md).toMatch(/\| slay \| \+0\.7000 \(n = 1\) \| 0\/1 \| 2\.9000 \| 1 \| 1 \| 2\.9000 \| 18\.17 \| 1\.0460 \| 0\.2750 \| — \|/);

    const html = readFileSync(join(outDir, 'index.html'), 'utf8');
    for (const file of ['val-loss.svg', 'val-ppl.svg', 'train-loss.svg', 'train-ppl.svg']) {
      const svg = readFileSync(join(outDir, file), 'utf8');
      expect(svg.startsWith('<svg')).toBe(true);
      expect(svg).toContain('xmlns="http://www.w3.org/2000/svg"');
      expectWellFormed(svg);
      expect(svg.match(/class="mark-line role-mark/g)).toHaveLength(2);
      // A ±sd band for softmax (two seeds), none for slay (one run).
      expect(svg.match(/class="mark-area role-mark/g)).toHaveLength(1);
      expect(svg).toContain('softmax');
      expect(svg).toContain('slay');
      expect(html).toContain(svg);
    }
    expect(html).toContain('<td style="text-align:left">softmax-s1</td>');
    expect(html).toContain('<td style="text-align:right">12,345</td>');
    const json = JSON.parse(readFileSync(join(outDir, 'runs.json'), 'utf8'));
    expect(json.groups.map((g: { label: string }) => g.label)).toEqual(['slay', 'softmax']);
    expect(json.groups[1].stats.finalValLoss.sd).toBeCloseTo(Math.SQRT2 / 10, 12);
  });

  it('averages a group over its seeds in the curves and splits groups by recipe', async () => {
    const other = writeRun({
      folder: 'softmax-lr',
      attention: 'softmax',
      seed: 1,
      lr: 3e-3,
      val: [2.9, 2.3, 2.0],
      train: [3, 2.4, 2.1],
      summary: summaryOf(2.0, 12345),
    });
    try {
      const result = await compareRuns([softmax1, softmax2, other], { outDir: join(root, 'report2'), warn: () => {} });
      // Labelled by the setting that tells the groups apart.
      expect(result.groups.map((g) => [g.label, g.runs.length])).toEqual([
        ['softmax lr=0.001', 2],
        ['softmax lr=0.003', 1],
      ]);
      const svg = readFileSync(join(root, 'report2', 'val-loss.svg'), 'utf8');
      expect(svg.match(/class="mark-line role-mark/g)).toHaveLength(2);
    } finally {
      rmSync(other, { recursive: true });
    }
  });

  it('refuses a group whose runs differ in more than the seed, and with force marks it in the report', async () => {
    // Seed 3 stopped after 2,000 tokens (no summary.json): same recipe, but its final loss is from earlier in training.
    const short = writeRun({ folder: 'softmax-s3', attention: 'softmax', seed: 3, val: [3.05, 2.45], train: [3.2, 2.55] });
    try {
      const dirs = [softmax1, softmax2, short, slay];
      await expect(compareRuns(dirs, { outDir: join(root, 'mixed'), warn: () => {} })).rejects.toThrow(
        /1 group mixes runs that differ in more than the seed[^]*softmax: final validation after different token counts \(3,000: softmax-s1, softmax-s2; 2,000: softmax-s3 \(unfinished\)\)[^]*--force/,
      );
      expect(existsSync(join(root, 'mixed'))).toBe(false); // nothing written
      const warnings: string[] = [];
      const result = await compareRuns(dirs, { outDir: join(root, 'mixed'), force: true, warn: (m) => warnings.push(m) });
      expect(result.groups.find((g) => g.label === 'softmax')!.mixed).toHaveLength(1);
      expect(result.groups.find((g) => g.label === 'slay')!.mixed).toEqual([]);
      expect(warnings.filter((w) => w.startsWith('MIXED GROUP'))).toHaveLength(1);
      const md = readFileSync(join(root, 'mixed', 'report.md'), 'utf8');
      expect(md).toMatch(/## ⚠ Groups whose runs differ in more than the seed[^]*- softmax: final validation after different token counts/);
      expect(md).toContain('| ⚠ softmax | (baseline) |  | 2.3500 ± 0.1323 | 3 | 1, 2, 3 |');
      expect(readFileSync(join(root, 'mixed', 'index.html'), 'utf8')).toContain('<div class="warning">');
    } finally {
      rmSync(short, { recursive: true });
    }
  });

  it('refuses a group whose runs followed different learning-rate schedules (a resume with other train keys)', async () => {
    const resumed = writeRun({
      folder: 'softmax-s4',
      attention: 'softmax',
      seed: 4,
      val: [3, 2.5, 2.3],
      train: [3.2, 2.6, 2.3],
      summary: summaryOf(2.3, 12345),
      lrAt: (step) => (step < 20 ? 1e-3 : 5e-4),
    });
    try {
      await expect(compareRuns([softmax1, resumed], { outDir: join(root, 'mixed-lr'), warn: () => {} })).rejects.toThrow(
        /softmax: different learning rates at step 20 \(0\.001: softmax-s1; 0\.0005: softmax-s4\)/,
      );
    } finally {
      rmSync(resumed, { recursive: true });
    }
  });

  it('draws each group as its mean over seeds with a ±sd band; perplexity curves are exp of the loss curves', async () => {
    const groups = groupRuns([await loadRun(softmax1), await loadRun(softmax2), await loadRun(slay)]);
    const loss = groupCurves(groups, 'val', 'loss');
    const ppl = groupCurves(groups, 'val', 'ppl');
    // softmax at 2,000 tokens: validation losses 2.5 and 2.4.
    const mean = 2.45;
    const sd = Math.sqrt(((2.5 - mean) ** 2 + (2.4 - mean) ** 2) / 1);
    const at = (points: typeof loss, series: string, x: number) => points.find((p) => p.series === series && p.x === x)!;
    expect(at(loss, 'softmax', 2000).y).toBeCloseTo(mean, 12);
    expect(at(loss, 'softmax', 2000).lo).toBeCloseTo(mean - sd, 12);
    expect(at(loss, 'softmax', 2000).hi).toBeCloseTo(mean + sd, 12);
    expect(at(ppl, 'softmax', 2000).y).toBeCloseTo(Math.exp(mean), 10);
    expect(at(ppl, 'softmax', 2000).lo).toBeCloseTo(Math.exp(mean - sd), 10);
    expect(at(ppl, 'softmax', 2000).hi).toBeCloseTo(Math.exp(mean + sd), 10);
    expect(at(loss, 'slay', 2000)).toEqual({ series: 'slay', x: 2000, y: 3.0 }); // one run: no band
  });

  it('lays the page out to the window’s width', async () => {
    await compareRuns([softmax1, softmax2], { outDir: join(root, 'page'), warn: () => {} });
    const html = readFileSync(join(root, 'page', 'index.html'), 'utf8');
    expect(html).not.toMatch(/max-width:\s*\d+px/);
    expect(html).toContain('<meta name="viewport" content="width=device-width');
    expect(html).toMatch(/figure svg\{width:100%;height:auto\}/);
    expect(html).toMatch(/grid-template-columns:repeat\(auto-fill/);
    // The inlined SVGs scale: they carry a viewBox.
    expect(html.match(/<svg [^>]*viewBox="0 0 \d+ \d+"/g)!.length).toBe(6); // against tokens (4) and time (2)
  });

  it('names the missing or corrupt file, or skips the run with a warning when asked', async () => {
    const broken = join(root, 'bad', 'no-metrics');
    mkdirSync(broken, { recursive: true });
    writeFileSync(join(broken, 'config.json'), JSON.stringify(recipe('softmax', 3)));
    // A folder left by an interrupted run: named, said to be incomplete, with the way to leave it out.
    await expect(compareRuns([softmax1, broken], { outDir: join(root, 'r3') })).rejects.toThrow(
      `${join(broken, 'metrics.jsonl')}: missing: ${broken} is an incomplete run folder (interrupted before its first metric record?)\nLeave that folder out, or pass --skip-invalid`,
    );
    const warnings: string[] = [];
    const result = await compareRuns([softmax1, broken], { outDir: join(root, 'r3'), skipInvalid: true, warn: (m) => warnings.push(m) });
    expect(result.runs).toHaveLength(1);
    expect(warnings[0]).toContain(`skipped ${broken}`);

    writeFileSync(
      join(broken, 'metrics.jsonl'),
      '{"step":1,"tokens":5,"split":"train","loss":1,"ppl":2.7,"lr":1,"grad_norm":null,"tokens_per_s":1,"elapsed_s":1}\n{oops\n{}\n',
    );
    await expect(loadRun(broken)).rejects.toThrow(`${join(broken, 'metrics.jsonl')}:2: not valid JSON`);
    writeFileSync(join(broken, 'metrics.jsonl'), '{"step":1,"tokens":"5","split":"train"}\n');
    await expect(loadRun(broken)).rejects.toThrow(`${join(broken, 'metrics.jsonl')}:1: metric record field tokens must be a number`);
    // A diverged loss is logged as null: the record is kept; no final loss, the best is the finite one.
    writeFileSync(
      join(broken, 'metrics.jsonl'),
      [
        '{"step":1,"tokens":5,"split":"val","loss":2,"ppl":7.4,"lr":1,"grad_norm":null,"tokens_per_s":1,"elapsed_s":1}',
        '{"step":2,"tokens":9,"split":"val","loss":null,"ppl":null,"lr":1,"grad_norm":null,"tokens_per_s":1,"elapsed_s":2}',
        '',
      ].join('\n'),
    );
    const diverged = await loadRun(broken);
    expect(diverged).toMatchObject({ tokens: 9, finalValLoss: null, finalValPpl: null, bestValLoss: 2, wallSeconds: 2 });
    // A last line cut short by a crash is dropped with a warning.
    writeFileSync(
      join(broken, 'metrics.jsonl'),
      '{"step":1,"tokens":5,"split":"val","loss":1,"ppl":2.7,"lr":1,"grad_norm":null,"tokens_per_s":1,"elapsed_s":1}\n{"step":2,"tok',
    );
    const partial = await loadRun(broken);
    expect(partial.records).toHaveLength(1);
    expect(partial.warnings[0]).toContain('metrics.jsonl:2: incomplete last line ignored');

    writeFileSync(join(broken, 'config.json'), '{"model": {}}');
    await expect(loadRun(broken)).rejects.toThrow(`${join(broken, 'config.json')}: expected the resolved recipe with model.attention.name`);
    writeFileSync(join(broken, 'config.json'), '{not json');
    await expect(loadRun(broken)).rejects.toThrow(`${join(broken, 'config.json')}: not valid JSON`);
  });

  it('refuses runs evaluated on another validation sample (train.evalSample), a run without the key counting as head', async () => {
    const sampleRoot = join(root, 'eval-samples');
    const head = writeRun({
      parent: sampleRoot,
      folder: 'softmax-head',
      attention: 'softmax',
      seed: 1,
      val: [3, 2.5, 2.2],
      train: [3.2, 2.6, 2.3],
      summary: summaryOf(2.2, 100),
    });
    const spread = writeRun({
      parent: sampleRoot,
      folder: 'slay-spread',
      attention: 'slay',
      seed: 1,
      val: [3, 2.5, 2.3],
      train: [3.2, 2.6, 2.3],
      summary: summaryOf(2.3, 100),
    });
    const config = JSON.parse(readFileSync(join(spread, 'config.json'), 'utf8'));
    writeFileSync(join(spread, 'config.json'), JSON.stringify({ ...config, train: { ...config.train, evalSample: 'spread' } }));
    await expect(compareRuns([head, spread], { outDir: join(root, 'eval-samples-report'), warn: () => {} })).rejects.toThrow(
      /train\.evalTokens and train\.evalSample \(other validation tokens\): \?: softmax-head; \? spread: slay-spread/,
    );
  });

  it('tells tokenizers apart by the sha256 their final model recorded, not by the path config.json names', async () => {
    const shaRoot = join(root, 'tokenizer-sha');
    const withModel = (folder: string, sha: string) => {
      const dir = writeRun({
        parent: shaRoot,
        folder,
        attention: 'softmax',
        seed: 1,
        val: [3, 2.5, 2.2],
        train: [3.2, 2.6, 2.3],
        summary: summaryOf(2.2, 100),
      });
      mkdirSync(join(dir, 'final'));
      writeFileSync(
        join(dir, 'final', 'model.safetensors'),
        encodeSafetensors(new Map([['w', { shape: [1], data: new Float32Array([1]) }]]), { tokenizer_sha256: sha }),
      );
      return dir;
    };
    const [a, b] = [withModel('a', 'a'.repeat(64)), withModel('b', 'b'.repeat(64))];
    expect((await loadRun(a)).family.tokenizer).toBe(`sha256 ${'a'.repeat(12)} (t.json)`);
    await expect(compareRuns([a, b], { outDir: join(root, 'sha-report'), warn: () => {} })).rejects.toThrow(
      `tokenizer (another vocabulary: other tokens, other losses): sha256 ${'a'.repeat(12)} (t.json): a; sha256 ${'b'.repeat(12)} (t.json): b`,
    );
  });

  it('refuses runs of another model kind or tokenizer, naming the difference; --split writes one report per kind', async () => {
    const mixedRoot = join(root, 'families');
    const gpt = writeRun({
      parent: mixedRoot,
      folder: 'gpt-softmax',
      attention: 'softmax',
      seed: 1,
      val: [3, 2.5, 2.2],
      train: [3.2, 2.6, 2.3],
      summary: summaryOf(2.2, 100),
    });
    const bert = writeRun({
      parent: mixedRoot,
      folder: 'bert-softmax',
      attention: 'softmax',
      seed: 1,
      kind: 'bert',
      val: [4, 3.5, 3.2],
      train: [4.2, 3.6, 3.3],
      summary: summaryOf(3.2, 100),
    });
    const otherVocab = writeRun({
      parent: mixedRoot,
      folder: 'gpt-slay-big-vocab',
      attention: 'slay',
      seed: 1,
      tokenizer: 'big.json',
      val: [6, 5.5, 5.2],
      train: [6, 5.6, 5.3],
      summary: summaryOf(5.2, 100),
    });
    await expect(compareRuns([gpt, bert], { outDir: join(root, 'families-report'), warn: () => {} })).rejects.toThrow(
      /^these runs' losses are not comparable on one axis; they differ in\n {2}model kind \(causal vs masked LM loss\): gpt: gpt-softmax; bert: bert-softmax\nCompare them separately, or pass --split/,
    );
    await expect(compareRuns([gpt, otherVocab], { outDir: join(root, 'families-report'), warn: () => {} })).rejects.toThrow(
      /tokenizer \(another vocabulary: other tokens, other losses\): t\.json: gpt-softmax; big\.json: gpt-slay-big-vocab/,
    );
    expect(existsSync(join(root, 'families-report'))).toBe(false); // nothing written
    const warnings: string[] = [];
    const split = await compareRuns([gpt, bert], { outDir: join(root, 'families-report'), split: true, warn: (m) => warnings.push(m) });
    expect(split.reports.map((r) => [r.outDir, r.runs.map((x) => x.name)])).toEqual([
      [join(root, 'families-report', 'gpt'), ['gpt-softmax']],
      [join(root, 'families-report', 'bert'), ['bert-softmax']],
    ]);
    expect(readFileSync(join(root, 'families-report', 'report.md'), 'utf8')).toMatch(
      /each kind has its own report[^]*model kind[^]*\[gpt\]\(gpt\/report\.md\)[^]*\[bert\]\(bert\/report\.md\)/,
    );
    expect(existsSync(join(root, 'families-report', 'bert', 'val-loss.svg'))).toBe(true);
    expect(warnings.some((w) => w.startsWith('the runs differ in model kind: one report per kind'))).toBe(true);
  });

  it('labels groups shortly and tables what tells them apart; n = 1 is said, not "mean ± sd"', async () => {
    const labelsRoot = join(root, 'labels');
    const runs = [
      writeRun({ parent: labelsRoot, folder: 'a', attention: 'softmax', seed: 1, val: [3, 2.5, 2.2], train: [3, 2.6, 2.3], summary: summaryOf(2.2, 100) }),
      writeRun({
        parent: labelsRoot,
        folder: 'b',
        attention: 'softmax',
        seed: 1,
        lr: 3e-3,
        dModel: 64,
        val: [3, 2.4, 2.1],
        train: [3, 2.5, 2.2],
        summary: summaryOf(2.1, 100),
      }),
      writeRun({ parent: labelsRoot, folder: 'c', attention: 'slay', seed: 1, val: [3, 2.6, 2.4], train: [3, 2.7, 2.5], summary: summaryOf(2.4, 100) }),
    ];
    const out = join(root, 'labels-report');
    const result = await compareRuns(runs, { outDir: out, warn: () => {} });
    expect(result.groups.map((g) => g.label)).toEqual(['softmax #1', 'softmax #2', 'slay']);
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    expect(md).toContain(
      '## What tells the groups apart\n\n| group | model.dModel | train.lr |\n|---|---|---|\n| softmax #1 | 32 | 0.001 |\n| softmax #2 | 64 | 0.003 |\n| slay | 32 | 0.001 |',
    );
    const svg = readFileSync(join(out, 'val-loss.svg'), 'utf8');
    expect(svg).toContain('n = 1: one seed per group, no spread');
    expect(svg).not.toContain('mean ± sd');
    expect(md).toContain('Every group has one seed (n = 1)');
  });

  it('pairs each group with the baseline (softmax by default) over the seeds both ran, with the 95% interval', async () => {
    const pairedRoot = join(root, 'paired');
    const loss = { softmax: [2.2, 2.4, 2.3], slay: [2.25, 2.42, 2.37] };
    const runs = Object.entries(loss).flatMap(([attention, finals]) =>
      finals.map((f, i) =>
        writeRun({
          parent: pairedRoot,
          folder: `${attention}-${i + 1}`,
          attention,
          seed: i + 1,
          val: [3, 2.6, f],
          train: [3, 2.7, f + 0.1],
          summary: summaryOf(f, 100),
        }),
      ),
    );
    const out = join(root, 'paired-report');
    const result = await compareRuns(runs, { outDir: out, warn: () => {} });
    expect(result.baseline).toBe('softmax');
    const slay = result.groups.find((g) => g.attention === 'slay')!;
    // Differences 0.05, 0.02, 0.07: mean 0.0467, sd 0.0252, t(0.975, 2) = 4.3027 → half-width 0.0625.
    expect(slay.paired!.mean).toBeCloseTo(0.046667, 5);
    expect(slay.paired!.ci![0]).toBeCloseTo(0.046667 - (4.302653 * 0.025166) / Math.sqrt(3), 4);
    expect(slay.paired!.wins).toBe(0);
    expect(result.groups.find((g) => g.attention === 'softmax')!.paired).toBeNull();
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    expect(md).toContain('Same for every group: n 3 · seeds 1, 2, 3 · params 100 · tokens 3,000 · tokens/s 520 · wall s 6.0 · recipe tiny.');
    // One group against the baseline: a family of one test, whose Holm-adjusted p is its p.
    expect(md).toMatch(/\| slay \| \+0\.0467 \\\[−0\.0158, \+0\.1092\\\] \| 0\.085 \| 0\.085 \| 0\/3 \| 2\.3467 ± 0\.0874 \|/);
    expect(md).toMatch(/\| softmax \| \(baseline\) \|/);
    // The same numbers for a spreadsheet (plain) and a paper (LaTeX).
    const csv = readFileSync(join(out, 'groups.csv'), 'utf8').split('\r\n');
    expect(csv[0]).toBe(
      'group,Δ final val loss vs softmax [95% CI],CI low,CI high,p,p (Holm),lower than softmax on,final val loss,final val loss sd,n,seeds,best val loss,val ppl,val bpb,val acc,params,tokens,tokens/s,wall s,recipe',
    );
    expect(csv.find((line) => line.startsWith('slay,'))).toMatch(
      /^slay,0\.0466\d*,-0\.0158\d*,0\.1091\d*,0\.0847\d*,0\.0847\d*,0\/3,2\.34\d*,0\.0\d+,3,"1, 2, 3",/,
    );
    // groups.tex fits a page: the comparison and the final loss; what every group shares goes to the caption.
    const tex = readFileSync(join(out, 'groups.tex'), 'utf8').split('\n');
    expect(tex.slice(0, 6)).toEqual([
      '\\begin{table}',
      '\\centering',
      '\\small',
      '\\caption{Final validation loss per group (mean $\\pm$ sd over n = 3 seeds). Same for every group: n 3 $\\cdot$ params 100 $\\cdot$ tokens 3,000.}',
      '\\begin{tabular}{lrrrrr}',
      '\\toprule',
    ]);
    expect(tex).toContain('group & $\\Delta$ final val loss vs softmax [95\\% CI] & p & final val loss & val ppl & val acc \\\\');
    expect(tex).toContain('slay & +0.0467 [$-$0.0158, +0.1092] & 0.085 & 2.3467 $\\pm$ 0.0874 & 10.45 & 0.4133 $\\pm$ 0.0218 \\\\');
    await expect(compareRuns(runs, { outDir: join(root, 'paired-none'), baseline: 'performer', warn: () => {} })).rejects.toThrow(
      /--baseline performer: no run uses that attention \(softmax, slay\)/,
    );
  });

  it('reports backend, commit and peak memory from env.json and summary.json, and plots loss against wall-clock time', async () => {
    const envRoot = join(root, 'env');
    const env = (backend: string, commit: string, dirty: boolean) => ({ backend: { name: backend }, git: { commit, dirty } });
    const run = writeRun({
      parent: envRoot,
      folder: 'with-env',
      attention: 'softmax',
      seed: 1,
      val: [3, 2.5, 2.2],
      train: [3, 2.6, 2.3],
      summary: { ...summaryOf(2.2, 100), peak_rss_bytes: 512 * 2 ** 20 },
      env: { ...env('tensorflow', '0123456789abcdef', false), resumes: [{ ...env('wasm', 'fedcba9876543210', true), resumedAtStep: 10 }] },
    });
    const bare = writeRun({
      parent: envRoot,
      folder: 'without-env',
      attention: 'slay',
      seed: 1,
      val: [3, 2.6, 2.4],
      train: [3, 2.7, 2.5],
      summary: summaryOf(2.4, 100),
    });
    const out = join(root, 'env-report');
    await compareRuns([run, bare], { outDir: out, warn: () => {} });
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    expect(md).toContain('| tokens/s | wall s | peak MiB | backend | commit |');
    // Markdown escaped: the dirty tree's * is not an emphasis mark.
    expect(md).toMatch(/\| with-env \| softmax \|[^\n]*\| 512 \| tensorflow → wasm \| 01234567 → fedcba98\\\* \|/);
    expect(md).toMatch(/\| without-env \| slay \|[^\n]*\| — \| — \| — \|/);
    const csv = readFileSync(join(out, 'runs.csv'), 'utf8');
    expect(csv).toContain(',512,tensorflow → wasm,01234567 → fedcba98*\r\n');
    const timeSvg = readFileSync(join(out, 'val-loss-time.svg'), 'utf8');
    expect(timeSvg).toContain('wall-clock time (s)');
    expect(timeSvg.match(/class="mark-line role-mark/g)).toHaveLength(2);
    const curve = groupCurves(groupRuns([await loadRun(run)]), 'val', 'loss', 'time');
    expect(curve.map((p) => p.x)).toEqual([2, 4, 6]); // elapsed_s of the three validations
  });

  it("shows MFU (summary.json's mfu, in percent) per run and per group once a run has it", async () => {
    const mfuRoot = join(root, 'mfu');
    const runs = [0.031, 0.035].map((mfu, i) =>
      writeRun({
        parent: mfuRoot,
        folder: `mfu-${i + 1}`,
        attention: 'softmax',
        seed: i + 1,
        val: [3, 2.2],
        train: [3, 2.3],
        summary: { ...summaryOf(2.2, 100), mfu },
      }),
    );
    const out = join(root, 'mfu-report');
    await compareRuns(runs, { outDir: out, warn: () => {} });
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    expect(md).toContain('| tokens/s | MFU % | wall s |');
    expect(md).toMatch(/\| mfu-1 \| softmax \|[^\n]*\| 520 \| 3\.10 \|/);
    // The group: mean ± sd over the seeds, 3.30 ± 0.28 (sd of 3.1 and 3.5).
    expect(md).toContain('3.30 ± 0.28');
  });

  it("tables and plots the loss by position of the runs' eval.json (eval --by-position), a group's mean over the runs that have one", async () => {
    const positionRoot = join(root, 'by-position');
    const byPosition = (losses: (number | null)[]) =>
      losses.map((loss, i) => ({ from: i === 0 ? 0 : 2 ** (i - 1), to: 2 ** i, loss, ppl: null, tokens: loss === null ? 0 : 10 }));
    const evals: Record<string, (number | null)[] | 'bad' | undefined> = {
      'pos-softmax-1': [4, 3, 2.5],
      'pos-softmax-2': [4.2, 3.2, null],
      'pos-slay-1': [4.5, 3.5, 3],
      'pos-slay-2': 'bad',
      'pos-slay-3': undefined,
    };
    const runs = Object.entries(evals).map(([folder, losses], i) => {
      const dir = writeRun({
        parent: positionRoot,
        folder,
        attention: folder.split('-')[1],
        seed: i + 1,
        val: [3, 2.2],
        train: [3, 2.3],
        summary: summaryOf(2.2, 100),
      });
      if (losses === 'bad') writeFileSync(join(dir, 'eval.json'), JSON.stringify({ loss: 2, by_position: [{ from: 4, to: 2, loss: 1, tokens: 3 }] }));
      else if (losses) writeFileSync(join(dir, 'eval.json'), JSON.stringify({ loss: 2, by_position: byPosition(losses) }));
      return dir;
    });
    const warnings: string[] = [];
    const out = join(root, 'by-position-report');
    const result = await compareRuns(runs, { outDir: out, warn: (m) => warnings.push(m), baseline: null });
    expect(result.runs.find((r) => r.name === 'pos-slay-2')!.warnings.join('\n')).toContain(
      `${join(positionRoot, 'pos-slay-2', 'eval.json')}: by_position[0] must be`,
    );
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    expect(md).toContain('## Loss by position');
    // softmax: both runs at [0,1) and [1,2) (mean 4.1, 3.1), one at [2,4); slay: its one run with a valid eval.json.
    expect(md).toContain('| positions | softmax (n = 2) | slay (n = 1) |');
    expect(md).toContain('| \\[0, 1) | 4.1000 | 4.5000 |');
    expect(md).toContain('| \\[1, 2) | 3.1000 | 3.5000 |');
    expect(md).toContain('| \\[2, 4) | 2.5000 | 3.0000 |');
    expect(readFileSync(join(out, 'by-position.csv'), 'utf8')).toContain('"[0, 1)",4.1,4.5');
    const svg = readFileSync(join(out, 'loss-by-position.svg'), 'utf8');
    expectWellFormed(svg);
    expect(svg).toContain('Validation loss by position in the sequence');
    expect(readFileSync(join(out, 'index.html'), 'utf8')).toContain('<h2>Loss by position</h2>');
    // Without any eval.json, the report has no such section.
    const plainOut = join(root, 'no-position-report');
    await compareRuns([softmax1, softmax2], { outDir: plainOut, warn: () => {} });
    expect(readFileSync(join(plainOut, 'report.md'), 'utf8')).not.toContain('Loss by position');
    expect(existsSync(join(plainOut, 'by-position.csv'))).toBe(false);
  });

  it("tables and plots the loss by position at the runs' last validation (metrics.jsonl's by_position), apart from eval.json's", async () => {
    const positionRoot = join(root, 'val-by-position');
    const buckets = (losses: (number | null)[]) =>
      losses.map((loss, i) => ({ from: i === 0 ? 0 : 2 ** (i - 1), to: 2 ** i, loss, tokens: loss === null ? 0 : 10 }));
    // Earlier validations log other losses: the report reads the last one. A run of an older version logged none.
    const runs = [
      { folder: 'vp-softmax-1', last: [4, 3, 2] as (number | null)[] | null, eval: null },
      { folder: 'vp-softmax-2', last: [4.4, 3.4, null], eval: null },
      { folder: 'vp-slay-1', last: [5, 4, 3.5], eval: [9, 9, 9] },
      { folder: 'vp-slay-2', last: null, eval: null },
    ].map(({ folder, last, eval: evalLosses }, i) => {
      const dir = writeRun({
        parent: positionRoot,
        folder,
        attention: folder.split('-')[1],
        seed: i + 1,
        val: [3, 2.5, 2.2],
        train: [3, 2.6, 2.3],
        summary: summaryOf(2.2, 100),
        valByPosition: (index) => (last === null ? undefined : index === 2 ? buckets(last) : buckets([7, 7, 7])),
      });
      if (evalLosses) writeFileSync(join(dir, 'eval.json'), JSON.stringify({ loss: 2, by_position: buckets(evalLosses) }));
      return dir;
    });
    const out = join(root, 'val-by-position-report');
    await compareRuns(runs, { outDir: out, warn: () => {}, baseline: null });
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    const section = md.slice(md.indexOf('## Validation loss by position'), md.indexOf('## Loss by position'));
    expect(section).toContain('| positions | softmax (n = 2) | slay (n = 1) |');
    expect(section).toContain('| \\[0, 1) | 4.2000 | 5.0000 |');
    expect(section).toContain('| \\[1, 2) | 3.2000 | 4.0000 |');
    expect(section).toContain('| \\[2, 4) | 2.0000 | 3.5000 |');
    // eval.json's curve stays its own section: slay's 9s are not mixed into the validation's.
    expect(md.slice(md.indexOf('## Loss by position'))).toContain('| \\[0, 1) | 9.0000 |');
    expect(readFileSync(join(out, 'val-by-position.csv'), 'utf8')).toContain('"[0, 1)",4.2,5');
    const svg = readFileSync(join(out, 'val-loss-by-position.svg'), 'utf8');
    expectWellFormed(svg);
    expect(svg).toContain('Validation loss by position at the last validation');
    expect(readFileSync(join(out, 'index.html'), 'utf8')).toContain('<h2>Validation loss by position</h2>');
    expect(md).toContain('![Validation loss by position at the last validation](val-loss-by-position.svg)');
    // A malformed by_position is the run's metrics.jsonl error, naming the line.
    const bad = writeRun({
      parent: positionRoot,
      folder: 'vp-bad',
      attention: 'softmax',
      seed: 9,
      val: [3],
      train: [3],
      valByPosition: () => [{ from: 3, to: 1, loss: 1, tokens: 1 }],
    });
    await expect(compareRuns([bad], { outDir: join(root, 'vp-bad-report'), warn: () => {} })).rejects.toThrow(
      `${join(bad, 'metrics.jsonl')}:2: metric record field by_position[0] must be`,
    );
  });

  it('runs that resolved to the same model keys are one recipe, whether model.preset set them or the recipe did', async () => {
    const presetRoot = join(root, 'preset');
    const TPP = { positional: 'rope', mlp: 'swiglu', norm: 'rmsnorm', bias: false };
    const folderWith = (folder: string, model: Record<string, unknown>) => {
      const dir = writeRun({ parent: presetRoot, folder, attention: 'slay', seed: 1, val: [3], train: [3] });
      const config = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
      writeFileSync(join(dir, 'config.json'), JSON.stringify({ ...config, model: { ...config.model, ...model } }));
      return loadRun(dir);
    };
    const byPreset = await folderWith('by-preset', { ...TPP, preset: 'transformer++' });
    const explicit = await folderWith('explicit', { ...TPP, preset: null });
    const older = await folderWith('older', TPP); // a version before model.preset: no such key
    const withBias = await folderWith('with-bias', { ...TPP, bias: true, preset: 'transformer++' });
    for (const run of [explicit, older]) {
      expect(run.recipeKey).toBe(byPreset.recipeKey);
      expect(run.pairingKey).toBe(byPreset.pairingKey);
    }
    expect(withBias.recipeKey).not.toBe(byPreset.recipeKey);
    expect(byPreset.settings['model.preset']).toBeUndefined();
    expect(byPreset.settings['model.positional']).toBe('rope');
  });

  it("tables the lm-evaluation-harness scores of the runs' lm-eval/<task>.json (npm run lm-eval), one row per run", async () => {
    const lmRoot = join(root, 'lm-eval');
    // The shape the harness writes (lm_eval 0.4), narrowed to one task: "metric,filter" keys, "N/A" for no stderr.
    const harnessJson = (task: string, metrics: Record<string, number | string>, effective: number) => ({
      results: { [task]: { name: task, alias: task, ...metrics } },
      'n-samples': { [task]: { original: 200, effective } },
      configs: { [task]: { task } },
      date: 1,
    });
    const runs = ['lm-softmax-1', 'lm-slay-1', 'lm-slay-2'].map((folder, i) =>
      writeRun({ parent: lmRoot, folder, attention: folder.split('-')[1], seed: i + 1, val: [3, 2.2], train: [3, 2.3], summary: summaryOf(2.2, 100) }),
    );
    mkdirSync(join(runs[0], 'lm-eval'));
    writeFileSync(
      join(runs[0], 'lm-eval', 'cloze.json'),
      JSON.stringify(harnessJson('cloze', { 'acc,none': 0.375, 'acc_stderr,none': 0.0625, 'acc_norm,none': 0.5, 'acc_norm_stderr,none': 'N/A' }, 16)),
    );
    writeFileSync(
      join(runs[0], 'lm-eval', 'text.json'),
      JSON.stringify(harnessJson('text', { 'bits_per_byte,none': 2.25, 'bits_per_byte_stderr,none': 'N/A' }, 6)),
    );
    mkdirSync(join(runs[1], 'lm-eval'));
    writeFileSync(join(runs[1], 'lm-eval', 'cloze.json'), JSON.stringify(harnessJson('cloze', { 'acc,none': 0.25, 'acc_stderr,none': 0.05 }, 16)));
    writeFileSync(join(runs[1], 'lm-eval', 'broken.json'), JSON.stringify({ scores: [] }));
    const out = join(root, 'lm-eval-report');
    const result = await compareRuns(runs, { outDir: out, warn: () => {}, baseline: null });
    expect(result.runs.find((r) => r.name === 'lm-slay-1')!.warnings.join('\n')).toContain(
      `${join(runs[1], 'lm-eval', 'broken.json')}: not lm-evaluation-harness results`,
    );
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    const section = md.split('## lm-evaluation-harness\n')[1].split('\n## ')[0];
    expect(section).toContain('| run | attention | cloze acc | cloze acc\\_norm | text bits\\_per\\_byte | documents |');
    expect(section).toContain('| lm-softmax-1 | softmax | 0.3750 ± 0.0625 | 0.5000 | 2.2500 | 16 |');
    expect(section).toContain('| lm-slay-1 | slay | 0.2500 ± 0.0500 |  |  | 16 |');
    // A run without results has no row.
    expect(section).not.toContain('lm-slay-2');
    expect(readFileSync(join(out, 'lm-eval.csv'), 'utf8')).toContain('lm-softmax-1,softmax,0.375,0.5,2.25,16');
    expect(readFileSync(join(out, 'index.html'), 'utf8')).toContain('<h2>lm-evaluation-harness</h2>');
  });

  it("tables passkey retrieval from the runs' passkey.json (eval --passkey --json), a column per length", async () => {
    const pkRoot = join(root, 'passkey');
    const runs = ['pk-softmax-1', 'pk-slay-1', 'pk-slay-2'].map((folder, i) =>
      writeRun({ parent: pkRoot, folder, attention: folder.split('-')[1], seed: i + 1, val: [3, 2.2], train: [3, 2.3], summary: summaryOf(2.2, 100) }),
    );
    const row = (length: number, retrieval: number | null, beyondTrainedContext = false): PasskeyRow => ({
      length,
      status: retrieval === null ? 'beyond the position table' : 'run',
      beyondTrainedContext,
      trials: retrieval === null ? 0 : 10,
      retrieval,
      tokenAccuracy: retrieval,
      loss: retrieval === null ? null : 1.5,
      byDepth: [],
    });
    const result = (rows: PasskeyRow[]): PasskeyCheckpointResult => ({
      dir: 'x',
      description: 'x',
      trainedLength: 1024,
      positionTable: 2048,
      depths: [0, 0.5, 1],
      trialsPerDepth: 2,
      rows,
    });
    writeFileSync(join(runs[0], 'passkey.json'), JSON.stringify(result([row(1024, 0.9), row(2048, 0.3, true), row(4096, null)])));
    writeFileSync(join(runs[1], 'passkey.json'), JSON.stringify(result([row(1024, 0.5), row(2048, 1.5)])));
    const out = join(root, 'passkey-report');
    const compared = await compareRuns(runs, { outDir: out, warn: () => {}, baseline: null });
    expect(compared.runs.find((r) => r.name === 'pk-slay-1')!.warnings.join('\n')).toMatch(/passkey\.json: rows\[1\] must hold .*retrieval \(null or 0…1\)/);
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    const section = md.split('## Passkey retrieval\n')[1].split('\n## ')[0];
    expect(section).toContain('| run | attention | 1024 tokens | 2048 tokens | 4096 tokens | keys per length |');
    expect(section).toContain('| pk-softmax-1 | softmax | 0.90 | 0.30 † | not run | 10 |');
    // A malformed file and a run without one have no row.
    expect(section).not.toContain('pk-slay');
    expect(readFileSync(join(out, 'passkey.csv'), 'utf8')).toContain('pk-softmax-1,softmax,0.9,0.3,,10');
    expect(readFileSync(join(out, 'index.html'), 'utf8')).toContain('<h2>Passkey retrieval</h2>');
  });

  it('writes CSV as RFC 4180 and LaTeX with its special characters escaped', () => {
    const table = { header: ['a', 'b'], right: [false, true], rows: [{ text: ['x_1 & 50%', '1,234'], raw: ['say "hi", ok', 1234] }] };
    expect(csvTable(table)).toBe('a,b\r\n"say ""hi"", ok",1234\r\n');
    expect(latexTable(table, 'Δ ± #')).toContain(
      '\\caption{$\\Delta$ $\\pm$ \\#}\n\\begin{tabular}{lr}\n\\toprule\na & b \\\\\n\\midrule\nx\\_1 \\& 50\\% & 1,234 \\\\',
    );
  });

  it('resolves quoted globs and parent folders to run folders', () => {
    expect(resolveRunDirs([join(root, 'runs', 'softmax-*')])).toEqual([softmax1, softmax2]);
    expect(resolveRunDirs([join(root, 'runs', 's?ay-s1')])).toEqual([slay]);
    expect(() => resolveRunDirs([join(root, 'runs', 'nothing-*')])).toThrow(/no folder matches/);
    expect(() => resolveRunDirs([join(root, 'missing')])).toThrow(/no such folder/);
  });
});

/** Each legend entry's label and its line colour (vega draws a symbol, then its label). */
function legendColours(svg: string): Map<string, string> {
  return new Map([...svg.matchAll(/d="M-5,0L5,0" stroke="(#[0-9a-f]{6})"[^]*?<text[^>]*>([^<]*)<\/text>/g)].map((m) => [m[2], m[1]]));
}

describe('statistics over distinct seeds', () => {
  it('counts a re-run of the same seed as a repeat, not as n: no zero-width interval, repeats shown with their spread', async () => {
    const repeatRoot = join(root, 'repeats');
    // Each mechanism trained twice with seed 1337 (a re-run after a crash, say): one seed per group.
    const runs = [
      writeRun({
        parent: repeatRoot,
        folder: 'softmax-a',
        attention: 'softmax',
        seed: 1337,
        val: [3, 2.5, 2.2],
        train: [3, 2.6, 2.3],
        summary: summaryOf(2.2, 100),
      }),
      writeRun({
        parent: repeatRoot,
        folder: 'softmax-b',
        attention: 'softmax',
        seed: 1337,
        val: [3, 2.5, 2.21],
        train: [3, 2.6, 2.3],
        summary: summaryOf(2.21, 100),
      }),
      writeRun({ parent: repeatRoot, folder: 'slay-a', attention: 'slay', seed: 1337, val: [3, 2.6, 2.3], train: [3, 2.7, 2.4], summary: summaryOf(2.3, 100) }),
      writeRun({ parent: repeatRoot, folder: 'slay-b', attention: 'slay', seed: 1337, val: [3, 2.6, 2.3], train: [3, 2.7, 2.4], summary: summaryOf(2.3, 100) }),
    ];
    const out = join(root, 'repeats-report');
    const result = await compareRuns(runs, { outDir: out, warn: () => {} });
    const [softmax, slay] = ['softmax', 'slay'].map((a) => result.groups.find((g) => g.attention === a)!);
    expect(softmax.stats.finalValLoss).toMatchObject({ n: 1, sd: null });
    expect(softmax.stats.finalValLoss.mean).toBeCloseTo(2.205, 12); // the seed's two runs averaged
    expect(softmax.seeds).toEqual([{ seed: 1337, runs: 2 }]);
    expect(softmax.repeats.runs).toBe(1);
    expect(softmax.repeats.spread).toBeCloseTo(0.01, 12);
    expect(slay.repeats).toEqual({ runs: 1, spread: 0 });
    // One pair (one seed), not two: a difference without an interval or p.
    expect(slay.paired).toMatchObject({ n: 1, ci: null, p: null, wins: 0 });
    expect(slay.paired!.mean).toBeCloseTo(2.3 - 2.205, 12);
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    expect(md).toContain('Same for every group: n 1 · seeds 1337 (×2) · repeated runs 1 ·');
    expect(md).toMatch(/\| slay \| \+0\.0950 \(n = 1\) \| 0\/1 \| 2\.3000 \| 0\.0000 \|/);
    expect(md).toMatch(/\| softmax \| \(baseline\) \| {2}\| 2\.2050 \| 0\.0100 \|/);
    expect(md).toContain('Runs that repeat a seed (softmax: 1, slay: 1) are averaged with it first and are not counted in n');
    expect(md).not.toMatch(/\[[+−]0\.0950, [+−]0\.0950\]/);
    // The curves' bands are over seeds too: one seed, no band.
    expect(groupCurves(result.groups, 'val', 'loss').every((p) => p.lo === undefined)).toBe(true);
  });
});

describe('a report fit for a paper', () => {
  it('gives a group one colour in every plot of the report, whatever each plot shows first', async () => {
    const colourRoot = join(root, 'colours');
    // Two softmax groups (so the colours are not the mechanisms' own) and a faster slay: against time, slay's
    // points come first.
    const runs = [
      writeRun({
        parent: colourRoot,
        folder: 'softmax-lr1',
        attention: 'softmax',
        seed: 1,
        val: [3, 2.5, 2.2],
        train: [3, 2.6, 2.3],
        summary: summaryOf(2.2, 100),
      }),
      writeRun({
        parent: colourRoot,
        folder: 'softmax-lr3',
        attention: 'softmax',
        seed: 1,
        lr: 3e-3,
        val: [3, 2.4, 2.1],
        train: [3, 2.5, 2.2],
        summary: summaryOf(2.1, 100),
      }),
      writeRun({
        parent: colourRoot,
        folder: 'slay-fast',
        attention: 'slay',
        seed: 1,
        speed: 5000,
        val: [3, 2.6, 2.4],
        train: [3, 2.7, 2.5],
        summary: summaryOf(2.4, 100),
      }),
    ];
    const out = join(root, 'colours-report');
    await compareRuns(runs, { outDir: out, warn: () => {} });
    const byTokens = legendColours(readFileSync(join(out, 'val-loss.svg'), 'utf8'));
    const byTime = legendColours(readFileSync(join(out, 'val-loss-time.svg'), 'utf8'));
    expect([...byTokens.keys()].sort()).toEqual(['slay', 'softmax lr=0.001', 'softmax lr=0.003']);
    expect(new Set(byTokens.values()).size).toBe(3);
    expect(byTime).toEqual(byTokens);
  });

  it('states once what every group shares, keeps counts without "± 0", and names the recipe the caller gives', async () => {
    const sharedRoot = join(root, 'shared');
    const runs = [1, 2].flatMap((seed) =>
      ['softmax', 'slay'].map((attention) => {
        const final = 2 + seed / 10 + (attention === 'slay' ? 0.05 * seed : 0);
        return writeRun({
          parent: sharedRoot,
          folder: `${attention}-seed${seed}`,
          attention,
          seed,
          val: [3, 2.5, final],
          train: [3, 2.6, 2.3],
          summary: summaryOf(final, 1_334_016),
        });
      }),
    );
    const out = join(root, 'shared-report');
    await compareRuns(runs, { outDir: out, warn: () => {}, recipeName: (dir) => (dir.includes('slay') ? 'sweep: slay' : 'sweep: softmax') });
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    expect(md).toContain('Same for every group: n 2 · seeds 1, 2 · params 1,334,016 · tokens 3,000 · tokens/s 520 · wall s 6.0.');
    expect(md).not.toContain('± 0 ');
    expect(md).toMatch(/\| slay \| [^\n]* \| sweep: slay \|\n/);
    const html = readFileSync(join(out, 'index.html'), 'utf8');
    expect(html).toContain('<p>Same for every group: n 2 · seeds 1, 2 · params 1,334,016');
    // The comparison columns come right after the group's name.
    expect(html).toMatch(
      /<thead><tr><th style="text-align:left">group<\/th><th style="text-align:right">Δ final val loss vs softmax \[95% CI\]<\/th><th style="text-align:right">p<\/th>/,
    );
    // groups.tex: booktabs, the comparison and what varies only.
    const tex = readFileSync(join(out, 'groups.tex'), 'utf8');
    expect(tex).toContain('\\toprule\ngroup & $\\Delta$ final val loss vs softmax [95\\% CI] & p & final val loss & val ppl & val acc \\\\\n\\midrule');
    expect(tex).toContain('Same for every group: n 2 $\\cdot$ params 1,334,016 $\\cdot$ tokens 3,000.}');
  });
});

describe('hostile and broken run folders', () => {
  it('refuses a model.kind or train.evalTokens from config.json that is not a recipe value, before anything is written', async () => {
    const hostileRoot = join(root, 'hostile');
    const good = writeRun({
      parent: hostileRoot,
      folder: 'good',
      attention: 'softmax',
      seed: 1,
      val: [3, 2.5, 2.2],
      train: [3, 2.6, 2.3],
      summary: summaryOf(2.2, 100),
    });
    const kind = writeRun({
      parent: hostileRoot,
      folder: 'kind',
      attention: 'slay',
      seed: 1,
      raw: { kind: '../victim' },
      val: [3, 2.5, 2.2],
      train: [3, 2.6, 2.3],
      summary: summaryOf(2.2, 100),
    });
    const tokens = writeRun({
      parent: hostileRoot,
      folder: 'tokens',
      attention: 'slay',
      seed: 1,
      raw: { evalTokens: 'x/../../../victim5' },
      val: [3, 2.5, 2.2],
      train: [3, 2.6, 2.3],
      summary: summaryOf(2.2, 100),
    });
    const out = join(root, 'hostile-out', 'report');
    await expect(compareRuns([good, kind], { outDir: out, split: true, warn: () => {} })).rejects.toThrow(
      `${join(kind, 'config.json')}: model.kind must be one of gpt, bert (got "../victim")`,
    );
    await expect(compareRuns([good, tokens], { outDir: out, split: true, warn: () => {} })).rejects.toThrow(
      `${join(tokens, 'config.json')}: train.evalTokens must be an integer ≥ 1 (got "x/../../../victim5")`,
    );
    expect(existsSync(join(root, 'hostile-out'))).toBe(false);
    expect(existsSync(join(root, 'victim'))).toBe(false);
  });

  it('writes only under the report folder: safeJoin refuses a name that leaves it', () => {
    expect(safeJoin('/r/out', 'gpt', 'report.md')).toBe('/r/out/gpt/report.md');
    for (const name of ['../victim', 'a/../../victim', '/etc', '..', '', 'a\nb']) expect(() => safeJoin('/r/out', name), name).toThrow(/refusing to write/);
    expect(folderSegment('../victim')).toBe('___victim');
    expect(folderSegment('..')).toBe('__');
    expect(folderSegment('x/../../y')).toBe('x_.._.._y');
  });

  it('neutralises spreadsheet formulas in CSV cells (OWASP: a leading single quote), numbers stay numbers', async () => {
    const table = {
      header: ['a', 'b', 'c', 'd', 'e', 'f', 'g'],
      right: [false, false, false, false, false, true, true],
      rows: [{ text: [], raw: ['=HYPERLINK("http://x")', '+1+2', '@SUM(A1)', '-cmd', '\tx', -0.5, '-1.5e-3'] }],
    };
    expect(csvTable(table).split('\r\n')[1]).toBe(`"'=HYPERLINK(""http://x"")",'+1+2,'@SUM(A1),'-cmd,'\tx,-0.5,-1.5e-3`);
    // End to end: a backend and commit from env.json, a mechanism's name.
    const csvRoot = join(root, 'csv');
    const run = writeRun({
      parent: csvRoot,
      folder: 'formula',
      attention: '=1+1',
      seed: 1,
      val: [3, 2.5, 2.2],
      train: [3, 2.6, 2.3],
      summary: summaryOf(2.2, 100),
      env: { backend: { name: '@evil' }, git: { commit: '-2+3abcdef', dirty: false } },
    });
    await compareRuns([run], { outDir: join(root, 'csv-report'), warn: () => {} });
    const runsCsv = readFileSync(join(root, 'csv-report', 'runs.csv'), 'utf8');
    expect(runsCsv).toContain(`formula,'=1+1,gpt,1,100,3000,2.2,`);
    expect(runsCsv).toContain(`,'@evil,'-2+3abcd\r\n`);
    expect(readFileSync(join(root, 'csv-report', 'groups.csv'), 'utf8')).toMatch(/^'=1\+1,/m);
  });

  it('shows a hostile attention name as text in report.md and index.html, never as HTML or a link', async () => {
    const name = '<img src=x onerror=alert(1)>[link](javascript:alert(2))';
    const run = writeRun({
      parent: join(root, 'xss'),
      folder: 'xss',
      attention: name,
      seed: 1,
      val: [3, 2.5, 2.2],
      train: [3, 2.6, 2.3],
      summary: summaryOf(2.2, 100),
    });
    await compareRuns([run], { outDir: join(root, 'xss-report'), warn: () => {} });
    const md = readFileSync(join(root, 'xss-report', 'report.md'), 'utf8');
    expect(md).not.toMatch(/(^|[^\\])<img/m);
    expect(md).not.toMatch(/(^|[^\\])\]\(javascript/m);
    expect(md).toContain('\\<img src=x onerror=alert(1)\\>\\[link\\](javascript:alert(2))');
    expect(readFileSync(join(root, 'xss-report', 'index.html'), 'utf8')).not.toContain('<img');
  });

  it('shows a hostile run folder name and recipe field as text in every table, list and page: no injected heading, cell, link or HTML', async () => {
    // No '/': one is a folder name.
    const hostile = (what: string) => `${what} \`<script>alert(1)\` a|b\n# Injected [x](javascript:alert(2)) <img src=x onerror=alert(3)>`;
    const parent = join(root, 'hostile');
    const run = (folder: string, seed: number) =>
      writeRun({ parent, folder, attention: 'softmax', seed, val: [3, 2.5, 2.2], train: [3, 2.6, 2.3], summary: summaryOf(2.2, 100) });
    const plain = run('plain', 1);
    const evil = run(hostile('run'), 2);
    const config = JSON.parse(readFileSync(join(evil, 'config.json'), 'utf8'));
    config.data.textColumn = hostile('column'); // a recipe field that tells the two groups apart
    writeFileSync(join(evil, 'config.json'), JSON.stringify(config));
    const out = join(root, 'hostile-report');
    await compareRuns([plain, evil], { outDir: out, warn: () => {} });
    const md = readFileSync(join(out, 'report.md'), 'utf8');
    expect(md.split('\n').filter((line) => line.startsWith('#'))).toEqual([
      '# Run comparison',
      '## Groups',
      '## What tells the groups apart',
      '## Curves',
      '## Runs',
      '## Run folders',
    ]);
    expect(md).not.toMatch(/(^|[^\\])<(script|img)/m);
    expect(md).not.toMatch(/(^|[^\\])\]\(javascript/m);
    expect(md).not.toMatch(/(^|[^\\])`/m);
    // Every table row has its header's cells: no '|' of a name ends one.
    for (const table of md.split('\n\n').filter((block) => block.startsWith('|'))) {
      const cells = table.split('\n').map((row) => row.replace(/\\\|/g, '').split('|').length);
      expect(new Set(cells).size, table).toBe(1);
    }
    for (const what of ['run', 'column']) expect(md, what).toContain(escapeMarkdown(hostile(what)));
    const html = readFileSync(join(out, 'index.html'), 'utf8');
    expect(html).not.toMatch(/<(script|img)/);
    expect(html).toContain(escapeHtml(hostile('column')));
    for (const file of readdirSync(out).filter((f) => f.endsWith('.svg'))) expect(readFileSync(join(out, file), 'utf8'), file).not.toMatch(/<(script|img)/);
  });

  it('skips a folder that is no run and holds none (runs/paper) with one line; an incomplete run is named with --skip-invalid', async () => {
    const parent = join(root, 'mixed-parent');
    const run = writeRun({
      parent,
      folder: 'gpt-softmax-1',
      attention: 'softmax',
      seed: 1,
      val: [3, 2.5, 2.2],
      train: [3, 2.6, 2.3],
      summary: summaryOf(2.2, 100),
    });
    // What `npm run paper` leaves: experiment folders of unit folders, none of them a training run folder.
    const paper = join(parent, 'paper');
    mkdirSync(join(paper, 'lm-compare-v1-tensorflow', 'unit-20260101-000000'), { recursive: true });
    writeFileSync(join(paper, 'lm-compare-v1-tensorflow', 'unit-20260101-000000', 'result.json'), '{}');
    const warnings: string[] = [];
    // `compare runs/*` as the shell expands it.
    expect(resolveRunDirs([run, paper], (m) => warnings.push(m))).toEqual([run]);
    expect(warnings).toEqual([`skipped ${paper}: not a run folder (no .slayformer-run, config.json or metrics.jsonl) and holds none`]);
    expect(() => resolveRunDirs([paper], () => {})).toThrow(`${paper}: not a run folder`);
    // A run folder moved away and its link left behind, as `runs/*` passes it: skipped with one line.
    const dangling = join(parent, 'gpt-softmax-moved');
    symlinkSync(join(root, 'nowhere'), dangling);
    const linkWarnings: string[] = [];
    expect(resolveRunDirs([run, dangling], (m) => linkWarnings.push(m))).toEqual([run]);
    expect(linkWarnings).toEqual([`skipped ${dangling}: a symbolic link to nothing`]);
    rmSync(dangling);
    // A run interrupted before its first record: its marker and config.json, no metrics.jsonl.
    const interrupted = join(parent, 'gpt-softmax-2');
    mkdirSync(interrupted);
    writeFileSync(join(interrupted, '.slayformer-run'), '');
    expect(resolveRunDirs([parent], () => {})).toEqual([run, interrupted]);
    await expect(compareRuns([run, interrupted], { outDir: join(root, 'interrupted'), warn: () => {} })).rejects.toThrow(
      `${join(interrupted, 'config.json')}: missing: ${interrupted} is an incomplete run folder (interrupted before it started?)\nLeave that folder out, or pass --skip-invalid`,
    );
    const skipped: string[] = [];
    const result = await compareRuns([run, interrupted], { outDir: join(root, 'interrupted'), skipInvalid: true, warn: (m) => skipped.push(m) });
    expect(result.runs.map((r) => r.dir)).toEqual([run]);
    expect(skipped).toEqual([expect.stringContaining(`skipped ${interrupted}: `)]);
  });
});
