// The fused CPU kernels (src/backend/native/kernels/) called directly with inputs they were not written for: any
// graph can name a registered kernel, so each checks ranks, sizes and attributes before reading a float, and answers a
// mismatch with an error naming itself, the input and the expected shape. Before the checks, GELU's gradient and
// LayerNorm read past their inputs and a scalar crashed LayerNorm (docs/bounds.md, "Native kernels").
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FUSED_CPU_KERNELS, fusedCpuKernelsStatus, type FusedCpuKernel } from '../../src/backend/fused-kernels.ts';
import { currentBuild, FUSED_OPS_ASAN_ADDON, FUSED_OPS_ADDON, nativePackageDir, SANITIZED_KERNELS_ENV, SETUP_COMMAND } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';

const build = currentBuild() ?? null;
const sanitized = process.env[SANITIZED_KERNELS_ENV] === '1';
const addon = build ? path.join(nativePackageDir(build), sanitized ? FUSED_OPS_ASAN_ADDON : FUSED_OPS_ADDON) : null;
const available = build !== null && !build.gpu && addon !== null && fs.existsSync(addon);
if (!available) console.log(`[slayformer] fused CPU kernels not built (a CPU build of \`${SETUP_COMMAND}\` builds them where g++ can): suite skipped`);

type Shapes = Record<string, number[]>;

interface KernelCase {
  kernel: FusedCpuKernel;
  /** Shapes the kernel takes, and the shapes of what it returns for them. */
  valid: Shapes;
  outputs: number[][];
  attrs?: Record<string, number>;
  /** Changes to `valid` the kernel must refuse, and the input (or attribute) its error names. */
  bad: Array<{ change: Shapes; attrs?: Record<string, number>; names: string }>;
}

const slayInputs = { x: [1, 2, 5, 4], anchors: [4, 3], omegas: [2, 2, 4, 3], nodes: [2, 2] };
const factorInputs = { aq: [2, 5, 3], ak: [2, 5, 3], bq: [2, 5, 4], bk: [2, 5, 4], values: [2, 5, 2] };
const geluGrad = (kernel: FusedCpuKernel): KernelCase => ({
  kernel,
  valid: { dy: [3, 5], x: [3, 5] },
  outputs: [[3, 5]],
  bad: [
    { change: { dy: [3, 4] }, names: 'x' },
    { change: { dy: [] }, names: 'x' },
    { change: { dy: [5, 3] }, names: 'x' },
  ],
});

const CASES: KernelCase[] = [
  { kernel: 'SlayformerGeluTanh', valid: { x: [] }, outputs: [[]], bad: [] },
  geluGrad('SlayformerGeluTanhGrad'),
  { kernel: 'SlayformerGeluErf', valid: { x: [2, 0, 3] }, outputs: [[2, 0, 3]], bad: [] },
  geluGrad('SlayformerGeluErfGrad'),
  {
    kernel: 'SlayformerLayerNorm',
    valid: { x: [4, 6], gain: [6], shift: [6] },
    outputs: [
      [4, 6],
      [4, 6],
      [4, 1],
    ],
    attrs: { eps: 1e-5 },
    bad: [
      { change: { x: [] }, names: 'x' },
      { change: { gain: [5] }, names: 'gain' },
      { change: { shift: [7] }, names: 'shift' },
      { change: { gain: [2, 3] }, names: 'gain' },
      { change: { x: [4, 0], gain: [0], shift: [0] }, names: 'x' },
      { change: {}, attrs: { eps: -1 }, names: 'eps' },
      { change: {}, attrs: { eps: Number.NaN }, names: 'eps' },
    ],
  },
  {
    kernel: 'SlayformerLayerNormGrad',
    valid: { dy: [4, 6], xhat: [4, 6], rstd: [4, 1], gain: [6] },
    outputs: [[4, 6], [6], [6]],
    bad: [
      { change: { dy: [4, 5] }, names: 'xhat' },
      { change: { dy: [8, 6] }, names: 'xhat' },
      { change: { rstd: [3, 1] }, names: 'rstd' },
      { change: { rstd: [4] }, names: 'rstd' },
      { change: { gain: [5] }, names: 'gain' },
      { change: { dy: [], xhat: [] }, names: 'dy' },
    ],
  },
  {
    kernel: 'SlayformerLinearNormalize',
    valid: { raw: [4, 6] },
    outputs: [[4, 5]],
    attrs: { delta: 0 },
    bad: [
      { change: { raw: [4, 1] }, names: 'raw' },
      { change: { raw: [] }, names: 'raw' },
      { change: {}, attrs: { delta: Number.POSITIVE_INFINITY }, names: 'delta' },
    ],
  },
  {
    kernel: 'SlayformerLinearNormalizeGrad',
    valid: { dy: [4, 5], raw: [4, 6] },
    outputs: [[4, 6]],
    attrs: { delta: 1e-6 },
    bad: [
      { change: { dy: [4, 6] }, names: 'raw' },
      { change: { dy: [3, 5] }, names: 'raw' },
      { change: { raw: [] }, names: 'raw' },
      { change: {}, attrs: { delta: -1e-6 }, names: 'delta' },
    ],
  },
  {
    kernel: 'SlayformerAttentionSoftmaxGrad',
    valid: { probs: [2, 5, 5], dprobs: [2, 5, 5], dout: [2, 5, 3], out: [2, 5, 3] },
    outputs: [[2, 5, 5]],
    bad: [
      { change: { probs: [] }, names: 'probs' },
      { change: { probs: [5], dprobs: [5] }, names: 'probs' },
      { change: { dprobs: [2, 5, 4] }, names: 'dprobs' },
      { change: { dout: [2, 4, 3] }, names: 'dout' },
      { change: { out: [2, 5, 2] }, names: 'out' },
      { change: { out: [] }, names: 'out' },
    ],
  },
  {
    kernel: 'SlayformerCausalAttention',
    valid: { q: [2, 5, 3], k: [2, 5, 3], v: [2, 5, 3] },
    outputs: [
      [2, 5, 3],
      [2, 5, 5],
    ],
    bad: [
      { change: { q: [] }, names: 'q' },
      { change: { k: [2, 4, 3] }, names: 'k' },
      { change: { v: [2, 5] }, names: 'v' },
    ],
  },
  {
    kernel: 'SlayformerCausalAttentionGrad',
    valid: { dout: [2, 5, 3], q: [2, 5, 3], k: [2, 5, 3], v: [2, 5, 3], probs: [2, 5, 5], out: [2, 5, 3] },
    outputs: [
      [2, 5, 3],
      [2, 5, 3],
      [2, 5, 3],
    ],
    bad: [
      { change: { probs: [2, 5, 4] }, names: 'probs' },
      { change: { out: [2, 5, 2] }, names: 'out' },
      { change: { dout: [] }, names: 'dout' },
    ],
  },
  {
    kernel: 'SlayformerCausalFactorAttention',
    valid: factorInputs,
    outputs: [
      [2, 5, 3],
      [2, 5, 5],
      [2, 5, 5],
    ],
    bad: [
      { change: { ak: [2, 5, 4] }, names: 'ak' },
      { change: { values: [2, 4, 2] }, names: 'values' },
      { change: { bq: [5, 4] }, names: 'bq' },
    ],
  },
  {
    kernel: 'SlayformerCausalFactorAttentionGrad',
    valid: { dout: [2, 5, 3], ...factorInputs, xa: [2, 5, 5], xb: [2, 5, 5] },
    outputs: [
      [2, 5, 3],
      [2, 5, 3],
      [2, 5, 4],
      [2, 5, 4],
      [2, 5, 2],
    ],
    bad: [
      { change: { dout: [2, 5, 2] }, names: 'values' },
      { change: { xa: [2, 5, 4] }, names: 'xa' },
      { change: { xb: [2, 5] }, names: 'xb' },
    ],
  },
  {
    kernel: 'SlayformerSlayFactors',
    valid: slayInputs,
    outputs: [
      [1, 2, 5, 3],
      [1, 2, 5, 6],
    ],
    bad: [
      { change: { x: [] }, names: 'x' },
      { change: { anchors: [3, 3] }, names: 'anchors' },
      { change: { omegas: [2, 1, 4, 3] }, names: 'omegas' },
      { change: { nodes: [2, 1] }, names: 'nodes' },
      { change: { nodes: [3, 2] }, names: 'nodes' },
    ],
  },
  {
    kernel: 'SlayformerSlayFactorsGrad',
    valid: { da: [1, 2, 5, 3], db: [1, 2, 5, 6], ...slayInputs },
    outputs: [[1, 2, 5, 4]],
    bad: [
      { change: { da: [1, 2, 5, 4] }, names: 'da' },
      { change: { db: [1, 2, 5, 5] }, names: 'db' },
      { change: { db: [] }, names: 'db' },
    ],
  },
];

/** Runs the kernel on tensors of these shapes (values 0.5; nodes as SLAY's (k, √w) pairs) and returns its output shapes. */
function runKernel(kernel: FusedCpuKernel, shapes: Shapes, attrs: Record<string, number> = {}): number[][] {
  return tf.tidy(() => {
    const inputs = Object.fromEntries(Object.entries(shapes).map(([name, shape]) => [name, tf.fill(shape, 0.5)]));
    const result = tf.engine().runKernel(kernel, inputs, attrs as unknown as tf.NamedAttrMap);
    const outputs = Array.isArray(result) ? result : [result];
    for (const output of outputs) output.dataSync();
    return outputs.map((output) => output.shape);
  });
}

describe.skipIf(!available)(`fused CPU kernels refuse shapes they were not written for${sanitized ? ' (AddressSanitizer build)' : ''}`, () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
  });
  afterAll(async () => {
    await initBackend('cpu', { quiet: true });
  });

  it('the addon under test is the one loaded', () => {
    expect(fusedCpuKernelsStatus()).toBe('in use');
    // Under AddressSanitizer (test/backend/fused-ops-asan.test.ts) the instrumented build must be what runs.
    if (sanitized) expect(fs.readFileSync('/proc/self/maps', 'utf8')).toContain(addon);
  });

  it('every kernel has cases here', () => {
    expect(CASES.map((c) => c.kernel).sort()).toEqual(FUSED_CPU_KERNELS.map((k) => k.name).sort());
  });

  it.each(CASES.map((c) => [c.kernel, c] as const))('%s: refuses bad ranks, sizes and attributes naming itself; then runs on good ones', (_, c) => {
    const before = tf.memory().numTensors;
    for (const { change, attrs, names } of c.bad) {
      const shapes = { ...c.valid, ...change };
      const call = () => runKernel(c.kernel, shapes, { ...c.attrs, ...attrs });
      expect(call, `${c.kernel} on ${JSON.stringify(shapes)} ${JSON.stringify(attrs ?? {})}`).toThrow(new RegExp(`${c.kernel}: ${names}\\b`));
    }
    expect(runKernel(c.kernel, c.valid, c.attrs)).toEqual(c.outputs);
    expect(tf.memory().numTensors).toBe(before);
  });
});
