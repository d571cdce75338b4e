// The run-to-run variance of a metric split between the two seeds of a run (docs/experiments.md, "Seed variance"):
// train.seed (weight initialisation, data order, dropout) and model.featureSeed (the attention's random features).
// Runs that cross the two seeds in a full grid — I weight seeds × J feature seeds, every cell run, a cell's repeats
// averaged first — are a two-way layout without replication, y_ab = μ + A_a + B_b + E_ab, with A, B and E (interaction
// and noise together) random and independent. The estimator is the ANOVA (method of moments) one:
//   MS_A = J·Σ_a (ȳ_a· − ȳ)² / (I − 1)    MS_B = I·Σ_b (ȳ_·b − ȳ)² / (J − 1)    MS_E = Σ_ab (y_ab − ȳ_a· − ȳ_·b + ȳ)² / ((I − 1)(J − 1))
//   σ²_A = (MS_A − MS_E) / J              σ²_B = (MS_B − MS_E) / I              σ²_E = MS_E
// unbiased, but a component can come out negative (its true value small beside the noise): it is reported as 0, and
// the raw value kept. Few seeds give wide uncertainty: 2 × 2 leaves one degree of freedom for each of the three.
import { groupBy } from './stats.ts';

export interface SeedCell {
  weightSeed: number;
  featureSeed: number;
  value: number;
}

export interface SeedVarianceSplit {
  weightSeeds: number[];
  featureSeeds: number[];
  /** σ²_A, σ²_B, σ²_E truncated at 0. */
  weights: number;
  features: number;
  residual: number;
  /** The same before truncation (σ²_A or σ²_B < 0 when the noise outweighs that seed). */
  raw: { weights: number; features: number; residual: number };
}

/** The split of `cells` (finite values); a reason instead when they do not make a full grid of ≥ 2 × 2 seeds. */
export function splitSeedVariance(cells: readonly SeedCell[]): SeedVarianceSplit | { problem: string } {
  const finite = cells.filter((c) => Number.isFinite(c.value));
  const weightSeeds = [...new Set(finite.map((c) => c.weightSeed))].sort((a, b) => a - b);
  const featureSeeds = [...new Set(finite.map((c) => c.featureSeed))].sort((a, b) => a - b);
  const [i, j] = [weightSeeds.length, featureSeeds.length];
  if (i < 2 || j < 2) return { problem: `${i} weight seed${i === 1 ? '' : 's'} × ${j} feature seed${j === 1 ? '' : 's'}: needs ≥ 2 of each` };
  const byCell = groupBy(finite, (c) => `${c.weightSeed}/${c.featureSeed}`);
  const missing = weightSeeds.flatMap((a) => featureSeeds.filter((b) => !byCell.has(`${a}/${b}`)).map((b) => `(${a}, ${b})`));
  if (missing.length > 0) return { problem: `not a full grid: no run for (train.seed, model.featureSeed) ${missing.join(', ')}` };
  const mean = (xs: number[]) => xs.reduce((s, x) => s + x, 0) / xs.length;
  const y = weightSeeds.map((a) => featureSeeds.map((b) => mean(byCell.get(`${a}/${b}`)!.map((c) => c.value))));
  const rowMeans = y.map(mean);
  const colMeans = featureSeeds.map((_, b) => mean(y.map((row) => row[b])));
  const grand = mean(rowMeans);
  const msA = (j * rowMeans.reduce((s, m) => s + (m - grand) ** 2, 0)) / (i - 1);
  const msB = (i * colMeans.reduce((s, m) => s + (m - grand) ** 2, 0)) / (j - 1);
  let ssE = 0;
  for (let a = 0; a < i; a++) for (let b = 0; b < j; b++) ssE += (y[a][b] - rowMeans[a] - colMeans[b] + grand) ** 2;
  const msE = ssE / ((i - 1) * (j - 1));
  const raw = { weights: (msA - msE) / j, features: (msB - msE) / i, residual: msE };
  return { weightSeeds, featureSeeds, weights: Math.max(0, raw.weights), features: Math.max(0, raw.features), residual: raw.residual, raw };
}
