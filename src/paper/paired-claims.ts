// A claim judged by a paired difference over seeds (or rates): its 95% Student t interval on the claimed side of 0
// (holds), across 0 (not separated) or on the other side (contradicted).
import { pairedT } from '../report/paired.ts';
import type { PairedResult } from '../report/paired.ts';
import type { Claim } from './protocol.ts';

/** `claimedSign` +1: the claim is that the difference is above 0; −1: below. */
export function verdictOf(result: PairedResult, claimedSign: 1 | -1): Claim['verdict'] {
  if (!result.ci) return 'not separated';
  const [lo, hi] = result.ci;
  if (claimedSign > 0 ? lo > 0 : hi < 0) return 'holds';
  if (claimedSign > 0 ? hi < 0 : lo > 0) return 'contradicted';
  return 'not separated';
}

export const signed = (x: number, digits: number) => (x >= 0 ? '+' : '−') + Math.abs(x).toFixed(digits);

export function describePaired(result: PairedResult, digits: number): string {
  const ci = result.ci ? ` (95% interval ${signed(result.ci[0], digits)} … ${signed(result.ci[1], digits)}` + (result.p === null ? ')' : `, p = ${result.p.toPrecision(2)})`) : '';
  return `mean difference ${signed(result.mean, digits)} over ${result.n} pairs${ci}`;
}

/** The pairs whose both values exist, and their paired t result. */
export function pairedOf(pairs: (readonly [number | undefined | null, number | undefined | null])[]): { n: number; result: PairedResult } {
  const done = pairs.filter((p): p is [number, number] => typeof p[0] === 'number' && typeof p[1] === 'number' && Number.isFinite(p[0]) && Number.isFinite(p[1]));
  return { n: done.length, result: pairedT(done.map((p) => p[0]), done.map((p) => p[1])) };
}
