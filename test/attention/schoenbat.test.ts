// SchoenbAt against float64 references: the finite-feature estimator of its own draw (exactly), and
// its target, kernel-normalised attention with κ(q, k) = f(q̃ᵀk̃) on the pre-SBN-normalised,
// d^(−1/4)-scaled inputs (as features grow), for all five kernels at a head size where they are not
// flat; post-SBN, gradients, options.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import '../../src/model/attention/schoenbat.ts';
import { createAttention } from '../../src/model/attention/registry.ts';
import type { AttentionModule } from '../../src/model/attention/types.ts';
import { Rng } from '../../src/core/rng.ts';
import { MACLAURIN_KERNELS, type MaclaurinKernel } from '../../src/model/features/random-maclaurin.ts';
import { dot, gradientCheck, kernelAttentionRef, randomArray4, relL2, tensor4, type Array4 } from '../helpers/reference.ts';
import { mechanismRef, preSbnScaledRef } from '../helpers/mechanisms.ts';
import { runAttention as run } from '../helpers/modules.ts';

const closedForm: Record<MaclaurinKernel, (x: number) => number> = {
  exp: Math.exp,
  inverse: (x) => 1 / (1 - x),
  logi: (x) => 1 - Math.log(1 - x),
  trigh: (x) => Math.cosh(x) + Math.sinh(x),
  sqrt: (x) => 2 - Math.sqrt(1 - x),
};

function create(options: Record<string, unknown>, causal = true, headDim = 8): AttentionModule {
  return createAttention('schoenbat', { numHeads: 2, headDim, causal, seed: 3, ...options });
}

describe('schoenbat', () => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  const rng = new Rng(21);
  const shape: [number, number, number, number] = [1, 2, 10, 8];
  const q = randomArray4(rng, shape);
  const k = randomArray4(rng, shape);
  const v = randomArray4(rng, shape);

  // Head size 4: q̃ᵀk̃ spans [−½, ½], where every kernel varies by a factor 1.6–3 (at d = 8 the span
  // ±0.35 leaves the kernels nearly flat), so exact kernel attention is 13–51% away from plain averaging.
  const small: [number, number, number, number] = [1, 2, 10, 4];
  const [q4, k4, v4] = [0, 1, 2].map(() => randomArray4(new Rng(22), small));
  const cases = MACLAURIN_KERNELS.flatMap((kernel) => [true, false].map((causal) => [kernel, causal] as const));

  it.each(cases)('equals the float64 estimator of its own random Maclaurin draw (%s, causal %s, head size 4)', (kernel, causal) => {
    for (const denominatorClamp of ['kernel-min', 'reference']) {
      const module = createAttention('schoenbat', { numHeads: 2, headDim: 4, causal, seed: 5, kernel, features: 64, chunkSize: 4, denominatorClamp });
      expect(relL2(run(module, q4, k4, v4), mechanismRef(module, q4, k4, v4, { causal, seed: 5 })), denominatorClamp).toBeLessThan(1e-5);
      module.dispose();
    }
  });

  it.each(cases)('converges to exact %s kernel attention as features grow (causal %s, head size 4)', (kernel, causal) => {
    const f = closedForm[kernel];
    const expected = kernelAttentionRef(q4, k4, v4, (qi, kj) => f(dot(preSbnScaledRef(qi), preSbnScaledRef(kj))), { causal });
    const errorAt = (features: number) => {
      // Averaged over a few seeds so the comparison is about D, not one lucky draw.
      let total = 0;
      for (const seed of [1, 2, 3]) {
        const module = createAttention('schoenbat', { numHeads: 2, headDim: 4, causal, seed, kernel, features });
        total += relL2(run(module, q4, k4, v4), expected);
        module.dispose();
      }
      return total / 3;
    };
    const coarse = errorAt(16);
    const fine = errorAt(4096);
    // The estimate must resolve the kernel's shape: its error is compared with the distance between
    // the exact output and plain averaging (f ≡ 1). Measured at D = 4096: 3–6% of that distance.
    const averaging = kernelAttentionRef(q4, k4, v4, () => 1, { causal });
    expect(fine).toBeLessThan(coarse / 4);
    expect(fine).toBeLessThan(0.1 * relL2(averaging, expected));
  });

  it('resolves its defaults and starts with post-SBN γ = 1, β = 0 (the identity)', () => {
    const module = create({});
    expect(module.options).toMatchObject({ kernel: 'exp', features: 128, maxDegree: 20, denominatorClamp: 'kernel-min', chunkSize: 64 });
    const [gamma, beta] = module.trainableVariables;
    expect(gamma.name).toMatch(/postSbnGamma$/);
    expect(Array.from(gamma.dataSync())).toEqual([1]);
    expect(Array.from(beta.dataSync())).toEqual(new Array(8).fill(0));
    expect(module.buffers.every((b) => !b.trainable)).toBe(true);
    module.dispose();
  });

  it('post-SBN is γ·RMFA + β', () => {
    const module = create({ features: 64 });
    const atInit = run(module, q, k, v);
    const [gamma, beta] = module.trainableVariables;
    const b = [0.5, -1, 2, 0, 0.25, -0.75, 1.5, 3];
    gamma.assign(tf.tensor1d([-2.5]));
    beta.assign(tf.tensor1d(b));
    const expected = atInit.map((bb) => bb.map((h) => h.map((row) => row.map((x, c) => -2.5 * x + b[c]))));
    expect(relL2(run(module, q, k, v), expected)).toBeLessThan(1e-6);
    module.dispose();
  });

  it('γ and β receive their exact gradients', () => {
    const module = create({ features: 64 });
    const rmfa = run(module, q, k, v);
    const weightRng = new Rng(8);
    const w = randomArray4(weightRng, shape);
    const { grads } = tf.variableGrads(
      () => tf.sum(tf.mul(module.apply(tensor4(q), tensor4(k), tensor4(v)), tensor4(w))) as tf.Scalar,
      module.trainableVariables,
    );
    const [gamma, beta] = module.trainableVariables;
    // ∂/∂γ Σ w·(γ·out + β) = Σ w·out;  ∂/∂β_c = Σ over positions of w_c.
    const gammaGrad = rmfa.flat(2).reduce((a, row, i) => a + dot(row, w.flat(2)[i]), 0);
    const betaGrad = new Array(8).fill(0).map((_, c) => w.flat(2).reduce((a, row) => a + row[c], 0));
    expect(grads[gamma.name].dataSync()[0]).toBeCloseTo(gammaGrad, 3);
    Array.from(grads[beta.name].dataSync()).forEach((g, c) => expect(g).toBeCloseTo(betaGrad[c], 4));
    tf.dispose(Object.values(grads));
    module.dispose();
  });

  it('passes a numerical gradient check through pre-SBN and the features (q and k)', () => {
    const module = createAttention('schoenbat', { numHeads: 1, headDim: 4, causal: true, seed: 5, features: 48, chunkSize: 2 });
    const gradRng = new Rng(9);
    const small: [number, number, number, number] = [1, 1, 5, 4];
    const [qt, kt, vt, wt] = [0, 1, 2, 3].map(() => tensor4(randomArray4(gradRng, small)));
    expect(gradientCheck((x) => tf.sum(tf.mul(module.apply(x as tf.Tensor4D, kt, vt), wt)) as tf.Scalar, qt)).toBeLessThan(2e-2);
    expect(gradientCheck((x) => tf.sum(tf.mul(module.apply(qt, x as tf.Tensor4D, vt), wt)) as tf.Scalar, kt)).toBeLessThan(2e-2);
    tf.dispose([qt, kt, vt, wt]);
    module.dispose();
  });

  it('the default clamp keeps exact results where the released 1.0 clamp shrinks them', () => {
    // One query facing one key with q̂ᵀk̂ = −1 (d = 4): the exact causal output at position 0 is v₀,
    // whose true denominator f(−1/√d) = e^(−1/2) < 1.
    const q0: Array4 = [[[[1, -1, 1, -1]]]];
    const k0: Array4 = [[[[-1, 1, -1, 1]]]];
    const v0: Array4 = [[[[1, 2, -3, 4]]]];
    const make = (denominatorClamp: string) =>
      createAttention('schoenbat', { numHeads: 1, headDim: 4, causal: true, seed: 1, features: 4096, denominatorClamp });
    const ours = make('kernel-min');
    const released = make('reference');
    expect(relL2(run(ours, q0, k0, v0), v0)).toBeLessThan(0.05);
    expect(
      relL2(
        run(released, q0, k0, v0),
        v0.map((b) => b.map((h) => h.map((row) => row.map((x) => x * Math.exp(-0.5))))),
      ),
    ).toBeLessThan(0.05);
    ours.dispose();
    released.dispose();
  });

  it('rejects bad options, naming the option and the allowed values', () => {
    expect(() => create({ kernel: 'cosh' })).toThrow(/'kernel' must be one of exp, inverse, logi, trigh, sqrt/);
    expect(() => create({ features: 1 })).toThrow(/'features' must be an integer ≥ 2/);
    expect(() => create({ denominatorClamp: 'none' })).toThrow(/'denominatorClamp' must be one of kernel-min, reference/);
  });
});
