// The XLA route's attention boundary (train.attentionKernel: fused; docs/xla.md, "Attention on the GPU"): softmax
// attention recorded as two XlaCallModule ops per layer (forward, gradient) whose custom calls the jax runner fills
// in with jax.nn.dot_product_attention (XLA's form on a CPU). The gradient program so built gives the composed
// program's loss and gradients within float32 rounding. Needs the tensorflow backend and `npm run setup:xla`
// (skipped with one line otherwise). Without jax: xla-attention-kernel.test.ts.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boundaryModule } from '../../src/backend/attention-boundary.ts';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { XlaRunner } from '../../src/backend/xla/runner.ts';
import { isXlaSetUp, venvPython, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { Rng } from '../../src/core/rng.ts';
import { createLanguageModel, type LanguageModel } from '../../src/model/lm.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { gradientInputs, hostArray, modelTensors, RecordingBook, recordGradientProgram } from '../../src/train/xla-recording.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

const withJax = isTensorflowSetUp() && isXlaSetUp();
if (!withJax) console.log(`[xla-attention-boundary] skipped: needs the tensorflow backend and ${XLA_SETUP_COMMAND}`);

const dir = mkdtempSync(join(tmpdir(), 'slay-xla-attention-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const model = (): LanguageModel => createLanguageModel(tinyGptConfig({ numLayers: 2 }));

describe.skipIf(!withJax)('the boundary filled in by jax', () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
  });

  it("gives the composed program's loss and gradients on jax's CPU; the two are cached apart", async () => {
    const m = model();
    const { runner } = await XlaRunner.start(venvPython(), { SLAYFORMER_XLA_PLATFORM: 'cpu' });
    try {
      const batch = randomBatch(new Rng(5), 'gpt', 2, 16, 61);
      const variables = [...m.parameters().values()];
      const { key, arrays } = gradientInputs(m, batch, variables, null, 32)!;
      const named = [...arrays, ...modelTensors(m).map(([n, t]) => [n, hostArray(t)] as const)];
      const run = async (attentionKernel: 'composed' | 'fused') => {
        const book = new RecordingBook({ attentionKernel }, dir);
        const entry = book.get('gradient', key, () => ({ spec: recordGradientProgram(m, batch, variables, null, 32) }));
        const loaded = await runner.request({ op: 'load', key: attentionKernel, base: entry.base });
        const reply = await runner.request(
          { op: 'eval', program: attentionKernel, names: named.map(([n]) => n) },
          named.map(([, a]) => a),
        );
        return { entry, via: String(loaded.header.via), sums: reply.header.sums as Record<string, number | number[]> };
      };
      const composed = await run('composed');
      const fused = await run('fused');
      expect(fused.entry.base).not.toBe(composed.entry.base);
      expect(readFileSync(`${fused.entry.base}.mlir`, 'utf8')).toContain('stablehlo.custom_call @slayformer.attention_grad');
      expect(composed.via).not.toContain('attention:');
      expect(fused.via).toContain('attention: jax xla × 4');
      expect(Object.keys(fused.sums).sort()).toEqual(Object.keys(composed.sums).sort());
      expect(Object.keys(composed.sums).filter((n) => n.startsWith('grad:')).length).toBe(variables.length);
      // Within 1e-5 of each output's scale (measured: ≤ 3e-7); softmax's key bias has a gradient of rounding noise
      // (0 in exact arithmetic, ~1e-9 here), which the 1e-7 floor holds.
      for (const [name, want] of Object.entries(composed.sums)) {
        const a = [want].flat() as number[];
        const b = [fused.sums[name]].flat() as number[];
        const scale = Math.max(...a.map(Math.abs));
        expect(b.length, name).toBe(a.length);
        b.forEach((x, j) => expect(Math.abs(x - a[j]), `${name}[${j}]`).toBeLessThanOrEqual(1e-5 * scale + 1e-7));
      }
    } finally {
      await runner.close();
      m.dispose();
    }
  }, 600_000);

  it("chooses cuDNN on NVIDIA GPUs for bf16 programs only, and takes XLA's form, saying why, where jax's cuDNN lowering refuses", () => {
    // The boundary's own module (no TensorFlow): this machine has no cuDNN, so the cuDNN lowering raises here.
    const script = [
      'import json, sys',
      `sys.path.insert(0, ${JSON.stringify(join(import.meta.dirname, '..', '..', 'src', 'backend', 'xla'))})`,
      'import attention_boundary as b',
      'text = sys.stdin.read()',
      'cases = [("gpu", "cuda 12080", "bf16"), ("gpu", "cuda 12080", "fp32"), ("gpu", "rocm 60300", "bf16"), ("cpu", "", "bf16")]',
      'print(json.dumps([[b.implementation_for(*c), b.replace_boundaries(text, *c)[1]] for c in cases]))',
    ].join('\n');
    const out = execFileSync(venvPython(), ['-c', script], {
      input: boundaryModule('slayformer.attention_grad', [4, 16, 8], 4, 3, true),
      env: { ...process.env, JAX_PLATFORMS: 'cpu', TF_CPP_MIN_LOG_LEVEL: '2' },
      encoding: 'utf8',
    });
    const [cudaBf16, cudaFp32, rocm, cpu] = JSON.parse(out.trim().split('\n').at(-1)!) as Array<[string, string]>;
    expect(cudaBf16).toEqual(['cudnn', 'attention: jax xla × 1 (cudnn refused: RuntimeError: cuDNN is not detected.)']);
    for (const other of [cudaFp32, rocm, cpu]) expect(other).toEqual(['xla', 'attention: jax xla × 1']);
  });
});
