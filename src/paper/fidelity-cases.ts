// The kernel-fidelity ablation's cases, scales and settings (SLAY paper, Tables 2 and 10) as plain data, apart
// from the measurement in fidelity.ts, which loads tfjs: `npm run ablate -- --help` lists them before any backend loads.

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

export interface FidelitySettings {
  embed: number;
  heads: number;
  batch: number;
  causal: boolean;
  seeds: number[];
}

export const PAPER_SETTINGS: FidelitySettings = { embed: 64, heads: 4, batch: 8, causal: true, seeds: [0, 1, 2] };
