// Float64 references of every registered mechanism's finite-feature output, computed from the
// module's own buffers (or the draw behind them) with plain loops, independently of the library's
// tensor code: the targets of the equality tests and of the float64 gradient check.
import type { AttentionModule } from '../../src/model/attention/types.ts';
import type { SlayAttention } from '../../src/model/attention/slay.ts';
import { gaussLaguerre, slayQuadrature } from '../../src/model/features/quadrature.ts';
import { drawRandomMaclaurin, maclaurinCoefficients, maclaurinSeries, type MaclaurinKernel } from '../../src/model/features/random-maclaurin.ts';
import { deriveSeed, Rng } from '../../src/core/rng.ts';
import { dot, favorAttentionRef, kernelAttentionRef, softmaxAttentionRef, unit, type Array4 } from './reference.ts';

const column = (matrix: number[][], j: number) => matrix.map((row) => row[j]);
/** A buffer's values by name suffix, read once per buffer (the references run many times on one module). */
const bufferValues = new WeakMap<object, unknown>();
const bufferOf = (module: AttentionModule, suffix: string) => {
  const found = module.buffers.find((b) => b.name.endsWith(suffix));
  if (!found) throw new Error(`no buffer ${suffix}`);
  // Keyed by the data, not the variable: a redraw assigns new data to the same variable.
  if (!bufferValues.has(found.dataId)) bufferValues.set(found.dataId, found.arraySync());
  return bufferValues.get(found.dataId) as number[][] & number[][][];
};
const mapRows = (x: Array4, f: (row: number[], head: number) => number[]): Array4 => x.map((b) => b.map((h, head) => h.map((row) => f(row, head))));

/** SLAY's Ψ(x) in float64 from the module's stored buffers, for every poly variant. */
export function slayFeaturesRef(module: SlayAttention, x: Array4): Array4 {
  const {
    poly,
    quadratureNodes: r,
    prfFeatures: m,
    anchors: p,
    epsilon,
  } = module.options as { poly: string; quadratureNodes: number; prfFeatures: number; anchors: number; epsilon: number };
  const c = 2 + epsilon;
  const buffer = (suffix: string) => bufferOf(module, suffix);
  const rule = slayQuadrature(r, epsilon);
  const alphas = gaussLaguerre(r).weights;
  const weights = poly === 'laplace-only' ? alphas.map((a) => (c / 4) * a) : rule.weights;
  const omegas = rule.scales.map((_, node) => buffer(`.prf.node${node}`) as number[][][]); // [H][d][M]
  const polyOf = (u: number[]): number[] => {
    switch (poly) {
      case 'anchor': {
        const a = buffer('.anchor.anchors'); // [d, P]
        return Array.from({ length: p }, (_, i) => dot(u, column(a, i)) ** 2 / Math.sqrt(p));
      }
      case 'exact':
        return u.flatMap((ui) => u.map((uj) => ui * uj));
      case 'random-maclaurin': {
        const s = buffer('.maclaurin');
        return Array.from({ length: p }, (_, i) => (dot(u, column(s, i)) * dot(u, column(s, p + i))) / Math.sqrt(p));
      }
      case 'tensorsketch': {
        const s = buffer('.countSketch');
        const c1 = Array.from({ length: p }, (_, i) => dot(u, column(s, i)));
        const c2 = Array.from({ length: p }, (_, i) => dot(u, column(s, p + i)));
        return Array.from({ length: p }, (_, kk) => c1.reduce((acc, a, i) => acc + a * c2[(kk - i + p) % p], 0));
      }
      case 'nystrom': {
        const a = buffer('.nystrom.anchors');
        const w = buffer('.whitening');
        const kernel = Array.from({ length: p }, (_, i) => dot(u, column(a, i)) ** 2);
        return Array.from({ length: p }, (_, j) => dot(kernel, column(w, j)));
      }
      default:
        return [];
    }
  };
  return mapRows(x, (xi, h) => {
    const u = unit(xi);
    const uu = dot(u, u);
    const polyFeatures = polyOf(u);
    return rule.scales.flatMap((s, node) => {
      const proj = Array.from({ length: m }, (_, j) => dot(u, column(omegas[node][h], j)));
      const prf = proj.map((pj) => Math.exp(Math.min(20, Math.max(-20, Math.sqrt(2 * s) * pj - s * uu))) / Math.sqrt(m));
      const root = Math.sqrt(weights[node]);
      if (poly === 'laplace-only') return prf.map((f) => root * f);
      if (poly === 'hadamard') return prf.map((f, j) => (root * proj[j] ** 2 * f) / Math.sqrt(m));
      return polyFeatures.flatMap((a) => prf.map((f) => root * a * f));
    });
  });
}

/** SchoenbAt's pre-SBN in float64: centre, divide by √(biased var + 1e-12), unit-normalise; then × d^(−1/4). */
export function preSbnScaledRef(row: number[]): number[] {
  const d = row.length;
  const mean = row.reduce((a, x) => a + x, 0) / d;
  const centred = row.map((x) => x - mean);
  const std = Math.sqrt(centred.reduce((a, x) => a + x * x, 0) / d + 1e-12);
  return unit(centred.map((x) => x / std)).map((x) => x * d ** -0.25);
}

/**
 * The random Maclaurin map of a SchoenbAt module made with `seed`, from the draw behind it (re-drawn
 * from the same seed): φ_0 = √a₀, φ_j = scale_j·Π_l r_{j,l}ᵀx over the feature's degree.
 */
export function maclaurinFeaturesRef(
  seed: number,
  inputDim: number,
  numFeatures: number,
  kernel: MaclaurinKernel,
  maxDegree: number,
): { features: (x: number[]) => number[]; kernelValue: (t: number) => number } {
  const coefficients = maclaurinCoefficients(kernel, maxDegree);
  const draw = drawRandomMaclaurin(new Rng(deriveSeed(seed, 'schoenbat.maclaurin')), inputDim, numFeatures, coefficients);
  const levelStarts = draw.levelSizes.map((_, l) => draw.levelSizes.slice(0, l).reduce((a, b) => a + b, 0));
  const rademacher = (row: number) => Array.from(draw.projections.subarray(row * inputDim, (row + 1) * inputDim));
  return {
    features: (x) => [
      draw.scales[0],
      ...draw.degrees.map((degree, j) => {
        let product = draw.scales[j + 1];
        for (let l = 0; l < degree; l++) product *= dot(rademacher(levelStarts[l] + j), x);
        return product;
      }),
    ],
    kernelValue: (t) => maclaurinSeries(coefficients, t),
  };
}

export interface ReferenceOptions {
  causal: boolean;
  keyMask?: number[][];
  /** The seed the module was created with (SchoenbAt's draw is re-made from it). */
  seed: number;
  /** Trainable parameters, when the reference should use values other than the module's. */
  covarianceFactor?: number[][][];
  gamma?: number;
  beta?: number[];
  /** GLA's gate factors, gate bias and output-norm weight. */
  gateDown?: number[][];
  gateUp?: number[][];
  gateBias?: number[];
  normWeight?: number[];
}

/**
 * GLA in its recurrent form, per position, in float64: S_t = diag(α_t) S_{t−1} + k_t v_tᵀ, o_t = RMSNorm(S_tᵀ q_t/√d)·w,
 * log α_t = logsigmoid([k_t of every head]·W↓·W↑ + b)/τ; a padded key adds nothing and does not decay the state.
 */
function glaRef(
  q: Array4,
  k: Array4,
  v: Array4,
  p: Required<Pick<ReferenceOptions, 'gateDown' | 'gateUp' | 'gateBias' | 'normWeight'>>,
  tau: number,
  keyMask?: number[][],
): Array4 {
  const [heads, l, d] = [q[0].length, q[0][0].length, q[0][0][0].length];
  const logSigmoid = (x: number) => (x < 0 ? x - Math.log1p(Math.exp(x)) : -Math.log1p(Math.exp(-x)));
  return q.map((qb, b) => {
    const gates = Array.from({ length: l }, (_, t) => {
      const row = Array.from({ length: heads }, (_, h) => k[b][h][t]).flat();
      const low = p.gateDown[0].map((_, r) => dot(row, column(p.gateDown, r)));
      return p.gateBias.map((bias, c) => logSigmoid(dot(low, column(p.gateUp, c)) + bias) / tau);
    });
    return qb.map((qh, h) => {
      const state = Array.from({ length: d }, () => new Array(d).fill(0));
      return qh.map((qt, t) => {
        const real = !keyMask || keyMask[b][t] === 1;
        if (real) {
          for (let i = 0; i < d; i++) {
            const decay = Math.exp(gates[t][h * d + i]);
            for (let j = 0; j < d; j++) state[i][j] = decay * state[i][j] + k[b][h][t][i] * v[b][h][t][j];
          }
        }
        const out = Array.from({ length: d }, (_, j) => state.reduce((acc, row, i) => acc + (row[j] * qt[i]) / Math.sqrt(d), 0));
        const rms = Math.sqrt(dot(out, out) / d + 1e-5);
        return out.map((x, j) => (x / rms) * p.normWeight[j]);
      });
    });
  });
}

const maclaurinMaps = new WeakMap<AttentionModule, ReturnType<typeof maclaurinFeaturesRef>>();

/** Any registered mechanism's output in float64, from the module's options and buffers. */
export function mechanismRef(module: AttentionModule, q: Array4, k: Array4, v: Array4, opts: ReferenceOptions): Array4 {
  const { causal, keyMask } = opts;
  const o = module.options as Record<string, number & string>;
  const d = q[0][0][0].length;
  const l = q[0][0].length;
  const features = (phi: (row: number[], head: number) => number[], clampMin?: number) =>
    // One head at a time: the feature map may depend on the head.
    q.map((_, b) =>
      q[b].map((__, head) => {
        const one = (a: Array4) => [[a[b][head].map((row) => phi(row, head))]];
        return kernelAttentionRef(one(q), one(k), [[v[b][head]]], (x, y) => dot(x, y), {
          causal,
          delta: o.delta ?? 0,
          clampMin,
          keyMask: keyMask && [keyMask[b]],
        })[0][0];
      }),
    );
  switch (module.name) {
    case 'softmax':
      if (!keyMask) return softmaxAttentionRef(q, k, v, causal);
      // A row that sees no real key is 0 (δ = 1e−300 makes it 0/δ and changes nothing else).
      return kernelAttentionRef(q, k, v, (a, b) => Math.exp(dot(a, b) / Math.sqrt(d)), { causal, keyMask, delta: 1e-300 });
    case 'yat-spherical':
      return kernelAttentionRef(
        q,
        k,
        v,
        (a, b) => {
          const x = Math.min(1, Math.max(-1, dot(unit(a), unit(b))));
          return (x * x) / (2 + o.epsilon - 2 * x);
        },
        { causal, keyMask, delta: o.delta },
      );
    case 'slay': {
      const slay = module as SlayAttention;
      const [phiQ, phiK] = [q, k].map((x) => slayFeaturesRef(slay, x));
      return kernelAttentionRef(phiQ, phiK, v, (a, b) => dot(a, b), { causal, keyMask, delta: o.delta });
    }
    case 'performer':
    case 'darkformer': {
      const covarianceFactor = module.name === 'darkformer' ? (opts.covarianceFactor ?? (module.trainableVariables[0].arraySync() as number[][][])) : undefined;
      const logWeights = o.dataInit === 'variance-optimal' ? (bufferOf(module, '.featureLogWeights') as number[][]) : undefined;
      return favorAttentionRef(q, k, v, bufferOf(module, '.projection') as number[][][], { causal, keyMask, delta: o.delta, covarianceFactor, logWeights });
    }
    case 'schoenbat': {
      if (!maclaurinMaps.has(module)) maclaurinMaps.set(module, maclaurinFeaturesRef(opts.seed, d, o.features, o.kernel as MaclaurinKernel, o.maxDegree));
      const map = maclaurinMaps.get(module)!;
      const clampMin = o.denominatorClamp === 'reference' ? 1 : map.kernelValue(-1 / Math.sqrt(d));
      const gamma = opts.gamma ?? module.trainableVariables[0].dataSync()[0];
      const beta = opts.beta ?? Array.from(module.trainableVariables[1].dataSync());
      const attended = features((row) => map.features(preSbnScaledRef(row)), clampMin);
      return mapRows(attended, (row) => row.map((x, c) => gamma * x + beta[c]));
    }
    case 'linear-elu':
      return features((row) => row.map((x) => (x > 0 ? x + 1 : Math.exp(x))));
    case 'cosformer': {
      const m = o.reweightLength || l;
      const relu = (row: number[]) => row.map((x) => Math.max(x, 0));
      return kernelAttentionRef(q, k, v, (a, b, i, j) => dot(relu(a), relu(b)) * Math.cos(((Math.PI / 2) * (i - j)) / m), { causal, keyMask, delta: o.delta });
    }
    case 'gla': {
      const values = (n: number) => module.trainableVariables[n].arraySync();
      const params = {
        gateDown: opts.gateDown ?? (values(0) as number[][]),
        gateUp: opts.gateUp ?? (values(1) as number[][]),
        gateBias: opts.gateBias ?? (values(2) as number[]),
        normWeight: opts.normWeight ?? (values(3) as number[]),
      };
      return glaRef(q, k, v, params, o.gateNormalizer, keyMask);
    }
    default:
      throw new Error(`no float64 reference for '${module.name}'`);
  }
}
