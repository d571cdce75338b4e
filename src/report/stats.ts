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
