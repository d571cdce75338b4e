// The offline GPU archive's benchmark rows (bench/xla-plan.ts, docs/xla.md "The archive's rows"), xla-run.py's CPU
// fallback end to end: an archive with tiny rows (a recording exported in both precisions, softmax composed and fused
// beside Performer)
// built here, unpacked by xla-run.py and run on jax's CPU with the PyTorch peer (bf16 autocast, SDPA, torch.compile on CPU torch) at the rows'
// shape, then again with a budget that covers nothing, where every row and the peer say why they were skipped.
// The end-to-end part needs the native backend, `npm run setup:xla`, the demo data (npm run demo) and, for the
// peer's measurement, torch in .venv-hf (npm run setup:transformers; without it the peer's skip reason is checked).
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { isXlaSetUp, venvPython, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { loadRecipe } from '../../src/store/recipes.ts';

const demo = loadRecipe('recipes/demo/gpt-slay.yaml');
const hasDemoData = existsSync(demo.data.dataset) && existsSync(demo.data.tokenizer);
const available = isTensorflowSetUp() && isXlaSetUp() && hasDemoData;
if (!available) console.log(`[xla-archive-rows] end to end skipped: needs the tensorflow backend, ${XLA_SETUP_COMMAND} and the demo data (npm run demo)`);
const peerPython = resolve('.venv-hf/bin/python');
const hasTorch = existsSync(peerPython) && spawnSync(peerPython, ['-c', 'import torch']).status === 0;
if (available && !hasTorch) console.log('[xla-archive-rows] the peer is checked for its skip reason only: no torch in .venv-hf (npm run setup:transformers)');

const dir = mkdtempSync(join(tmpdir(), 'slay-xla-rows-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

interface RowResult {
  id: string;
  attention: string;
  attentionKernel: string;
  attentionImplementation?: string | null;
  path?: string;
  precision: string;
  losses?: number[];
  msPerStep?: number;
  gradAccum: number;
  tokensPerSecond?: number;
  compileSeconds?: number;
  compiledPeakBytes?: number | null;
  peakBytes?: number | null;
  builtSeconds: number;
  programBytes: number;
  modelFlopsPerToken?: number;
  mfu?: number | null;
  skipped?: string;
  error?: string;
}

describe.skipIf(!available)('the archive with benchmark rows, run by xla-run.py on jax CPU', () => {
  const archive = join(dir, 'slayformer-xla.tar.xz');
  // Two micro-batches a step, as GPT-2 small's rows sum sixteen; softmax also with the fused kernel (jax's XLA form on CPU).
  const rows = 'long:softmax:bf16:2x1x32,long:softmax:bf16:2x1x32:fused,long:performer:bf16:2x1x32,long:performer:fp32:2x1x32';
  const ids = ['long-softmax-bf16-2x1x32', 'long-softmax-fused-bf16-2x1x32', 'long-performer-bf16-2x1x32', 'long-performer-fp32-2x1x32'];
  const runArchive = (name: string, extra: string[]) =>
    spawnSync(
      venvPython(),
      // --dir relative to this folder: Node and the peer run elsewhere (in it, in --out)
      [join(dir, 'xla-run.py'), '--archive', archive, '--dir', relative(process.cwd(), join(dir, name)), '--out', join(dir, `${name}-out`)]
        .concat(['--peer-python', peerPython])
        .concat(['--row-steps', '1', '--row-warmup', '1', '--steps', '1', '--warmup', '1', '--train-steps', '2'])
        .concat(extra),
      { encoding: 'utf8', env: { ...process.env, SLAYFORMER_XLA_PLATFORM: 'cpu' } },
    );
  const resultsOf = (name: string) =>
    JSON.parse(readFileSync(join(dir, `${name}-out`, 'results.json'), 'utf8')) as {
      rows: RowResult[];
      peer: Array<Record<string, unknown>>;
      crossover: Array<{ mechanism: string; precision: string; lengths: number[]; softmaxKernels: string[] }>;
      runs: Array<Record<string, unknown>>;
    };

  it('builds with the rows, and runs every row, the peer at their shape and the loss checks', () => {
    const build = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'bench/xla-archive.ts', '--out', archive, '--models', 'demo', '--rows', rows].concat([
        '--cpu-steps',
        '1',
        '--train-steps',
        '2',
        '--stage',
        join(dir, 'stage'),
        '--xz-level',
        '0',
      ]),
      { encoding: 'utf8' },
    );
    expect(build.status, build.stderr).toBe(0);
    expect(build.stdout).toMatch(/long-performer-2x1x32: recorded and exported in \d+ s here, [\d.]+ MB of programs/);
    // The fused row's programs are a recording of their own, which says its kernel.
    expect(build.stdout).toMatch(/long-softmax-fused-2x1x32: recorded and exported in \d+ s here/);
    const kernelOf = (group: string) => JSON.parse(readFileSync(join(dir, 'stage', 'programs', group, 'bf16', 'manifest.json'), 'utf8')).attentionKernel;
    expect(kernelOf('long-softmax-fused-2x1x32')).toBe('fused');
    expect(kernelOf('long-softmax-2x1x32')).toBe('composed');
    expect(statSync(archive).size).toBeLessThanOrEqual(60e6);
    const run = runArchive('full', ['--budget', '3600']);
    expect(run.status, run.stderr + run.stdout).toBe(0);
    const results = resultsOf('full');
    expect(results.rows.map((r) => r.id)).toEqual(ids);
    for (const r of results.rows) {
      expect(r.error ?? r.skipped).toBeUndefined();
      expect(r.losses).toHaveLength(2);
      expect(r.msPerStep).toBeGreaterThan(0);
      // A step is both micro-batches' tokens.
      expect(r.gradAccum).toBe(2);
      expect(r.tokensPerSecond! * r.msPerStep!).toBeCloseTo(1000 * 2 * 32, 6);
      expect(r.compileSeconds).toBeGreaterThan(0);
      // XLA's compiled estimate on every platform; jax's CPU reports no device peak, so no MFU either.
      expect(r.compiledPeakBytes).toBeGreaterThan(0);
      expect(r.peakBytes).toBeNull();
      expect(r.mfu).toBeNull();
      expect(r.modelFlopsPerToken).toBeGreaterThan(0);
      expect(r.builtSeconds).toBeGreaterThan(0);
      expect(r.programBytes).toBeGreaterThan(0);
    }
    // One recording, two precisions: the same first loss to bf16's rounding, not to the bit.
    const [composed, fused, bf16, fp32] = results.rows;
    expect(Math.abs(bf16.losses![0] - fp32.losses![0]) / fp32.losses![0]).toBeLessThan(2 ** -8);
    expect(bf16.losses![0]).not.toBe(fp32.losses![0]);
    // The fused row trained from its own programs, the boundary filled by jax's XLA form (no cuDNN on CPU); its
    // attention products stay float32 where the composed bf16 row rounds them, so their losses agree to bf16's rounding.
    expect(results.rows.map((r) => r.attentionKernel)).toEqual(['composed', 'fused', 'composed', 'composed']);
    expect(fused.path).toMatch(/attention: jax xla × \d+/);
    expect(fused.attentionImplementation).toBe('xla');
    expect(composed.path).not.toMatch(/attention:/);
    expect(composed.attentionImplementation).toBeNull();
    expect(Math.abs(fused.losses![0] - composed.losses![0]) / composed.losses![0]).toBeLessThan(2 ** -8);
    // Softmax ran in bf16 only: the fp32 Performer row has nothing to be compared with. In bf16 Performer is compared
    // with the faster of the two softmax rows, whose kernel the entry names.
    const faster = fused.msPerStep! < composed.msPerStep! ? 'fused' : 'composed';
    expect(results.crossover).toEqual([
      expect.objectContaining({ mechanism: 'performer', precision: 'bf16', lengths: [32], softmaxKernels: [faster] }),
      expect.objectContaining({ mechanism: 'performer', precision: 'fp32', lengths: [], text: 'not measured (no length where softmax ran too)' }),
    ]);
    expect(results.peer).toHaveLength(1);
    const peer = results.peer[0];
    expect(peer).toMatchObject({ id: 'peer-long-2x32', batch: 2, seq: 32 });
    if (hasTorch) {
      expect(peer).toMatchObject({ bf16: true, compiled: true, d: 128, layers: 4, heads: 4, vocab: 4096 });
      expect(peer.tokens_per_s).toBeGreaterThan(0);
    } else expect(peer.skipped).toMatch(/no torch in/);
    expect(results.runs.map((r) => r.model)).toEqual(['demo', 'demo recipe (trainer, data, checkpoints)']);
    const md = readFileSync(join(dir, 'full-out', 'results.md'), 'utf8');
    expect(md).toContain('| row | mechanism | attention kernel | precision | tokens per step |');
    expect(md).toContain('| long-softmax-fused-bf16-2x1x32 | softmax | fused (xla) | bf16 | 2 × 1 × 32 |');
    expect(md).toContain('| long-softmax-bf16-2x1x32 | softmax | composed | bf16 | 2 × 1 × 32 |');
    expect(md).toContain('| PyTorch peer (softmax, SDPA, bf16 autocast, torch.compile) |');
    expect(md).toContain('| mechanism | precision | lengths measured | softmax compared (its fastest row at each length) | overtakes softmax (ms per step) |');
    expect(md).toMatch(new RegExp(`\\| performer \\| bf16 \\| 32 \\| 32 ${faster} \\|`));
  });

  it('skips, saying why, every row and the peer that the budget does not cover', () => {
    const run = runArchive('none', ['--budget', '1', '--only', 'rows,peer']);
    expect(run.status, run.stderr + run.stdout).toBe(0);
    const results = resultsOf('none');
    expect(results.rows.map((r) => r.id)).toEqual(ids);
    expect(results.rows.map((r) => r.attentionKernel)).toEqual(['composed', 'fused', 'composed', 'composed']);
    for (const r of results.rows) expect(r.skipped).toMatch(/^time budget: \d+ s left, a row:long task takes ~\d+ s here$/);
    expect(run.stdout).toMatch(/^skipped long-softmax-bf16-2x1x32: time budget/m);
    expect(results.peer[0].skipped).toMatch(hasTorch ? /^time budget/ : /no torch in/);
    expect(results.runs).toEqual([]);
  });
});
