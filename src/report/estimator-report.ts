// compare's sections on the random features: each run's estimator health (train.estimatorHealth, metrics.jsonl's
// estimator_health; docs/training.md#estimator-health) as a table and a plot, and the seed variance split between
// train.seed and model.featureSeed (seed-variance.ts) for runs that vary both.
import { canonicalJson } from '../core/json.ts';
import type { EstimatorHealthRecord } from '../store/run-record.ts';
import type { RunSummary } from './load-runs.ts';
import { lineChartSvg, type LinePoint } from './plot.ts';
import { splitSeedVariance } from './seed-variance.ts';
import { formatNumber, groupBy } from './stats.ts';
import { makeTable, type Table } from './table.ts';

export const HEALTH_HEADING = 'Estimator health';
export const HEALTH_NOTE =
  'At the run’s last validation with train.estimatorHealth, per layer: the kernel-approximation error ‖K̂ − K‖/‖K‖ and the attention-output error against exact kernel-normalised attention (means over queries), and the estimated/exact denominator ratio’s minimum, 1% and 50% quantiles (1 = exact; near 0 or below is where the estimator fails). Table: estimator-health.csv.';
export const SEED_VARIANCE_HEADING = 'Seed variance: weights and data vs random features';
export const SEED_VARIANCE_NOTE =
  'Runs of one recipe that cross train.seed (weights, data order, dropout) with model.featureSeed (the attention’s random features) in a full grid: the final validation loss’s variance split by the two-way random-effects ANOVA estimator (each cell’s repeats averaged first; the residual holds the interaction and the noise; a negative component is shown as 0). Runs without model.featureSeed draw their features from train.seed and are not split. Table: seed-variance.csv.';

interface HealthRow {
  run: RunSummary;
  step: number;
  layer: number;
  health: EstimatorHealthRecord;
}

/** The run's last validation record holding estimator health, if any. */
function lastHealth(run: RunSummary): { step: number; tokens: number; health: EstimatorHealthRecord } | null {
  const records = run.records.filter((r) => r.split === 'val' && r.estimator_health);
  if (records.length === 0) return null;
  const last = records.reduce((a, b) => (b.step >= a.step ? b : a));
  return { step: last.step, tokens: last.tokens, health: last.estimator_health! };
}

/** One row per run and layer, from each run's last health record; null when no run logged one. */
export function healthTableModel(runs: RunSummary[]): Table | null {
  const rows: HealthRow[] = runs.flatMap((run) => {
    const last = lastHealth(run);
    return last ? last.health.kernel_error.map((_, layer) => ({ run, step: last.step, layer, health: last.health })) : [];
  });
  if (rows.length === 0) return null;
  const measure = (title: string, key: keyof EstimatorHealthRecord) => ({
    title,
    right: true,
    text: (r: HealthRow) => formatNumber(r.health[key][r.layer], 4),
    raw: (r: HealthRow) => r.health[key][r.layer],
  });
  return makeTable<HealthRow>(
    [
      { title: 'run', text: (r) => r.run.name },
      { title: 'attention', text: (r) => r.run.attention },
      { title: 'step', right: true, text: (r) => formatNumber(r.step), raw: (r) => r.step },
      { title: 'layer', right: true, text: (r) => String(r.layer), raw: (r) => r.layer },
      measure('kernel error', 'kernel_error'),
      measure('output error', 'output_error'),
      measure('denominator min', 'denominator_min'),
      measure('denominator 1%', 'denominator_p01'),
      measure('denominator 50%', 'denominator_p50'),
    ],
    rows,
  );
}

/** The kernel error (mean over layers) against tokens, one line per run; none when no run logged health. */
export async function plotHealth(runs: RunSummary[]): Promise<{ file: string; title: string; svg: string }[]> {
  const points: LinePoint[] = runs.flatMap((run) =>
    run.records.flatMap((r) => {
      const errors = r.split === 'val' ? r.estimator_health?.kernel_error.filter((v): v is number => typeof v === 'number') : undefined;
      return errors?.length ? [{ series: run.name, x: r.tokens, y: errors.reduce((a, b) => a + b, 0) / errors.length }] : [];
    }),
  );
  if (points.length === 0) return [];
  const title = 'Kernel-approximation error during training';
  const svg = await lineChartSvg(points, {
    title: `${title} (train.estimatorHealth; mean over layers)`,
    xTitle: 'tokens',
    yTitle: '‖K̂ − K‖ / ‖K‖',
    seriesTitle: 'run',
    mechanismOf: (name) => runs.find((r) => r.name === name)?.attention ?? name,
  });
  return [{ file: 'estimator-health.svg', title, svg }];
}

interface SplitRow {
  attention: string;
  runs: number;
  weightSeeds: number;
  featureSeeds: number;
  weights: number;
  features: number;
  residual: number;
}

/**
 * The seed-variance split of the final validation loss for each set of runs equal but for train.seed and
 * model.featureSeed; the sets that vary both but do not make a full grid are said in `problems`.
 */
export function seedVarianceModel(runs: RunSummary[]): { table: Table | null; problems: string[] } {
  const withFeatureSeed = runs.filter((r) => typeof r.settings['model.featureSeed'] === 'number' && r.seed !== null && r.finalValLoss !== null);
  const families = groupBy(withFeatureSeed, (r) => canonicalJson({ ...r.settings, 'model.featureSeed': undefined }));
  const rows: SplitRow[] = [];
  const problems: string[] = [];
  for (const members of families.values()) {
    const cells = members.map((r) => ({ weightSeed: r.seed!, featureSeed: r.settings['model.featureSeed'] as number, value: r.finalValLoss! }));
    if (new Set(cells.map((c) => c.weightSeed)).size < 2 && new Set(cells.map((c) => c.featureSeed)).size < 2) continue;
    const split = splitSeedVariance(cells);
    if ('problem' in split) {
      problems.push(`${members[0].attention} (${members.map((r) => r.name).join(', ')}): ${split.problem}`);
      continue;
    }
    const { weights, features, residual } = split;
    rows.push({
      attention: members[0].attention,
      runs: members.length,
      weightSeeds: split.weightSeeds.length,
      featureSeeds: split.featureSeeds.length,
      weights,
      features,
      residual,
    });
  }
  if (rows.length === 0) return { table: null, problems };
  const share = (r: SplitRow, part: number) => {
    const total = r.weights + r.features + r.residual;
    return total > 0 ? part / total : null;
  };
  const sd = (title: string, value: (r: SplitRow) => number) => ({
    title,
    right: true,
    text: (r: SplitRow) => `${formatNumber(Math.sqrt(value(r)), 4)} (${formatNumber((share(r, value(r)) ?? Number.NaN) * 100, 0)}%)`,
    raw: (r: SplitRow) => value(r),
  });
  const table = makeTable<SplitRow>(
    [
      { title: 'attention', text: (r) => r.attention },
      { title: 'runs', right: true, text: (r) => String(r.runs), raw: (r) => r.runs },
      { title: 'train seeds × feature seeds', right: true, text: (r) => `${r.weightSeeds} × ${r.featureSeeds}` },
      sd('sd from train.seed (share of variance)', (r) => r.weights),
      sd('sd from model.featureSeed (share)', (r) => r.features),
      sd('residual sd (share)', (r) => r.residual),
    ],
    rows,
  );
  return { table, problems };
}
