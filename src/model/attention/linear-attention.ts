// The linear-attention contraction, written once for every kernel (feature-map) mechanism.
//
//   Y_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + δ)       j over all keys, or j ≤ i if causal
//
// The denominator rides along as an extra value column of ones, so numerator and denominator come
// out of the same products. The causal form is chunkwise-parallel (as flash-linear-attention's
// naive chunk form): inside a chunk of C positions a masked C×C product, across chunks the
// per-chunk states φ(K_c)ᵀV_c combined by an exclusive prefix sum over the chunk axis. Memory is
// O(B·H·(L/C)·F·D) for the states plus O(B·H·L·C) for the score blocks, never the B·H·L·F·D of a
// cumulative sum of per-position outer products. All chunks are processed at once, so there is no
// JavaScript loop over the sequence in the graph.
//
// The recurrent form (decoding, one position at a time) keeps only S = Σ_{j≤t} φ(k_j)[v_j, 1]ᵀ,
// [B, H, F, D+1], and reads out φ(q_t)ᵀS: O(1) state and work per token. Mechanisms describe
// themselves once as FeatureMaps; featureMapAttention (whole sequence) and featureMapStep (one
// position) both run from that description, so the two forms share all feature code.
import * as tf from '@tensorflow/tfjs';
import { batchMatMul, causalMask01, ConstantCache, flattenHeads, maxWithoutGradient, safeDivide } from '../ops.ts';
import type { ApplyOptions, AttentionConfig, AttentionModule, AttentionState } from './types.ts';

export interface ContractionOptions {
  causal: boolean;
  /** Chunk length of the causal form. */
  chunkSize: number;
  /** Added to the denominator: a number, or a tensor broadcastable to [B, H, L, 1]. */
  delta?: number | tf.Tensor;
  /** Instead of adding δ, clamp the denominator from below (for signed features, e.g. SchoenbAt's 1.0). */
  clampMin?: number;
  /** [B, L] 1/0: padded keys contribute nothing. */
  keyMask?: tf.Tensor2D;
}

const masks = new ConstantCache();

/**
 * Features given as a tensor product: φ(u) = concat_r (a(u) ⊗ b_r(u)), with a [B, H, L, Fa] and
 * b = concat_r b_r [B, H, L, Fb]. Then φ(q)ᵀφ(k) = (a(q)ᵀa(k))·(b(q)ᵀb(k)), so a block of scores
 * costs Fa + Fb multiply-adds per pair instead of F = Fa·Fb (SLAY: 8 + 32 against 256).
 */
export interface ProductFactors {
  a: tf.Tensor4D;
  b: tf.Tensor4D;
}

/** What the contraction needs from queries and keys, whether given as features or as factors. */
interface Sides {
  /** Unmasked score blocks [N, C, C] from `chunked`, which cuts [B, H, L, ·] into [N, C, ·]. */
  scores(chunked: (x: tf.Tensor4D) => tf.Tensor3D): tf.Tensor3D;
  /** Explicit query and key features (the causal form asks only when there is more than one chunk). */
  features(): { q: tf.Tensor4D; k: tf.Tensor4D };
}

/**
 * `wholeSequence`: score the sequence as one block, (masked) scores × [V, 1], instead of going
 * through states — for the causal form the same as chunkSize = L.
 */
function contract(sides: Sides, v: tf.Tensor4D, opts: ContractionOptions, wholeSequence = false): tf.Tensor4D {
  const [b, h, l, d] = v.shape;
  const valuesAndOnes = tf.concat([v, tf.ones([b, h, l, 1])], 3) as tf.Tensor4D;
  let out: tf.Tensor4D;
  if (opts.causal) out = causalContraction(sides, valuesAndOnes, wholeSequence ? l : opts.chunkSize);
  else if (wholeSequence) out = tf.reshape(batchMatMul(sides.scores(flattenHeads), flattenHeads(valuesAndOnes)), [b, h, l, d + 1]);
  else out = bidirectionalContraction(sides.features(), valuesAndOnes);
  const numerator = tf.slice(out, [0, 0, 0, 0], [b, h, l, d]);
  const denominator = tf.slice(out, [0, 0, 0, d], [b, h, l, 1]);
  return safeDivide(numerator, normalizeDenominator(denominator, opts)) as tf.Tensor4D;
}

const maskKeys = <T extends tf.Tensor4D>(keys: T, keyMask: tf.Tensor2D | undefined): T => {
  if (!keyMask) return keys;
  const [b, , l] = keys.shape;
  return tf.mul(keys, tf.reshape(keyMask, [b, 1, l, 1])) as T;
};

/**
 * phiQ, phiK: [B, H, L, F] features; v: [B, H, L, D]. Returns [B, H, L, D].
 */
export function linearAttention(
  phiQ: tf.Tensor4D,
  phiK: tf.Tensor4D,
  v: tf.Tensor4D,
  opts: ContractionOptions,
): tf.Tensor4D {
  return tf.tidy(() => {
    const keys = maskKeys(phiK, opts.keyMask);
    const sides: Sides = {
      scores: (chunked) => batchMatMul(chunked(phiQ), chunked(keys), false, true),
      features: () => ({ q: phiQ, k: keys }),
    };
    return contract(sides, v, opts);
  });
}

/**
 * linearAttention for product features (ProductFactors); `features` builds the explicit ones. The
 * causal form scores its diagonal blocks from the factors and builds explicit features only for the
 * chunk states. When scoring the whole sequence as one block costs fewer multiply-adds per position
 * than the chunked (or, bidirectional, the state) form, L·(Fa + Fb + D + 1) ≤ C·(Fa + Fb + D + 1) +
 * F·(2D + 4) with C = 0 when bidirectional (states, their read-out, and building both sides'
 * features), it does that and never builds them. Same values either way (up to float rounding); only
 * the cost differs.
 */
export function productLinearAttention(
  q: ProductFactors,
  k: ProductFactors,
  v: tf.Tensor4D,
  features: (f: ProductFactors) => tf.Tensor4D,
  opts: ContractionOptions,
): tf.Tensor4D {
  return tf.tidy(() => {
    const keys = { a: maskKeys(k.a, opts.keyMask), b: k.b };
    const sides: Sides = {
      scores: (chunked) => tf.mul(batchMatMul(chunked(q.a), chunked(keys.a), false, true), batchMatMul(chunked(q.b), chunked(keys.b), false, true)) as tf.Tensor3D,
      features: () => ({ q: features(q), k: features(keys) }),
    };
    const l = v.shape[2];
    const factorDim = q.a.shape[3] + q.b.shape[3] + v.shape[3] + 1;
    const featureDim = q.a.shape[3] * q.b.shape[3];
    const blockPerPosition = opts.causal ? Math.min(opts.chunkSize, l) * factorDim : 0; // no blocks without a mask
    return contract(sides, v, opts, l * factorDim <= blockPerPosition + featureDim * (2 * v.shape[3] + 4));
  });
}

export function normalizeDenominator(denominator: tf.Tensor, opts: Pick<ContractionOptions, 'delta' | 'clampMin'>): tf.Tensor {
  if (opts.clampMin !== undefined) return tf.maximum(denominator, opts.clampMin);
  return tf.add(denominator, opts.delta ?? 0);
}

/** Σ_j φ(k_j)[v_j, 1] once, then every query reads it: [B, H, L, D+1]. */
function bidirectionalContraction({ q: phiQ, k: phiK }: { q: tf.Tensor4D; k: tf.Tensor4D }, values: tf.Tensor4D): tf.Tensor4D {
  const [b, h, l, dv] = values.shape;
  const state = batchMatMul(flattenHeads(phiK), flattenHeads(values), true, false); // [BH, F, D+1]
  return tf.reshape(batchMatMul(flattenHeads(phiQ), state), [b, h, l, dv]);
}

function causalContraction(sides: Sides, values: tf.Tensor4D, chunkSize: number): tf.Tensor4D {
  const [b, h, l, dv] = values.shape;
  const c = Math.min(chunkSize, l);
  const chunks = Math.ceil(l / c);
  const padded = chunks * c;
  const bh = b * h;
  // Zero-padding at the end is harmless: padded keys come after every real query.
  const chunked = (x: tf.Tensor4D) =>
    tf.reshape(padded === l ? x : tf.pad(x, [[0, 0], [0, 0], [0, padded - l], [0, 0]]), [bh * chunks, c, x.shape[3]]) as tf.Tensor3D;
  const vv = chunked(values);

  const mask = masks.get(`causal${c}`, () => causalMask01(c));
  const scores = tf.mul(sides.scores(chunked), mask); // [BH·nC, C, C]
  let out = batchMatMul(scores, vv); // intra-chunk part

  if (chunks > 1) {
    // State entering chunk n: Σ_{m<n} φ(K_m)ᵀ[V_m, 1]. tfjs's cumsum gradient works only on the
    // last axis, so the chunk axis is moved last for the prefix sum.
    const { q: phiQ, k: phiK } = sides.features();
    const f = phiQ.shape[3];
    const perChunk = tf.reshape(batchMatMul(chunked(phiK), vv, true, false), [bh, chunks, f * dv]);
    const prefix = tf.transpose(tf.cumsum(tf.transpose(perChunk, [0, 2, 1]), 2, true), [0, 2, 1]);
    out = tf.add(out, batchMatMul(chunked(phiQ), tf.reshape(prefix, [bh * chunks, f, dv])));
  }
  const full = tf.reshape(out, [b, h, padded, dv]) as tf.Tensor4D;
  return padded === l ? full : (tf.slice(full, [0, 0, 0, 0], [b, h, l, dv]) as tf.Tensor4D);
}

/**
 * One side's features. `shift` [B, H, L, 1] (stabilised positive random features): a log-scale
 * removed per row, the true features being features·e^shift; absent = none.
 */
export interface ScaledFeatures {
  features: tf.Tensor4D;
  shift?: tf.Tensor;
}

/** A kernel mechanism's feature maps, for sequences of a given total length (cosFormer's M). */
export interface FeatureMaps {
  /** F, the feature dimension. */
  featureDim: number;
  /** Whether key features come with a `shift` (then the contraction rescales them, see below). */
  shiftedKeys: boolean;
  /** x [B, H, L, d] holding positions start … start+L−1 (0-based) → features [B, H, L, F]. */
  query(q: tf.Tensor4D, start: number): ScaledFeatures;
  key(k: tf.Tensor4D, start: number): ScaledFeatures;
  /**
   * Optional: the same (unshifted) features as ProductFactors, and how to expand them; the
   * whole-sequence form then uses productLinearAttention. query/key must equal features(factors(x)).
   */
  factors?: { of(x: tf.Tensor4D): ProductFactors; features(f: ProductFactors): tf.Tensor4D };
}

export interface Normalization {
  /** δ on the un-stabilised scale (see scaledDelta). */
  delta?: number;
  clampMin?: number;
}

/**
 * Bounds on the exponent of the rescaled δ. The lower one (e^−46 ≈ 1e−20) keeps the denominator
 * well inside float32 when every feature product of a row underflows — the output is then ≈ 0 and
 * its gradient finite (safeDivide) — and only binds when c_q + c_k > 46 + ln δ, rows whose
 * stabilised denominator is itself ≲ 1e−20. The upper one (e^69) only bites where the true
 * denominator is < 1e−30·δ, i.e. where the output is already 0 to float precision.
 */
const LOG_DELTA_MIN = -46;
const LOG_DELTA_MAX = 69;

/**
 * Shifted features carry e^(−c_q) (queries) and e^(−c_k) (keys); both cancel in the ratio except
 * through δ, so δ is handed over on the un-stabilised scale, δ·e^(−c_q−c_k): the ratio is then
 * exactly the un-stabilised one and does not depend on how c_k was chosen (a maximum over all
 * positions in the whole-sequence form, a running maximum in the recurrent one).
 */
function scaledDelta(delta: number, queryShift: tf.Tensor | undefined, keyShift: tf.Tensor | undefined): number | tf.Tensor {
  if (!queryShift && !keyShift) return delta;
  const logDelta = delta > 0 ? Math.log(delta) : -Infinity;
  let exponent: tf.Tensor = tf.scalar(logDelta);
  if (queryShift) exponent = tf.sub(exponent, queryShift);
  if (keyShift) exponent = tf.sub(exponent, keyShift);
  return tf.exp(tf.clipByValue(exponent, LOG_DELTA_MIN, LOG_DELTA_MAX));
}

function checkNormalization(maps: FeatureMaps, norm: Normalization): void {
  if (norm.clampMin !== undefined && maps.shiftedKeys) throw new Error('internal: clampMin cannot be combined with shifted features');
  if (maps.factors && maps.shiftedKeys) throw new Error('internal: product factors cannot be combined with shifted features');
}

/**
 * The whole-sequence form. Shifted keys are brought to one scale per (batch, head): c_k = the
 * maximum shift over positions, so every key feature is ≤ its row's unshifted maximum and nothing
 * overflows. (Padded keys take part in that maximum; the result does not depend on it.)
 */
export function featureMapAttention(
  maps: FeatureMaps,
  q: tf.Tensor4D,
  k: tf.Tensor4D,
  v: tf.Tensor4D,
  opts: Omit<ContractionOptions, 'delta'> & Normalization,
): tf.Tensor4D {
  checkNormalization(maps, opts);
  return tf.tidy(() => {
    if (maps.factors) {
      const { of, features } = maps.factors;
      return productLinearAttention(of(q), of(k), v, features, { ...opts, delta: opts.delta ?? 0 });
    }
    const query = maps.query(q, 0);
    const key = maps.key(k, 0);
    let keys = key.features;
    let keyShift: tf.Tensor | undefined;
    if (key.shift) {
      keyShift = maxWithoutGradient(key.shift, 2); // [B, H, 1, 1]; the shifts carry no gradient anyway
      keys = tf.mul(keys, tf.exp(tf.sub(key.shift, keyShift)));
    }
    const delta = opts.clampMin !== undefined ? undefined : scaledDelta(opts.delta ?? 0, query.shift, keyShift);
    return linearAttention(query.features, keys, v, { ...opts, delta });
  });
}

/**
 * State before position 0: sums [B, H, F, D+1] = 0 and, for shifted keys, keyShift [B, H, 1, 1] =
 * −∞ (the running maximum of the key shifts seen so far).
 */
export function initFeatureMapState(maps: FeatureMaps, batch: number, heads: number, headDim: number, maxLength: number): AttentionState {
  const tensors: Record<string, tf.Tensor> = { sums: tf.zeros([batch, heads, maps.featureDim, headDim + 1]) };
  if (maps.shiftedKeys) tensors.keyShift = tf.fill([batch, heads, 1, 1], -Infinity);
  return { maxLength, length: 0, tensors };
}

/**
 * The recurrent form at one position t: S_t = S_{t−1} + φ(k_t)[v_t, 1]ᵀ, out = φ(q_t)ᵀS_t normalised
 * as the contraction (δ or clampMin). Shifted keys: S is kept on the scale e^(−c_t), c_t = max of
 * the key shifts up to t; when c grows, S is rescaled by e^(c_{t−1} − c_t) ≤ 1, and φ(k_t) enters as
 * features·e^(shift_t − c_t) ≤ features. Every term is thus the un-stabilised one times e^(−c_t), the
 * same form as the whole-sequence contraction with c_t for c_k — and by scaledDelta the ratio does
 * not depend on that constant, so the outputs agree exactly (up to rounding), while nothing
 * overflows whatever the norms of later keys.
 */
export function featureMapStep(
  maps: FeatureMaps,
  q: tf.Tensor4D,
  k: tf.Tensor4D,
  v: tf.Tensor4D,
  state: AttentionState,
  norm: Normalization,
): { out: tf.Tensor4D; state: AttentionState } {
  checkNormalization(maps, norm);
  checkStepShapes(q, k, v, state);
  const position = state.length;
  const tensors = tf.tidy(() => {
    const [b, h, , d] = v.shape;
    const query = maps.query(q, position);
    const key = maps.key(k, position);
    let sums = state.tensors.sums;
    let keys = key.features;
    let keyShift: tf.Tensor | undefined;
    if (key.shift) {
      const previous = state.tensors.keyShift;
      keyShift = tf.maximum(previous, key.shift);
      sums = tf.mul(sums, tf.exp(tf.sub(previous, keyShift)));
      keys = tf.mul(keys, tf.exp(tf.sub(key.shift, keyShift)));
    }
    const valuesAndOnes = tf.concat([v, tf.ones([b, h, 1, 1])], 3);
    const f = maps.featureDim;
    sums = tf.add(sums, tf.reshape(batchMatMul(flattenHeads(keys), flattenHeads(valuesAndOnes), true, false), [b, h, f, d + 1]));
    const read = tf.reshape(batchMatMul(flattenHeads(query.features), flattenHeads(sums)), [b, h, 1, d + 1]);
    const numerator = tf.slice(read, [0, 0, 0, 0], [b, h, 1, d]);
    const denominator = tf.slice(read, [0, 0, 0, d], [b, h, 1, 1]);
    const guard = norm.clampMin !== undefined ? norm : { delta: scaledDelta(norm.delta ?? 0, query.shift, keyShift) };
    const out = tf.div(numerator, normalizeDenominator(denominator, guard));
    const kept: Record<string, tf.Tensor> = { out, sums };
    if (keyShift) kept.keyShift = keyShift;
    return kept;
  });
  const { out, ...next } = tensors;
  return { out: out as tf.Tensor4D, state: { maxLength: state.maxLength, length: position + 1, tensors: next } };
}

/** Fails unless q, k, v are one position [B, H, 1, D] and the state has room for it. */
export function checkStepShapes(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, state: AttentionState): void {
  for (const [label, t] of [['q', q], ['k', k], ['v', v]] as const) {
    if (t.rank !== 4 || t.shape[2] !== 1) throw new Error(`attention step: ${label} must be [batch, heads, 1, headDim] (got [${t.shape.join(', ')}])`);
  }
  if (state.length >= state.maxLength) {
    throw new Error(`attention step: position ${state.length} is past the state's maxLength ${state.maxLength}`);
  }
}

/** Fails for bidirectional mechanisms: decoding one position at a time needs causal attention. */
export function requireCausal(name: string, config: AttentionConfig): void {
  if (!config.causal) throw new Error(`attention '${name}': incremental decoding (initState/step) needs causal: true`);
}

/**
 * apply, initState and step of a kernel mechanism from its feature maps: `maps(totalLength)` gives
 * the maps for sequences of totalLength positions (only cosFormer's depend on it).
 */
export function featureMapMethods(
  name: string,
  config: AttentionConfig,
  maps: (totalLength: number) => FeatureMaps,
  opts: Normalization & { chunkSize: number },
): Pick<AttentionModule, 'apply' | 'initState' | 'step'> {
  const { chunkSize, ...norm } = opts;
  return {
    apply(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, applyOpts: ApplyOptions = {}) {
      return featureMapAttention(maps(q.shape[2]), q, k, v, { ...norm, causal: config.causal, chunkSize, keyMask: applyOpts.keyMask });
    },
    initState(batch: number, maxLength: number) {
      requireCausal(name, config);
      return initFeatureMapState(maps(maxLength), batch, config.numHeads, config.headDim, maxLength);
    },
    step(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, state: AttentionState, position: number) {
      checkPosition(state, position);
      return featureMapStep(maps(state.maxLength), q, k, v, state, norm);
    },
  };
}

/** The position passed to step must be the next one the state expects. */
export function checkPosition(state: AttentionState, position: number): void {
  if (position !== state.length) {
    throw new Error(`attention step: position ${position} given, but the state has consumed ${state.length} positions (steps must come in order)`);
  }
}
