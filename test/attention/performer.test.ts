import * as tf from '@tensorflow/tfjs';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import '../../src/model/attention/performer.ts';
import { drawPrfProjection, type RandomFeatureModule } from '../../src/model/attention/performer.ts';
import { createAttention } from '../../src/model/attention/registry.ts';
import { Rng } from '../../src/core/rng.ts';
import { dot, flat, gradientCheck, meanAndStdErr, randomArray4, relL2, softmaxAttentionRef, tensor4, type Array4 } from '../helpers/reference.ts';
import { attentionTracker, runAttention as run } from '../helpers/modules.ts';

beforeAll(async () => {
  await initBackend(testBackend());
});

const modules = attentionTracker<RandomFeatureModule>();
afterEach(() => modules.disposeAll());

const performer = (options: Record<string, unknown> & { numHeads: number; headDim: number }) => modules.create<RandomFeatureModule>('performer', options);

describe('performer features', () => {
  it.each([true, false])('are unbiased for exp(qᵀk/√d) (orthogonal %s)', (orthogonal) => {
    const [h, l, d, m] = [1, 3, 4, 8];
    const rng = new Rng(21);
    const q = randomArray4(rng, [1, h, l, d], 0.8);
    const k = randomArray4(rng, [1, h, l, d], 0.8);
    const samples: number[][] = Array.from({ length: l * l }, () => []);
    for (let seed = 0; seed < 400; seed++) {
      const module = createAttention('performer', { numHeads: h, headDim: d, seed, features: m, orthogonal }) as RandomFeatureModule;
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
        const exact = Math.exp(dot(q[0][0][i], k[0][0][j]) / Math.sqrt(d));
        const { mean, stdErr } = meanAndStdErr(samples[i * l + j]);
        expect(Math.abs(mean - exact)).toBeLessThan(4 * stdErr);
      }
    }
  });

  it('are non-negative', () => {
    const module = performer({ numHeads: 2, headDim: 4, features: 16, seed: 1 });
    const x = randomArray4(new Rng(2), [1, 2, 6, 4], 3);
    const phi = tf.tidy(() => flat(module.featureMap(tensor4(x)).arraySync()));
    expect(Math.min(...phi)).toBeGreaterThanOrEqual(0);
  });
});

describe('performer attention', () => {
  it.each([false, true])('converges to exact softmax attention as features grow (causal %s)', (causal) => {
    const shape: [number, number, number, number] = [1, 2, 10, 4];
    const rng = new Rng(5);
    // PRF variance grows like exp(2‖q̃+k̃‖²): moderate norms keep m = 4096 accurate.
    const q = randomArray4(rng, shape, 0.6);
    const k = randomArray4(rng, shape, 0.6);
    const v = randomArray4(rng, shape);
    const exact = softmaxAttentionRef(q, k, v, causal);
    const meanError = (features: number) => {
      let total = 0;
      for (let seed = 0; seed < 3; seed++) {
        total += relL2(run(performer({ numHeads: 2, headDim: 4, causal, seed, features, chunkSize: 4 }), q, k, v), exact);
      }
      return total / 3;
    };
    const small = meanError(16);
    const large = meanError(16384);
    // Measured ≈ 0.2 at m = 16 and ≈ 0.015 at m = 16384 (the error halves per 4× features there).
    expect(large).toBeLessThan(small / 6);
    expect(large).toBeLessThan(0.03);
  });

  it('matches the float64 FAVOR+ estimator built from the same projection', () => {
    const [h, l, d, m] = [2, 7, 4, 6];
    const rng = new Rng(8);
    const q = randomArray4(rng, [1, h, l, d], 1.5);
    const k = randomArray4(rng, [1, h, l, d], 1.5);
    const v = randomArray4(rng, [1, h, l, d]);
    const module = performer({ numHeads: h, headDim: d, causal: true, seed: 4, features: m, chunkSize: 3, delta: 0.5 });
    const omega = module.buffers[0].arraySync() as number[][][];
    // φ(x)_j = m^(−1/2) exp(ω_jᵀx̃ − ‖x̃‖²/2), x̃ = d^(−1/4)x; Y_i = Σ_{j≤i} φ_iᵀφ_j v_j / (Σ_{j≤i} φ_iᵀφ_j + δ).
    const phi = (x: number[], head: number) => {
      const xs = x.map((c) => c * d ** -0.25);
      return Array.from({ length: m }, (_, j) => Math.exp(xs.reduce((s, c, i) => s + c * omega[head][i][j], 0) - dot(xs, xs) / 2) / Math.sqrt(m));
    };
    const expected = q.map((qb, b) =>
      qb.map((qh, head) =>
        qh.map((qi, i) => {
          const num = new Array(d).fill(0);
          let den = 0;
          for (let j = 0; j <= i; j++) {
            const w = dot(phi(qi, head), phi(k[b][head][j], head));
            den += w;
            v[b][head][j].forEach((x, c) => (num[c] += w * x));
          }
          return num.map((x) => x / (den + 0.5));
        }),
      ),
    );
    expect(relL2(run(module, q, k, v), expected)).toBeLessThan(1e-5);
  });

  it('keeps a positive denominator and finite outputs on adversarial inputs', () => {
    const [h, l, d] = [2, 8, 4];
    const rng = new Rng(13);
    const base = randomArray4(rng, [1, h, l, d]);
    const v = randomArray4(rng, [1, h, l, d]);
    const scaled = (a: Array4, s: number) => a.map((b) => b.map((hh) => hh.map((row) => row.map((x) => x * s))));
    const zeros = scaled(base, 0);
    const cases: Array<[string, Array4, Array4]> = [
      ['q = k', base, base],
      ['q = −k', base, scaled(base, -1)],
      ['huge q = k (1e3)', scaled(base, 1e3), scaled(base, 1e3)],
      ['huge q, −k (1e4)', scaled(base, 1e4), scaled(base, -1e4)],
      ['huge keys only (1e4)', base, scaled(base, 1e4)],
      ['zero vectors', zeros, zeros],
    ];
    for (const causal of [false, true]) {
      const module = performer({ numHeads: h, headDim: d, causal, seed: 2, features: 8, chunkSize: 4 });
      for (const [label, q, k] of cases) {
        const out = run(module, q, k, v);
        // With non-negative weights and a positive denominator every output is a sub-convex
        // combination of the attended values: between min(0, min v) and max(0, max v).
        out.forEach((ob, b) =>
          ob.forEach((oh, head) =>
            oh.forEach((row, i) => {
              const attended = v[b][head].slice(0, causal ? i + 1 : l);
              row.forEach((x, c) => {
                const column = attended.map((vj) => vj[c]);
                expect(Number.isFinite(x), `${label}: finite`).toBe(true);
                expect(x, label).toBeGreaterThanOrEqual(Math.min(0, ...column) - 1e-5);
                expect(x, label).toBeLessThanOrEqual(Math.max(0, ...column) + 1e-5);
              });
            }),
          ),
        );
      }
      // Zero queries and keys give every key the same weight: the output is the (causal) mean of v.
      expect(relL2(run(module, zeros, zeros, v), softmaxAttentionRef(zeros, zeros, v, causal))).toBeLessThan(1e-5);
    }
  });

  it('is strictly causal even when future keys move the global key maximum', () => {
    const [h, l, d, m] = [2, 12, 8, 16];
    const cut = 5; // positions ≤ cut must not see what happens after it
    const rng = new Rng(17);
    const q = randomArray4(rng, [1, h, l, d]);
    const k = randomArray4(rng, [1, h, l, d], 0.5);
    const v = randomArray4(rng, [1, h, l, d]);
    const module = performer({ numHeads: h, headDim: d, causal: true, seed: 3, features: m, chunkSize: 4 });
    const omega = module.buffers[0].arraySync() as number[][][];
    // A key with x̃ = ω_j has logit ‖ω_j‖²/2, the largest any key can reach on feature j.
    const alignedKey = (head: number) => {
      const norms = Array.from({ length: m }, (_, j) => Math.hypot(...omega[head].map((r) => r[j])));
      const j = norms.indexOf(Math.max(...norms));
      return omega[head].map((r) => r[j] * d ** 0.25);
    };
    const withFuture = (make: (head: number, i: number) => number[]) =>
      k.map((kb) => kb.map((kh, head) => kh.map((row, i) => (i > cut ? make(head, i) : row))));
    const futureV = v.map((vb) => vb.map((vh) => vh.map((row, i) => (i > cut ? row.map((x) => -10 * x + 3) : row))));
    const maxKeyLogit = (keys: Array4) => tf.tidy(() => Math.log(Math.sqrt(m) * (module.featureMap(tensor4(keys)).max().arraySync() as number)));

    const before = run(module, q, k, v);
    const aligned = withFuture((head) => alignedKey(head));
    expect(maxKeyLogit(aligned) - maxKeyLogit(k)).toBeGreaterThan(4); // the stabiliser really moves
    const huge = withFuture((head, i) => k[0][head][i].map((x) => x * 1e3));
    for (const keys of [aligned, huge]) {
      const after = run(module, q, keys, futureV);
      const prefix = (a: Array4) => a.map((b) => b.map((hh) => hh.slice(0, cut + 1)));
      expect(relL2(prefix(after), prefix(before))).toBeLessThan(1e-5);
      expect(relL2(after, before)).toBeGreaterThan(1e-2); // the change is visible after the cut
    }
  });

  it('redraws the projection exactly every redrawInterval steps, reproducibly from the seed', () => {
    const options = { numHeads: 2, headDim: 4, seed: 12, features: 6, redrawInterval: 3 };
    const a = performer(options);
    const b = performer(options);
    const values = (module: RandomFeatureModule) => flat(module.buffers[0].arraySync());
    let previous = values(a);
    for (let step = 1; step <= 10; step++) {
      a.onTrainStep!(step);
      b.onTrainStep!(step);
      const current = values(a);
      expect(current).toEqual(values(b));
      if (step % 3 === 0) expect(current).not.toEqual(previous);
      else expect(current).toEqual(previous);
      expect(a.drawIndex).toBe(Math.floor(step / 3));
      const expected = tf.tidy(() => flat(drawPrfProjection(12, Math.floor(step / 3), 2, 4, 6, true).arraySync()));
      expect(current).toEqual(expected);
      previous = current;
    }
    // A resumed run that first sees step 8 lands on the same draw as the uninterrupted one.
    const resumed = performer(options);
    resumed.onTrainStep!(8);
    expect(values(resumed)).toEqual(tf.tidy(() => flat(drawPrfProjection(12, 2, 2, 4, 6, true).arraySync())));

    const fixed = performer({ ...options, redrawInterval: 0 });
    const initial = values(fixed);
    for (let step = 1; step <= 10; step++) fixed.onTrainStep!(step);
    expect(values(fixed)).toEqual(initial);
    expect(fixed.drawIndex).toBe(0);
    expect(fixed.trainableVariables).toEqual([]);
    expect(fixed.buffers[0].trainable).toBe(false);
  });

  it('passes a numerical gradient check with respect to q', () => {
    const [h, l, d] = [1, 5, 3];
    const rng = new Rng(31);
    const k = tensor4(randomArray4(rng, [1, h, l, d]));
    const v = tensor4(randomArray4(rng, [1, h, l, d]));
    const weights = tensor4(randomArray4(rng, [1, h, l, d]));
    const q = tensor4(randomArray4(rng, [1, h, l, d]));
    for (const causal of [true, false]) {
      const module = performer({ numHeads: h, headDim: d, causal, seed: 6, features: 8, chunkSize: 2 });
      const loss = (x: tf.Tensor) => tf.sum(tf.mul(module.apply(x as tf.Tensor4D, k, v), weights)) as tf.Scalar;
      expect(gradientCheck(loss, q, { step: 1e-2 })).toBeLessThan(2e-2);
    }
    tf.dispose([q, k, v, weights]);
  });

  it('rejects bad options, naming the option and the allowed values', () => {
    expect(() => performer({ numHeads: 1, headDim: 4, features: 0 })).toThrow(/'features' must be an integer ≥ 1/);
    expect(() => performer({ numHeads: 1, headDim: 4, redrawInterval: -1 })).toThrow(/'redrawInterval' must be an integer ≥ 0/);
    expect(() => performer({ numHeads: 1, headDim: 4, orthogonal: 'yes' })).toThrow(/'orthogonal' must be true or false/);
    expect(() => performer({ numHeads: 1, headDim: 4, delta: -1 })).toThrow(/'delta' must be a number ≥ 0/);
    expect(() => performer({ numHeads: 1, headDim: 4, rank: 2 })).toThrow(/unknown option 'rank'.*features/);
    const module = performer({ numHeads: 2, headDim: 4 });
    const wrong = tf.zeros([1, 3, 5, 4]) as tf.Tensor4D;
    expect(() => module.apply(wrong, wrong, wrong)).toThrow(/performer: q must be \[batch, 2, length, 4\]/);
    wrong.dispose();
  });
});
