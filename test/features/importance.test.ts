// The variance-optimal proposal of src/model/features/importance.ts (DARKFormer paper, Theorem 3.2) against float64
// references written here: Σ* = (I + 2Λ)(I − 2Λ)⁻¹ built from a known eigenbasis, the Gaussian densities' ratio, and
// Monte-Carlo means of the importance-weighted estimator against the exact kernel exp(qᵀk) with 4-standard-error bounds;
// then the mechanisms' dataInit 'variance-optimal' (Performer and DARKFormer) wired to it.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import { createAttention } from '../../src/model/attention/index.ts';
import type { DarkformerModule } from '../../src/model/attention/darkformer.ts';
import type { RandomFeatureModule } from '../../src/model/attention/performer.ts';
import { pooledCovariance, PROPOSAL_MARGIN, proposalDraws, varianceOptimalProposal } from '../../src/model/features/importance.ts';
import { orthogonalGaussianRows } from '../../src/model/features/orthogonal.ts';
import { testBackend } from '../helpers/backend.ts';
import { mechanismRef } from '../helpers/mechanisms.ts';
import { dot, meanAndStdErr, relL2, tensor4, toArray4, type Array4 } from '../helpers/reference.ts';

beforeAll(async () => {
  await initBackend(testBackend());
});

/** A Haar-ish orthonormal basis (rows), by Gram–Schmidt of Gaussian rows: the test's own, not the project's. */
function basis(rng: Rng, d: number): number[][] {
  const rows: number[][] = [];
  while (rows.length < d) {
    const v = Array.from(rng.normalArray(d));
    for (const u of rows) {
      const p = dot(u, v);
      v.forEach((_, i) => (v[i] -= p * u[i]));
    }
    const n = Math.hypot(...v);
    rows.push(v.map((x) => x / n));
  }
  return rows;
}

/** Σ_e f(λ_e) u_e u_eᵀ. */
const spectral = (u: number[][], values: number[]) => u.map((_, i) => u.map((__, j) => values.reduce((s, l, e) => s + l * u[e][i] * u[e][j], 0)));
const matVec = (a: number[][], x: number[]) => a.map((row) => dot(row, x));

/** x ~ N(0, Λ) for Λ = Σ λ_e u_e u_eᵀ. */
function gaussian(rng: Rng, u: number[][], eigen: number[]): number[] {
  const z = rng.normalArray(eigen.length);
  return u[0].map((_, i) => eigen.reduce((s, l, e) => s + Math.sqrt(l) * z[e] * u[e][i], 0));
}

const D = 6;
const EIGEN = [0.4, 0.3, 0.15, 0.08, 0.03, 0.01];

/** One feature's term of the estimator: w·exp(ωᵀq − ‖q‖²/2)·exp(ωᵀk − ‖k‖²/2), float64. */
const term = (omega: number[], logWeight: number, q: number[], k: number[]) =>
  Math.exp(logWeight + dot(omega, q) + dot(omega, k) - (dot(q, q) + dot(k, k)) / 2);

const rowsOf = (flat: Float64Array, m: number, d: number) => Array.from({ length: m }, (_, j) => Array.from(flat.subarray(j * d, (j + 1) * d)));

describe('variance-optimal proposal (float64)', () => {
  const rng = new Rng(31);
  const u = basis(rng, D);
  const lambda = spectral(u, EIGEN);
  const proposal = varianceOptimalProposal(lambda);

  it('draws ω = Σ*^(1/2)z with Σ* = (I + 2Λ)(I − 2Λ)⁻¹, each weighted by p_I(ω)/ψ*(ω)', () => {
    const s = EIGEN.map((l) => (1 + 2 * l) / (1 - 2 * l));
    const root = spectral(u, s.map(Math.sqrt));
    const inverse = spectral(
      u,
      s.map((x) => 1 / x),
    );
    const logDet = s.reduce((a, x) => a + Math.log(x), 0);
    const m = 20;
    const z = rng.normalArray(m * D);
    const { omegaRows, logWeights } = proposalDraws(proposal, z, m);
    for (let j = 0; j < m; j++) {
      const expected = matVec(root, Array.from(z.subarray(j * D, (j + 1) * D)));
      const omega = Array.from(omegaRows.subarray(j * D, (j + 1) * D));
      omega.forEach((x, i) => expect(x).toBeCloseTo(expected[i], 9));
      // log N(ω; 0, I) − log N(ω; 0, Σ*)
      const reference = -dot(omega, omega) / 2 + dot(omega, matVec(inverse, omega)) / 2 + logDet / 2;
      expect(logWeights[j]).toBeCloseTo(reference, 9);
    }
  });

  it(`clips Λ's eigenvalues to ½ − ${PROPOSAL_MARGIN} (and negatives to 0) before forming Σ*`, () => {
    const clipped = varianceOptimalProposal(spectral(u, [0.9, 0.5, 0.2, 0.1, 0, -1e-12]));
    const ceiling = 0.5 - PROPOSAL_MARGIN;
    expect(Math.max(...clipped.clippedEigenvalues)).toBeCloseTo(ceiling, 12);
    expect(Math.min(...clipped.clippedEigenvalues)).toBe(0);
    expect(Math.max(...clipped.variances)).toBeCloseTo((1 + 2 * ceiling) / (1 - 2 * ceiling), 9);
    expect(() => varianceOptimalProposal(lambda, 0.5)).toThrow(/margin must be in/);
  });

  it('the importance-weighted estimator is unbiased for exp(qᵀk): iid and orthogonal draws, within 4 standard errors', () => {
    const pairs = Array.from({ length: 4 }, () => [gaussian(rng, u, EIGEN), gaussian(rng, u, EIGEN)]);
    pairs.push([u[0].map((x) => 1.2 * x), u[0].map((x) => 0.9 * x)]); // along the widest direction, qᵀk = 1.08
    const n = 30_000;
    const iid = proposalDraws(proposal, rng.normalArray(n * D), n);
    const iidRows = rowsOf(iid.omegaRows, n, D);
    const blocks = 5_000; // orthogonal draws: terms within a block are coupled, so each block's mean is one sample
    const orth = proposalDraws(proposal, orthogonalGaussianRows(rng, D, blocks * D), blocks * D);
    const orthRows = rowsOf(orth.omegaRows, blocks * D, D);
    for (const [q, k] of pairs) {
      const exact = Math.exp(dot(q, k));
      const a = meanAndStdErr(iidRows.map((omega, j) => term(omega, iid.logWeights[j], q, k)));
      expect(Math.abs(a.mean - exact), `iid: ${a.mean} ± ${a.stdErr} against ${exact}`).toBeLessThan(4 * a.stdErr);
      const blockMeans = Array.from({ length: blocks }, (_, b) => {
        let sum = 0;
        for (let j = b * D; j < (b + 1) * D; j++) sum += term(orthRows[j], orth.logWeights[j], q, k);
        return sum / D;
      });
      const o = meanAndStdErr(blockMeans);
      expect(Math.abs(o.mean - exact), `orthogonal: ${o.mean} ± ${o.stdErr} against ${exact}`).toBeLessThan(4 * o.stdErr);
    }
  });

  it("on anisotropic q, k ~ N(0, Λ) its variance is below the isotropic (Performer's) estimator's", () => {
    const n = 4_000;
    const z = rng.normalArray(n * D);
    const isotropic = rowsOf(z, n, D);
    const draws = proposalDraws(proposal, z, n);
    const weighted = rowsOf(draws.omegaRows, n, D);
    const variance = (xs: number[]) => {
      const mean = xs.reduce((s, x) => s + x, 0) / xs.length;
      return xs.reduce((s, x) => s + (x - mean) ** 2, 0) / (xs.length - 1);
    };
    let iso = 0;
    let opt = 0;
    const pairs = 200;
    for (let p = 0; p < pairs; p++) {
      const q = gaussian(rng, u, EIGEN);
      const k = gaussian(rng, u, EIGEN);
      // Relative variance, so that pairs with a large kernel do not dominate the mean.
      const exact2 = Math.exp(2 * dot(q, k));
      iso += variance(isotropic.map((omega) => term(omega, 0, q, k))) / exact2 / pairs;
      opt += variance(weighted.map((omega, j) => term(omega, draws.logWeights[j], q, k))) / exact2 / pairs;
    }
    expect(opt).toBeLessThan(0.8 * iso);
  });

  it("pools the queries' and keys' sample covariances: ½(Cov q + Cov k)", () => {
    const q = [
      [1, 2],
      [3, 1],
      [2, 6],
    ].map((r) => Float64Array.from(r));
    const k = [
      [0, 0],
      [2, 2],
      [4, 1],
    ].map((r) => Float64Array.from(r));
    // Cov q = [[1, −0.5], [−0.5, 7]], Cov k = [[4, 1], [1, 1]] (centred, 1/(n − 1)).
    expect(pooledCovariance(q, k)).toEqual([
      [2.5, 0.25],
      [0.25, 4],
    ]);
  });
});

describe("dataInit 'variance-optimal'", () => {
  const HEADS = 2;
  const HEAD_DIM = 8;
  const scale = HEAD_DIM ** 0.25;
  const rng = new Rng(5);
  const bases = Array.from({ length: HEADS }, () => basis(rng, HEAD_DIM));
  const eigen = [0.45, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005];
  /** [B, H, L, d] raw inputs x = d^(1/4)·x̃ with x̃ ~ N(0, Λ_h) per head: the mechanism's scale x̃ is anisotropic. */
  const calibration = (b: number, l: number): Array4 =>
    Array.from({ length: b }, () => bases.map((u) => Array.from({ length: l }, () => gaussian(rng, u, eigen).map((x) => x * scale))));
  const options = (extra: Record<string, unknown> = {}) => ({
    numHeads: HEADS,
    headDim: HEAD_DIM,
    causal: true,
    features: 32,
    dataInit: 'variance-optimal',
    ...extra,
  });

  it('Performer: apply equals the float64 reference with the fitted projection and importance weights', () => {
    const module = createAttention('performer', { ...options(), seed: 3 }) as RandomFeatureModule;
    const before = tf.memory().numTensors;
    tf.tidy(() => module.dataInit!.initializeFromData(tensor4(calibration(4, 32)), tensor4(calibration(4, 32))));
    expect(tf.memory().numTensors).toBe(before);
    const logWeights = module.buffers[1].arraySync() as number[][];
    expect(Math.max(...logWeights.flat().map(Math.abs))).toBeGreaterThan(0.1); // the weights moved off 1
    const [q, k, v] = [calibration(1, 6), calibration(1, 6), calibration(1, 6)];
    const out = tf.tidy(() => toArray4(module.apply(tensor4(q), tensor4(k), tensor4(v))));
    expect(relL2(out, mechanismRef(module, q, k, v, { causal: true, seed: 3 }))).toBeLessThan(1e-5);
    module.dispose();
  });

  it('Performer: over seeds, φ(q)ᵀφ(k) averages to exp(qᵀk/√d) within 4 standard errors (unbiased after the fit)', () => {
    const [cq, ck] = [calibration(2, 64), calibration(2, 64)];
    // Along each head's widest direction, where leaving out the weights would bias the mean by orders of magnitude.
    const [q, k] = [0.6, 0.4].map((a): Array4 => [bases.map((u) => [u[0].map((x) => a * scale * x)])]);
    const samples: number[][] = [[], []];
    for (let seed = 0; seed < 60; seed++) {
      const module = createAttention('performer', { ...options(), seed }) as RandomFeatureModule;
      tf.tidy(() => module.dataInit!.initializeFromData(tensor4(cq), tensor4(ck)));
      const estimates = tf.tidy(() => tf.sum(tf.mul(module.featureMap(tensor4(q)), module.featureMap(tensor4(k))), -1).dataSync());
      for (let h = 0; h < HEADS; h++) samples[h].push(estimates[h]);
      module.dispose();
    }
    for (let h = 0; h < HEADS; h++) {
      const exact = Math.exp(dot(q[0][h][0], k[0][h][0]) / Math.sqrt(HEAD_DIM));
      const { mean, stdErr } = meanAndStdErr(samples[h]);
      expect(Math.abs(mean - exact), `head ${h}: ${mean} ± ${stdErr} against ${exact}`).toBeLessThan(4 * stdErr);
      expect(stdErr).toBeLessThan(0.15 * exact); // a tight bound: a biased, heavy-tailed estimate would pass the first with a huge error
    }
  });

  it("DARKFormer: M stays the identity, and projection and weights are Performer's for the same seed", () => {
    const [cq, ck] = [calibration(2, 16), calibration(2, 16)];
    const dark = createAttention('darkformer', { ...options(), seed: 9 }) as DarkformerModule;
    const performer = createAttention('performer', { ...options(), seed: 9 }) as RandomFeatureModule;
    for (const m of [dark, performer]) tf.tidy(() => m.dataInit!.initializeFromData(tensor4(cq), tensor4(ck)));
    const identity = Array.from({ length: HEADS }, () =>
      Array.from({ length: HEAD_DIM }, (_, i) => Array.from({ length: HEAD_DIM }, (__, j) => (i === j ? 1 : 0))),
    );
    expect(dark.covarianceFactor.arraySync()).toEqual(identity);
    expect(dark.dataInit!.fills.label).toBe('projection and importance weights');
    dark.buffers.forEach((b, i) => expect(Array.from(b.dataSync())).toEqual(Array.from(performer.buffers[i].dataSync())));
    dark.dispose();
    performer.dispose();
  });

  it('refuses a redraw interval, and DARKFormer refuses it beside init whitening', () => {
    expect(() => createAttention('performer', { ...options({ redrawInterval: 10 }), seed: 1 })).toThrow(/dataInit 'variance-optimal' needs redrawInterval 0/);
    expect(() => createAttention('darkformer', { ...options({ init: 'whitening' }), seed: 1 })).toThrow(/keeps M = I and needs init 'identity'/);
  });
});
