// A claim judged by a paired difference over seeds (or rates): its 95% Student t interval on the claimed side of a
// threshold, 0 unless the claim names a margin (holds), across it (not separated) or on the other side (contradicted).
import { pairedT, pValueAgainst, tQuantileOf } from '../report/paired.ts';
import type { PairedResult } from '../report/paired.ts';
import type { Claim } from './protocol.ts';

/** `claimedSign` +1: the claim is that the difference is above `threshold`; −1: below. */
export function verdictOf(result: PairedResult, claimedSign: 1 | -1, threshold = 0): Claim['verdict'] {
  if (!result.ci) return 'not separated';
  const [lo, hi] = result.ci;
  if (claimedSign > 0 ? lo > threshold : hi < threshold) return 'holds';
  if (claimedSign > 0 ? hi < threshold : lo > threshold) return 'contradicted';
  return 'not separated';
}

export const signed = (x: number, digits: number) => (x >= 0 ? '+' : '−') + Math.abs(x).toFixed(digits);

/** "+0.0237 (−0.0013 … +0.0486)": the mean difference and its interval. */
export function describeInterval(result: PairedResult, digits: number): string {
  return `${signed(result.mean, digits)}${result.ci ? ` (${signed(result.ci[0], digits)} … ${signed(result.ci[1], digits)})` : ''}`;
}

function describePaired(result: PairedResult, digits: number): string {
  const ci = result.ci
    ? ` (95% interval ${signed(result.ci[0], digits)} … ${signed(result.ci[1], digits)}` + (result.p === null ? ')' : `, p = ${result.p.toPrecision(2)})`)
    : '';
  return `mean difference ${signed(result.mean, digits)} over ${result.n} pairs${ci}`;
}

/** The number of pairs whose both values exist, and their paired t result (null when fewer than 2: nothing to judge). */
export function pairedOf(pairs: (readonly [number | undefined | null, number | undefined | null])[]): { n: number; result: PairedResult | null } {
  const done = pairs.filter(
    (p): p is [number, number] => typeof p[0] === 'number' && typeof p[1] === 'number' && Number.isFinite(p[0]) && Number.isFinite(p[1]),
  );
  return {
    n: done.length,
    result:
      done.length < 2
        ? null
        : pairedT(
            done.map((p) => p[0]),
            done.map((p) => p[1]),
          ),
  };
}

/**
 * Pairs needed for a paired difference of this mean and sd to fall clear of `threshold` at 95%: the least n with
 * t_{0.975, n−1} · sd / √n < |mean − threshold| (null when it sits on the threshold).
 */
export function seedsToSeparate(mean: number, sd: number, threshold = 0): number | null {
  const distance = Math.abs(mean - threshold);
  if (!(distance > 0) || !Number.isFinite(sd)) return null;
  if (sd === 0) return 2;
  for (let n = 2; n <= 10_000; n++) if ((tQuantileOf(0.975, n - 1) * sd) / Math.sqrt(n) < distance) return n;
  return null;
}

/** "≈ 3", or "more than 100" where the difference is as good as none at this spread. */
export function describeSeedsNeeded(needed: number): string {
  return needed > 100 ? 'more than 100' : `≈ ${needed}`;
}

export interface PairedClaimOptions {
  /** +1: the claim is that the difference (claimed − baseline) is above `threshold`; −1: below. */
  claimedSign: 1 | -1;
  /** 0 unless the claim names a margin (e.g. "matches": at most +0.01 worse). */
  threshold?: number;
  digits: number;
  /** What one pair is, for "1 seed pair(s) done". */
  pairName?: string;
  /** Words put before the numbers (e.g. the counts behind them). */
  prefix?: string;
}

/**
 * The claim judged from its (claimed, baseline) pairs: its verdict, and the evidence in words, with the pairs a
 * difference that is not separated yet would need at its observed size and spread.
 */
export function pairedClaim(statement: string, pairs: (readonly [number | undefined | null, number | undefined | null])[], options: PairedClaimOptions): Claim {
  const { n, result } = pairedOf(pairs);
  const pairName = options.pairName ?? 'seed pair';
  if (!result) return { statement, verdict: 'not run', evidence: `${n} ${pairName}(s) done` };
  const threshold = options.threshold ?? 0;
  const verdict = verdictOf(result, options.claimedSign, threshold);
  let evidence = `${options.prefix ?? ''}${describePaired(result, options.digits)}`;
  if (verdict === 'not separated' && result.sd !== null) {
    const needed = seedsToSeparate(result.mean, result.sd, threshold);
    evidence += needed === null ? '; no difference to separate' : `; a difference this size would need ${describeSeedsNeeded(needed)} ${pairName}s to separate`;
  }
  const side = Math.sign(result.mean - threshold) === options.claimedSign ? 1 : -1;
  return { statement, verdict, evidence, test: { p: pValueAgainst(result, threshold), side } };
}
