// The offline GPU archive of the XLA route (bench/xla-archive.ts, docs/xla.md "Offline GPU node"): it builds, its size
// is under the 60 MB, and its script (xla-run.py) unpacks it into an empty folder and trains from it here on
// jax's CPU — the bundled Node.js, the compiled programs, the trainer on the carried data — with the same losses as
// the CPU run the builder recorded in it. The demo model only (GPT-2 small's CPU steps take minutes here).
// Needs the native backend and `npm run setup:xla`.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { isXlaSetUp, venvPython, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { loadRecipe } from '../../src/store/recipes.ts';

// The archive carries the demo recipe's data and tokenizer (npm run demo prepares them).
const demo = loadRecipe('recipes/demo/gpt-slay.yaml');
const hasDemoData = existsSync(demo.data.dataset) && existsSync(demo.data.tokenizer);
const available = isTensorflowSetUp() && isXlaSetUp() && hasDemoData;
if (!available) console.log(`[xla-archive] skipped: needs the tensorflow backend, ${XLA_SETUP_COMMAND} and the demo data (npm run demo)`);

const dir = mkdtempSync(join(tmpdir(), 'slay-xla-archive-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!available)('the offline GPU archive', () => {
  it('builds under 60 MB, and xla-run.py unpacks it and trains from it on jax CPU with the recorded CPU losses', () => {
    const archive = join(dir, 'slayformer-xla.tar.xz');
    const build = spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        'bench/xla-archive.ts',
        '--out',
        archive,
        '--models',
        'demo',
        // The benchmark rows have their own test (xla-archive-rows.test.ts): recording them all takes minutes here.
        '--rows',
        'none',
        '--cpu-steps',
        '1',
        '--train-steps',
        '2',
        '--stage',
        join(dir, 'stage'),
        '--xz-level',
        '0',
      ],
      { encoding: 'utf8' },
    );
    expect(build.status, build.stderr).toBe(0);
    expect(statSync(archive).size).toBeLessThanOrEqual(60e6);
    const out = join(dir, 'results');
    const run = spawnSync(
      venvPython(),
      [join(dir, 'xla-run.py'), '--archive', archive, '--dir', join(dir, 'unpacked'), '--out', out, '--steps', '1', '--warmup', '1', '--train-steps', '2'],
      { encoding: 'utf8', env: { ...process.env, SLAYFORMER_XLA_PLATFORM: 'cpu' } },
    );
    expect(run.status, run.stderr + run.stdout).toBe(0);
    expect(run.stdout).toMatch(/^unpacking /m);
    const results = JSON.parse(readFileSync(join(out, 'results.json'), 'utf8')) as { runs: Array<Record<string, unknown>> };
    const demo = results.runs.find((r) => r.model === 'demo') as {
      losses: number[];
      maxLossDifference: number;
      path: string;
      modelFlopsPerToken: number;
      mfu: number | null;
    };
    expect(demo.losses).toHaveLength(2);
    // Model FLOPs per token always; MFU only against a GPU's datasheet peak (none on jax's CPU).
    expect(demo.modelFlopsPerToken).toBeGreaterThan(0);
    expect(demo.mfu).toBeNull();
    expect(readFileSync(join(out, 'results.md'), 'utf8')).toContain('| run | batch × seq | parameters | ms/step | tokens/s | MFU | compile s |');
    expect(demo.path).toBe('portable artifact');
    expect(demo.maxLossDifference).toBeLessThan(1e-5);
    const trained = results.runs.find((r) => Array.isArray(r.metrics)) as {
      metrics: Array<{ split: string; step: number; loss: number }>;
      cpu: Array<{ split: string; step: number; loss: number }>;
      error?: string;
    };
    expect(trained.error).toBeUndefined();
    const train = trained.metrics.filter((m) => m.split === 'train');
    expect(train.map((m) => m.step)).toEqual(trained.cpu.filter((m) => m.split === 'train').map((m) => m.step));
    train.forEach((m, i) => expect(Math.abs(m.loss - trained.cpu.filter((c) => c.split === 'train')[i].loss)).toBeLessThan(1e-5));
  });
});
