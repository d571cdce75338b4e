// The kernel-fidelity ablation's cases, scales, settings and input draws (SLAY paper, Tables 2 and 10) as plain data,
// apart from the measurement in fidelity.ts, which loads tfjs: `npm run ablate -- --help` lists them before any
// backend loads, and the float64 limits (slay-limits.ts) draw the very inputs the measurement uses.
import { deriveSeed, Rng } from '../core/rng.ts';

export interface FidelityCase {
  /** Row label, e.g. "slay/anchor". */
  label: string;
  mechanism: string;
  options: Record<string, unknown>;
  /** The exact mechanism it is compared against. */
  reference: { mechanism: string; options: Record<string, unknown> };
}

export interface FidelityScale {
  length: number;
  quadratureNodes: number;
  prfFeatures: number;
  anchors: number;
}

/** The paper's three scales (T, R, M, P), ε = 1e-6. */
export const PAPER_SCALES: FidelityScale[] = [
  { length: 128, quadratureNodes: 2, prfFeatures: 8, anchors: 8 },
  { length: 256, quadratureNodes: 2, prfFeatures: 16, anchors: 16 },
  { length: 512, quadratureNodes: 2, prfFeatures: 32, anchors: 32 },
];

export const SLAY_POLYS = ['anchor', 'random-maclaurin', 'tensorsketch', 'nystrom', 'laplace-only', 'hadamard', 'exact'];

/** The ablation set at one scale: SLAY variants vs exact spherical Yat, Performer/DARKFormer vs softmax. */
export function paperCases(scale: FidelityScale, epsilon = 1e-6): FidelityCase[] {
  const yat = { mechanism: 'yat-spherical', options: { epsilon, delta: 1e-6 } };
  const softmax = { mechanism: 'softmax', options: {} };
  const { quadratureNodes, prfFeatures, anchors } = scale;
  return [
    // Feature budget comparable to SLAY's R·P·M at this scale.
    { label: 'performer', mechanism: 'performer', options: { features: quadratureNodes * prfFeatures * anchors }, reference: softmax },
    { label: 'darkformer', mechanism: 'darkformer', options: { features: quadratureNodes * prfFeatures * anchors }, reference: softmax },
    ...SLAY_POLYS.map((poly) => ({
      label: `slay/${poly}`,
      mechanism: 'slay',
      options: { poly, quadratureNodes, prfFeatures, anchors, epsilon, delta: 1e-6 },
      reference: yat,
    })),
  ];
}

export interface FidelityRow {
  label: string;
  length: number;
  /** 'ok', or why the case has no numbers ("OOM: …", "error: …"). */
  status: string;
  relL2: number;
  cosine: number;
  mse: number;
  forwardMs: number;
  /** Standard deviations over seeds of the same metrics. */
  sd: { relL2: number; cosine: number; mse: number };
  seeds: number;
  /** rel-ℓ2 of each seed, in the order of the settings' seeds (empty when the case failed). */
  relL2PerSeed: number[];
}

/**
 * How q, k, v are made from x ~ N(0, I) and what is compared:
 * - `torch-linear`: as the SLAY reference harness does, q, k, v are PyTorch `nn.Linear` layers at their default
 *   init (weights and biases uniform in ±1/√embed) and the compared output is the attention's after an output
 *   projection of the same kind, shared by estimator and reference ("tied QKV/out projections");
 * - `plain`: q, k, v are bias-free projections with N(0, 1/embed) weights and the attention's own output is compared.
 * The output bias is common to both outputs, so it adds to ‖y*‖ and not to ‖y − y*‖: under `torch-linear` the
 * rel-ℓ2 falls as T grows (the attention outputs, averages of more values, shrink against it) where `plain` stays
 * flat (docs/attention.md, "SLAY's anchor features against the paper's Table 10").
 */
export type FidelityProjections = 'torch-linear' | 'plain';

export interface FidelitySettings {
  embed: number;
  heads: number;
  batch: number;
  causal: boolean;
  seeds: number[];
  projections: FidelityProjections;
}

export const PAPER_SETTINGS: FidelitySettings = { embed: 64, heads: 4, batch: 8, causal: true, seeds: [0, 1, 2], projections: 'torch-linear' };

/** A linear layer y = x·w (+ b): w [in, out] row-major. */
export interface DrawnLinear {
  w: Float64Array;
  b: Float64Array | null;
}

/** One seed's inputs: x [batch, length, embed] and the q, k, v (and, for torch-linear, output) projections. */
export interface FidelityDraw {
  x: Float64Array;
  q: DrawnLinear;
  k: DrawnLinear;
  v: DrawnLinear;
  out: DrawnLinear | null;
}

/** The inputs of one seed under the settings' projections (FidelityProjections), in float64. */
export function drawFidelityInputs(settings: FidelitySettings, length: number, seed: number): FidelityDraw {
  const rng = new Rng(deriveSeed(seed, 'fidelity-inputs'));
  const { embed, batch } = settings;
  const torch = settings.projections === 'torch-linear';
  const x = rng.normalArray(batch * length * embed);
  // nn.Linear's default init: kaiming_uniform(a = √5) gives U(±1/√fan_in) for the weights, and so for the biases.
  const bound = 1 / Math.sqrt(embed);
  const uniform = (n: number) => Float64Array.from({ length: n }, () => (2 * rng.uniform() - 1) * bound);
  const linear = (): DrawnLinear =>
    torch ? { w: uniform(embed * embed), b: uniform(embed) } : { w: rng.normalArray(embed * embed).map((v) => v / Math.sqrt(embed)), b: null };
  const [q, k, v] = [linear(), linear(), linear()];
  return { x, q, k, v, out: torch ? linear() : null };
}
