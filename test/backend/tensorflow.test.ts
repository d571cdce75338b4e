// The native backend built by `npm run setup:tensorflow`: its TF 2.21 fixes, its fused kernel, the
// routing that differs from wasm, and the set-up command's reuse and error lines. The numerical
// suites themselves run on it in the `tensorflow` vitest project (vitest.config.ts).
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { hasFusedKernel, STATELESS_UNIFORM } from '../../src/backend/fused-kernels.ts';
import {
  BUILD_STAMP,
  isTensorflowSetUp,
  nativePackageDir,
  PROJECT_ROOT,
  readBuildStamp,
  SETUP_COMMAND,
  TENSORFLOW_CACHE,
} from '../../src/backend/native-build.ts';
import { SetupError, setupTensorflow } from '../../src/backend/tensorflow-setup.ts';
import { tensorflowInfo } from '../../src/backend/tensorflow.ts';
import { crossEntropySum } from '../../src/model/lm.ts';
import { crossEntropyRef } from '../helpers/reference.ts';
import { explicitTransposes } from '../../src/model/ops.ts';
import { DropoutSource, dropoutSeedTensor } from '../../src/model/layers.ts';
import { Rng } from '../../src/core/rng.ts';

const available = isTensorflowSetUp();

describe.skipIf(!available)(`tensorflow backend (skipped when not built: ${SETUP_COMMAND})`, () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
  });
  afterAll(async () => {
    await initBackend('cpu', { quiet: true });
  });

  it('is the wheel-built TensorFlow the stamp names', () => {
    expect(tf.getBackend()).toBe('tensorflow');
    expect(tensorflowInfo().tensorflow).toBe(readBuildStamp()!.tensorflow);
  });

  it('round on int32 keeps the integers (TF ≥ 2.17 returns zeros), floats still round half to even', () => {
    const ints = tf.tidy(() => tf.round(tf.tensor1d([3, -2, 0, 2147483647], 'int32')).arraySync());
    expect(ints).toEqual([3, -2, 0, 2147483647]);
    const floats = tf.tidy(() => tf.round(tf.tensor1d([1.4, 2.5, -3.5, 0.5])).arraySync());
    expect(floats).toEqual([1, 2, -4, 0]);
  });

  it('concat of scalars gives the vector cpu and wasm give (TF 2.21 refuses rank 0), and leaks nothing', () => {
    const before = tf.memory().numTensors;
    const joined = tf.tidy(() => tf.concat([tf.scalar(1), tf.scalar(2), tf.scalar(-3)]).arraySync());
    expect(joined).toEqual([1, 2, -3]);
    const mixed = tf.tidy(() => tf.concat([tf.tensor1d([4, 5]), tf.tensor1d([6])]).arraySync());
    expect(mixed).toEqual([4, 5, 6]);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('computes the cross-entropy equal to a float64 reference in value and gradient', () => {
    const [n, vocab] = [6, 50];
    const rng = new Rng(5);
    const logits = Array.from({ length: n * vocab }, () => 4 * rng.normal());
    const targets = Array.from({ length: n }, (_, i) => (i * 17) % vocab);
    const { value: want, grad: gradWant } = crossEntropyRef(logits, targets, vocab, undefined, 2);
    const before = tf.memory().numTensors;
    const { value, grad } = tf.tidy(() => {
      const l = tf.tensor2d(logits, [n, vocab]);
      const t = tf.tensor1d(targets, 'int32');
      return {
        value: crossEntropySum(l, t).dataSync()[0],
        grad: Array.from(
          tf
            .grad((x: tf.Tensor) => tf.mul(crossEntropySum(x as tf.Tensor2D, t), 2))(l)
            .dataSync(),
        ),
      };
    });
    expect(Math.abs(value - want) / want).toBeLessThan(1e-6);
    expect(Math.max(...grad.map((g, i) => Math.abs(g - gradWant[i])))).toBeLessThan(1e-6);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('draws dropout masks from a seed tensor: the rate within binomial bounds, kept values scaled, a function of the seed and the site', () => {
    const rate = 0.25;
    const [rows, cols] = [200, 100];
    const draw = (seed: number | tf.Tensor1D, sites = 1) =>
      tf.tidy(() => {
        const source = new DropoutSource(rate, seed);
        let out: tf.Tensor = tf.ones([rows, cols]);
        for (let i = 0; i < sites; i++) out = source.apply(tf.ones([rows, cols]));
        return Array.from(out.dataSync());
      });
    const before = tf.memory().numTensors;
    const a = draw(41);
    const n = a.length;
    const dropped = a.filter((x) => x === 0).length;
    // Binomial(n, rate): 5 standard deviations.
    expect(Math.abs(dropped - n * rate)).toBeLessThan(5 * Math.sqrt(n * rate * (1 - rate)));
    expect(a.every((x) => x === 0 || x === Math.fround(1 / (1 - rate)))).toBe(true);
    expect(draw(41)).toEqual(a);
    expect(tf.tidy(() => draw(dropoutSeedTensor(41)))).toEqual(a);
    const agree = (b: number[]) => b.filter((x, i) => (x === 0) === (a[i] === 0)).length / n;
    // Independent masks agree on (1 − rate)² + rate² = 62.5% of positions.
    expect(agree(draw(42))).toBeLessThan(0.7);
    expect(agree(draw(41, 2))).toBeLessThan(0.7);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('uses transpose flags instead of explicit transposes (a wasm-only detour)', () => {
    expect(explicitTransposes()).toBe(false);
  });
});

describe.skipIf(!available)("TensorFlow's start-up lines", () => {
  // absl prints INFO lines from TF's static initialisers while the library loads ("oneDNN custom operations
  // are on"); the loader silences them through native/quiet_stderr.c. A child's stderr here is a socket.
  const load = (env: Record<string, string>) =>
    spawnSync(
      process.execPath,
      [
        '--import',
        'tsx',
        '-e',
        "import('./src/backend/start.ts').then(async (m) => { await m.initBackend('tensorflow', { quiet: true }); process.stderr.write('loaded\\n'); })",
      ],
      {
        cwd: PROJECT_ROOT,
        encoding: 'utf8',
        env: { ...process.env, ...env },
      },
    );

  it('do not reach stderr; TF_CPP_MIN_LOG_LEVEL=0 shows them again', () => {
    // oneDNN on explicitly: TF logs that line whenever it is on, whatever the CPU's default.
    const quiet = load({ TF_CPP_MIN_LOG_LEVEL: '2', TF_ENABLE_ONEDNN_OPTS: '1' });
    expect(quiet.status, quiet.stderr).toBe(0);
    expect(quiet.stderr).toBe('loaded\n');
    const loud = load({ TF_CPP_MIN_LOG_LEVEL: '0', TF_ENABLE_ONEDNN_OPTS: '1' });
    expect(loud.stderr).toMatch(/oneDNN custom operations are on/);
    expect(loud.stderr.trim().split('\n').pop()).toBe('loaded');
  });
});

describe('backends without the fused kernel fall back to the composed form', () => {
  it.each(['cpu', 'wasm'])('%s', async (name) => {
    await initBackend(name, { quiet: true });
    expect(hasFusedKernel(STATELESS_UNIFORM)).toBe(false);
    expect(explicitTransposes()).toBe(name === 'wasm');
  });
});

describe('setup:tensorflow', () => {
  it('fails with one line naming what is missing, before it touches the cache', () => {
    const stampBefore = fs.existsSync(BUILD_STAMP) ? fs.readFileSync(BUILD_STAMP, 'utf8') : null;
    const lines: string[] = [];
    const attempt = () => setupTensorflow({ gpu: false, tensorflow: '2.21.*', python: '/nonexistent/python3', force: true, log: (l) => lines.push(l) });
    expect(attempt).toThrow(SetupError);
    expect(attempt).toThrow(/^\/nonexistent\/python3 not found: install Python 3 with pip \(or pass --python PATH\)$/);
    expect(fs.existsSync(BUILD_STAMP) ? fs.readFileSync(BUILD_STAMP, 'utf8') : null).toBe(stampBefore);
  });

  it.skipIf(!available)('keeps a matching build, removing what interrupted builds left; build.json holds relative paths only', () => {
    // What an interrupted build leaves: a half-built tree, and the staging folder of older versions.
    const leftovers = [path.join(TENSORFLOW_CACHE, 'tree-1999-01-01T00-00-00-000Z-1'), path.join(TENSORFLOW_CACHE, 'staging')];
    for (const dir of leftovers) {
      fs.mkdirSync(path.join(dir, 'node_modules'), { recursive: true });
      fs.writeFileSync(path.join(dir, 'node_modules', 'partial'), 'x');
    }
    const stampBefore = fs.readFileSync(BUILD_STAMP, 'utf8');
    const { reused } = setupTensorflow({ gpu: false, tensorflow: '2.21.*', python: 'python3', force: false, log: () => {} });
    expect(reused).toBe(true);
    for (const dir of leftovers) expect(fs.existsSync(dir), dir).toBe(false);
    expect(fs.readFileSync(BUILD_STAMP, 'utf8')).toBe(stampBefore);
    // Moving the project folder keeps the build: no absolute path is recorded.
    const stamp = readBuildStamp()!;
    expect(path.isAbsolute(stamp.tree) || path.isAbsolute(stamp.binding)).toBe(false);
    expect(stampBefore).not.toContain(PROJECT_ROOT);
    expect(fs.existsSync(path.join(nativePackageDir(stamp), stamp.binding))).toBe(true);
  });

  it.skipIf(!available)('keeps a matching build without rebuilding, and says so', () => {
    const lines: string[] = [];
    const { build, reused } = setupTensorflow({ gpu: false, tensorflow: '2.21.*', python: 'python3', force: false, log: (l) => lines.push(l) });
    // Not rebuilt: reused, the same stamp, and no line of a build step (a time bound would fail on a busy machine).
    expect(reused).toBe(true);
    expect(build).toEqual(readBuildStamp());
    expect(lines).toEqual([expect.stringMatching(/^already built: TensorFlow 2\.21\.\d+, tfjs-node 4\.22\.0, .* \(--force rebuilds\)$/)]);
  });

  it('the CLI answers --help and refuses an unknown option with one line and the usage', () => {
    const cli = (...args: string[]) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/setup-tensorflow.ts', ...args], { cwd: PROJECT_ROOT, encoding: 'utf8' });
    const help = cli('--help');
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^Usage:\n {2}npm run setup:tensorflow -- /);
    const bad = cli('--gpuu');
    expect(bad.status).toBe(2);
    expect(bad.stderr.split('\n')[0]).toBe("setup:tensorflow: unknown option '--gpuu'");
  });
});

describe.skipIf(!available)('check:gpu on this (CPU) build', () => {
  const checkGpu = (...args: string[]) =>
    spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/check-gpu.ts', ...args], { cwd: PROJECT_ROOT, encoding: 'utf8' });

  it('refuses a CPU build with the command that makes a GPU one', () => {
    const r = checkGpu();
    expect(r.status).toBe(1);
    expect(r.stderr.trim().split('\n').pop()).toBe(
      `check:gpu: this is a CPU build: run \`${SETUP_COMMAND} -- --gpu --force\` (or pass --cpu to check it anyway)`,
    );
  });

  it("with --cpu runs every other check and a recipe's first steps, printing tokens/s", () => {
    const r = checkGpu('recipes/demo/gpt-softmax.yaml', '--cpu', '--steps', '1');
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/ok {3}gradient vs cpu: relative error/);
    for (const how of ['TensorFlow functions', 'functions \\+ XLA', 'op by op']) {
      expect(r.stdout).toMatch(new RegExp(`${how} +\\d+ ms per step, [\\d,]+ tokens/s, loss \\d+\\.\\d{3}, \\d+ values \\(\\d+ bytes\\) read back per step`));
    }
    // Function steps read back the loss and the gradient norm only.
    expect(r.stdout).toMatch(/TensorFlow functions +.* 2 values \(8 bytes\) read back per step/);
    expect(r.stdout).toMatch(/ok {3}XLA \(train\.xla\) vs cpu: /);
    expect(r.stdout).toMatch(/peak memory: [\d,]+ MB peak resident on the host \(no GPU memory: \/job:localhost\/replica:0\/task:0\/device:CPU:0\)/);
    expect(r.stdout.trim().split('\n').pop()).toBe('check:gpu: ok');
  });
});
