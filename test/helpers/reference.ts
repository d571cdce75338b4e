// Independent float64 references for the attention tests: plain loops over JS numbers, no tfjs.
import * as tf from '@tensorflow/tfjs';
import { Rng } from '../../src/core/rng.ts';

/** [B][H][L][D] float64 arrays. */
export type Array4 = number[][][][];

export function toArray4(t: tf.Tensor): Array4 {
  return t.arraySync() as Array4;
}

export function randomArray4(rng: Rng, shape: [number, number, number, number], scale = 1): Array4 {
  const [b, h, l, d] = shape;
  return Array.from({ length: b }, () =>
    Array.from({ length: h }, () => Array.from({ length: l }, () => Array.from({ length: d }, () => rng.normal() * scale))),
  );
}

export function tensor4(a: Array4): tf.Tensor4D {
  return tf.tensor4d(a);
}

export const dot = (a: number[], b: number[]) => a.reduce((s, x, i) => s + x * b[i], 0);
export const norm = (a: number[]) => Math.sqrt(dot(a, a));
export const unit = (a: number[]) => {
  const n = Math.max(norm(a), 1e-12);
  return a.map((x) => x / n);
};

/**
 * Kernel-normalised attention Y_i = Σ_j κ(q_i,k_j) v_j / (Σ_j κ(q_i,k_j) + δ), j ≤ i if causal (or
 * the denominator clamped from below at clampMin instead of adding δ).
 * With normalize: 'softmax' the weights are exp-normalised instead (κ is then the logit).
 */
export function kernelAttentionRef(
  q: Array4,
  k: Array4,
  v: Array4,
  kernel: (qi: number[], kj: number[], i: number, j: number) => number,
  { causal, delta = 0, keyMask, clampMin }: { causal: boolean; delta?: number; keyMask?: number[][]; clampMin?: number },
): Array4 {
  return q.map((qb, b) =>
    qb.map((qh, h) =>
      qh.map((qi, i) => {
        const d = v[b][h][0].length;
        const num = new Array(d).fill(0);
        let den = 0;
        for (let j = 0; j < k[b][h].length; j++) {
          if (causal && j > i) break;
          if (keyMask && keyMask[b][j] === 0) continue;
          const w = kernel(qi, k[b][h][j], i, j);
          den += w;
          for (let c = 0; c < d; c++) num[c] += w * v[b][h][j][c];
        }
        return num.map((x) => x / (clampMin === undefined ? den + delta : Math.max(den, clampMin)));
      }),
    ),
  );
}

export function softmaxAttentionRef(q: Array4, k: Array4, v: Array4, causal: boolean): Array4 {
  return q.map((qb, b) =>
    qb.map((qh, h) =>
      qh.map((qi, i) => {
        const d = qi.length;
        const logits = k[b][h].map((kj, j) => (causal && j > i ? -Infinity : dot(qi, kj) / Math.sqrt(d)));
        const m = Math.max(...logits);
        const w = logits.map((x) => Math.exp(x - m));
        const s = w.reduce((a, x) => a + x, 0);
        return v[b][h][0].map((_, c) => w.reduce((acc, wj, j) => acc + wj * v[b][h][j][c], 0) / s);
      }),
    ),
  );
}

/** The quadratic masked form of linear attention over given features (the chunked form's reference). */
export function featureAttentionRef(phiQ: Array4, phiK: Array4, v: Array4, { causal, delta = 0 }: { causal: boolean; delta?: number }): Array4 {
  return kernelAttentionRef(phiQ, phiK, v, (a, b) => dot(a, b), { causal, delta });
}

export function flat(a: unknown): number[] {
  return (a as unknown[]).flat(Infinity as 1) as number[];
}

export function relL2(actual: unknown, expected: unknown): number {
  const a = flat(actual);
  const e = flat(expected);
  if (a.length !== e.length) throw new Error(`length ${a.length} vs ${e.length}`);
  let num = 0;
  let den = 0;
  for (let i = 0; i < a.length; i++) {
    num += (a[i] - e[i]) ** 2;
    den += e[i] ** 2;
  }
  return Math.sqrt(num / den);
}

export function meanAndStdErr(samples: number[]): { mean: number; stdErr: number } {
  const n = samples.length;
  const mean = samples.reduce((a, x) => a + x, 0) / n;
  const variance = samples.reduce((a, x) => a + (x - mean) ** 2, 0) / (n - 1);
  return { mean, stdErr: Math.sqrt(variance / n) };
}

/**
 * Central-difference gradient check of a scalar function of one input, on a few random coordinates.
 * Returns the worst relative error max |g_num − g_auto| / max(|g_num|, |g_auto|, floor).
 */
export function gradientCheck(
  f: (x: tf.Tensor) => tf.Scalar,
  x: tf.Tensor,
  { coordinates = 12, step = 1e-2, floor = 1e-3, seed = 7 }: { coordinates?: number; step?: number; floor?: number; seed?: number } = {},
): number {
  const auto = tf.tidy(() => tf.grad(f)(x).dataSync().slice());
  const base = x.dataSync().slice();
  const rng = new Rng(seed);
  let worst = 0;
  for (let n = 0; n < coordinates; n++) {
    const i = rng.int(base.length);
    const eval_ = (delta: number) =>
      tf.tidy(() => {
        const shifted = base.slice();
        shifted[i] += delta;
        return f(tf.tensor(shifted, x.shape)).dataSync()[0];
      });
    const numeric = (eval_(step) - eval_(-step)) / (2 * step);
    const err = Math.abs(numeric - auto[i]) / Math.max(Math.abs(numeric), Math.abs(auto[i]), floor);
    worst = Math.max(worst, err);
  }
  return worst;
}

/** Positive random features in float64, m^(−1/2)·exp(ω_jᵀx − ‖x‖²/2), for one head's projection omega [d][m]. */
export function prfRef(x: number[], omega: number[][]): number[] {
  const m = omega[0].length;
  const half = dot(x, x) / 2;
  return Array.from({ length: m }, (_, j) => Math.exp(x.reduce((s, c, i) => s + c * omega[i][j], 0) - half) / Math.sqrt(m));
}

/**
 * Performer / DARKFormer attention in float64, un-stabilised: kernel-normalised attention over the
 * positive random features of x̃ = M·d^(−1/4)x (M = I for Performer), with the module's projection
 * omega [H][r][m], covariance factor M [H][r][d] and log importance weights [H][m] (dataInit 'variance-optimal').
 */
export function favorAttentionRef(
  q: Array4,
  k: Array4,
  v: Array4,
  omega: number[][][],
  {
    causal,
    delta,
    keyMask,
    covarianceFactor,
    logWeights,
  }: { causal: boolean; delta: number; keyMask?: number[][]; covarianceFactor?: number[][][]; logWeights?: number[][] },
): Array4 {
  const tilde = (x: number[], head: number) => {
    const scaled = x.map((c) => c * x.length ** -0.25);
    return covarianceFactor ? covarianceFactor[head].map((row) => dot(row, scaled)) : scaled;
  };
  return q.map((qb, b) =>
    qb.map((_, head) => {
      const one = (a: Array4) => [[a[b][head]]];
      const mask = keyMask && [keyMask[b]];
      // Importance weights w_j (log w_j given) enter the kernel once: Σ_j w_j φ_j(q) φ_j(k).
      const weight = (j: number) => (logWeights ? Math.exp(logWeights[head][j]) : 1);
      const kernel = (qi: number[], kj: number[]) => {
        const [fq, fk] = [prfRef(tilde(qi, head), omega[head]), prfRef(tilde(kj, head), omega[head])];
        return fq.reduce((s, x, j) => s + weight(j) * x * fk[j], 0);
      };
      return kernelAttentionRef(one(q), one(k), one(v), kernel, { causal, delta, keyMask: mask })[0][0];
    }),
  );
}

/**
 * Σ_r w_r·(logsumexp(row r) − row r[target r]) and its gradient × `scale`: scale·w_r·(softmax(row r) − onehot), in
 * float64 (logits row-major [n, vocab]; weights default 1).
 */
export function crossEntropyRef(
  logits: number[],
  targets: number[],
  vocab: number,
  weights: number[] = targets.map(() => 1),
  scale = 1,
): { value: number; grad: number[] } {
  let value = 0;
  const grad: number[] = [];
  targets.forEach((target, r) => {
    const row = logits.slice(r * vocab, (r + 1) * vocab);
    const max = Math.max(...row);
    const z = row.reduce((s, x) => s + Math.exp(x - max), 0);
    value += weights[r] * (max + Math.log(z) - row[target]);
    row.forEach((x, j) => grad.push(scale * weights[r] * (Math.exp(x - max) / z - (j === target ? 1 : 0))));
  });
  return { value, grad };
}
