// The linear-attention contraction over one segment of positions, written once for every kernel
// (feature-map) mechanism and every form built from it (whole sequence, memory-bounded segments,
// decoding):
//
//   Y_i = φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ / (φ(q_i)ᵀ Σ_j φ(k_j) + δ)       j over all keys, or j ≤ i if causal
//
// The denominator rides along as an extra value column of ones. A segment starts from a carry, the
// sums Σ_j φ(k_j)[v_j, 1]ᵀ of every earlier position [B, H, F, D+1] (the decoding state), and may
// hand on its own. The causal form is chunkwise-parallel (flash-linear-attention's chunk form):
// inside a chunk of C positions a masked C×C product; the state entering each chunk is the carry
// plus an exclusive prefix sum of the per-chunk states φ(K_c)ᵀ[V_c, 1], all chunks at once with no
// loop. Memory O(B·H·(S/C)·F·D) for the states plus O(B·H·S·C) for the score blocks.
//
// Row-stabilised positive random features (Performer, DARKFormer) come with a shift c per row, the
// true features being features·e^c. Queries keep their own row shift (it cancels in the ratio);
// keys must share a scale with every key a query sees, and a query may see only keys up to itself.
// So query i uses a_i = max_{j ≤ i} c_j, the running maximum of the key shifts (carry included), and
// every term is rescaled by an exponent ≤ 0: e^(c_j − a_i) inside a chunk, e^(A_n − a_i) for the
// state entering chunk n (kept on the scale A_n = max of the shifts before the chunk), e^(b_m − A_n)
// to bring chunk m's state (scale b_m, its own maximum) to A_n. Nothing overflows, no later key
// changes an earlier row, and δ goes in as δ·e^(−c_q − a_i): the ratio is then exactly the
// un-stabilised one, whatever the shifts (decoding reaches the same a_i position by position). The
// maxima are computed off the autodiff tape: the output does not depend on them.
//
// Document masking (docs/attention.md, "Documents kept apart"): with each position's document id
// (non-decreasing along a row), a query sees only keys of its own document. Inside a chunk the score
// block is masked block-diagonally; across chunks the running state is reset at a boundary: chunk
// m's state sums only its keys of the document of its last position, chunk n's entering state
// adds the states of chunks ending in the document of the position before it (and the carry when
// it belongs there too), and only a query of that document reads it. The key scale of shifted
// features stays the running maximum over every earlier key: a scale only, the ratio is unchanged.
import * as tf from '@tensorflow/tfjs';
import { batchMatMul, flattenHeads, safeDivide, untaped } from '../ops.ts';
import { fusedCausalFactorAttention, fusedLinearNormalize } from '../fused.ts';

/** Features given as a tensor product φ(u) = concat_r a(u) ⊗ b_r(u): a [B, H, L, Fa], b = concat_r b_r [B, H, L, Fb]. */
export interface ProductFactors {
  a: tf.Tensor4D;
  b: tf.Tensor4D;
}

/** One side (queries or keys) of a segment, as the contraction consumes it. */
export interface Side {
  /** Explicit features [B, H, S, F] (row-stabilised when `shift` is set); built on first use. */
  features(): tf.Tensor4D;
  /** The same features as product factors: a block of scores then costs Fa + Fb multiply-adds per pair instead of Fa·Fb. */
  factors?: ProductFactors;
  /** [B, H, S, 1]: the log-scale removed from each row (a constant, off the tape). */
  shift?: tf.Tensor4D;
}

/** The running sums of a segment's predecessors (= the decoding state), on the scale e^(−shift) for shifted keys. */
export interface Carry {
  sums: tf.Tensor4D;
  /** [B, H, 1, 1]: the largest key shift so far (EMPTY_SHIFT before any key). */
  shift?: tf.Tensor4D;
}

export interface Normalization {
  /** Added to the denominator (on the un-stabilised scale). */
  delta?: number;
  /** Instead of adding δ, clamp the denominator from below (signed features, e.g. SchoenbAt). */
  clampMin?: number;
}

/** The documents of a segment's positions (document masking). */
export interface SegmentDocuments {
  /** [B, S]: each position's document id, ≥ 0 and non-decreasing along a row. */
  ids: tf.Tensor2D;
  /** [B, 1]: the document of the position before the segment, the one the carry's sums belong to (with a carry). */
  before?: tf.Tensor2D;
}

/** The shift of "no key yet" and of padded keys: e^(EMPTY_SHIFT − c) = 0 for any real c, with no ∞ − ∞. */
export const EMPTY_SHIFT = -1e30;
/**
 * Bounds of the rescaled δ·e^(−c_q − a). Upper: e^69 only where the true denominator is < 1e−30·δ,
 * i.e. where the output is 0 to float precision anyway. Lower: the smallest normal float32, so a row
 * whose every term underflows divides 0 by a positive number; it never changes a denominator that
 * is itself a normal float32.
 */
const LOG_DELTA_MAX = 69;
const SMALLEST_NORMAL = 2 ** -126;

/**
 * [n, n] `inside` where j ≤ i (strict: j < i), else `outside`. Built per call (n² values), not
 * cached: sizes vary with segments and decoding blocks.
 */
const lowerTriangle = (n: number, strict: boolean, inside: number, outside: number) =>
  tf.tensor2d(
    Float32Array.from({ length: n * n }, (_, e) => (e % n <= Math.floor(e / n) - (strict ? 1 : 0) ? inside : outside)),
    [n, n],
  );
/** The causal 0/1 mask. */
const lowerOnes = (n: number, strict = false) => lowerTriangle(n, strict, 1, 0);
/** Added before a maximum over j: a masked maximum. */
const lowerShifts = (n: number, strict = false) => lowerTriangle(n, strict, 0, EMPTY_SHIFT);

/** v [B, H, S, D] → [v, 1] [B, H, S, D+1]. */
const withOnes = (v: tf.Tensor4D) => {
  const [b, h, s] = v.shape;
  return tf.concat([v, tf.ones([b, h, s, 1])], 3) as tf.Tensor4D;
};

/** Score blocks [N, C, C] of the chunks `cut` makes, from factors when both sides have them. */
function scoreBlocks(q: Side, k: Side, cut: (x: tf.Tensor4D) => tf.Tensor3D): tf.Tensor3D {
  if (q.factors && k.factors) {
    return tf.mul(batchMatMul(cut(q.factors.a), cut(k.factors.a), false, true), batchMatMul(cut(q.factors.b), cut(k.factors.b), false, true));
  }
  return batchMatMul(cut(q.features()), cut(k.features()), false, true);
}

/**
 * Σ_{j ≤ i} of scores·[v, 1] within each chunk (`values` = the chunks of [v, 1]): for tensor-product features one fused
 * kernel where the backend has it, which takes v itself and whose products skip the masked key tiles (model/fused.ts).
 */
function withinChunks(
  q: Side,
  k: Side,
  v: tf.Tensor4D,
  values: () => tf.Tensor3D,
  cut: (x: tf.Tensor4D) => tf.Tensor3D,
  c: number,
  scales: CausalScales | null,
  masks: DocumentMasks | null,
): tf.Tensor3D {
  const attention = q.factors && k.factors && !scales && !masks ? fusedCausalFactorAttention() : null;
  if (attention && q.factors && k.factors) return attention(cut(q.factors.a), cut(k.factors.a), cut(q.factors.b), cut(k.factors.b), cut(v));
  // The scores within chunks under the causal mask (or the shifted keys' rescaling, which holds it), and within documents.
  const causal = scales ? scales.intra : lowerOnes(c);
  return batchMatMul(tf.mul(scoreBlocks(q, k, cut), masks ? tf.mul(causal, masks.same) : causal), values());
}

/** [num, den] [B, H, S, D+1] → num / den, den normalised by δ (or its rescaled form) or clampMin; a constant δ by one fused op where the backend has it. */
function normalize(raw: tf.Tensor4D, norm: Normalization, scaledDelta?: tf.Tensor): tf.Tensor4D {
  const fused = norm.clampMin === undefined && !scaledDelta ? fusedLinearNormalize(norm.delta ?? 0) : null;
  if (fused) return fused(raw) as tf.Tensor4D;
  const [b, h, s, dv] = raw.shape;
  const numerator = tf.slice(raw, [0, 0, 0, 0], [b, h, s, dv - 1]);
  const denominator = tf.slice(raw, [0, 0, 0, dv - 1], [b, h, s, 1]);
  let guarded: tf.Tensor;
  if (norm.clampMin !== undefined) guarded = tf.maximum(denominator, norm.clampMin);
  else guarded = tf.add(denominator, scaledDelta ?? norm.delta ?? 0);
  return safeDivide(numerator, guarded) as tf.Tensor4D;
}

/** δ·e^(−c_q − a), bounded (see LOG_DELTA_MAX): a [B, H, S, 1] or [B, H, 1, 1], the keys' scale. */
function rescaledDelta(delta: number, queryShift: tf.Tensor, keyScale: tf.Tensor): tf.Tensor {
  const logDelta = delta > 0 ? Math.log(delta) : -Infinity;
  return tf.maximum(tf.exp(tf.minimum(tf.sub(tf.sub(logDelta, queryShift), keyScale), LOG_DELTA_MAX)), SMALLEST_NORMAL);
}

/** The rescalings of the causal form for shifted keys (see the top of the file); all constants. */
interface CausalScales {
  /** [N, C, C]: e^(c_j − a_i) for j ≤ i within the chunk, 0 above the diagonal. */
  intra: tf.Tensor3D;
  /** [B, H, S, 1]: e^(c_j − b_m), key j of chunk m brought to its chunk's scale. */
  keyScale: tf.Tensor4D;
  /** [BH, nC, nC]: e^(b_m − A_n) for m < n, else 0. */
  combine: tf.Tensor3D;
  /** [BH, nC, 1]: e^(shiftIn − A_n), the carry brought to each chunk's entering scale. */
  carryIn: tf.Tensor3D;
  /** [N, C, 1]: e^(A_n − a_i). */
  read: tf.Tensor3D;
  /** [BH, 1, nC] and [BH, 1, 1]: chunks and carry brought to the outgoing scale. */
  total: tf.Tensor3D;
  carryOut: tf.Tensor3D;
  shiftOut: tf.Tensor4D;
  /** [B, H, S, 1]: δ·e^(−c_q − a_i). */
  delta: tf.Tensor4D;
}

function causalScales(
  queryShift: tf.Tensor4D,
  keyShift: tf.Tensor4D,
  carryShift: tf.Tensor4D | undefined,
  c: number,
  chunks: number,
  delta: number,
  masks: DocumentMasks | null,
): CausalScales {
  return untaped(() => {
    const [b, h, s] = keyShift.shape;
    const bh = b * h;
    const padded = chunks * c;
    const keys = tf.reshape(
      padded === s
        ? keyShift
        : tf.pad(
            keyShift,
            [
              [0, 0],
              [0, 0],
              [0, padded - s],
              [0, 0],
            ],
            EMPTY_SHIFT,
          ),
      [bh * chunks, 1, c],
    );
    // With documents every maximum runs over the keys of the query's own document only (masks: see documentMasks),
    // so that a document's scale is its own, as when it runs alone.
    const within = tf.max(tf.add(keys, masks ? hiddenWhereZero(tf.mul(lowerOnes(c), masks.same)) : lowerShifts(c)), -1, true); // [N, C, 1]: max of c_j over j ≤ i in the chunk
    const chunkMax = tf.reshape(tf.slice(tf.reshape(within, [bh, chunks, c]), [0, 0, c - 1], [bh, chunks, 1]), [bh, 1, chunks]); // b_m
    const incoming = carryShift ? tf.reshape(carryShift, [bh, 1, 1]) : tf.fill([bh, 1, 1], EMPTY_SHIFT);
    const before = tf.reshape(tf.max(tf.add(chunkMax, masks ? hiddenWhereZero(masks.combine) : lowerShifts(chunks, true)), -1), [bh, chunks, 1]); // max over m < n
    const entering = tf.maximum(before, masks ? tf.add(incoming, hiddenWhereZero(masks.carryIn)) : incoming); // A_n [BH, nC, 1]
    const enteringRows = tf.reshape(entering, [bh * chunks, 1, 1]);
    const running = tf.maximum(within, masks ? tf.add(enteringRows, hiddenWhereZero(masks.read)) : enteringRows); // a_i [N, C, 1]
    // Exponents are ≤ 0 where the mask keeps them; the minimum keeps the masked ones finite too.
    const decay = (x: tf.Tensor) => tf.exp(tf.minimum(x, 0));
    const shiftOut = masks
      ? tf.maximum(tf.add(incoming, hiddenWhereZero(masks.carryOut)), tf.max(tf.add(chunkMax, hiddenWhereZero(masks.total)), -1, true))
      : tf.maximum(incoming, tf.max(chunkMax, -1, true)); // [BH, 1, 1]
    const runningRows = tf.reshape(running, [b, h, padded, 1]);
    const queryRunning = padded === s ? runningRows : tf.slice(runningRows, [0, 0, 0, 0], [b, h, s, 1]);
    const keyScale = tf.reshape(decay(tf.sub(tf.reshape(keys, [bh, chunks, c]), tf.reshape(chunkMax, [bh, chunks, 1]))), [b, h, padded, 1]);
    return {
      intra: tf.mul(decay(tf.sub(keys, running)), lowerOnes(c)) as tf.Tensor3D,
      keyScale: (padded === s ? keyScale : tf.slice(keyScale, [0, 0, 0, 0], [b, h, s, 1])) as tf.Tensor4D,
      combine: tf.mul(decay(tf.sub(chunkMax, entering)), lowerOnes(chunks, true)) as tf.Tensor3D,
      carryIn: decay(tf.sub(incoming, entering)) as tf.Tensor3D,
      read: decay(tf.sub(enteringRows, running)) as tf.Tensor3D,
      total: decay(tf.sub(chunkMax, shiftOut)) as tf.Tensor3D,
      carryOut: decay(tf.sub(incoming, shiftOut)) as tf.Tensor3D,
      shiftOut: tf.reshape(shiftOut, [b, h, 1, 1]) as tf.Tensor4D,
      delta: rescaledDelta(delta, queryShift, queryRunning) as tf.Tensor4D,
    };
  });
}

/** 0 where a 0/1 mask is 1, EMPTY_SHIFT where it is 0: added before a maximum, a masked maximum. */
const hiddenWhereZero = (mask01: tf.Tensor) => tf.mul(tf.sub(1, mask01), EMPTY_SHIFT);

/** The 0/1 masks of document masking in the causal form (see the top of the file); all constants. */
interface DocumentMasks {
  /** [N, C, C]: key j and query i of a chunk in the same document. */
  same: tf.Tensor3D;
  /** [N, C, 1]: the key belongs to the document of its chunk's last position (counts in the chunk's state). */
  tail: tf.Tensor3D;
  /** [BH, nC, nC]: chunk m (< n) ends in the document of the position before chunk n. */
  combine: tf.Tensor3D;
  /** [BH, nC, 1]: the carry belongs to the document of the position before chunk n. */
  carryIn: tf.Tensor3D;
  /** [N, C, 1]: the query belongs to the document of the position before its chunk (it reads the entering state). */
  read: tf.Tensor3D;
  /** [BH, 1, nC] and [BH, 1, 1]: chunks and carry in the document of the segment's last position (the outgoing carry). */
  total: tf.Tensor3D;
  carryOut: tf.Tensor3D;
}

const equalAsOnes = (a: tf.Tensor, b: tf.Tensor) => tf.cast(tf.equal(a, b), 'float32');

/** [B, S] document ids → [B·H, S] (each head sees its row's documents). */
const idsPerHead = (ids: tf.Tensor2D, heads: number) => {
  const [b, s] = ids.shape;
  return tf.reshape(tf.tile(tf.reshape(ids, [b, 1, s]), [1, heads, 1]), [b * heads, s]) as tf.Tensor2D;
};

function documentMasks(docs: SegmentDocuments, heads: number, c: number, chunks: number): DocumentMasks {
  return untaped(() => {
    const [b, s] = docs.ids.shape;
    const bh = b * heads;
    const padded = chunks * c;
    // Padding repeats the last document: padded keys are zero, and the last chunk still ends in the last real document.
    const last = tf.slice(docs.ids, [0, s - 1], [b, 1]);
    const ids = padded === s ? docs.ids : tf.concat([docs.ids, tf.tile(last, [1, padded - s])], 1);
    const byChunk = tf.reshape(idsPerHead(ids as tf.Tensor2D, heads), [bh, chunks, c]);
    const rows = tf.reshape(byChunk, [bh * chunks, c, 1]);
    const ends = tf.reshape(tf.slice(byChunk, [0, 0, c - 1], [bh, chunks, 1]), [bh, chunks]);
    const before = docs.before ? idsPerHead(docs.before, heads) : tf.fill([bh, 1], -1);
    const entering = chunks > 1 ? tf.concat([before, tf.slice(ends, [0, 0], [bh, chunks - 1])], 1) : before; // [BH, nC]
    const lastEnd = tf.slice(ends, [0, chunks - 1], [bh, 1]);
    return {
      same: equalAsOnes(rows, tf.reshape(rows, [bh * chunks, 1, c])) as tf.Tensor3D,
      tail: tf.reshape(equalAsOnes(byChunk, tf.reshape(ends, [bh, chunks, 1])), [bh * chunks, c, 1]) as tf.Tensor3D,
      combine: tf.mul(equalAsOnes(tf.reshape(entering, [bh, chunks, 1]), tf.reshape(ends, [bh, 1, chunks])), lowerOnes(chunks, true)) as tf.Tensor3D,
      carryIn: tf.reshape(equalAsOnes(entering, before), [bh, chunks, 1]) as tf.Tensor3D,
      read: tf.reshape(equalAsOnes(byChunk, tf.reshape(entering, [bh, chunks, 1])), [bh * chunks, c, 1]) as tf.Tensor3D,
      total: tf.reshape(equalAsOnes(ends, lastEnd), [bh, 1, chunks]) as tf.Tensor3D,
      carryOut: tf.reshape(equalAsOnes(before, lastEnd), [bh, 1, 1]) as tf.Tensor3D,
    };
  });
}

/** The carry kept only where the first position of `docs` continues the carry's document: a boundary empties it (sums 0, no shift). */
function carryWithinDocument(carry: Carry, docs: SegmentDocuments): Carry {
  const [b] = docs.ids.shape;
  const kept = untaped(() => tf.reshape(equalAsOnes(tf.slice(docs.ids, [0, 0], [b, 1]), docs.before!), [b, 1, 1, 1]));
  const shift = carry.shift && (untaped(() => tf.add(tf.mul(carry.shift!, kept), hiddenWhereZero(kept))) as tf.Tensor4D);
  return { sums: tf.mul(carry.sums, kept) as tf.Tensor4D, ...(shift ? { shift } : {}) };
}

/**
 * The causal form over one segment: queries and keys of the same positions, values v [B, H, S, D],
 * the carry of earlier positions (null = none). Returns the normalised outputs and, with wantCarry,
 * the carry after the segment.
 */
export function causalSegment(
  q: Side,
  k: Side,
  v: tf.Tensor4D,
  carry: Carry | null,
  chunkSize: number,
  norm: Normalization,
  wantCarry = false,
  docs?: SegmentDocuments,
): { out: tf.Tensor4D; carry?: Carry } {
  const [b, h, s, d] = v.shape;
  if (s === 1 && carry) {
    // One position after others (decoding): its key joins the carry, then its query reads the carry —
    // the same sums and scale as the general form below, in a third of the ops.
    const next = accumulateKeys(k, v, docs ? carryWithinDocument(carry, docs) : carry);
    return { out: readQueries(q, next, norm), carry: wantCarry ? next : undefined };
  }
  const dv = d + 1;
  const c = Math.min(chunkSize, s);
  const chunks = Math.ceil(s / c);
  const padded = chunks * c;
  const bh = b * h;
  // Zero-padding at the end is harmless: padded keys come after every real query.
  const cut = (x: tf.Tensor4D) =>
    tf.reshape(
      padded === s
        ? x
        : tf.pad(x, [
            [0, 0],
            [0, 0],
            [0, padded - s],
            [0, 0],
          ]),
      [bh * chunks, c, x.shape[3]],
    ) as tf.Tensor3D;
  let withOnesCut: tf.Tensor3D | undefined;
  const values = () => (withOnesCut ??= cut(withOnes(v)));
  const masks = docs ? documentMasks(docs, h, c, chunks) : null;
  const scales = k.shift ? causalScales(q.shift!, k.shift, carry?.shift, c, chunks, norm.delta ?? 0, masks) : null;

  let out = withinChunks(q, k, v, values, cut, c, scales, masks);
  let next: Carry | undefined;
  if (chunks > 1 || carry || wantCarry) {
    const keys = scales ? (tf.mul(k.features(), scales.keyScale) as tf.Tensor4D) : k.features();
    const f = keys.shape[3];
    const keyChunks = masks ? tf.mul(cut(keys), masks.tail) : cut(keys);
    const perChunk = tf.reshape(batchMatMul(keyChunks, values(), true, false), [bh, chunks, f * dv]) as tf.Tensor3D; // φ(K_m)ᵀ[V_m, 1]
    const entering = statesEnteringChunks(perChunk, carry, scales, masks);
    if (entering) {
      let read = batchMatMul(cut(q.features()), tf.reshape(entering, [bh * chunks, f, dv]));
      if (scales) read = tf.mul(read, scales.read);
      if (masks) read = tf.mul(read, masks.read);
      out = tf.add(out, read);
    }
    if (wantCarry) next = carryAfter(perChunk, carry, scales, masks, [b, h, f, dv]);
  }
  const full = tf.reshape(out, [b, h, padded, dv]) as tf.Tensor4D;
  const raw = padded === s ? full : (tf.slice(full, [0, 0, 0, 0], [b, h, s, dv]) as tf.Tensor4D);
  return { out: normalize(raw, norm, scales?.delta), carry: next };
}

/**
 * The state entering each chunk [BH, nC, F·(D+1)]: the carry plus Σ_{m<n} of the chunk states
 * perChunk [BH, nC, F·(D+1)], rescaled for shifted keys; null when there is neither.
 */
function statesEnteringChunks(perChunk: tf.Tensor3D, carry: Carry | null, scales: CausalScales | null, masks: DocumentMasks | null): tf.Tensor | null {
  const [bh, chunks, width] = perChunk.shape;
  let entering: tf.Tensor | null = null;
  if (chunks > 1) {
    const combine = scales && masks ? tf.mul(scales.combine, masks.combine) : (scales?.combine ?? masks?.combine);
    // tfjs's cumsum gradient works only on the last axis, so the chunk axis is moved last.
    entering = combine ? batchMatMul(combine, perChunk) : tf.transpose(tf.cumsum(tf.transpose(perChunk, [0, 2, 1]), 2, true), [0, 2, 1]);
  }
  if (carry) {
    let incoming: tf.Tensor = tf.reshape(carry.sums, [bh, 1, width]);
    if (scales) incoming = tf.mul(incoming, scales.carryIn);
    if (masks) incoming = tf.mul(incoming, masks.carryIn);
    entering = entering ? tf.add(entering, incoming) : incoming;
  }
  return entering;
}

/** The carry after the segment, shaped [B, H, F, D+1]: the incoming carry plus every chunk state, on the outgoing scale. */
function carryAfter(
  perChunk: tf.Tensor3D,
  carry: Carry | null,
  scales: CausalScales | null,
  masks: DocumentMasks | null,
  shape: [number, number, number, number],
): Carry {
  const [bh, , width] = perChunk.shape;
  const total = scales && masks ? tf.mul(scales.total, masks.total) : (scales?.total ?? masks?.total);
  let sums: tf.Tensor = total ? batchMatMul(total, perChunk) : tf.sum(perChunk, 1, true);
  if (carry) {
    let incoming: tf.Tensor = tf.reshape(carry.sums, [bh, 1, width]);
    if (scales) incoming = tf.mul(incoming, scales.carryOut);
    if (masks) incoming = tf.mul(incoming, masks.carryOut);
    sums = tf.add(sums, incoming);
  }
  return { sums: tf.reshape(sums, shape) as tf.Tensor4D, ...(scales ? { shift: scales.shiftOut } : {}) };
}

/** Bidirectional: the carry plus every key of the segment, Σ_j φ(k_j)[v_j, 1]ᵀ (shifted keys brought to their largest shift). */
export function accumulateKeys(k: Side, v: tf.Tensor4D, carry: Carry | null): Carry {
  const [b, h, , d] = v.shape;
  let keys = k.features();
  let shift: tf.Tensor4D | undefined;
  let carryScale: tf.Tensor | undefined;
  if (k.shift) {
    const keyShift = k.shift;
    const scales = untaped(() => {
      const incoming = carry?.shift ?? tf.fill([b, h, 1, 1], EMPTY_SHIFT);
      const top = tf.maximum(incoming, tf.max(keyShift, 2, true));
      return { top, keyScale: tf.exp(tf.sub(keyShift, top)), carryScale: tf.exp(tf.sub(incoming, top)) };
    });
    keys = tf.mul(keys, scales.keyScale) as tf.Tensor4D;
    shift = scales.top as tf.Tensor4D;
    carryScale = scales.carryScale;
  }
  const f = keys.shape[3];
  let sums: tf.Tensor = tf.reshape(batchMatMul(flattenHeads(keys), flattenHeads(withOnes(v)), true, false), [b, h, f, d + 1]);
  if (carry) sums = tf.add(sums, carryScale ? tf.mul(carry.sums, carryScale) : carry.sums);
  return { sums: sums as tf.Tensor4D, ...(shift ? { shift } : {}) };
}

/** Bidirectional: every query reads the sums of all keys. */
export function readQueries(q: Side, carry: Carry, norm: Normalization): tf.Tensor4D {
  const features = q.features();
  const [b, h, s] = features.shape;
  const dv = carry.sums.shape[3];
  const raw = tf.reshape(batchMatMul(flattenHeads(features), flattenHeads(carry.sums)), [b, h, s, dv]) as tf.Tensor4D;
  const scaledDelta = q.shift && carry.shift ? untaped(() => rescaledDelta(norm.delta ?? 0, q.shift!, carry.shift!)) : undefined;
  return normalize(raw, norm, scaledDelta);
}

/** Bidirectional, scored as one block (scores × [V, 1]) instead of through the sums: cheaper for short sequences of product factors. */
export function bidirectionalBlock(q: Side, k: Side, v: tf.Tensor4D, norm: Normalization): tf.Tensor4D {
  const [b, h, s, d] = v.shape;
  const raw = tf.reshape(batchMatMul(scoreBlocks(q, k, flattenHeads), flattenHeads(withOnes(v))), [b, h, s, d + 1]) as tf.Tensor4D;
  return normalize(raw, norm);
}

/**
 * Bidirectional within documents: every query against the keys of its own document, scored as one block [L, L] masked
 * block-diagonally by the document ids [B, L]; shifted keys are brought to the largest shift of the query's document.
 */
export function bidirectionalWithinDocuments(q: Side, k: Side, v: tf.Tensor4D, norm: Normalization, ids: tf.Tensor2D): tf.Tensor4D {
  const [b, h, s, d] = v.shape;
  const same = untaped(() => {
    const perHead = idsPerHead(ids, h);
    return equalAsOnes(tf.reshape(perHead, [b * h, s, 1]), tf.reshape(perHead, [b * h, 1, s]));
  });
  let scores = tf.mul(scoreBlocks(q, k, flattenHeads), same);
  let scaledDelta: tf.Tensor | undefined;
  const keyShift = k.shift;
  if (keyShift) {
    const scale = untaped(() => {
      const shifts = tf.reshape(keyShift, [b * h, 1, s]);
      const top = tf.max(tf.add(shifts, hiddenWhereZero(same)), -1, true); // [BH, L, 1]: per query, over its document's keys
      const delta = q.shift ? rescaledDelta(norm.delta ?? 0, q.shift, tf.reshape(top, [b, h, s, 1])) : undefined;
      return { weights: tf.exp(tf.minimum(tf.sub(shifts, top), 0)), delta };
    });
    scores = tf.mul(scores, scale.weights);
    scaledDelta = scale.delta;
  }
  const raw = tf.reshape(batchMatMul(scores, flattenHeads(withOnes(v))), [b, h, s, d + 1]) as tf.Tensor4D;
  return normalize(raw, norm, scaledDelta);
}
