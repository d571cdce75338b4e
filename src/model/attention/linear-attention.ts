// Linear attention for every kernel (feature-map) mechanism. A mechanism describes its features once
// (FeatureMaps); apply, initState and step all run from that description through one contraction
// (chunked.ts):
//
//   Y_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + δ)       j over all keys, or j ≤ i if causal
//
// apply runs the whole sequence as one segment under ordinary autodiff when its features fit a
// memory budget, and in segments with a recomputing gradient beyond it (segmented.ts), so a layer's
// memory grows linearly in L with a small constant. step decodes one or more positions from the
// recurrent state S = Σ_{j<t} φ(k_j)[v_j, 1]ᵀ, [B, H, F, D+1] — O(1) state and work per token — which
// is exactly the carry between segments.
import * as tf from '@tensorflow/tfjs';
import { currentDevice } from '../../backend/current.ts';
import { BOUNDS } from '../../core/bounds.ts';
import { untaped } from '../ops.ts';
import {
  accumulateKeys,
  bidirectionalBlock,
  bidirectionalWithinDocuments,
  causalSegment,
  EMPTY_SHIFT,
  readQueries,
  type Carry,
  type Normalization,
  type ProductFactors,
  type SegmentDocuments,
  type Side,
} from './chunked.ts';
import { bidirectionalRecomputed, causalRecomputed, causalSegments, type SegmentFunctions } from './segmented.ts';
import type { ApplyOptions, AttentionConfig, AttentionModule, AttentionState, DocumentLayout, OptionSpecs, StepOptions } from './types.ts';

export type { Normalization, ProductFactors } from './chunked.ts';

/**
 * One side's features. `shift` [B, H, L, 1] (row-stabilised positive random features): a log-scale
 * removed per row, the true features being features·e^shift; computed off the tape (untaped).
 */
export interface ScaledFeatures {
  features: tf.Tensor4D;
  shift?: tf.Tensor4D;
}

/** A kernel mechanism's feature maps, for sequences of a given total length (cosFormer's M). */
export interface FeatureMaps {
  /** F, the feature dimension. */
  featureDim: number;
  /** Whether key (and query) features come with a `shift`. */
  shiftedKeys: boolean;
  /**
   * A per-position map of q and k with trainable parameters (DARKFormer's M), run before everything
   * else under ordinary autodiff. query, key and factors must not read trainable variables: the
   * memory-bounded form recomputes them under its own gradient, which reaches only q, k and v.
   */
  prepare?(x: tf.Tensor4D): tf.Tensor4D;
  /**
   * x [B, H, L, d] holding positions start … start+L−1 (0-based) → features [B, H, L, F]. With document masking,
   * `positions` [B, L] gives each position's index within its document instead (cosFormer's reweighting restarts there).
   */
  query(q: tf.Tensor4D, start: number, positions?: tf.Tensor2D): ScaledFeatures;
  key(k: tf.Tensor4D, start: number, positions?: tf.Tensor2D): ScaledFeatures;
  /** Optional: the same (unshifted) features as ProductFactors, and how to expand them. */
  factors?: { of(x: tf.Tensor4D): ProductFactors; features(f: ProductFactors): tf.Tensor4D };
}

export interface ContractionOptions extends Normalization {
  causal: boolean;
  /** Chunk length of the causal form. */
  chunkSize: number;
  /** [B, L] 1/0: padded keys contribute nothing (and do not take part in the key stabiliser). */
  keyMask?: tf.Tensor2D;
  /** Positions per segment of the memory-bounded form; 0 or absent: see segmentLength. */
  segmentLength?: number;
  /** Document masking: queries see only keys of their own document (docs/attention.md, "Documents kept apart"). */
  documents?: DocumentLayout;
}

/**
 * The default memory policy. Autodiff of the contraction keeps ~12–26 tensors of F + C values per
 * position and head (features and a row of chunk scores; measured on wasm: 34 KB per position and
 * head for SLAY's F = 256, 4.8 KB for ELU+1's F = 32, at C = 64). A whole sequence runs as one
 * segment while B·H·L·(F + C) is within the device's budget (src/backend/device.ts): 2^22 on wasm (a
 * 4 GB heap) and cpu (≤ ~0.6 GB; every training shape of the CPU recipes), 2^26 on the native backend
 * (a GPU's memory; the GPT-2-small recipes at batch 8). Longer ones run in segments with B·H·S·(F + C) ≤ 2^20 (~150 MB of working memory:
 * 384 positions of SLAY at 8 heads), each recomputed in the backward pass.
 */
const SEGMENT_VALUES = 2 ** 20;
const wholeSequenceValues = () => currentDevice().kernels.wholeSequenceValues;

/**
 * Positions per segment for a sequence of `length`: `given` if set (> 0), else the whole sequence
 * within the backend's budget, else as many whole chunks as keep B·H·S·(F + C) within SEGMENT_VALUES
 * (at least one chunk).
 */
export function segmentLength(given: number | undefined, batch: number, heads: number, featureDim: number, chunkSize: number, length: number): number {
  if (given) return given;
  const perPosition = batch * heads * (featureDim + chunkSize);
  if (length * perPosition <= wholeSequenceValues()) return length;
  return chunkSize * Math.max(1, Math.floor(SEGMENT_VALUES / (perPosition * chunkSize)));
}

/** The options of the contraction every kernel mechanism takes (the registry validates them). */
export const contractionOptionSpecs: OptionSpecs = {
  chunkSize: { kind: 'int', default: 64, min: 1, max: BOUNDS.positions.max, doc: 'chunk length of the causal contraction' },
  segmentLength: {
    kind: 'int',
    default: 0,
    min: 0,
    max: BOUNDS.positions.max,
    doc: 'positions per segment of the memory-bounded form: longer sequences run segment by segment, saving one state per segment and recomputing each segment in the backward pass; 0 = the whole sequence while batch·heads·length·(features + chunkSize) ≤ 2²² (wasm, cpu; 2²⁶ on other backends), else whole chunks up to 2²⁰ such values (≥ the context length: never segmented)',
  },
};

/** chunkSize and segmentLength from resolved options. */
export const contractionOptions = (options: Record<string, unknown>) => ({
  chunkSize: options.chunkSize as number,
  segmentLength: options.segmentLength as number,
});

/** Keys' rows scaled by the mask [B, L] (padded keys contribute nothing). */
const maskRows = <T extends tf.Tensor4D>(x: T, keyMask: tf.Tensor2D | undefined): T => {
  if (!keyMask) return x;
  const [b, , l] = x.shape;
  return tf.mul(x, tf.reshape(keyMask, [b, 1, l, 1])) as T;
};

/** A Side whose explicit features are built once, on first use. */
function lazySide(build: () => tf.Tensor4D, rest: Omit<Side, 'features'> = {}): Side {
  let built: tf.Tensor4D | null = null;
  return { ...rest, features: () => (built ??= build()) };
}

/** Queries, or keys (with their mask), as the contraction consumes them. */
function sideOf(maps: FeatureMaps, x: tf.Tensor4D, start: number, role: 'query' | 'key', keyMask?: tf.Tensor2D, positions?: tf.Tensor2D): Side {
  const mask = role === 'key' ? keyMask : undefined;
  if (maps.factors) {
    const { of, features } = maps.factors;
    const raw = of(x);
    const factors = mask ? { a: maskRows(raw.a, mask), b: raw.b } : raw;
    return lazySide(() => features(factors), { factors });
  }
  const { features, shift } = role === 'key' ? maps.key(x, start, positions) : maps.query(x, start, positions);
  if (!mask) return { features: () => features, shift };
  // Padded keys get the empty shift: they do not set the scale of the keys a query sees.
  const maskedShift = shift && (untaped(() => tf.add(shift, tf.mul(tf.sub(1, tf.reshape(mask, [x.shape[0], 1, x.shape[2], 1])), EMPTY_SHIFT))) as tf.Tensor4D);
  return lazySide(() => maskRows(features, mask), { shift: maskedShift });
}

/**
 * Product factors score a block in Fa + Fb + D + 1 multiply-adds per pair; when one block over all
 * L positions costs no more per position than the chunked form (or, bidirectional, the sums: both
 * sides' features, the states and their read-out, F·(2D + 4)), it is used and no feature is built.
 */
function blockIsCheaper(q: Side, l: number, d: number, chunkSize: number | null): boolean {
  if (!q.factors) return false;
  const fa = q.factors.a.shape[3];
  const fb = q.factors.b.shape[3];
  const factorDim = fa + fb + d + 1;
  const chunked = chunkSize === null ? 0 : Math.min(chunkSize, l) * factorDim;
  return l * factorDim <= chunked + fa * fb * (2 * d + 4);
}

/** Columns start … start+length−1 of a [B, L] tensor. */
export const columns = (x: tf.Tensor2D, start: number, length: number) =>
  length === x.shape[1] ? x : (tf.slice(x, [0, start], [x.shape[0], length]) as tf.Tensor2D);

/**
 * The documents of a run of positions: `documents` covers positions `offset` … (the whole sequence: offset 0; a decoding
 * step: its own positions), `before` [B, 1] is the document of the position before them (a decoding state's).
 */
interface DocumentsOfRun {
  layout: DocumentLayout;
  offset: number;
  before?: tf.Tensor2D;
}

/** The contraction of one segment, from the maps (positions are relative to the sequence the key mask covers). */
function segmentFunctions(maps: FeatureMaps, chunkSize: number, norm: Normalization, keyMask?: tf.Tensor2D, documents?: DocumentsOfRun): SegmentFunctions {
  const maskAt = (start: number, length: number) => keyMask && columns(keyMask, start, length);
  const positionsAt = (start: number, length: number) => documents && columns(documents.layout.positions, start - documents.offset, length);
  const documentsAt = (start: number, length: number): SegmentDocuments | undefined => {
    if (!documents) return undefined;
    const at = start - documents.offset;
    const ids = documents.layout.ids;
    return { ids: columns(ids, at, length), before: at > 0 ? columns(ids, at - 1, 1) : documents.before };
  };
  const query = (q: tf.Tensor4D, start: number) => sideOf(maps, q, start, 'query', undefined, positionsAt(start, q.shape[2]));
  const key = (k: tf.Tensor4D, start: number) => sideOf(maps, k, start, 'key', maskAt(start, k.shape[2]), positionsAt(start, k.shape[2]));
  return {
    causal(q, k, v, carry, start, wantCarry) {
      const qs = query(q, start);
      const whole = !carry && !wantCarry && blockIsCheaper(qs, q.shape[2], v.shape[3], chunkSize);
      return causalSegment(qs, key(k, start), v, carry, whole ? q.shape[2] : chunkSize, norm, wantCarry, documentsAt(start, q.shape[2]));
    },
    accumulate: (k, v, carry, start) => accumulateKeys(key(k, start), v, carry),
    read: (q, carry, start) => readQueries(query(q, start), carry, norm),
  };
}

function checkNormalization(maps: FeatureMaps, norm: Normalization): void {
  if (norm.clampMin !== undefined && maps.shiftedKeys) throw new Error('internal: clampMin cannot be combined with shifted features');
  if (maps.factors && maps.shiftedKeys) throw new Error('internal: product factors cannot be combined with shifted features');
}

/**
 * The whole-sequence form: q, k, v [B, H, L, ·] → [B, H, L, D]. One segment under ordinary autodiff
 * while segmentLength allows, else segments with the recomputing gradient.
 */
export function featureMapAttention(maps: FeatureMaps, q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, opts: ContractionOptions): tf.Tensor4D {
  checkNormalization(maps, opts);
  return tf.tidy(() => {
    const [b, h, l, d] = v.shape;
    const [qq, kk] = maps.prepare ? [maps.prepare(q), maps.prepare(k)] : [q, k];
    const norm = { delta: opts.delta, clampMin: opts.clampMin };
    const documents = opts.documents && { layout: opts.documents, offset: 0 };
    const fns = segmentFunctions(maps, opts.chunkSize, norm, opts.keyMask, documents);
    const positions = opts.documents?.positions;
    if (!opts.causal && opts.documents) {
      // Within documents, bidirectional: one block masked by document (not the segmented form).
      return bidirectionalWithinDocuments(
        sideOf(maps, qq, 0, 'query', undefined, positions),
        sideOf(maps, kk, 0, 'key', opts.keyMask, positions),
        v,
        norm,
        opts.documents.ids,
      );
    }
    const segment = segmentLength(opts.segmentLength, b, h, maps.featureDim, opts.chunkSize, l);
    if (l > segment) return (opts.causal ? causalRecomputed(fns, segment) : bidirectionalRecomputed(fns, segment))(qq, kk, v);
    if (opts.causal) return fns.causal(qq, kk, v, null, 0, false).out;
    const qs = sideOf(maps, qq, 0, 'query');
    const ks = sideOf(maps, kk, 0, 'key', opts.keyMask);
    return blockIsCheaper(qs, l, d, null) ? bidirectionalBlock(qs, ks, v, norm) : readQueries(qs, accumulateKeys(ks, v, null), norm);
  });
}

/** Maps of features given as they are (the contraction alone). */
const givenFeatures = (featureDim: number): FeatureMaps => {
  const side = (x: tf.Tensor4D) => ({ features: x });
  return { featureDim, shiftedKeys: false, query: side, key: side };
};

/** The contraction of given features phiQ, phiK [B, H, L, F] with v [B, H, L, D]. */
export function linearAttention(phiQ: tf.Tensor4D, phiK: tf.Tensor4D, v: tf.Tensor4D, opts: ContractionOptions): tf.Tensor4D {
  return featureMapAttention(givenFeatures(phiQ.shape[3]), phiQ, phiK, v, opts);
}

/** The contraction of given product factors; `features` expands them (concat_r a ⊗ b_r). */
export function productLinearAttention(
  q: ProductFactors,
  k: ProductFactors,
  v: tf.Tensor4D,
  features: (f: ProductFactors) => tf.Tensor4D,
  opts: ContractionOptions,
): tf.Tensor4D {
  return tf.tidy(() => {
    const fa = q.a.shape[3];
    const fb = q.b.shape[3];
    // The maps take one input per side: the two factors side by side.
    const split = (x: tf.Tensor4D) => {
      const [a, b] = tf.split(x, [fa, fb], 3) as tf.Tensor4D[];
      return { a, b };
    };
    const maps: FeatureMaps = { ...givenFeatures(fa * fb), factors: { of: split, features } };
    const joined = (f: ProductFactors) => tf.concat([f.a, f.b], 3) as tf.Tensor4D;
    return featureMapAttention(maps, joined(q), joined(k), v, opts);
  });
}

/**
 * State before position 0: sums [B, H, F, D+1] = 0 and, for shifted keys, keyShift [B, H, 1, 1] =
 * EMPTY_SHIFT (the running maximum of the key shifts seen so far). A step with documents adds
 * `document` [B, 1], the document of the last position consumed (the one the sums belong to).
 */
export function initFeatureMapState(maps: FeatureMaps, batch: number, heads: number, headDim: number, maxLength: number): AttentionState {
  const tensors: Record<string, tf.Tensor> = { sums: tf.zeros([batch, heads, maps.featureDim, headDim + 1]) };
  if (maps.shiftedKeys) tensors.keyShift = tf.fill([batch, heads, 1, 1], EMPTY_SHIFT);
  return { maxLength, length: 0, tensors };
}

/**
 * The recurrent form: positions t … t+n−1 from the state after t positions — the causal
 * contraction of those positions with the state as its carry (in segments when they are many), so
 * the outputs equal the whole-sequence apply's and the state after them is the carry it hands on.
 */
export function featureMapStep(
  maps: FeatureMaps,
  q: tf.Tensor4D,
  k: tf.Tensor4D,
  v: tf.Tensor4D,
  state: AttentionState,
  opts: Normalization & { chunkSize: number; segmentLength?: number },
  stepOpts: StepOptions = {},
): { out: tf.Tensor4D; state: AttentionState } {
  checkNormalization(maps, opts);
  checkStepShapes(q, k, v, state);
  const layout = stepOpts.documents;
  if (layout) checkStepDocuments(layout, q);
  const position = state.length;
  const tensors = tf.tidy(() => {
    const [b, h, n] = v.shape;
    const [qq, kk] = maps.prepare ? [maps.prepare(q), maps.prepare(k)] : [q, k];
    const norm = { delta: opts.delta, clampMin: opts.clampMin };
    // Before any position the state belongs to no document (−1: a first position never continues it).
    const before = layout && ((state.tensors.document as tf.Tensor2D | undefined) ?? (tf.fill([b, 1], -1) as tf.Tensor2D));
    const fns = segmentFunctions(maps, opts.chunkSize, norm, undefined, layout && { layout, offset: position, before });
    const carry: Carry = { sums: state.tensors.sums as tf.Tensor4D, shift: state.tensors.keyShift as tf.Tensor4D | undefined };
    const segment = segmentLength(opts.segmentLength, b, h, maps.featureDim, opts.chunkSize, n);
    const result = causalSegments(fns, [qq, kk, v], carry, position, segment, true);
    const kept: Record<string, tf.Tensor> = { out: result.out, sums: result.carry!.sums };
    if (result.carry!.shift) kept.keyShift = result.carry!.shift;
    if (layout) kept.document = tf.clone(columns(layout.ids, n - 1, 1));
    return kept;
  });
  const { out, ...next } = tensors;
  return { out: out as tf.Tensor4D, state: { maxLength: state.maxLength, length: position + q.shape[2], tensors: next } };
}

/** Fails unless q, k, v are [B, H, n, D] with the same n ≥ 1 and the state has room for n more positions. */
export function checkStepShapes(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor, state: AttentionState): void {
  for (const [label, t] of [
    ['q', q],
    ['k', k],
    ['v', v],
  ] as const) {
    if (t.rank !== 4 || !(q.shape[2]! >= 1) || t.shape[2] !== q.shape[2]) {
      throw new Error(`attention step: ${label} must be [batch, heads, n, headDim] with the same n ≥ 1 as q (got [${t.shape.join(', ')}])`);
    }
  }
  const n = q.shape[2]!;
  if (state.length + n > state.maxLength) {
    const which = n === 1 ? `position ${state.length}` : `positions ${state.length} … ${state.length + n - 1}`;
    throw new Error(`attention step: ${which} past the state's maxLength ${state.maxLength}`);
  }
}

/** Fails unless a step's documents cover its n positions of its B rows. */
export function checkStepDocuments(documents: DocumentLayout, q: tf.Tensor4D): void {
  const [b, , n] = q.shape;
  for (const [label, t] of [
    ['ids', documents.ids],
    ['positions', documents.positions],
  ] as const) {
    if (t.rank !== 2 || t.shape[0] !== b || t.shape[1] !== n) {
      throw new Error(`attention step: documents.${label} must be [batch, n] = [${b}, ${n}] (got [${t.shape.join(', ')}])`);
    }
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
  opts: Normalization & { chunkSize: number; segmentLength?: number },
): Pick<AttentionModule, 'apply' | 'initState' | 'step'> {
  return {
    apply(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, applyOpts: ApplyOptions = {}) {
      return featureMapAttention(maps(q.shape[2]), q, k, v, { ...opts, causal: config.causal, keyMask: applyOpts.keyMask, documents: applyOpts.documents });
    },
    initState(batch: number, maxLength: number) {
      requireCausal(name, config);
      return initFeatureMapState(maps(maxLength), batch, config.numHeads, config.headDim, maxLength);
    },
    step(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, state: AttentionState, position: number, stepOpts?: StepOptions) {
      checkPosition(state, position);
      return featureMapStep(maps(state.maxLength), q, k, v, state, opts, stepOpts);
    },
  };
}

/** The position passed to step must be the next one the state expects. */
export function checkPosition(state: AttentionState, position: number): void {
  if (position !== state.length) {
    throw new Error(`attention step: position ${position} given, but the state has consumed ${state.length} positions (steps must come in order)`);
  }
}
