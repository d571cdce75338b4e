// The offline GPU archive's plan (bench/xla-plan.ts, docs/xla.md "The archive's rows"): the rows `--rows` reads, and
// where bench/xla-run.py finds each linear mechanism overtaking softmax (its crossovers(), on rows made here; no jax).
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { ARCHIVE_ROWS, type ArchiveRow, GPT2_ROW_SHAPE, LONG_LENGTHS, parseRows, ROW_MECHANISMS, SOFTMAX_LONGEST } from '../../bench/xla-plan.ts';
import { attentionNames } from '../../src/model/attention/index.ts';

describe('the archive rows (--rows)', () => {
  it('plans GPT-2 small at 16 × 1024 for each mechanism in both precisions and the long-context rows by length', () => {
    const gpt2 = parseRows('gpt2', attentionNames());
    // Each mechanism in both precisions, and softmax's fused kernel in bf16.
    expect(gpt2).toHaveLength(2 * ROW_MECHANISMS.length + 1);
    for (const r of gpt2) expect(r.batch * r.gradAccum * r.seq).toBe(16 * 1024);
    expect(gpt2.every((r) => r.batch === GPT2_ROW_SHAPE.batch)).toBe(true);
    expect(new Set(gpt2.map((r) => `${r.attention} ${r.attentionKernel} ${r.precision}`)).size).toBe(gpt2.length);
    // The two precisions of a mechanism share one recording; the fused kernel is a recording of its own.
    expect(new Set(gpt2.map((r) => r.group)).size).toBe(ROW_MECHANISMS.length + 1);
    const long = parseRows('long', attentionNames());
    const tag = (r: ArchiveRow) => (r.attentionKernel === 'fused' ? `${r.attention}:fused` : r.attention);
    for (const seq of LONG_LENGTHS)
      expect(long.filter((r) => r.seq === seq).map(tag)).toEqual(
        seq <= SOFTMAX_LONGEST ? ['softmax', 'softmax:fused', ...ROW_MECHANISMS.slice(1)] : ROW_MECHANISMS.filter((m) => m !== 'softmax'),
      );
    expect(parseRows('all', attentionNames())).toEqual(ARCHIVE_ROWS);
    expect(parseRows('none', attentionNames())).toEqual([]);
  });

  it('runs the fused softmax rows right after their composed ones, as programs of their own', () => {
    const ids = ARCHIVE_ROWS.map((r) => r.id);
    for (const [composed, fused] of [
      ['gpt2-softmax-bf16', 'gpt2-softmax-fused-bf16'],
      ['long-softmax-1k', 'long-softmax-fused-1k'],
      ['long-softmax-4k', 'long-softmax-fused-4k'],
    ]) {
      expect(ids.indexOf(fused)).toBe(ids.indexOf(composed) + 1);
      const [c, f] = [ARCHIVE_ROWS[ids.indexOf(composed)], ARCHIVE_ROWS[ids.indexOf(fused)]];
      expect(f).toMatchObject({ attention: 'softmax', attentionKernel: 'fused', precision: 'bf16', seq: c.seq, batch: c.batch, gradAccum: c.gradAccum });
      expect(c.attentionKernel).toBe('composed');
      expect(f.group).not.toBe(c.group);
    }
    expect(ids).not.toContain('long-softmax-fused-16k');
    expect(parseRows('fused', attentionNames()).map((r) => r.id)).toEqual(['gpt2-softmax-fused-bf16', 'long-softmax-fused-1k', 'long-softmax-fused-4k']);
    // cuDNN's fused attention takes bf16 operands: no fused row in fp32.
    expect(ARCHIVE_ROWS.filter((r) => r.attentionKernel === 'fused').every((r) => r.attention === 'softmax' && r.precision === 'bf16')).toBe(true);
  });

  it('reads rows of their own and row ids once each, and names what it cannot read', () => {
    const rows = parseRows('demo:performer:bf16:2x1x64,gpt2-slay-bf16,gpt2-slay-bf16', attentionNames());
    expect(rows.map((r) => r.id)).toEqual(['demo-performer-bf16-2x1x64', 'gpt2-slay-bf16']);
    expect(rows[0]).toMatchObject({ model: 'demo', attention: 'performer', precision: 'bf16', gradAccum: 2, batch: 1, seq: 64 });
    expect(() => parseRows('demo:performer:fp16:1x64', attentionNames())).toThrow(/'demo:performer:fp16:1x64' is neither a set/);
    expect(() => parseRows('gpt3:slay:bf16:1x64', attentionNames())).toThrow(/unknown model 'gpt3'/);
    expect(() => parseRows('demo:nope:bf16:1x64', attentionNames())).toThrow(/unknown mechanism 'nope'/);
    expect(() => parseRows('demo:slay:bf16:0x64', attentionNames())).toThrow(/must be ≥ 1/);
  });

  it('reads an attention kernel after the shape (composed by default), fused for softmax only', () => {
    const rows = parseRows('long:softmax:bf16:2x1x32:fused,long:softmax:bf16:2x1x32,long:softmax:bf16:2x1x32:composed', attentionNames());
    expect(rows.map((r) => [r.id, r.attentionKernel])).toEqual([
      ['long-softmax-fused-bf16-2x1x32', 'fused'],
      ['long-softmax-bf16-2x1x32', 'composed'],
    ]);
    expect(rows[0].group).toBe('long-softmax-fused-2x1x32');
    expect(rows[1].group).toBe('long-softmax-2x1x32');
    expect(() => parseRows('long:performer:bf16:1x32:fused', attentionNames())).toThrow(
      /'long:performer:bf16:1x32:fused': the fused kernel is softmax attention's/,
    );
    expect(() => parseRows('long:softmax:bf16:1x32:flash', attentionNames())).toThrow(/unknown attention kernel 'flash' \(composed, fused\)/);
  });
});

/** xla-run.py's crossovers() on rows made here (no jax: it imports jax only to train). */
function crossovers(rows: Array<{ attention: string; seq: number; msPerStep: number | null; precision?: string; attentionKernel?: string }>) {
  const code = `import importlib.util, json, sys
spec = importlib.util.spec_from_file_location('xla_run', 'bench/xla-run.py')
xla_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(xla_run)
print(json.dumps(xla_run.crossovers(json.loads(sys.argv[1]))))`;
  const given = rows.map((r) => ({ model: 'long', precision: 'bf16', ...r }));
  const run = spawnSync('python3', ['-B', '-c', code, JSON.stringify(given)], { encoding: 'utf8' });
  expect(run.status, run.stderr).toBe(0);
  return JSON.parse(run.stdout) as Array<{ mechanism: string; overtakesAt: number | null; notBefore: number | null; text: string; softmaxKernels: string[] }>;
}

describe('where a linear mechanism overtakes softmax (xla-run.py)', () => {
  it('names the first length it is faster at, the one before, or that it is not within the longest both ran at', () => {
    const found = crossovers([
      { attention: 'softmax', seq: 1024, msPerStep: 10 },
      { attention: 'softmax', seq: 4096, msPerStep: 50 },
      { attention: 'slay', seq: 1024, msPerStep: 20 },
      { attention: 'slay', seq: 4096, msPerStep: 40 },
      { attention: 'slay', seq: 16384, msPerStep: 160 },
      { attention: 'performer', seq: 1024, msPerStep: 9 },
      { attention: 'performer', seq: 4096, msPerStep: 30 },
      { attention: 'darkformer', seq: 1024, msPerStep: 30 },
      { attention: 'darkformer', seq: 4096, msPerStep: 60 },
      { attention: 'darkformer', seq: 16384, msPerStep: 240 },
    ]);
    const by = Object.fromEntries(found.map((c) => [c.mechanism, c]));
    expect(by.slay).toMatchObject({ overtakesAt: 4096, notBefore: 1024, text: 'between 1K and 4K' });
    expect(by.performer).toMatchObject({ overtakesAt: 1024, notBefore: null, text: 'already at 1K (the shortest measured)' });
    expect(by.darkformer).toMatchObject({ overtakesAt: null, text: 'not within 4K (softmax did not run at 16K)' });
    expect(crossovers([{ attention: 'slay', seq: 1024, msPerStep: 5 }])[0].text).toMatch(/^not measured/);
  });

  it("compares with softmax's fastest row at each length, composed or fused, and names its kernel", () => {
    const found = crossovers([
      { attention: 'softmax', seq: 1024, msPerStep: 10 },
      { attention: 'softmax', attentionKernel: 'fused', seq: 1024, msPerStep: 12 },
      { attention: 'softmax', seq: 4096, msPerStep: 50 },
      { attention: 'softmax', attentionKernel: 'fused', seq: 4096, msPerStep: 20 },
      // Faster than composed softmax at 4K, not than fused.
      { attention: 'slay', seq: 1024, msPerStep: 20 },
      { attention: 'slay', seq: 4096, msPerStep: 40 },
      { attention: 'slay', seq: 16384, msPerStep: 160 },
    ]);
    expect(found).toEqual([
      expect.objectContaining({
        mechanism: 'slay',
        softmaxKernels: ['composed', 'fused'],
        overtakesAt: null,
        text: 'not within 4K (softmax did not run at 16K)',
      }),
    ]);
    // A fused row that did not run (no ms per step) leaves the composed one as softmax.
    const composedOnly = crossovers([
      { attention: 'softmax', seq: 4096, msPerStep: 50 },
      { attention: 'softmax', attentionKernel: 'fused', seq: 4096, msPerStep: null },
      { attention: 'slay', seq: 4096, msPerStep: 40 },
    ]);
    expect(composedOnly[0]).toMatchObject({ softmaxKernels: ['composed'], overtakesAt: 4096 });
  });
});
