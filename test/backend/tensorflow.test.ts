// The native backend built by `npm run setup:tensorflow`: its TF 2.21 fixes, its fused kernel, the
// routing that differs from wasm, and the set-up command's reuse and error lines. The numerical
// suites themselves run on it in the `tensorflow` vitest project (vitest.config.ts).
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend.ts';
import { hasFusedKernel, SPARSE_CROSS_ENTROPY } from '../../src/backend/fused-kernels.ts';
import { BUILD_STAMP, isTensorflowSetUp, PROJECT_ROOT, readBuildStamp, SETUP_COMMAND } from '../../src/backend/native-build.ts';
import { SetupError, setupTensorflow } from '../../src/backend/tensorflow-setup.ts';
import { tensorflowInfo } from '../../src/backend/tensorflow.ts';
import { crossEntropySum } from '../../src/model/lm.ts';
import { explicitTransposes } from '../../src/model/ops.ts';
import { Rng } from '../../src/model/rng.ts';

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

  it('runs the fused cross-entropy, equal to a float64 reference in value and gradient', () => {
    expect(hasFusedKernel(SPARSE_CROSS_ENTROPY)).toBe(true);
    const [n, vocab] = [6, 50];
    const rng = new Rng(5);
    const logits = Array.from({ length: n * vocab }, () => 4 * rng.normal());
    const targets = Array.from({ length: n }, (_, i) => (i * 17) % vocab);
    let want = 0;
    const gradWant: number[] = [];
    for (let r = 0; r < n; r++) {
      const row = logits.slice(r * vocab, (r + 1) * vocab);
      const max = Math.max(...row);
      const z = row.reduce((s, x) => s + Math.exp(x - max), 0);
      want += max + Math.log(z) - row[targets[r]];
      row.forEach((x, j) => gradWant.push(2 * (Math.exp(x - max) / z - (j === targets[r] ? 1 : 0))));
    }
    const before = tf.memory().numTensors;
    const { value, grad } = tf.tidy(() => {
      const l = tf.tensor2d(logits, [n, vocab]);
      const t = tf.tensor1d(targets, 'int32');
      return {
        value: crossEntropySum(l, t).dataSync()[0],
        grad: Array.from(tf.grad((x: tf.Tensor) => tf.mul(crossEntropySum(x as tf.Tensor2D, t), 2))(l).dataSync()),
      };
    });
    expect(Math.abs(value - want) / want).toBeLessThan(1e-6);
    expect(Math.max(...grad.map((g, i) => Math.abs(g - gradWant[i])))).toBeLessThan(1e-6);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('uses transpose flags instead of explicit transposes (a wasm-only detour)', () => {
    expect(explicitTransposes()).toBe(false);
  });
});

describe('backends without the fused kernel fall back to the composed form', () => {
  it.each(['cpu', 'wasm'])('%s', async (name) => {
    await initBackend(name, { quiet: true });
    expect(hasFusedKernel(SPARSE_CROSS_ENTROPY)).toBe(false);
    expect(explicitTransposes()).toBe(name === 'wasm');
  });
});

describe('setup:tensorflow', () => {
  it('fails with one line naming what is missing, before it touches the cache', () => {
    const stampBefore = fs.existsSync(BUILD_STAMP) ? fs.readFileSync(BUILD_STAMP, 'utf8') : null;
    const lines: string[] = [];
    const attempt = () =>
      setupTensorflow({ gpu: false, tensorflow: '2.21.*', python: '/nonexistent/python3', force: true, log: (l) => lines.push(l) });
    expect(attempt).toThrow(SetupError);
    expect(attempt).toThrow(/^\/nonexistent\/python3 not found: install Python 3 with pip \(or pass --python PATH\)$/);
    expect(fs.existsSync(BUILD_STAMP) ? fs.readFileSync(BUILD_STAMP, 'utf8') : null).toBe(stampBefore);
  });

  it.skipIf(!available)('keeps a matching build without rebuilding, and says so', () => {
    const lines: string[] = [];
    const started = Date.now();
    const { build, reused } = setupTensorflow({ gpu: false, tensorflow: '2.21.*', python: 'python3', force: false, log: (l) => lines.push(l) });
    expect(reused).toBe(true);
    expect(build).toEqual(readBuildStamp());
    expect(lines).toEqual([expect.stringMatching(/^already built: TensorFlow 2\.21\.\d+, tfjs-node 4\.22\.0, .* \(--force rebuilds\)$/)]);
    expect(Date.now() - started).toBeLessThan(5000);
  });

  it('the CLI answers --help and refuses an unknown option with one line and the usage', () => {
    const cli = (...args: string[]) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/setup-tensorflow.ts', ...args], { cwd: PROJECT_ROOT, encoding: 'utf8' });
    const help = cli('--help');
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: npm run setup:tensorflow/);
    const bad = cli('--gpuu');
    expect(bad.status).toBe(1);
    expect(bad.stderr.split('\n')[0]).toMatch(/^setup:tensorflow: Unknown option '--gpuu'/);
  });
});
