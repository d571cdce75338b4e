// Grouping runs: runs of the same recipe and attention that differ in their seed are a group, with mean ± sd over its
// distinct seeds (n = seeds; a re-run of a seed is a repeat, averaged with it), what its runs still differ in (mixed),
// the paired difference of its final validation loss to the baseline attention's group, what tells the groups apart,
// and each group's curves.
import { canonicalJson } from '../core/json.ts';
import type { RunSummary } from './load-runs.ts';
import { pairedT } from './paired.ts';
import type { PairedResult } from './paired.ts';
import type { LinePoint } from './plot.ts';
import { formatNumber, groupBy, meanSd, meanSdOverSeeds, perSeed } from './stats.ts';
import type { MeanSd } from './stats.ts';

export interface RunGroup {
  label: string;
  attention: string;
  recipeName: string;
  runs: RunSummary[];
  /** The distinct seeds of its runs (in order of appearance) and how many runs each has. */
  seeds: { seed: number | null; runs: number }[];
  /**
   * Runs that repeat a seed already in the group (a re-run after a crash, say): not samples. Their spread is the
   * largest range (max − min) of the final validation loss among runs of one seed, which measures non-determinism;
   * null when no seed repeats.
   */
  repeats: { runs: number; spread: number | null };
  /** Mean ± sd over distinct seeds (a seed's repeats averaged first; n = seeds); finalValPpl is exp(mean final loss), without an sd. */
  stats: Record<
    'params' | 'tokens' | 'finalValLoss' | 'bestValLoss' | 'finalValPpl' | 'finalValBpb' | 'finalValAcc' | 'tokensPerSecond' | 'mfu' | 'wallSeconds',
    MeanSd
  >;
  /** How the runs differ in more than the seed (empty when they do not). */
  mixed: string[];
  /** The runs' recipe without the attention (from the first run): the baseline group has the same. */
  pairingKey: string;
  /** The difference of the final validation loss to the baseline group, paired by distinct seed (repeats averaged first); null for the baseline or without one. */
  paired: (PairedResult & { baseline: string; wins: number }) | null;
}

/** The settings (dotted recipe keys) whose values are not the same in all of `runs`. */
function differingSettings(runs: RunSummary[]): string[] {
  const keys = new Set(runs.flatMap((r) => Object.keys(r.settings)));
  return [...keys].filter((k) => new Set(runs.map((r) => canonicalJson(r.settings[k]))).size > 1).sort();
}

/** A setting's value as a table cell or label part: strings as they are, the rest as JSON; — when unset. */
const settingText = (value: unknown) => (value === undefined ? '—' : typeof value === 'string' ? value : JSON.stringify(value));
/** A recipe key as short as it stays unambiguous: `options.prfFeatures` for attention options. */
export const shortKey = (key: string) => key.replace(/^model\.attention\.options\./, 'options.');

/**
 * The groups' labels: the attention alone when it has one group; with several, the attention and the one setting
 * that tells its groups apart (`softmax lr=0.003`), or a number when several settings do (`softmax #2`), which the
 * report's table of differing settings then explains. Short, so that legends are not cut off.
 */
function groupLabels(grouped: RunSummary[][]): string[] {
  const byAttention = groupBy(grouped, (g) => g[0].attention);
  const seen = new Map<string, number>();
  return grouped.map((runs) => {
    const first = runs[0];
    const siblings = byAttention.get(first.attention)!;
    if (siblings.length === 1) return first.attention;
    const keys = differingSettings(siblings.map((g) => g[0]));
    const number = (seen.get(first.attention) ?? 0) + 1;
    seen.set(first.attention, number);
    if (keys.length !== 1) return `${first.attention} #${number}`;
    return `${first.attention} ${shortKey(keys[0]).split('.').at(-1)}=${settingText(first.settings[keys[0]])}`;
  });
}

/** The settings in which the groups differ (besides the seed), one column per key and one row per group. */
export function differencesTable(groups: RunGroup[]): { keys: string[]; rows: { label: string; values: string[] }[] } {
  const keys = differingSettings(groups.map((g) => g.runs[0])).filter((k) => k !== 'model.attention.name');
  return { keys, rows: groups.map((g) => ({ label: g.label, values: keys.map((k) => settingText(g.runs[0].settings[k])) })) };
}

export const describeRun = (r: RunSummary) => `${r.name}${r.finished ? '' : ' (unfinished)'}`;

/**
 * What the runs of one group (same recipe up to the seed) still differ in: the tokens trained before their
 * final validation (an unfinished, stopped or diverged run next to finished ones) and the learning rate
 * logged at the same step (a run resumed with other train.* keys follows another schedule than its
 * config.json now says). Empty when they differ in the seed only.
 */
function groupMixing(runs: RunSummary[]): string[] {
  if (runs.length < 2) return [];
  const problems: string[] = [];
  // "256,000: a, b; 153,600: c (unfinished)": the runs by value.
  const list = (value: (r: RunSummary) => string) => [...groupBy(runs, value)].map(([v, same]) => `${v}: ${same.map(describeRun).join(', ')}`).join('; ');
  if (new Set(runs.map((r) => r.finalValTokens)).size > 1) {
    problems.push(`final validation after different token counts (${list((r) => formatNumber(r.finalValTokens))})`);
  } else if (new Set(runs.map((r) => r.tokens)).size > 1) {
    problems.push(`different tokens trained (${list((r) => formatNumber(r.tokens))})`);
  }
  const lrAt = runs.map((r) => new Map(r.records.filter((rec) => rec.split === 'train').map((rec) => [rec.step, rec.lr])));
  for (const [step, lr] of lrAt[0]) {
    const others = lrAt.map((m) => m.get(step));
    if (others.some((v) => v !== undefined && Math.abs(v - lr) > 1e-9 * Math.abs(lr))) {
      problems.push(
        `different learning rates at step ${step} (${list((r) => String(r.records.find((rec) => rec.split === 'train' && rec.step === step)?.lr ?? '—'))}): resumed with other train.* keys?`,
      );
      break;
    }
  }
  return problems;
}

/**
 * Groups runs of the same recipe and attention (differing in seed only); labels are unique. With `baseline` (an
 * attention), every other group gets the paired difference of its final validation loss to the baseline group with
 * the same other settings, over the seeds both have (as `sweep report` computes it).
 */
export function groupRuns(runs: RunSummary[], baseline: string | null = null): RunGroup[] {
  const grouped = [...groupBy(runs, (r) => `${r.attention}\u0000${r.recipeKey}`).values()];
  const labels = groupLabels(grouped);
  const groups = grouped.map((runsOfGroup, i): RunGroup => {
    const first = runsOfGroup[0];
    const stat = (key: keyof RunGroup['stats']) =>
      meanSdOverSeeds(
        runsOfGroup,
        (r) => r.seed,
        (r) => r[key],
      );
    const loss = stat('finalValLoss');
    const seeds = perSeed(
      runsOfGroup,
      (r) => r.seed,
      () => 0,
    ).map(({ seed, runs: count }) => ({ seed, runs: count }));
    const repeatedLosses = perSeed(
      runsOfGroup,
      (r) => r.seed,
      (r) => r.finalValLoss,
    ).filter((s) => s.runs > 1);
    return {
      label: labels[i],
      attention: first.attention,
      recipeName: first.recipeName,
      runs: runsOfGroup,
      seeds,
      repeats: {
        runs: runsOfGroup.length - seeds.length,
        spread: repeatedLosses.length > 0 ? Math.max(...repeatedLosses.map((s) => s.range)) : null,
      },
      stats: {
        params: stat('params'),
        tokens: stat('tokens'),
        finalValLoss: loss,
        bestValLoss: stat('bestValLoss'),
        // The perplexity of the mean loss: averaging perplexities would weight the worse seeds exponentially.
        finalValPpl: { mean: Math.exp(loss.mean), sd: null, n: loss.n },
        finalValBpb: stat('finalValBpb'),
        finalValAcc: stat('finalValAcc'),
        tokensPerSecond: stat('tokensPerSecond'),
        mfu: stat('mfu'),
        wallSeconds: stat('wallSeconds'),
      },
      mixed: groupMixing(runsOfGroup),
      pairingKey: first.pairingKey,
      paired: null,
    };
  });
  if (baseline !== null) pairWithBaseline(groups, baseline);
  return groups;
}

/**
 * The paired difference to the baseline group of the same settings (see groupRuns). A pair is one distinct seed: the
 * runs of a seed are averaged first on both sides, so a repeated run is never a second pair.
 */
function pairWithBaseline(groups: RunGroup[], baseline: string): void {
  const baselines = new Map<string, RunGroup>();
  for (const g of groups) if (g.attention === baseline && !baselines.has(g.pairingKey)) baselines.set(g.pairingKey, g);
  for (const g of groups) {
    const partner = baselines.get(g.pairingKey);
    if (g.attention === baseline || !partner) continue;
    const finalLoss = (r: RunSummary) => r.finalValLoss;
    const baseBySeed = new Map(
      perSeed(partner.runs, (r) => r.seed, finalLoss)
        .filter((s) => s.seed !== null)
        .map((s) => [s.seed, s.value]),
    );
    const pairs = perSeed(g.runs, (r) => r.seed, finalLoss).filter((s) => s.seed !== null && baseBySeed.has(s.seed));
    if (pairs.length === 0) continue;
    const x = pairs.map((s) => s.value);
    const base = pairs.map((s) => baseBySeed.get(s.seed)!);
    g.paired = { ...pairedT(x, base), baseline: partner.label, wins: x.filter((v, i) => v < base[i]).length };
  }
}

/**
 * One curve per group: the mean over the group's distinct seeds of the loss at each token count logged (against time: at each
 * step logged, at the runs' mean elapsed time), with a ±sd band where two or more seeds logged it; perplexity curves
 * are exp of those (exp(mean loss), band exp(mean ± sd)).
 */
export function groupCurves(groups: RunGroup[], split: 'train' | 'val', value: 'loss' | 'ppl', against: 'tokens' | 'time' = 'tokens'): LinePoint[] {
  const scale = value === 'ppl' ? Math.exp : (v: number) => v;
  const points: LinePoint[] = [];
  for (const g of groups) {
    const byPoint = groupBy(
      g.runs.flatMap((r) => r.records.filter((rec) => rec.split === split && Number.isFinite(rec.loss)).map((rec) => ({ seed: r.seed, rec }))),
      ({ rec }) => String(against === 'tokens' ? rec.tokens : rec.step),
    );
    for (const [key, recs] of byPoint) {
      // Over distinct seeds, as the tables: a seed's repeated runs are averaged first.
      const { mean, sd } = meanSdOverSeeds(
        recs,
        (r) => r.seed,
        (r) => r.rec.loss,
      );
      const band = sd === null ? {} : { lo: scale(mean - sd), hi: scale(mean + sd) };
      const x = against === 'tokens' ? Number(key) : meanSd(recs.map(({ rec }) => rec.elapsed_s)).mean;
      points.push({ series: g.label, x, y: scale(mean), ...band });
    }
  }
  return points.sort((a, b) => a.x - b.x);
}

/** The baseline attention when none is named: softmax when a run uses it, else none. `compare` and `sweep report` share it. */
export function defaultBaseline(attentions: Iterable<string>): string | null {
  return [...attentions].includes('softmax') ? 'softmax' : null;
}
