// slay: Spherical Linearized Attention with the Yat kernel (SLAY paper; docs/notes/attention-kernels.md §1).
//
//   x = q̂ᵀk̂ (unit-normalised q, k),  C = 2 + ε,  x²/(C − 2x) = ∫₀^∞ e^{−Cs} x² e^{2sx} ds
//                                                  ≈ Σ_r w_r x² e^{2 s_r x}      (Gauss–Laguerre, R nodes)
//   Ψ(u) = concat_r √w_r · (φ_poly(u) ⊗ φ_PRF(u; s_r))     (explicit outer product, P·M per node)
//   Y_i  = Ψ(q_i)ᵀ Σ_j Ψ(k_j) v_jᵀ / (Ψ(q_i)ᵀ Σ_j Ψ(k_j) + δ)   (shared linearAttention; kernel
//                                                                  normalisation, not a softmax)
// The tensor-product variants hand the contraction Ψ's two factors, φ_poly and concat_r √w_r φ_PRF,r
// (productLinearAttention): Ψ(q)ᵀΨ(k) = (φ_poly(q)ᵀφ_poly(k))·Σ_r w_r φ_PRF,r(q)ᵀφ_PRF,r(k), so causal
// score blocks cost P + R·M instead of R·P·M per pair, and short sequences never build Ψ.
//
// φ_PRF(u; s) = M^(−1/2) exp(√(2s)·ωᵀu − s), ω ~ N(0, I) iid per head and per node, exponent clamped
// to ±20 as the reference; it is the shared PRF map at x = √(2s)·û. φ_poly is one of the maps of
// ../features/polynomial.ts (default 'anchor'). Which kernel each variant targets in expectation:
//   exact, random-maclaurin, tensorsketch:  Σ_r w_r x² e^{2 s_r x}          (the quadrature kernel)
//   anchor:                                 Σ_r w_r (1 + 2x²) e^{2 s_r x} / (d(d+2))   (§1.4 there)
//   nystrom:                                ≈ the quadrature kernel (low-rank, signed)
//   laplace-only (no polynomial factor):    Σ_r (C/4) α_r e^{2 s_r x} ≈ (C²/4)/(C − 2x)  (§1.3 there)
//   hadamard (ω shared by both factors, poly = (ωᵀu)²/√M, element-wise product, R·M features):
//     Σ_r (w_r/M) e^{2 s_r x} (a⁴ + 2a²(1 + 2x) + 1 + 2x²),  a² = 2 s_r (1 + x)²
// The random matrices are drawn once from the mechanism's seed and never redrawn.
import * as tf from '@tensorflow/tfjs';
import { BOUNDS } from '../../core/bounds.ts';
import { positiveRandomFeatures } from '../features/prf.ts';
import {
  createPolynomialMap,
  POLYNOMIAL_KINDS,
  polynomialOutputDim,
  polynomialParameterShapes,
  type PolynomialFeatureMap,
  type PolynomialKind,
} from '../features/polynomial.ts';
import { dot } from '../features/linalg.ts';
import { gaussianProjection } from '../features/projections.ts';
import { slayQuadrature } from '../features/quadrature.ts';
import { fusedSlayFactors } from '../fused.ts';
import { l2Normalize, namedVariable, projectPerHead, rowOuterProduct } from '../ops.ts';
import { deriveSeed, Rng } from '../../core/rng.ts';
import { contractionOptionSpecs, featureMapMethods, type FeatureMaps, type ProductFactors } from './linear-attention.ts';
import { registerAttention } from './registry.ts';
import type { AttentionConfig, AttentionModule, KernelEstimate } from './types.ts';

export const SLAY_POLY_VARIANTS = [...POLYNOMIAL_KINDS, 'laplace-only', 'hadamard'] as const;
export type SlayPolyVariant = (typeof SLAY_POLY_VARIANTS)[number];

/** The exponent clamp of the reference implementation (e^20 still fits float32 comfortably). */
const PRF_CLAMP = 20;

export interface SlayOptions {
  epsilon: number;
  delta: number;
  quadratureNodes: number;
  prfFeatures: number;
  anchors: number;
  poly: SlayPolyVariant;
  chunkSize: number;
  segmentLength: number;
}

/** The SLAY module, plus its feature map (for tests and analysis). */
export interface SlayAttention extends AttentionModule {
  /** Quadrature scales s_r and per-node weights (w_r = α_r/C; (C/4)·α_r for laplace-only). */
  readonly quadrature: { scales: number[]; weights: number[] };
  /** Ψ(u) for raw (not yet normalised) q or k [B, H, L, d] → [B, H, L, featureDim]. */
  features(x: tf.Tensor4D): tf.Tensor4D;
  /** Tensor-product variants (not laplace-only, hadamard): Ψ's factors, Ψ = concat_r a ⊗ b_r; else null. */
  readonly factors: ((x: tf.Tensor4D) => ProductFactors) | null;
  readonly featureDim: number;
}

registerAttention('slay', {
  description: 'SLAY: linearised spherical Yat attention (Gauss–Laguerre × polynomial ⊗ positive random features)',
  quadratic: false,
  options: {
    epsilon: { kind: 'number', default: 1e-3, exclusiveMin: 0, doc: 'ε in C = 2 + ε (paper LM setting 1e-3)' },
    delta: { kind: 'number', default: 1e-6, min: 0, doc: 'δ added to the attention denominator' },
    quadratureNodes: { kind: 'int', default: 2, min: 1, max: BOUNDS.quadratureNodes.max, doc: 'R, Gauss–Laguerre nodes' },
    prfFeatures: { kind: 'int', default: 16, min: 1, max: BOUNDS.features.max, doc: 'M, positive random features per node and head' },
    anchors: {
      kind: 'int',
      default: 8,
      min: 1,
      max: BOUNDS.features.max,
      doc: 'P, polynomial features: anchors, Maclaurin pairs, sketch size or Nyström anchors (unused by exact, laplace-only, hadamard)',
    },
    poly: { kind: 'enum', default: 'anchor', values: SLAY_POLY_VARIANTS, doc: 'polynomial factor x² approximation' },
    ...contractionOptionSpecs,
    chunkSize: {
      kind: 'int',
      default: 64,
      min: 1,
      max: BOUNDS.positions.max,
      doc: 'chunk length of the causal contraction (tensor-product variants score the whole sequence as one block instead when that costs fewer multiply-adds: L ≤ ~300 at the defaults with head size 32)',
    },
  },
  tensors: ({ numHeads, headDim }, options) => {
    const { quadratureNodes: r, prfFeatures: m, anchors: p, poly } = options as unknown as SlayOptions;
    const polyShapes = isPolynomialKind(poly) ? polynomialParameterShapes(poly, headDim, p) : [];
    return [
      ...polyShapes.map(([name, shape]) => ({ name: `${poly}.${name}`, shape, trainable: false })),
      ...Array.from({ length: r }, (_, node) => ({ name: `prf.node${node}`, shape: [numHeads, headDim, m], trainable: false })),
    ];
  },
  featureMap: ({ headDim }, options) => {
    const { quadratureNodes: r, prfFeatures: m, anchors: p, poly } = options as unknown as SlayOptions;
    // Unit rows (3d), then per node the PRF projection (2dM, M exponentials); the polynomial factor's projections and
    // outputs, or hadamard's squares; and the R·P·M products of the tensor product.
    const prf = r * (2 * headDim * m + m);
    if (!isPolynomialKind(poly)) return { features: r * m, flopsPerSide: 3 * headDim + prf + (poly === 'hadamard' ? 2 * r * m : 0) };
    const outputDim = polynomialOutputDim(poly, headDim, p);
    const projections = polynomialParameterShapes(poly, headDim, p).reduce((sum, [, [rows, cols]]) => sum + 2 * rows * cols, 0);
    return { features: r * outputDim * m, flopsPerSide: 3 * headDim + projections + outputDim + prf + r * outputDim * m };
  },
  create: (config, options) => createSlay(config, options as unknown as SlayOptions),
});

const isPolynomialKind = (poly: string): poly is PolynomialKind => (POLYNOMIAL_KINDS as readonly string[]).includes(poly);

export function createSlay(config: AttentionConfig, options: SlayOptions): SlayAttention {
  const { numHeads: h, headDim: d } = config;
  const { epsilon, delta, quadratureNodes: r, prfFeatures: m, anchors: p, poly, chunkSize, segmentLength } = options;
  const c = 2 + epsilon;
  const { scales, weights: quadratureWeights } = slayQuadrature(r, epsilon);
  // Laplace-only discretises (C²/4)/(C − 2x) (docs/notes/attention-kernels.md §1.3): weights (C²/4)·w_r = (C/4)·α_r.
  const weights = poly === 'laplace-only' ? quadratureWeights.map((w) => ((c * c) / 4) * w) : quadratureWeights;

  const buffers: tf.Variable[] = [];
  const buffer = (name: string, value: tf.Tensor) => {
    const v = namedVariable(config.scope, name, value, false);
    buffers.push(v);
    return v;
  };
  let polyMap: PolynomialFeatureMap | null = null;
  if (isPolynomialKind(poly)) {
    polyMap = createPolynomialMap({
      kind: poly,
      inputDim: d,
      features: p,
      rng: new Rng(deriveSeed(config.seed, `slay.${poly}`)),
      store: (name, value) => buffer(`${poly}.${name}`, value) as tf.Variable<tf.Rank.R2>,
    });
  }
  const prfRng = new Rng(deriveSeed(config.seed, 'slay.prf'));
  const omegas = scales.map((_, node) => buffer(`prf.node${node}`, gaussianProjection(prfRng, h, d, m)));
  const perNode = poly === 'laplace-only' || poly === 'hadamard' ? m : polyMap!.outputDim * m;
  const featureDim = r * perNode;

  const checkShape = (x: tf.Tensor4D) => {
    const [, heads, , dim] = x.shape;
    if (heads !== h || dim !== d) {
      throw new Error(`slay: expected q/k of shape [batch, ${h}, length, ${d}], got [${x.shape.join(', ')}]`);
    }
  };
  /** q or k [B, H, L, d] unit-normalised per row (after checking the shape). */
  const unitRows = (x: tf.Tensor4D) => {
    checkShape(x);
    return l2Normalize(x);
  };
  // √w_r goes on the small PRF factor, before the P·M expansion.
  const prfFeatures = (unit: tf.Tensor4D, node: number) =>
    tf.mul(
      positiveRandomFeatures(tf.mul(unit, Math.sqrt(2 * scales[node])) as tf.Tensor4D, omegas[node], { clamp: PRF_CLAMP }).features,
      Math.sqrt(weights[node]),
    ) as tf.Tensor4D;
  const concatNodes = (parts: tf.Tensor4D[]) => (parts.length === 1 ? parts[0] : (tf.concat(parts, 3) as tf.Tensor4D));

  // For the fused kernel of the 'anchor' factors (model/fused.ts): (k_r, √w_r) per node, with k_r = √(2 s_r).
  const nodes =
    poly === 'anchor'
      ? tf.tensor2d(
          scales.flatMap((scale, node) => [Math.sqrt(2 * scale), Math.sqrt(weights[node])]),
          [r, 2],
        )
      : null;

  /** Tensor-product variants: Ψ = concat_r φ_poly ⊗ φ_PRF,r, as factors a = φ_poly, b = concat_r φ_PRF,r. */
  function factors(x: tf.Tensor4D): ProductFactors {
    const fused = nodes ? fusedSlayFactors() : null;
    if (fused && nodes) {
      return tf.tidy(() => {
        checkShape(x);
        const [a, b] = fused(x, polyMap!.parameters.get('anchors')!, tf.stack(omegas) as tf.Tensor4D, nodes);
        return { a, b };
      });
    }
    return tf.tidy(() => {
      const unit = unitRows(x);
      const [b, , l] = x.shape;
      const a = tf.reshape(polyMap!.apply(tf.reshape(unit, [b * h * l, d]) as tf.Tensor2D), [b, h, l, polyMap!.outputDim]) as tf.Tensor4D;
      return { a, b: concatNodes(scales.map((_, node) => prfFeatures(unit, node))) };
    });
  }

  /** Ψ from its factors: one row-wise outer product per node. */
  function expand({ a, b: prf }: ProductFactors): tf.Tensor4D {
    return tf.tidy(() => {
      const [b, , l, k] = a.shape;
      const rows = b * h * l;
      const aRows = tf.reshape(a, [rows, k]) as tf.Tensor2D;
      // tf.split, not one tf.slice per node: a slice's gradient is padded back to all R·M columns.
      const prfByNode = scales.length === 1 ? [prf] : tf.split(prf, scales.length, 3);
      return concatNodes(
        prfByNode.map((prfNode) => tf.reshape(rowOuterProduct(aRows, tf.reshape(prfNode, [rows, m]) as tf.Tensor2D), [b, h, l, perNode]) as tf.Tensor4D),
      );
    });
  }

  function features(x: tf.Tensor4D): tf.Tensor4D {
    if (polyMap) return tf.tidy(() => expand(factors(x)));
    return tf.tidy(() => {
      const unit = unitRows(x);
      return concatNodes(
        scales.map((_, node) => {
          const prf = prfFeatures(unit, node);
          if (poly === 'laplace-only') return prf;
          // hadamard: the polynomial factor reuses this node's projections ωᵀu (the reference's shared ω).
          return tf.mul(tf.mul(tf.square(projectPerHead(unit, omegas[node])), 1 / Math.sqrt(m)), prf) as tf.Tensor4D;
        }),
      );
    });
  }

  const side = (x: tf.Tensor4D) => ({ features: features(x) });
  // What the features estimate in expectation over the draw, as the table at the top of this file says: the R-node
  // quadrature is part of the mechanism; its own error against x²/(C − 2x) is the ablation's (docs/attention.md).
  const polynomialKernel = (x: number, node: number): number => {
    if (poly === 'anchor') return (1 + 2 * x * x) / (d * (d + 2));
    if (poly === 'laplace-only') return 1;
    if (poly === 'hadamard') {
      const a2 = 2 * scales[node] * (1 + x) ** 2;
      return (a2 * a2 + 2 * a2 * (1 + 2 * x) + 1 + 2 * x * x) / m;
    }
    return x * x;
  };
  const kernel: KernelEstimate = {
    formula: `Σ_r w_r·p(x)·e^(2 s_r x), x = q̂ᵀk̂, R = ${r} Gauss–Laguerre nodes, p the expectation of the '${poly}' factor`,
    features: (x) => ({ features: features(x) }),
    kernelInputs: (x) => tf.tidy(() => unitRows(x)),
    logKernel: (q, k) => {
      const x = Math.min(1, Math.max(-1, dot(q, k)));
      return Math.log(scales.reduce((sum, scale, node) => sum + weights[node] * polynomialKernel(x, node) * Math.exp(2 * scale * x), 0));
    },
  };
  const maps: FeatureMaps = { featureDim, shiftedKeys: false, query: side, key: side, ...(polyMap ? { factors: { of: factors, features: expand } } : {}) };
  return {
    name: 'slay',
    options: { ...options },
    trainableVariables: [],
    buffers,
    quadrature: { scales, weights },
    featureDim,
    features,
    factors: polyMap ? factors : null,
    kernel,
    ...featureMapMethods('slay', config, () => maps, { chunkSize, segmentLength, delta }),
    dispose() {
      nodes?.dispose();
      polyMap?.dispose();
      for (const omega of omegas) omega.dispose();
    },
  };
}
