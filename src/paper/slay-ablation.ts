// slay-ablation: the SLAY paper's polynomial-approximation ablation (Table 10, whose Large block is Table 2), on the
// kernel-fidelity harness of `npm run ablate` (src/paper/fidelity.ts), with two tables of our own: the same cells on
// the attention output alone (no output projection), and the convergence of the anchor, exact and laplace-only
// estimators as the feature budget grows, beside each one's limit computed exactly (src/paper/slay-limits.ts).
// One unit = one table cell, in its own process (a failed allocation leaves the wasm heap unusable); its value is the
// rel-ℓ2 of each seed.
import type { FidelitySettings } from './fidelity-cases.ts';
import { PAPER_SCALES, PAPER_SETTINGS, paperCases, runFidelity } from './fidelity.ts';
import type { CellSpec, Experiment, Explanation, PublishedValue, UnitOutcome, UnitSpec, UnitView } from './protocol.ts';
import { estimatorLimit, LIMIT_POLYS, type LimitPoly } from './slay-limits.ts';

const EPSILON = 1e-6;
const SCALE_NAMES = ['Small', 'Medium', 'Large'];
/** The attention output alone: bias-free N(0, 1/embed) projections and no output projection. */
const PLAIN_SETTINGS: FidelitySettings = { ...PAPER_SETTINGS, projections: 'plain' };
/**
 * The convergence sweep: T = 256, R = 2, M = P = budget, plain projections (the output bias would hide how far the
 * kernel is from Yat), batch 2 so that exact's R·d²·M features fit at M = 64 (its M = 128 would need 0.5 GB per tensor).
 */
const CONVERGENCE = { length: 256, quadratureNodes: 2, budgets: [8, 16, 32, 64, 128], settings: { ...PLAIN_SETTINGS, batch: 2 } };
const CONVERGENCE_LIMIT: Record<LimitPoly, number> = { exact: 64, anchor: 128, 'laplace-only': 128 };

/**
 * Table 10 as printed, per method (our case label → the paper's row name, rel-ℓ2 and forward ms at T = 128, 256,
 * 512). test/paper/published.test.ts checks this transcription against the paper's text.
 */
const TABLE_10: { label: string; paper: string; relL2: number[]; ms: number[] }[] = [
  { label: 'slay/exact', paper: 'Exact (Spherical)', relL2: [0, 0, 0], ms: [3.12, 0.79, 5.02] },
  { label: 'slay/laplace-only', paper: 'Laplace-only', relL2: [0.587, 0.5417, 0.485], ms: [2.78, 16.1, 1905.8] },
  { label: 'slay/anchor', paper: 'Anchor', relL2: [0.6626, 0.5667, 0.4939], ms: [3.82, 18.54, 489.42] },
  { label: 'slay/hadamard', paper: 'Hadamard (shared ω)', relL2: [0.8237, 0.6609, 0.6793], ms: [3.34, 17.44, 1932.07] },
  { label: 'slay/nystrom', paper: 'Nyström', relL2: [22.9072, 61.6529, 28.197], ms: [3.41, 18.46, 569.64] },
  { label: 'slay/tensorsketch', paper: 'TensorSketch', relL2: [474075.1562, 214115.9844, 461739.0312], ms: [5.17, 19.01, 547.76] },
  { label: 'slay/random-maclaurin', paper: 'Random Maclaurin', relL2: [2195912.75, 1715766.875, 1772757.5], ms: [5.59, 18.8, 551.43] },
];

/** The paper's rows, for the transcription test. */
export const PUBLISHED_TABLE_10 = TABLE_10;

/** Performer and DARKFormer against softmax, at the same feature budget: extra rows the paper does not have. */
const EXTRA_LABELS = ['performer', 'darkformer'];

function explanation(label: string): Explanation | undefined {
  switch (label) {
    case 'slay/exact':
      return {
        kind: 'deliberate',
        text: 'our `exact` variant is the explicit vec(uuᵀ) polynomial features, so it keeps the PRF and quadrature error; the paper’s row is the exact kernel itself, 0 by definition',
      };
    case 'slay/laplace-only':
    case 'slay/anchor':
    case 'slay/hadamard':
      return {
        kind: 'protocol-gap',
        text:
          'the paper does not say how its inputs and weights are drawn; ours are the reference harness’s as we read it (x ~ N(0, I), PyTorch’s default nn.Linear init for q, k, v and the output projection, biases included), and the paper’s weights, seeds and PRF draws are not published: ' +
          'the rel-ℓ2 moves with these (the output bias alone takes anchor from ≈ 0.79 to ≈ 0.58 at T = 256: the attention-output table below)',
      };
    case 'slay/nystrom':
      return { kind: 'deliberate', text: 'our Nyström features add a 10⁻³ ridge to the landmark kernel, so fewer rows cancel towards 0 than in the paper’s' };
    case 'slay/tensorsketch':
    case 'slay/random-maclaurin':
      return {
        kind: 'deliberate',
        text: 'signed estimators, whose denominators can cancel: ours add δ = 10⁻⁶ after summing over the whole prefix in float32, so fewer rows cancel to ≈ 0 and the error, still orders of magnitude off, is smaller than the paper’s',
      };
    default:
      return undefined;
  }
}

const unitName = (length: number, label: string) => `T${length}-${label.replace('/', '_')}`;
const plainUnitName = (length: number, label: string) => `plain-${unitName(length, label)}`;
const limitUnitName = (length: number, poly: LimitPoly) => `T${length}-limit_${poly}`;
const convergenceUnitName = (budget: number | 'limit', poly: LimitPoly) => `convergence-${budget === 'limit' ? 'limit' : `b${budget}`}-${poly}`;
const scaleColumn = (i: number) => `${SCALE_NAMES[i]} (T = ${PAPER_SCALES[i].length})`;
const limitLabel = (poly: LimitPoly) => `slay/${poly} limit (float64)`;
const budgetColumn = (budget: number | 'limit') => (budget === 'limit' ? 'limit (float64)' : `M = P = ${budget}`);

const TABLE_PAPER = 'Table 10';
const TABLE_PLAIN = 'Table 10 on the attention output alone (plain projections, no output projection)';
const TABLE_CONVERGENCE = 'Convergence in the feature budget (T = 256, R = 2, plain projections, batch 2)';

/** What the convergence table shows, from its numbers: whether each estimator's error heads to its limit. */
function convergenceNotes(view: UnitView): string[] {
  const mean = (values: number[]) => (values.length ? values.reduce((a, b) => a + b, 0) / values.length : null);
  const lines: string[] = [];
  for (const poly of LIMIT_POLYS) {
    const first = mean(view.values(convergenceUnitName(CONVERGENCE.budgets[0], poly)));
    const largest = CONVERGENCE_LIMIT[poly];
    const last = mean(view.values(convergenceUnitName(largest, poly)));
    const limit = mean(view.values(convergenceUnitName('limit', poly)));
    if (first === null || last === null || limit === null) continue;
    lines.push(
      `slay/${poly}: rel-ℓ2 ${first.toFixed(3)} at M = P = ${CONVERGENCE.budgets[0]}, ${last.toFixed(3)} at ${largest}; its limit (the estimator's expected kernel in place of its features, float64) is ${limit.toFixed(3)}.`,
    );
  }
  if (lines.length === 0) return [];
  return [
    `Where each estimator converges (convergence table): ${lines.join(' ')} ` +
      'Anchor features estimate (1 + 2x²)/(d(d + 2)) per node, not x², so SLAY with anchors converges to Σ_r w_r (1 + 2x²) e^{2 s_r x}, which stays far from x²/(C − 2x) on these inputs, whatever M and P; exact polynomial features converge to the quadrature kernel, close to Yat. ' +
      'A claim that "SLAY matches Yat" holds for the exact features in kernel terms; with the default anchors it is a statement about trained models (lm-compare), not about the kernel.',
  ];
}

export const slayAblation: Experiment = {
  name: 'slay-ablation',
  version: 2,
  title: 'SLAY polynomial-approximation ablation',
  source: 'SLAY: Spherical Linearized Attention with Yat-Kernel (ICML 2026), Table 10 (its Large block is Table 2)',
  measures:
    'rel-ℓ2 error ‖y − y*‖/‖y*‖ of each SLAY polynomial variant’s attention output against exact kernel-normalised spherical Yat attention on the same inputs (Performer and DARKFormer against softmax as extra rows)',
  metric: { name: 'rel-ℓ2', digits: 4 },
  agreement: {
    statement:
      '|ours − paper| ≤ 2·√2·sd_ours + 0.1·|paper|: the paper prints one run without an sd, so our sd over the seeds stands in for its run-to-run spread, and 10% of its value covers the rest of the harness noise',
    tolerance: (paper, ours) => 2 * Math.SQRT2 * (ours.sd ?? 0) + 0.1 * Math.abs(paper.mean),
  },
  protocol: {
    scales: PAPER_SCALES.map((s, i) => `${SCALE_NAMES[i]}: T = ${s.length}, R = ${s.quadratureNodes}, M = ${s.prfFeatures}, P = ${s.anchors}`).join('; '),
    inputs: `embedding ${PAPER_SETTINGS.embed}, ${PAPER_SETTINGS.heads} heads, batch ${PAPER_SETTINGS.batch}, causal, float32, x ~ N(0, I); Table 10: q, k, v and the output projection are PyTorch nn.Linear layers at their default init (weights and biases U(±1/√64)), shared by estimator and reference (the reference harness ties them), and the output after the projection is compared; the attention-output table: bias-free N(0, 1/64) projections and the attention output itself`,
    convergence: `T = ${CONVERGENCE.length}, R = ${CONVERGENCE.quadratureNodes}, M = P = ${CONVERGENCE.budgets.join(', ')} (exact to ${CONVERGENCE_LIMIT.exact}), plain projections, batch ${CONVERGENCE.settings.batch}; the limit rows use each estimator's expected kernel in place of its features (src/paper/slay-limits.ts), in float64 on the same inputs`,
    reference: `exact spherical Yat attention (ε = ${EPSILON}) for the SLAY variants, softmax for Performer and DARKFormer (m = R·P·M features)`,
    seeds: PAPER_SETTINGS.seeds.join(', '),
    latency: 'forward time of one call after a warm-up call, on this machine’s CPU; the paper’s are on an A100 GPU, so they are shown, not compared',
    quick: '--quick: the Small scale only, and the convergence sweep to M = P = 32',
  },
  notes: [
    'Performer and DARKFormer give the same numbers: DARKFormer starts from M = I, where it is Performer with the same projection draw.',
    'The output projection’s bias is shared by the estimator’s output and the reference’s, so it adds to ‖y*‖ and not to ‖y − y*‖: the paper’s errors fall with T because the attention outputs, averages over more positions, shrink against it, not because the estimators converge (compare Table 10 with the attention-output table, whose errors are flat in T).',
  ],
  measuredNotes: (view) => convergenceNotes(view),
  shown: [
    { key: 'forward_ms', paperKey: 'paper_forward_ms', title: 'Forward latency (ms; ours on this CPU, the paper’s on an A100: not compared)', digits: 1 },
  ],
  backend: 'wasm',

  units(quick) {
    const scales = quick ? PAPER_SCALES.slice(0, 1) : PAPER_SCALES;
    const budgets = quick ? CONVERGENCE.budgets.slice(0, 3) : CONVERGENCE.budgets;
    return [
      ...scales.flatMap((scale): UnitSpec[] => [
        ...paperCases(scale, EPSILON).map((c) => ({ name: unitName(scale.length, c.label), settings: { length: scale.length, label: c.label } })),
        ...LIMIT_POLYS.map((poly) => ({ name: limitUnitName(scale.length, poly), settings: { length: scale.length, limit: poly } })),
        ...paperCases(scale, EPSILON).map((c) => ({
          name: plainUnitName(scale.length, c.label),
          settings: { length: scale.length, label: c.label, plain: true },
        })),
      ]),
      ...LIMIT_POLYS.flatMap((poly): UnitSpec[] => [
        ...budgets.filter((b) => b <= CONVERGENCE_LIMIT[poly]).map((budget) => ({ name: convergenceUnitName(budget, poly), settings: { budget, poly } })),
        { name: convergenceUnitName('limit', poly), settings: { budget: 'limit', poly } },
      ]),
    ];
  },

  cells(quick) {
    const scales = quick ? PAPER_SCALES.slice(0, 1) : PAPER_SCALES;
    const budgets = quick ? CONVERGENCE.budgets.slice(0, 3) : CONVERGENCE.budgets;
    const labels = [...TABLE_10.map((r) => r.label), ...EXTRA_LABELS];
    const paperCells = labels.flatMap((label) =>
      scales.map((scale, i): CellSpec => {
        const row = TABLE_10.find((r) => r.label === label);
        const published: PublishedValue | null = row ? { mean: row.relL2[i], sd: null, source: i === 2 ? 'Table 10 (= Table 2)' : 'Table 10' } : null;
        return { table: TABLE_PAPER, row: label, column: scaleColumn(i), published, explanation: explanation(label), units: [unitName(scale.length, label)] };
      }),
    );
    const limitCells = LIMIT_POLYS.flatMap((poly) =>
      scales.map(
        (scale, i): CellSpec => ({
          table: TABLE_PAPER,
          row: limitLabel(poly),
          column: scaleColumn(i),
          published: null,
          units: [limitUnitName(scale.length, poly)],
        }),
      ),
    );
    const plainCells = labels.flatMap((label) =>
      scales.map(
        (scale, i): CellSpec => ({ table: TABLE_PLAIN, row: label, column: scaleColumn(i), published: null, units: [plainUnitName(scale.length, label)] }),
      ),
    );
    const convergenceCells = LIMIT_POLYS.flatMap((poly) =>
      [...budgets, 'limit' as const].map(
        (budget): CellSpec => ({
          table: TABLE_CONVERGENCE,
          row: `slay/${poly}`,
          column: budgetColumn(budget),
          published: null,
          units: budget === 'limit' || budget <= CONVERGENCE_LIMIT[poly] ? [convergenceUnitName(budget, poly)] : [],
        }),
      ),
    );
    return [...paperCells, ...limitCells, ...plainCells, ...convergenceCells];
  },

  async runUnit(settings): Promise<UnitOutcome> {
    const { length, label, limit, plain, budget, poly } = settings as {
      length?: number;
      label?: string;
      limit?: LimitPoly;
      plain?: boolean;
      budget?: number | 'limit';
      poly?: LimitPoly;
    };
    if (poly !== undefined && budget !== undefined) return convergenceUnit(poly, budget);
    const index = PAPER_SCALES.findIndex((s) => s.length === length);
    if (index < 0) throw new Error(`slay-ablation: no scale with T = ${length}`);
    const scale = PAPER_SCALES[index];
    if (limit !== undefined) return limitOutcome(estimatorLimit(limit, scale.quadratureNodes, PAPER_SETTINGS, scale.length, EPSILON));
    const cases = paperCases(scale, EPSILON).filter((c) => c.label === label);
    if (cases.length === 0) throw new Error(`slay-ablation: no case ${label}`);
    const paperMs = plain ? null : (TABLE_10.find((r) => r.label === label)?.ms[index] ?? null);
    return fidelityOutcome(cases, length!, plain ? PLAIN_SETTINGS : PAPER_SETTINGS, paperMs);
  },
};

async function fidelityOutcome(cases: ReturnType<typeof paperCases>, length: number, settings: FidelitySettings, paperMs: number | null): Promise<UnitOutcome> {
  const [row] = await runFidelity(cases, length, settings);
  const ok = row.status === 'ok';
  return {
    values: ok ? row.relL2PerSeed : [],
    extra: { forward_ms: ok ? row.forwardMs : null, paper_forward_ms: paperMs, cosine: ok ? row.cosine : null, mse: ok ? row.mse : null },
    ...(ok ? {} : { error: row.status }),
    details: { options: cases[0].options, reference: cases[0].reference, projections: settings.projections, batch: settings.batch },
    headline: ok ? `rel-ℓ2 ${row.relL2.toPrecision(4)} ± ${row.sd.relL2.toPrecision(2)}, ${row.forwardMs.toFixed(1)} ms` : row.status,
  };
}

function limitOutcome(values: number[]): UnitOutcome {
  const mean = values.reduce((a, b) => a + b, 0) / values.length;
  return { values, extra: {}, details: { computed: 'float64, the expected kernel in place of the features' }, headline: `limit rel-ℓ2 ${mean.toPrecision(4)}` };
}

/** One cell of the convergence table: the estimator at M = P = budget, or its limit. */
async function convergenceUnit(poly: LimitPoly, budget: number | 'limit'): Promise<UnitOutcome> {
  const { length, quadratureNodes, settings } = CONVERGENCE;
  if (budget === 'limit') return limitOutcome(estimatorLimit(poly, quadratureNodes, settings, length, EPSILON));
  const options = { poly, quadratureNodes, prfFeatures: budget, anchors: budget, epsilon: EPSILON, delta: 1e-6 };
  const reference = { mechanism: 'yat-spherical', options: { epsilon: EPSILON, delta: 1e-6 } };
  return fidelityOutcome([{ label: `slay/${poly}`, mechanism: 'slay', options, reference }], length, settings, null);
}
