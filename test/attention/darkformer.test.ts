import * as tf from '@tensorflow/tfjs';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import '../../src/model/attention/performer.ts';
import '../../src/model/attention/darkformer.ts';
import { darkformerAttention, type DarkformerModule } from '../../src/model/attention/darkformer.ts';
import type { RandomFeatureModule } from '../../src/model/attention/performer.ts';
import { createAttention } from '../../src/model/attention/registry.ts';
import { Rng } from '../../src/core/rng.ts';
import { dot, flat, gradientCheck, kernelAttentionRef, meanAndStdErr, randomArray4, relL2, tensor4, type Array4 } from '../helpers/reference.ts';
import { attentionTracker, runAttention as run } from '../helpers/modules.ts';

beforeAll(async () => {
  await initBackend(testBackend());
});

const modules = attentionTracker<RandomFeatureModule>();
afterEach(() => modules.disposeAll());

const make = modules.create;
const darkformer = (options: Record<string, unknown> & { numHeads: number; headDim: number }) => make<DarkformerModule>('darkformer', options);

/** A random r×d factor per head, away from the identity. */
function randomFactors(rng: Rng, heads: number, r: number, d: number, scale: number): number[][][] {
  return Array.from({ length: heads }, () =>
    Array.from({ length: r }, (_, i) => Array.from({ length: d }, (_, j) => (i === j ? 0.6 : 0) + scale * rng.normal())),
  );
}

/** x̃ = M d^(−1/4) x, so the DARKFormer kernel is exp(x̃_qᵀx̃_k) = exp(qᵀMᵀMk/√d). */
const aligned = (m: number[][], x: number[]) => m.map((row) => dot(row, x) * x.length ** -0.25);

describe('darkformer features', () => {
  it('are unbiased for exp(qᵀΣk/√d) with a non-identity M of rank < d', () => {
    const [h, l, d, r, m] = [1, 3, 4, 3, 8];
    const rng = new Rng(41);
    const q = randomArray4(rng, [1, h, l, d], 0.8);
    const k = randomArray4(rng, [1, h, l, d], 0.8);
    const factors = randomFactors(rng, h, r, d, 0.4);
    const samples: number[][] = Array.from({ length: l * l }, () => []);
    for (let seed = 0; seed < 400; seed++) {
      const module = createAttention('darkformer', { numHeads: h, headDim: d, seed, features: m, rank: r }) as DarkformerModule;
      module.covarianceFactor.assign(tf.tensor3d(factors));
      const kernel = tf.tidy(() => {
        const phiQ = tf.reshape(module.featureMap(tensor4(q)), [l, m]);
        const phiK = tf.reshape(module.featureMap(tensor4(k)), [l, m]);
        return tf.matMul(phiQ, phiK, false, true).arraySync() as number[][];
      });
      module.dispose();
      kernel.flat().forEach((x, i) => samples[i].push(x));
    }
    for (let i = 0; i < l; i++) {
      for (let j = 0; j < l; j++) {
        const exact = Math.exp(dot(aligned(factors[0], q[0][0][i]), aligned(factors[0], k[0][0][j])));
        const { mean, stdErr } = meanAndStdErr(samples[i * l + j]);
        expect(Math.abs(mean - exact)).toBeLessThan(4 * stdErr);
      }
    }
  });
});

describe('darkformer attention', () => {
  it.each([false, true])('converges to kernel-normalised exp(qᵀΣk/√d) attention as features grow (causal %s)', (causal) => {
    const [h, l, d] = [2, 10, 4];
    const rng = new Rng(6);
    const q = randomArray4(rng, [1, h, l, d], 0.5);
    const k = randomArray4(rng, [1, h, l, d], 0.5);
    const v = randomArray4(rng, [1, h, l, d]);
    const factors = randomFactors(rng, h, d, d, 0.3);
    // The reference kernel depends on the head (one M per head): one single-head reference per head.
    const exact: Array4 = [
      factors.map((f, head) => {
        const one = (a: Array4) => [[a[0][head]]];
        const kernel = (qi: number[], kj: number[]) => Math.exp(dot(aligned(f, qi), aligned(f, kj)));
        return kernelAttentionRef(one(q), one(k), one(v), kernel, { causal })[0][0];
      }),
    ];
    const meanError = (features: number) => {
      let total = 0;
      for (let seed = 0; seed < 3; seed++) {
        const module = darkformer({ numHeads: h, headDim: d, causal, seed, features, chunkSize: 4 });
        module.covarianceFactor.assign(tf.tensor3d(factors));
        total += relL2(run(module, q, k, v), exact);
      }
      return total / 3;
    };
    const small = meanError(16);
    const large = meanError(16384);
    expect(large).toBeLessThan(small / 6);
    expect(large).toBeLessThan(0.03);
  });

  it.each([false, true])('with M = I gives exactly Performer’s output for the same seed (causal %s)', (causal) => {
    const [h, l, d] = [2, 9, 4];
    const rng = new Rng(7);
    const q = randomArray4(rng, [2, h, l, d], 1.5);
    const k = randomArray4(rng, [2, h, l, d], 1.5);
    const v = randomArray4(rng, [2, h, l, d]);
    const options = { numHeads: h, headDim: d, causal, seed: 19, features: 10, chunkSize: 4 };
    const performer = make<RandomFeatureModule>('performer', options);
    const dark = darkformer(options);
    expect(flat(dark.covarianceFactor.arraySync())).toEqual(
      flat(
        [0, 1].map(() => [
          [1, 0, 0, 0],
          [0, 1, 0, 0],
          [0, 0, 1, 0],
          [0, 0, 0, 1],
        ]),
      ),
    );
    expect(flat(dark.buffers[0].arraySync())).toEqual(flat(performer.buffers[0].arraySync()));
    expect(relL2(run(dark, q, k, v), run(performer, q, k, v))).toBeLessThan(1e-6);
  });

  it('keeps finite outputs and a positive denominator on adversarial inputs, and is strictly causal', () => {
    const [h, l, d] = [2, 8, 4];
    const rng = new Rng(9);
    const base = randomArray4(rng, [1, h, l, d]);
    const v = randomArray4(rng, [1, h, l, d]);
    const scaled = (a: Array4, s: number) => a.map((b) => b.map((hh) => hh.map((row) => row.map((x) => x * s))));
    const module = darkformer({ numHeads: h, headDim: d, causal: true, seed: 3, features: 8, chunkSize: 4 });
    module.covarianceFactor.assign(tf.tensor3d(randomFactors(rng, h, d, d, 0.5)));
    for (const [q, k] of [
      [base, scaled(base, -1)],
      [scaled(base, 1e4), scaled(base, 1e4)],
      [scaled(base, 1e3), scaled(base, -1e3)],
      [scaled(base, 0), scaled(base, 0)],
    ]) {
      for (const x of flat(run(module, q, k, v))) expect(Number.isFinite(x)).toBe(true);
    }
    // Future keys of a huge norm and future values changed: positions ≤ 3 keep their outputs.
    const cut = 3;
    const before = run(module, base, base, v);
    const future = (a: Array4, s: number) => a.map((b) => b.map((hh) => hh.map((row, i) => (i > cut ? row.map((x) => x * s + 1) : row))));
    const after = run(module, base, future(base, 30), future(v, -5));
    const prefix = (a: Array4) => a.map((b) => b.map((hh) => hh.slice(0, cut + 1)));
    expect(relL2(prefix(after), prefix(before))).toBeLessThan(1e-5);
    expect(relL2(after, before)).toBeGreaterThan(1e-2);
  });

  it('redraws its base projection on Performer’s schedule', () => {
    const module = darkformer({ numHeads: 1, headDim: 4, seed: 2, features: 5, redrawInterval: 2 });
    const initial = flat(module.buffers[0].arraySync());
    module.onTrainStep!(1);
    expect(flat(module.buffers[0].arraySync())).toEqual(initial);
    module.onTrainStep!(2);
    expect(flat(module.buffers[0].arraySync())).not.toEqual(initial);
    expect(module.drawIndex).toBe(1);
    expect(module.buffers[0].trainable).toBe(false);
  });

  it('whitening: initializeFromData makes the transformed calibration inputs isotropic', () => {
    const [h, l, d] = [2, 3000, 3];
    const rng = new Rng(23);
    // Anisotropic, correlated Gaussians x = A z (+ an offset for the keys), A different per head.
    const mixing = [
      [
        [3, 0, 0],
        [1, 0.5, 0],
        [0.5, -0.2, 0.6],
      ],
      [
        [0.5, 0, 0],
        [0, 2, 0],
        [1, 1, 1],
      ],
    ];
    const sample = (offset: number) => [
      Array.from({ length: h }, (_, head) =>
        Array.from({ length: l }, () => {
          const z = [rng.normal(), rng.normal(), rng.normal()];
          return mixing[head].map((row) => dot(row, z) + offset);
        }),
      ),
    ];
    const q = sample(0);
    const k = sample(2);
    const module = darkformer({ numHeads: h, headDim: d, seed: 1, features: 4, init: 'whitening' });
    expect(module.options.init).toBe('whitening');
    expect(module.dataInit?.fills.variable).toBe(module.covarianceFactor);
    tf.tidy(() => module.dataInit!.initializeFromData(tensor4(q), tensor4(k)));
    const factors = module.covarianceFactor.arraySync() as number[][][];
    for (let head = 0; head < h; head++) {
      // ½(Cov(Mq) + Cov(Mk)) ≈ I (the 1e−4 ridge moves it by < 3e−3 at these eigenvalues), hence x̃ = M d^(−1/4) x has covariance I/√d.
      const covariance = (xs: number[][]) => {
        const ys = xs.map((x) => factors[head].map((row) => dot(row, x)));
        const mean = [0, 1, 2].map((c) => ys.reduce((s, y) => s + y[c], 0) / ys.length);
        return [0, 1, 2].map((a) => [0, 1, 2].map((b) => ys.reduce((s, y) => s + (y[a] - mean[a]) * (y[b] - mean[b]), 0) / (ys.length - 1)));
      };
      const cq = covariance(q[0][head]);
      const ck = covariance(k[0][head]);
      for (let a = 0; a < d; a++) {
        for (let b = 0; b < d; b++) expect(Math.abs((cq[a][b] + ck[a][b]) / 2 - (a === b ? 1 : 0))).toBeLessThan(3e-3);
      }
      // M is the symmetric Λ^(−1/2) of the population covariance AAᵀ, up to sampling error:
      // check MᵀM·AAᵀ ≈ I.
      const m = factors[head];
      const a = mixing[head];
      const sigma = [0, 1, 2].map((i) => [0, 1, 2].map((j) => m.reduce((s, row) => s + row[i] * row[j], 0)));
      const lambda = a.map((ri) => a.map((rj) => dot(ri, rj)));
      for (let i = 0; i < d; i++) {
        for (let j = 0; j < d; j++) {
          const product = sigma[i].reduce((s, x, c) => s + x * lambda[c][j], 0);
          expect(Math.abs(product - (i === j ? 1 : 0))).toBeLessThan(0.1);
        }
      }
    }
  });

  it('M receives gradients; numerical gradient checks with respect to q and M pass', () => {
    const [h, l, d] = [1, 5, 3];
    const rng = new Rng(29);
    const q = tensor4(randomArray4(rng, [1, h, l, d]));
    const k = tensor4(randomArray4(rng, [1, h, l, d]));
    const v = tensor4(randomArray4(rng, [1, h, l, d]));
    const weights = tensor4(randomArray4(rng, [1, h, l, d]));
    const factor = tf.tensor3d(randomFactors(rng, h, d, d, 0.4));
    for (const causal of [true, false]) {
      const module = darkformer({ numHeads: h, headDim: d, causal, seed: 8, features: 8, chunkSize: 2 });
      module.covarianceFactor.assign(factor);
      expect(module.trainableVariables).toEqual([module.covarianceFactor]);
      const { value, grads } = tf.variableGrads(() => tf.sum(tf.mul(module.apply(q, k, v), weights)) as tf.Scalar, module.trainableVariables);
      const gradNorm = tf.tidy(() => tf.norm(grads[module.covarianceFactor.name]).arraySync() as number);
      expect(gradNorm).toBeGreaterThan(1e-3);
      tf.dispose([value, ...Object.values(grads)]);

      const opts = { causal, chunkSize: 2, delta: 1e-6 };
      const omega = module.buffers[0];
      const lossOfQ = (x: tf.Tensor) => tf.sum(tf.mul(darkformerAttention(x as tf.Tensor4D, k, v, module.covarianceFactor, omega, opts), weights)) as tf.Scalar;
      const lossOfM = (x: tf.Tensor) => tf.sum(tf.mul(darkformerAttention(q, k, v, x, omega, opts), weights)) as tf.Scalar;
      expect(gradientCheck(lossOfQ, q)).toBeLessThan(2e-2);
      expect(gradientCheck(lossOfM, factor)).toBeLessThan(2e-2);
    }
    tf.dispose([q, k, v, weights, factor]);
  });

  it('rejects bad options, naming the option and the allowed values', () => {
    expect(() => darkformer({ numHeads: 1, headDim: 4, features: 0 })).toThrow(/'features' must be an integer ≥ 1/);
    expect(() => darkformer({ numHeads: 1, headDim: 4, rank: 5 })).toThrow(/'rank' must be an integer in 1 … headDim = 4/);
    expect(() => darkformer({ numHeads: 1, headDim: 4, init: 'random' })).toThrow(/'init' must be one of identity, whitening/);
    const lowRank = darkformer({ numHeads: 1, headDim: 4, rank: 2 });
    expect(lowRank.options.rank).toBe(2);
    expect(lowRank.covarianceFactor.shape).toEqual([1, 2, 4]);
    const x = tf.zeros([1, 1, 4, 4]) as tf.Tensor4D;
    expect(() => lowRank.initializeFromData(x, x)).toThrow(/needs option 'rank' = headDim = 4/);
    const full = darkformer({ numHeads: 1, headDim: 4 });
    expect(full.options.rank).toBe(4);
    expect(full.dataInit).toBeUndefined(); // init 'identity': nothing for a new run to calibrate
    expect(() => full.initializeFromData(x, x)).toThrow(/head 0 have no variance/);
    expect(() => full.initializeFromData(tf.zeros([1, 2, 4, 4]) as tf.Tensor4D, x)).toThrow(/q must be \[batch, 1, length, 4\]/);
    x.dispose();
  });
});
