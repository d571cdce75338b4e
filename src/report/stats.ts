// Mean ± sample standard deviation over repeated runs (seeds), and grouping helpers.
// A dozen lines of arithmetic: not worth a statistics dependency.

export interface MeanSd {
  mean: number;
  /** Sample standard deviation (n − 1 in the denominator); null when n < 2. */
  sd: number | null;
  n: number;
}

/** Mean and sample sd of the finite values; null/NaN/±∞ are left out (n counts what was used). */
export function meanSd(values: ReadonlyArray<number | null | undefined>): MeanSd {
  const xs = values.filter((v): v is number => typeof v === 'number' && Number.isFinite(v));
  const n = xs.length;
  if (n === 0) return { mean: Number.NaN, sd: null, n: 0 };
  const mean = xs.reduce((a, b) => a + b, 0) / n;
  if (n < 2) return { mean, sd: null, n };
  const ss = xs.reduce((a, x) => a + (x - mean) ** 2, 0);
  return { mean, sd: Math.sqrt(ss / (n - 1)), n };
}

/** A number with thousands separators and exactly `digits` decimals ("12,345.68"); "—" for null or non-finite. */
export function formatNumber(value: number | null | undefined, digits = 0): string {
  if (typeof value !== 'number' || !Number.isFinite(value)) return '—';
  return value.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** "0.512 ± 0.013 (n=3)"; "0.512 (n=1)" without an sd; "—" when there is no value. Thousands separated. */
export function formatMeanSd(stat: MeanSd, digits = 3, { showN = true }: { showN?: boolean } = {}): string {
  if (stat.n === 0) return '—';
  const body = stat.sd === null ? formatNumber(stat.mean, digits) : `${formatNumber(stat.mean, digits)} ± ${formatNumber(stat.sd, digits)}`;
  return showN ? `${body} (n=${stat.n})` : body;
}

/** Groups items by a string key, keeping the order in which keys first appear. */
export function groupBy<T>(items: Iterable<T>, key: (item: T) => string): Map<string, T[]> {
  const groups = new Map<string, T[]>();
  for (const item of items) {
    const k = key(item);
    const group = groups.get(k);
    if (group) group.push(item);
    else groups.set(k, [item]);
  }
  return groups;
}

/** One seed's value: the mean over its runs, how many runs it had and their range (max − min; 0 for one run). */
export interface SeedValue {
  seed: number | null;
  value: number;
  runs: number;
  range: number;
}

/**
 * The finite values averaged per distinct seed, in the order seeds first appear. A re-run with a seed already run
 * is a repeat, not a new sample: its difference from the first run measures non-determinism, not the seed's effect,
 * so statistics over seeds count each seed once. An unknown seed (null) cannot be matched: each such run is its own.
 */
export function perSeed<T>(items: Iterable<T>, seedOf: (item: T) => number | null, valueOf: (item: T) => number | null | undefined): SeedValue[] {
  let unknown = 0;
  const groups = groupBy(
    [...items].flatMap((item) => {
      const value = valueOf(item);
      return typeof value === 'number' && Number.isFinite(value) ? [{ seed: seedOf(item), value }] : [];
    }),
    (v) => (v.seed === null ? `?${unknown++}` : String(v.seed)),
  );
  return [...groups.values()].map((same) => {
    const values = same.map((v) => v.value);
    return {
      seed: same[0].seed,
      value: values.reduce((a, b) => a + b, 0) / values.length,
      runs: values.length,
      range: Math.max(...values) - Math.min(...values),
    };
  });
}

/** Mean ± sd over distinct seeds (repeats of a seed averaged first, see perSeed); n counts seeds. */
export function meanSdOverSeeds<T>(items: Iterable<T>, seedOf: (item: T) => number | null, valueOf: (item: T) => number | null | undefined): MeanSd {
  return meanSd(perSeed(items, seedOf, valueOf).map((s) => s.value));
}
