// The fused CPU kernels of the native backend (src/backend/native/kernels/, src/model/fused.ts):
// each kernel's values and gradients against its composed twin (the form the other backends run) and against a float64
// reference, one test (or a pair) per kernel file: gelu.cc, layer_norm.cc, causal_attention.cc and
// attention_softmax_grad.cc (softmax attention, causal and not), causal_factor_attention.cc, linear_normalize.cc,
// slay_factors.cc; the dense layer's MatMul + BiasAdd; recorded into a graph function; no tensor left.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  composedFormsKey,
  FUSED_CPU_KERNELS,
  fusedCpuKernelsStatus,
  fusedFormsEnabled,
  hasFusedKernel,
  LINEAR_WITH_BIAS,
  withComposedKernels,
} from '../../src/backend/fused-kernels.ts';
import {
  currentBuild,
  FUSED_OPS_ADDON,
  FUSED_OPS_ASAN_ADDON,
  isTensorflowSetUp,
  nativePackageDir,
  SANITIZED_KERNELS_ENV,
  SETUP_COMMAND,
} from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { GraphCache } from '../../src/backend/tf-graph.ts';
import { Rng } from '../../src/core/rng.ts';
import { createAttention } from '../../src/model/attention/index.ts';
import type { SlayAttention } from '../../src/model/attention/slay.ts';
import { fusedCausalFactorAttention, fusedLinearNormalize, fusedSlayFactors } from '../../src/model/fused.ts';
import { activate, layerNorm, linear } from '../../src/model/layers.ts';
import { randomArray4, softmaxAttentionRef, tensor4, type Array4 } from '../helpers/reference.ts';

const build = isTensorflowSetUp() ? (currentBuild() ?? null) : null;
const available = build !== null && !build.gpu && fs.existsSync(path.join(nativePackageDir(build), FUSED_OPS_ADDON));
if (!available) console.log(`[slayformer] fused CPU kernels not built (a CPU build of \`${SETUP_COMMAND}\` builds them where g++ can): suite skipped`);

const rng = new Rng(9);
const randn = (n: number, scale = 1) => Array.from(rng.normalArray(n), (x) => x * scale);

const maxRel = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  let worst = 0;
  let top = 1e-12;
  for (let i = 0; i < b.length; i++) {
    worst = Math.max(worst, Math.abs(a[i] - b[i]));
    top = Math.max(top, Math.abs(b[i]));
  }
  return worst / top;
};

describe.skipIf(!available)('fused CPU kernels (tensorflow backend)', () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
  });
  afterAll(async () => {
    await initBackend('cpu', { quiet: true });
  });

  it('the built addon is loaded and its kernels registered: the ops of the kernel table, in its order', () => {
    expect(fusedCpuKernelsStatus()).toBe('in use');
    // The addon tensorflow.ts loaded (the module cache hands back the same one): the ops it registered, from the table.
    const addon = path.join(nativePackageDir(build!), process.env[SANITIZED_KERNELS_ENV] === '1' ? FUSED_OPS_ASAN_ADDON : FUSED_OPS_ADDON);
    const loaded = createRequire(import.meta.url)(addon) as { ops: string[]; error: string | null };
    expect(loaded.error).toBeNull();
    expect(loaded.ops).toEqual(FUSED_CPU_KERNELS.map((k) => k.name));
  });

  /** Value and gradients of `f` on the inputs, with the fused kernels and with the composed form. */
  function both(inputs: tf.Tensor[], f: (...xs: tf.Tensor[]) => tf.Tensor, upstream: tf.Tensor) {
    const once = () =>
      tf.tidy(() => {
        const value = f(...inputs);
        const grads = tf.grads((...xs: tf.Tensor[]) => tf.sum(tf.mul(f(...xs), upstream)))(inputs);
        return { value: value.dataSync().slice(), grads: grads.map((g) => g.dataSync().slice()) };
      });
    return { fused: once(), composed: withComposedKernels(once) };
  }

  it.each(['gelu-tanh', 'gelu-erf'] as const)(
    '%s: value and gradient equal the composed form to float rounding and the float64 derivative; no tensor left',
    (form) => {
      const before = tf.memory().numTensors;
      const xs = randn(64 * 48, 2.5);
      const dy = randn(64 * 48);
      const x = tf.tensor2d(xs, [64, 48]);
      const up = tf.tensor2d(dy, [64, 48]);
      const { fused, composed } = both([x], (t) => activate(t as tf.Tensor2D, form), up);
      expect(maxRel(fused.value, composed.value)).toBeLessThan(2e-6);
      expect(maxRel(fused.grads[0], composed.grads[0])).toBeLessThan(2e-6);
      // float64 derivative of the same function
      const ref = xs.map((v, i) => {
        const cdf = form === 'gelu-erf' ? 0.5 * (1 + erf64(v / Math.SQRT2)) : 0.5 * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3)));
        const slope =
          form === 'gelu-erf'
            ? cdf + (v * Math.exp(-0.5 * v * v)) / Math.sqrt(2 * Math.PI)
            : cdf + v * 0.5 * (1 - Math.tanh(Math.sqrt(2 / Math.PI) * (v + 0.044715 * v ** 3)) ** 2) * Math.sqrt(2 / Math.PI) * (1 + 3 * 0.044715 * v * v);
        return dy[i] * slope;
      });
      expect(maxRel(fused.grads[0], ref)).toBeLessThan(1e-5);
      tf.dispose([x, up]);
      expect(tf.memory().numTensors).toBe(before);
    },
  );

  // [1100, 130]: enough work that the kernels split rows (and the gain's column sums) over threads, and rows that are
  // not whole 16-lane blocks.
  it.each([
    [96, 40],
    [1100, 130],
  ])('LayerNorm [%i, %i]: value and the gradients of x, gain and shift equal the composed form and the float64 LayerNorm; no tensor left', (n, d) => {
    const before = tf.memory().numTensors;
    const x = tf.tensor2d(
      randn(n * d, 3).map((v, i) => v + (i % d) * 0.1),
      [n, d],
    );
    const gain = tf.tensor1d(randn(d, 0.5).map((v) => 1 + v));
    const shift = tf.tensor1d(randn(d, 0.2));
    const up = tf.tensor2d(randn(n * d), [n, d]);
    const { fused, composed } = both([x, gain, shift], (a, g, b) => layerNorm(a as tf.Tensor2D, g as tf.Tensor1D, b as tf.Tensor1D, 1e-5), up);
    expect(maxRel(fused.value, composed.value)).toBeLessThan(2e-6);
    fused.grads.forEach((g, i) => expect(maxRel(g, composed.grads[i])).toBeLessThan(1e-5));
    const [xs, gs, bs, us] = [x, gain, shift, up].map((t) => Array.from(t.dataSync()));
    const ref = layerNormRef(xs, gs, bs, us, d, 1e-5);
    expect(maxRel(fused.value, ref[0])).toBeLessThan(1e-5);
    fused.grads.forEach((g, i) => expect(maxRel(g, ref[i + 1])).toBeLessThan(1e-5));
    tf.dispose([x, gain, shift, up]);
    expect(tf.memory().numTensors).toBe(before);
  });

  // L = 37: rows longer and shorter than the kernels' 16-lane blocks, and their tails; L = 150: the causal
  // kernel's three query strips of 64, the last one partial.
  it.each([
    [true, 37],
    [true, 150],
    [false, 37],
  ])(
    'softmax attention (causal %s, L = %i): value and the q, k, v gradients equal the composed form and float64 exact attention; no tensor left',
    (causal, l) => {
      const before = tf.memory().numTensors;
      const shape: [number, number, number, number] = [2, 3, l, 8];
      const [qa, ka, va, ua] = [0, 1, 2, 3].map(() => randomArray4(rng, shape, 1.5));
      const [q, k, v, up] = [qa, ka, va, ua].map(tensor4);
      const attn = createAttention('softmax', { numHeads: 3, headDim: 8, causal });
      const { fused, composed } = both([q, k, v], (a, b, c) => attn.apply(a as tf.Tensor4D, b as tf.Tensor4D, c as tf.Tensor4D), up);
      expect(maxRel(fused.value, composed.value)).toBeLessThan(2e-6);
      fused.grads.forEach((g, i) => expect(maxRel(g, composed.grads[i])).toBeLessThan(2e-6));
      expect(maxRel(fused.value, softmaxAttentionRef(qa, ka, va, causal).flat(3))).toBeLessThan(1e-5);
      softmaxAttentionGradsRef(qa, ka, va, ua, causal).forEach((g, i) => expect(maxRel(fused.grads[i], g)).toBeLessThan(1e-5));
      attn.dispose();
      tf.dispose([q, k, v, up]);
      expect(tf.memory().numTensors).toBe(before);
    },
  );

  it('causal attention: a NaN score makes its row NaN as the composed form does (the non-finite rule sees it); bad shapes are refused', () => {
    expect(hasFusedKernel('SlayformerCausalAttention')).toBe(true);
    const attn = createAttention('softmax', { numHeads: 1, headDim: 4, causal: true });
    const qs = randn(20 * 4);
    qs[5 * 4 + 1] = Number.NaN; // query 5
    const q = tf.tensor4d(qs, [1, 1, 20, 4]);
    const k = tf.tensor4d(randn(20 * 4), [1, 1, 20, 4]);
    const rowsWithNaN = () =>
      tf.tidy(() => {
        const out = attn.apply(q, k, k).dataSync();
        return Array.from({ length: 20 }, (_, i) => i).filter((i) => Number.isNaN(out[i * 4]));
      });
    expect(rowsWithNaN()).toEqual([5]);
    expect(withComposedKernels(rowsWithNaN)).toEqual([5]);
    const scores = tf.zeros([2, 3, 4]);
    const wider = tf.zeros([2, 4, 4]);
    expect(() => tf.engine().runKernel('SlayformerCausalAttention', { q: scores, k: scores, v: wider })).toThrow(
      /SlayformerCausalAttention: v has shape \[2, 4, 4\] where \[N, L, D\] is expected, with N = 2 \(q\), L = 3 \(q\), D = 4 \(q\)/,
    );
    tf.dispose([q, k, scores, wider]);
    attn.dispose();
  });

  it('SLAY (tensor-product features, one causal block of 37): value and q, k, v gradients equal the composed form; no tensor left', () => {
    const before = tf.memory().numTensors;
    const shape: [number, number, number, number] = [2, 2, 37, 8];
    const [q, k, v, up] = [0, 1, 2, 3].map(() => tensor4(randomArray4(rng, shape)));
    const attn = createAttention('slay', { numHeads: 2, headDim: 8, causal: true, seed: 3 });
    const { fused, composed } = both([q, k, v], (a, b, c) => attn.apply(a as tf.Tensor4D, b as tf.Tensor4D, c as tf.Tensor4D), up);
    expect(maxRel(fused.value, composed.value)).toBeLessThan(2e-6);
    fused.grads.forEach((g, i) => expect(maxRel(g, composed.grads[i])).toBeLessThan(1e-5));
    attn.dispose();
    tf.dispose([q, k, v, up]);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('causal attention of tensor-product features (SLAY, L = 150: three strips): value and gradients equal the composed form; the kernel equals its float64 definition; no tensor left', () => {
    expect(hasFusedKernel('SlayformerCausalFactorAttention')).toBe(true);
    const before = tf.memory().numTensors;
    const shape: [number, number, number, number] = [1, 2, 150, 8];
    const [q, k, v, up] = [0, 1, 2, 3].map(() => tensor4(randomArray4(rng, shape)));
    const attn = createAttention('slay', { numHeads: 2, headDim: 8, causal: true, seed: 3 });
    const { fused, composed } = both([q, k, v], (a, b, c) => attn.apply(a as tf.Tensor4D, b as tf.Tensor4D, c as tf.Tensor4D), up);
    expect(maxRel(fused.value, composed.value)).toBeLessThan(2e-6);
    fused.grads.forEach((g, i) => expect(maxRel(g, composed.grads[i])).toBeLessThan(1e-5));
    // The kernel against its definition: C = 70 is a strip of 64 and one of 6.
    const [n, c, fa, fb, dv] = [2, 70, 5, 7, 4];
    const widths = [fa, fa, fb, fb, dv, dv + 1]; // the output (and its upstream gradient) has the ones column's sums last
    const arrays = widths.map((f) => randn(n * c * f).map(Math.fround));
    const [aq, ak, bq, bk, vs, us] = arrays.map((a, i) => tf.tensor3d(a, [n, c, widths[i]]));
    const got = tf.tidy(() => {
      const f = (...xs: tf.Tensor[]) => fusedCausalFactorAttention()!(...(xs as [tf.Tensor3D, tf.Tensor3D, tf.Tensor3D, tf.Tensor3D, tf.Tensor3D]));
      const grads = tf.grads((...xs: tf.Tensor[]) => tf.sum(tf.mul(f(...xs), us)))([aq, ak, bq, bk, vs]);
      return [f(aq, ak, bq, bk, vs), ...grads].map((t) => t.dataSync().slice());
    });
    causalFactorAttentionRef(arrays, [n, c, fa, fb, dv]).forEach((expected, i) => expect(maxRel(got[i], expected)).toBeLessThan(1e-5));
    expect(() => tf.engine().runKernel('SlayformerCausalFactorAttention', { aq, ak: bq, bq, bk, values: vs })).toThrow(
      /SlayformerCausalFactorAttention: ak has shape \[2, 70, 7\] where \[N, C, Fa\] is expected, with N = 2 \(aq\), C = 70 \(aq\), Fa = 5 \(aq\)/,
    );
    attn.dispose();
    tf.dispose([q, k, v, up, aq, ak, bq, bk, vs, us]);
    expect(tf.memory().numTensors).toBe(before);
  });

  it.each([true, false])(
    "linear attention's normalisation (ELU+1, causal %s) equals the composed form; the kernel equals its float64 definition, denominators whose square underflows included; no tensor left",
    (causal) => {
      expect(hasFusedKernel('SlayformerLinearNormalize')).toBe(true);
      const before = tf.memory().numTensors;
      const shape: [number, number, number, number] = [2, 2, 37, 8];
      const [q, k, v, up] = [0, 1, 2, 3].map(() => tensor4(randomArray4(rng, shape)));
      const attn = createAttention('linear-elu', { numHeads: 2, headDim: 8, causal, seed: 3 });
      const { fused, composed } = both([q, k, v], (a, b, c) => attn.apply(a as tf.Tensor4D, b as tf.Tensor4D, c as tf.Tensor4D), up);
      expect(maxRel(fused.value, composed.value)).toBeLessThan(2e-6);
      fused.grads.forEach((g, i) => expect(maxRel(g, composed.grads[i])).toBeLessThan(1e-5));
      // The kernel against its definition: rows of width D + 1 = 21 (a 16-lane block and a tail); every third row's
      // denominator is 1e-25 (its square is 0 in float32), its numerators scaled alike, as a kernel-normalised row's are.
      const [rows, d, delta] = [45, 20, 1e-30];
      const raw = Array.from({ length: rows }, (_, r) => {
        const scale = r % 3 === 0 ? 1e-25 : 1;
        return [...randn(d).map((x) => Math.fround(x * scale)), Math.fround(scale * (1 + Math.abs(randn(1)[0])))];
      });
      const dy = randn(rows * d).map(Math.fround);
      const [rawT, dyT] = [tf.tensor2d(raw.flat(), [rows, d + 1]), tf.tensor2d(dy, [rows, d])];
      const got = tf.tidy(() => {
        const f = (x: tf.Tensor) => fusedLinearNormalize(delta)!(x);
        return [f(rawT), tf.grad((x: tf.Tensor) => tf.sum(tf.mul(f(x), dyT)))(rawT)].map((t) => t.dataSync().slice());
      });
      const g = raw.map((row) => Math.fround(row[d] + delta));
      const value = raw.flatMap((row, r) => row.slice(0, d).map((n) => n / g[r]));
      const grad = raw.flatMap((row, r) => {
        const dyRow = dy.slice(r * d, (r + 1) * d);
        const den = -dyRow.reduce((acc, x, j) => acc + x * (row[j] / g[r]), 0) / g[r];
        return [...dyRow.map((x) => x / g[r]), den];
      });
      expect(got[1].every(Number.isFinite)).toBe(true);
      expect(maxRel(got[0], value)).toBeLessThan(1e-6);
      expect(maxRel(got[1], grad)).toBeLessThan(1e-5);
      expect(() =>
        tf.tidy(() => tf.engine().runKernel('SlayformerLinearNormalize', { raw: tf.zeros([3, 1]) }, { delta } as unknown as tf.NamedAttrMap)),
      ).toThrow(/SlayformerLinearNormalize: raw has shape \[3, 1\] where \[\.\.\., D\+1\] is expected, with D ≥ 1/);
      attn.dispose();
      tf.dispose([q, k, v, up, rawT, dyT]);
      expect(tf.memory().numTensors).toBe(before);
    },
  );

  it("SLAY's feature factors, clamped exponents included: value and gradient equal the composed form; no tensor left", () => {
    expect(hasFusedKernel('SlayformerSlayFactors')).toBe(true);
    const before = tf.memory().numTensors;
    // 16 nodes and head size 64: a row along a column of the last node's ω has an exponent above 20, its opposite below −20.
    const attn = createAttention('slay', { numHeads: 1, headDim: 64, causal: true, seed: 3, quadratureNodes: 16 }) as SlayAttention;
    const omega = attn.buffers.find((b) => b.name.endsWith('prf.node15'))!;
    const column = Array.from(tf.tidy(() => tf.reshape(tf.slice(omega, [0, 0, 0], [1, 64, 1]), [64]).dataSync()));
    const rows = [column, column.map((x) => -x), ...[0, 1, 2, 3].map(() => randn(64))];
    const x = tf.tensor4d(rows.flat(), [1, 1, 6, 64]);
    const features = 8 + 16 * 16; // anchors P = 8, then R·M
    const up = tf.tensor4d(randn(6 * features, 1e-8), [1, 1, 6, features]); // e^20 ≈ 5e8: a moderate gradient scale
    const once = () =>
      tf.tidy(() => {
        const f = (input: tf.Tensor) => {
          const { a, b } = attn.factors!(input as tf.Tensor4D);
          return tf.concat([a, b], 3);
        };
        const value = f(x);
        return [value, tf.grad((input: tf.Tensor) => tf.sum(tf.mul(f(input), up)))(x)].map((t) => t.dataSync().slice());
      });
    const fused = once();
    const composed = withComposedKernels(once);
    expect(maxRel(fused[0], composed[0])).toBeLessThan(2e-6);
    expect(maxRel(fused[1], composed[1])).toBeLessThan(1e-5);
    // Row 0 reaches the clamp: its last-node first feature is √w·M^(−½)·e^20.
    expect(fused[0].length).toBe(6 * features);
    const top = fused[0][8 + 15 * 16];
    expect(Math.abs(top - Math.sqrt(attn.quadrature.weights[15]) * Math.exp(20) * 0.25) / top).toBeLessThan(1e-5);
    attn.dispose();
    tf.dispose([x, up]);
    expect(tf.memory().numTensors).toBe(before);
  });

  it("SLAY's feature factors: the kernel's value equals its float64 definition, its gradient the float64 central differences; no tensor left", () => {
    const before = tf.memory().numTensors;
    const [b, h, l, d, p, r, m] = [1, 2, 5, 6, 3, 2, 4];
    const arrays = [b * h * l * d, d * p, r * h * d * m].map((n) => randn(n, 0.7).map(Math.fround));
    const nodes = [1.2, 0.8, 0.6, 0.5]; // (k_r, √w_r): exponents well inside the ±20 clamp
    const [da, db] = [b * h * l * p, b * h * l * r * m].map((n) => randn(n).map(Math.fround));
    const shapes = { b, h, l, d, p, r, m };
    const inputs = [tf.tensor4d(arrays[0], [b, h, l, d]), tf.tensor2d(arrays[1], [d, p]), tf.tensor4d(arrays[2], [r, h, d, m]), tf.tensor2d(nodes, [r, 2])];
    const ups = [tf.tensor4d(da, [b, h, l, p]), tf.tensor4d(db, [b, h, l, r * m])];
    const got = tf.tidy(() => {
      const f = (x: tf.Tensor) => fusedSlayFactors()!(x as tf.Tensor4D, ...(inputs.slice(1) as [tf.Tensor2D, tf.Tensor4D, tf.Tensor2D]));
      const grad = tf.grad((x: tf.Tensor) => {
        const [a, bOut] = f(x);
        return tf.add(tf.sum(tf.mul(a, ups[0])), tf.sum(tf.mul(bOut, ups[1])));
      })(inputs[0]);
      return [...f(inputs[0]), grad].map((t) => t.dataSync().slice());
    });
    const [aRef, bRef] = slayFactorsRef(arrays[0], arrays[1], arrays[2], nodes, shapes);
    expect(maxRel(got[0], aRef)).toBeLessThan(1e-5);
    expect(maxRel(got[1], bRef)).toBeLessThan(1e-5);
    const objective = (x: number[]) => {
      const [a, bOut] = slayFactorsRef(x, arrays[1], arrays[2], nodes, shapes);
      return a.reduce((acc, v, i) => acc + v * da[i], 0) + bOut.reduce((acc, v, i) => acc + v * db[i], 0);
    };
    const step = 1e-6;
    const numeric = arrays[0].map((_, i) => {
      const [plus, minus] = [step, -step].map((s) => objective(arrays[0].map((v, j) => (j === i ? v + s : v))));
      return (plus - minus) / (2 * step);
    });
    expect(maxRel(got[2], numeric)).toBeLessThan(1e-5);
    tf.dispose([...inputs, ...ups]);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('a dense layer with bias runs as MatMul + BiasAdd: value and gradients equal the composed form; no tensor left', () => {
    expect(hasFusedKernel(LINEAR_WITH_BIAS)).toBe(true);
    const before = tf.memory().numTensors;
    const x = tf.tensor2d(randn(50 * 24), [50, 24]);
    const w = tf.tensor2d(randn(24 * 36, 0.2), [24, 36]);
    const b = tf.tensor1d(randn(36));
    const up = tf.tensor2d(randn(50 * 36), [50, 36]);
    const { fused, composed } = both([x, w, b], (a, c, d) => linear(a as tf.Tensor2D, c as tf.Tensor2D, d as tf.Tensor1D), up);
    expect(maxRel(fused.value, composed.value)).toBeLessThan(2e-6);
    fused.grads.forEach((g, i) => expect(maxRel(g, composed.grads[i])).toBeLessThan(2e-6));
    tf.dispose([x, w, b, up]);
    expect(tf.memory().numTensors).toBe(before);
  });

  it('is used on the CPU build, and recorded into a TensorFlow function that gives the eager values', () => {
    expect(hasFusedKernel('SlayformerLayerNorm')).toBe(true);
    expect(withComposedKernels(() => hasFusedKernel('SlayformerLayerNorm'))).toBe(false);
    // One kernel's composed twin alone (bench:paired --composed): the others stay fused, and recorded programs are keyed apart.
    const onlyLayerNorm = () => [hasFusedKernel('SlayformerLayerNorm'), hasFusedKernel('SlayformerGeluTanh'), fusedFormsEnabled(), composedFormsKey()];
    expect(withComposedKernels(onlyLayerNorm, ['SlayformerLayerNormGrad', 'SlayformerLayerNorm'])).toEqual([
      false,
      true,
      true,
      '|composed:SlayformerLayerNorm,SlayformerLayerNormGrad',
    ]);
    expect(onlyLayerNorm()).toEqual([true, true, true, '']);
    const cache = new GraphCache();
    const x = tf.tensor2d(randn(8 * 16), [8, 16]);
    const gain = tf.ones([16]) as tf.Tensor1D;
    const shift = tf.zeros([16]) as tf.Tensor1D;
    try {
      const f = () => [activate(layerNorm(x, gain, shift, 1e-5), 'gelu-tanh')];
      const eager = tf.tidy(() => f()[0].dataSync().slice());
      for (let i = 0; i < 3; i++) {
        const out = tf.tidy(() => cache.call('ln-gelu', [x, gain, shift], f)[0].dataSync().slice());
        expect(maxRel(out, eager)).toBeLessThan(1e-6);
      }
      expect(cache.status('ln-gelu')).toMatch(/^graph/);
    } finally {
      cache.dispose();
      tf.dispose([x, gain, shift]);
    }
  });
});

/**
 * d/dq, d/dk, d/dv of Σ O⊙U for O = softmax(q·kᵀ/√d, causal)·v in float64, flattened, by the textbook
 * backward (row term rowsum(dP⊙P), not the kernels' rowsum(dO⊙O)).
 */
function softmaxAttentionGradsRef(q: Array4, k: Array4, v: Array4, u: Array4, causal: boolean): number[][] {
  const grads = [q, k, v].map((t) => t.map((tb) => tb.map((th) => th.map((row) => row.map(() => 0)))));
  const [dq, dk, dv] = grads;
  const dot = (a: number[], b: number[]) => a.reduce((acc, x, i) => acc + x * b[i], 0);
  q.forEach((qb, b) =>
    qb.forEach((qh, h) => {
      const [kh, vh, uh] = [k[b][h], v[b][h], u[b][h]];
      const scale = 1 / Math.sqrt(qh[0].length);
      qh.forEach((qi, i) => {
        const logits = kh.map((kj, j) => (causal && j > i ? -Infinity : dot(qi, kj) * scale));
        const m = Math.max(...logits);
        const w = logits.map((x) => Math.exp(x - m));
        const total = w.reduce((a, x) => a + x, 0);
        const p = w.map((x) => x / total);
        const dp = vh.map((vj) => dot(uh[i], vj));
        const rowTerm = p.reduce((acc, pj, j) => acc + pj * dp[j], 0);
        p.forEach((pj, j) => {
          const ds = pj * (dp[j] - rowTerm) * scale;
          for (let c = 0; c < qi.length; c++) {
            dq[b][h][i][c] += ds * kh[j][c];
            dk[b][h][j][c] += ds * qi[c];
            dv[b][h][j][c] += pj * uh[i][c];
          }
        });
      });
    }),
  );
  return grads.map((g) => g.flat(3));
}

/**
 * out_i = Σ_{j≤i} (aq_i·ak_j)(bq_i·bk_j) v_j per block, and the gradients of Σ out⊙u with respect to aq, ak, bq, bk, v,
 * in float64 from flat [N, C, ·] arrays.
 */
/** out = S·[v, 1] [n, c, dv + 1] and the gradients for upstream u [n, c, dv + 1], in float64. */
function causalFactorAttentionRef([aq, ak, bq, bk, v, u]: number[][], [n, c, fa, fb, dv]: number[]): number[][] {
  const w = dv + 1;
  const out = new Array<number>(n * c * w).fill(0);
  const [daq, dak] = [0, 1].map(() => new Array<number>(n * c * fa).fill(0));
  const [dbq, dbk] = [0, 1].map(() => new Array<number>(n * c * fb).fill(0));
  const dvs = new Array<number>(n * c * dv).fill(0);
  const dot = (x: number[], xi: number, y: number[], yi: number, w: number) => {
    let acc = 0;
    for (let f = 0; f < w; f++) acc += x[xi + f] * y[yi + f];
    return acc;
  };
  for (let b = 0; b < n; b++)
    for (let i = 0; i < c; i++)
      for (let j = 0; j <= i; j++) {
        const [qa, ka, qb, kb, oi, vj] = [(b * c + i) * fa, (b * c + j) * fa, (b * c + i) * fb, (b * c + j) * fb, (b * c + i) * w, (b * c + j) * dv];
        const xa = dot(aq, qa, ak, ka, fa);
        const xb = dot(bq, qb, bk, kb, fb);
        const ds = dot(u, oi, v, vj, dv) + u[oi + dv];
        for (let e = 0; e < dv; e++) {
          out[oi + e] += xa * xb * v[vj + e];
          dvs[vj + e] += xa * xb * u[oi + e];
        }
        out[oi + dv] += xa * xb;
        for (let f = 0; f < fa; f++) {
          daq[qa + f] += ds * xb * ak[ka + f];
          dak[ka + f] += ds * xb * aq[qa + f];
        }
        for (let f = 0; f < fb; f++) {
          dbq[qb + f] += ds * xa * bk[kb + f];
          dbk[kb + f] += ds * xa * bq[qb + f];
        }
      }
  return [out, daq, dak, dbq, dbk, dvs];
}

/** LayerNorm over rows of width d in float64: [y, dx, dgain, dshift] for upstream u, by the textbook backward. */
function layerNormRef(x: number[], gain: number[], shift: number[], u: number[], d: number, eps: number): number[][] {
  const rows = x.length / d;
  const y = new Array<number>(x.length).fill(0);
  const dx = new Array<number>(x.length).fill(0);
  const [dgain, dshift] = [0, 1].map(() => new Array<number>(d).fill(0));
  for (let row = 0; row < rows; row++) {
    const xr = x.slice(row * d, (row + 1) * d);
    const mean = xr.reduce((a, v) => a + v, 0) / d;
    const rstd = 1 / Math.sqrt(xr.reduce((a, v) => a + (v - mean) ** 2, 0) / d + eps);
    const xhat = xr.map((v) => (v - mean) * rstd);
    const g = xhat.map((_, j) => u[row * d + j] * gain[j]);
    const meanG = g.reduce((a, v) => a + v, 0) / d;
    const meanGX = g.reduce((a, v, j) => a + v * xhat[j], 0) / d;
    for (let j = 0; j < d; j++) {
      y[row * d + j] = xhat[j] * gain[j] + shift[j];
      dx[row * d + j] = rstd * (g[j] - meanG - xhat[j] * meanGX);
      dgain[j] += u[row * d + j] * xhat[j];
      dshift[j] += u[row * d + j];
    }
  }
  return [y, dx, dgain, dshift];
}

/**
 * SLAY's factors in float64 (src/model/fused.ts, fusedSlayFactors): for u = x/‖x‖ of each row of x [B, H, L, d],
 * a = (u·anchors)²/√P [B, H, L, P] and b = concat_r √w_r·M^(−½)·exp(clamp(k_r u·ω_r − k_r²‖u‖²/2, ±20)) [B, H, L, R·M].
 */
function slayFactorsRef(
  x: number[],
  anchors: number[],
  omegas: number[],
  nodes: number[],
  { b, h, l, d, p, r, m }: Record<'b' | 'h' | 'l' | 'd' | 'p' | 'r' | 'm', number>,
): number[][] {
  const a = new Array<number>(b * h * l * p).fill(0);
  const out = new Array<number>(b * h * l * r * m).fill(0);
  for (let row = 0; row < b * h * l; row++) {
    const head = Math.floor(row / l) % h;
    const xr = x.slice(row * d, (row + 1) * d);
    const norm = Math.sqrt(
      Math.max(
        xr.reduce((acc, v) => acc + v * v, 0),
        1e-24,
      ),
    );
    const u = xr.map((v) => v / norm);
    const unit = u.reduce((acc, v) => acc + v * v, 0);
    for (let q = 0; q < p; q++) {
      const c = u.reduce((acc, v, j) => acc + v * anchors[j * p + q], 0);
      a[row * p + q] = (c * c) / Math.sqrt(p);
    }
    for (let n = 0; n < r; n++) {
      const [k, sqrtW] = [nodes[n * 2], nodes[n * 2 + 1]];
      for (let f = 0; f < m; f++) {
        const dot = u.reduce((acc, v, j) => acc + v * omegas[((n * h + head) * d + j) * m + f], 0);
        const e = Math.min(20, Math.max(-20, k * dot - (k * k * unit) / 2));
        out[(row * r + n) * m + f] = (sqrtW / Math.sqrt(m)) * Math.exp(e);
      }
    }
  }
  return [a, out];
}

/** erf in float64 (Abramowitz–Stegun 7.1.26 is too coarse here: series + continued fraction). */
function erf64(x: number): number {
  const t = Math.abs(x);
  if (t < 2.5) {
    let sum = 0;
    let term = t;
    for (let k = 0; k < 80; k++) {
      sum += term / (2 * k + 1);
      term *= (-t * t) / (k + 1);
    }
    return Math.sign(x) * (2 / Math.sqrt(Math.PI)) * sum;
  }
  // erfc by its continued fraction for large |x|
  let f = 0;
  for (let k = 60; k >= 1; k--) f = k / 2 / (t + f);
  const erfc = Math.exp(-t * t) / Math.sqrt(Math.PI) / (t + f);
  return Math.sign(x) * (1 - erfc);
}
