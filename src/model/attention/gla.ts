// gla: gated linear attention (Yang et al. 2024, "Gated Linear Attention Transformers with Hardware-Efficient
// Training"; flash-linear-attention's GatedLinearAttention), causal only. Each head keeps a state S [Dk, Dv] that
// decays per key channel by a data-dependent gate before each new key is added:
//
//   S_t = diag(α_t) S_{t−1} + k_t v_tᵀ,   o_t = RMSNorm(S_tᵀ q_t / √Dk)·w,   log α_t = logsigmoid(x̃_t W↓ W↑ + b) / τ
//
// with a low-rank gate (W↓ [d, r], W↑ [r, d], r = gateRank, τ = gateNormalizer, fla's 16 and 16) and fla's per-head
// output RMSNorm (a weight [Dk] shared by the heads). No denominator: the norm keeps the output's scale. Where fla's
// layer reads the gate (and an output gate) from the block's input x, a mechanism here sees only q, k and v: the gate
// reads x̃ = the layer's keys of all heads, [k_1 … k_H] = x·W_k (after rotary positions when model.positional is
// rope), and there is no output gate; the key dimension is the head size (fla's expand_k 0.5 halves it).
//
// The chunked form (fla's chunk_gla): positions in chunks of C; inside a chunk, with G = the cumulative log-gates
// from the chunk's start, query i reads key j ≤ i through Σ_c q_ic k_jc e^(G_ic − G_jc) (every exponent ≤ 0: no
// overflow however long the chunk), and the state entering the chunk through (q_i ⊙ e^(G_i))ᵀ S; the state leaving
// it is e^(G_C) ⊙ S + Σ_j (k_j ⊙ e^(G_C − G_j)) v_jᵀ. The chunks run one after another; long sequences run in
// segments with a recomputing gradient (segmented.ts), and decoding is the same contraction from the state. With
// documents kept apart (data.documentMask) the state restarts at every boundary (see `chunk`).
import * as tf from '@tensorflow/tfjs';
import { BOUNDS } from '../../core/bounds.ts';
import { Rng, deriveSeed } from '../../core/rng.ts';
import { namedVariable } from '../ops.ts';
import { checkPosition, checkStepDocuments, checkStepShapes, columns, requireCausal, segmentLength } from './linear-attention.ts';
import { registerAttention, type ResolvedOptions } from './registry.ts';
import { causalRecomputed, causalSegments, type SegmentFunctions } from './segmented.ts';
import type { AttentionConfig, AttentionModule, AttentionState, TensorDeclaration } from './types.ts';

/** ε of the output RMSNorm (fla's norm_eps). */
const NORM_EPS = 1e-5;
/** N(0, GATE_STD²) init of the gate's two low-rank factors; its bias starts at 0 (α = ½^(1/τ) per step). */
const GATE_STD = 0.02;

const declared = ({ numHeads, headDim }: Omit<AttentionConfig, 'scope'>, options: ResolvedOptions): TensorDeclaration[] => {
  const width = numHeads * headDim;
  const rank = options.gateRank as number;
  return [
    { name: 'gateDown', shape: [width, rank], trainable: true },
    { name: 'gateUp', shape: [rank, width], trainable: true },
    { name: 'gateBias', shape: [width], trainable: true },
    { name: 'normWeight', shape: [headDim], trainable: true },
  ];
};

/** A chunk's documents (data.documentMask): ids [B, C], and [B, 1] the document of the position before it (null: none). */
interface ChunkDocuments {
  ids: tf.Tensor2D;
  before: tf.Tensor2D | null;
}

/** 1 where a equals b (broadcast), else 0. */
const same = (a: tf.Tensor, b: tf.Tensor) => tf.cast(tf.equal(a, b), 'float32');

/**
 * One chunk's contraction: q, k, g (log-gates ≤ 0), v [B, H, C, ·] from the state S [B, H, Dk, Dv] entering it
 * (null = zeros) → the chunk's outputs (before the norm) and, when asked, the state leaving it. With documents (ids
 * non-decreasing along a row) a query reads only keys of its own document: the scores are masked to it, only queries of
 * the document before the chunk read the entering state, and the leaving state holds the keys of the chunk's last
 * document (and the entering state only when the whole chunk continues it) — the state restarts at every boundary.
 */
function chunk(q: tf.Tensor4D, k: tf.Tensor4D, g: tf.Tensor4D, v: tf.Tensor4D, state: tf.Tensor4D | null, wantState: boolean, docs?: ChunkDocuments) {
  const [b, h, c, dk] = q.shape;
  const ids = docs && tf.reshape(docs.ids, [b, 1, c, 1]);
  const lastId = docs && tf.reshape(tf.slice(docs.ids, [0, c - 1], [b, 1]), [b, 1, 1, 1]);
  const before = docs?.before ? tf.reshape(docs.before, [b, 1, 1, 1]) : null;
  // G_i, ≤ 0 and decreasing; summed along the last axis (tfjs's Cumsum gradient mis-shapes another axis).
  const cumulative = tf.transpose(tf.cumsum(tf.transpose(g, [0, 1, 3, 2]), 3), [0, 1, 3, 2]) as tf.Tensor4D;
  // e^(G_i − G_j) for j ≤ i (exponent ≤ 0); masked pairs are clamped to e^0 before the 0/1 mask, so nothing overflows.
  const differences = tf.sub(tf.reshape(cumulative, [b, h, c, 1, dk]), tf.reshape(cumulative, [b, h, 1, c, dk]));
  let visible: tf.Tensor = tf.reshape(tf.linalg.bandPart(tf.ones([c, c]), -1, 0), [1, 1, c, c, 1]);
  if (ids) visible = tf.mul(visible, tf.reshape(same(ids, tf.reshape(ids, [b, 1, 1, c])), [b, 1, c, c, 1]));
  const decay = tf.mul(tf.exp(tf.minimum(differences, 0)), visible);
  const scores = tf.sum(tf.mul(tf.mul(tf.reshape(q, [b, h, c, 1, dk]), tf.reshape(k, [b, h, 1, c, dk])), decay), -1); // [B, H, C, C]
  let out = tf.matMul(scores, v) as tf.Tensor4D;
  if (state) {
    const readers = ids && before ? tf.mul(q, same(ids, before)) : q;
    out = tf.add(out, tf.matMul(tf.mul(readers, tf.exp(cumulative)), state)) as tf.Tensor4D;
  }
  if (!wantState) return { out };
  const last = tf.slice(cumulative, [0, 0, c - 1, 0], [b, h, 1, dk]); // G_C [B, H, 1, Dk]
  const counted = ids ? tf.mul(k, same(ids, lastId!)) : k;
  const added = tf.matMul(tf.mul(counted, tf.exp(tf.sub(last, cumulative))), v, true, false) as tf.Tensor4D; // [B, H, Dk, Dv]
  if (!state) return { out, state: added };
  const kept = ids && before ? tf.mul(state, same(lastId!, before)) : state;
  return { out, state: tf.add(tf.mul(tf.reshape(tf.exp(last), [b, h, dk, 1]), kept), added) as tf.Tensor4D };
}

/** log σ(x) = −softplus(−x) (tf.logSigmoid's gradient reads a tensor its tidy has freed). */
const logSigmoid = (x: tf.Tensor) => tf.neg(tf.softplus(tf.neg(x)));

/**
 * The documents of a run of positions: `ids` [B, ·] covers positions `offset` … (the whole sequence: offset 0; a decoding
 * step: its own positions), `before` [B, 1] is the document of the position before them (a decoding state's).
 */
interface DocumentsOfRun {
  ids: tf.Tensor2D;
  offset: number;
  before: tf.Tensor2D | null;
}

/** The chunked contraction of one segment; k carries the log-gates as its second half ([k, g], [B, H, S, 2·Dk]). */
function segmentFunctions(chunkSize: number, documents?: DocumentsOfRun): SegmentFunctions {
  /** The documents of positions start … start+n−1 (positions of the sequence). */
  const documentsAt = (start: number, n: number): ChunkDocuments | undefined => {
    if (!documents) return undefined;
    const { ids, offset } = documents;
    const at = start - offset;
    return { ids: columns(ids, at, n), before: at > 0 ? columns(ids, at - 1, 1) : documents.before };
  };
  return {
    causal(q, kg, v, carry, start, wantCarry) {
      const [b, h, l, dk] = q.shape;
      const [k, g] = tf.split(kg, 2, 3) as tf.Tensor4D[];
      const outs: tf.Tensor4D[] = [];
      let state = carry?.sums ?? null;
      for (let offset = 0; offset < l; offset += chunkSize) {
        const n = Math.min(chunkSize, l - offset);
        const at = (x: tf.Tensor4D) => (n === l ? x : (tf.slice(x, [0, 0, offset, 0], [b, h, n, x.shape[3]]) as tf.Tensor4D));
        const result = chunk(at(q), at(k), at(g), at(v), state, wantCarry || offset + n < l, documentsAt(start + offset, n));
        outs.push(result.out);
        state = result.state ?? null;
      }
      const out = (outs.length === 1 ? outs[0] : tf.concat(outs, 2)) as tf.Tensor4D;
      return wantCarry ? { out, carry: { sums: state ?? (tf.zeros([b, h, dk, v.shape[3]]) as tf.Tensor4D) } } : { out };
    },
    accumulate: () => {
      throw new Error("internal: attention 'gla' has no bidirectional form");
    },
    read: () => {
      throw new Error("internal: attention 'gla' has no bidirectional form");
    },
  };
}

registerAttention('gla', {
  description: 'gated linear attention (GLA, Yang et al. 2024; flash-linear-attention): a data-dependent per-channel decay of the state, causal only',
  quadratic: false,
  causalOnly: true,
  options: {
    gateRank: { kind: 'int', default: 16, min: 1, max: BOUNDS.width.max, doc: 'rank r of the gate projection x̃·W↓·W↑ (fla: 16)' },
    gateNormalizer: { kind: 'number', default: 16, exclusiveMin: 0, doc: 'τ in log α = logsigmoid(·)/τ: larger keeps the decay nearer 1 (fla: 16)' },
    chunkSize: {
      kind: 'int',
      default: 16,
      min: 1,
      max: BOUNDS.positions.max,
      doc: 'chunk length of the causal form (its intra-chunk term holds C² · head size values per head)',
    },
    segmentLength: {
      kind: 'int',
      default: 0,
      min: 0,
      max: BOUNDS.positions.max,
      doc: 'positions per segment of the memory-bounded form (one state saved per segment, each segment recomputed in the backward pass); 0 = as the other kernel mechanisms, with head size + chunkSize values per position',
    },
  },
  tensors: declared,
  // The state is Dk × Dv per head (m = Dk features); per side, half of the gate's two low-rank products (2·d·r per
  // token each, shared by the heads) and the decay.
  featureMap: ({ headDim }, options) => ({ features: headDim, flopsPerSide: 2 * headDim * (options.gateRank as number) + headDim }),
  create(config, options): AttentionModule {
    const { numHeads, headDim } = config;
    const rank = options.gateRank as number;
    const width = numHeads * headDim;
    const chunkSize = options.chunkSize as number;
    const normal = (name: string, shape: [number, number]) => {
      const rng = new Rng(deriveSeed(config.seed, `gla.${name}`));
      return namedVariable(
        config.scope,
        name,
        tf.tensor2d(
          Float32Array.from(rng.normalArray(shape[0] * shape[1]), (x) => x * GATE_STD),
          shape,
        ),
        true,
      );
    };
    const gateDown = normal('gateDown', [width, rank]);
    const gateUp = normal('gateUp', [rank, width]);
    const gateBias = namedVariable(config.scope, 'gateBias', tf.zeros([width]), true);
    const normWeight = namedVariable(config.scope, 'normWeight', tf.ones([headDim]), true);

    /** [k, g] [B, H, L, 2·Dk]: the keys (padded ones zeroed) and their log-gates (0 at padding: no decay). */
    const keysAndGates = (k: tf.Tensor4D, keyMask?: tf.Tensor2D): tf.Tensor4D => {
      const [b, h, l, d] = k.shape;
      const rows = tf.reshape(tf.transpose(k, [0, 2, 1, 3]), [b * l, h * d]);
      const logits = tf.add(tf.matMul(tf.matMul(rows, gateDown), gateUp), gateBias);
      let gates = tf.transpose(tf.reshape(tf.div(logSigmoid(logits), options.gateNormalizer as number), [b, l, h, d]), [0, 2, 1, 3]) as tf.Tensor4D;
      let keys = k;
      if (keyMask) {
        const mask = tf.reshape(keyMask, [b, 1, l, 1]);
        gates = tf.mul(gates, mask);
        keys = tf.mul(k, mask);
      }
      return tf.concat([keys, gates], 3) as tf.Tensor4D;
    };
    const scaled = (q: tf.Tensor4D) => tf.mul(q, 1 / Math.sqrt(headDim)) as tf.Tensor4D;
    const normed = (o: tf.Tensor4D) => tf.mul(tf.mul(o, tf.rsqrt(tf.add(tf.mean(tf.square(o), -1, true), NORM_EPS))), normWeight) as tf.Tensor4D;

    return {
      name: 'gla',
      options,
      trainableVariables: [gateDown, gateUp, gateBias, normWeight],
      buffers: [],
      apply(q, k, v, opts = {}) {
        return tf.tidy(() => {
          const [b, h, l] = q.shape;
          const kg = keysAndGates(k, opts.keyMask);
          const fns = segmentFunctions(chunkSize, opts.documents && { ids: opts.documents.ids, offset: 0, before: null });
          const segment = segmentLength(options.segmentLength as number, b, h, headDim, chunkSize, l);
          const out = l > segment ? causalRecomputed(fns, segment)(scaled(q), kg, v) : fns.causal(scaled(q), kg, v, null, 0, false).out;
          return normed(out);
        });
      },
      initState(batch: number, maxLength: number): AttentionState {
        requireCausal('gla', config);
        return { maxLength, length: 0, tensors: { sums: tf.zeros([batch, numHeads, headDim, headDim]) } };
      },
      step(q, k, v, state, position, opts = {}) {
        checkPosition(state, position);
        checkStepShapes(q, k, v, state);
        const layout = opts.documents;
        if (layout) checkStepDocuments(layout, q);
        const { out, ...next } = tf.tidy(() => {
          const [b, h, n] = q.shape;
          // Before any position the state belongs to no document (−1: a first position never continues it).
          const before = layout ? ((state.tensors.document as tf.Tensor2D | undefined) ?? (tf.fill([b, 1], -1) as tf.Tensor2D)) : null;
          const fns = segmentFunctions(chunkSize, layout && { ids: layout.ids, offset: position, before });
          const segment = segmentLength(options.segmentLength as number, b, h, headDim, chunkSize, n);
          const result = causalSegments(fns, [scaled(q), keysAndGates(k), v], { sums: state.tensors.sums as tf.Tensor4D }, position, segment, true);
          const kept: Record<string, tf.Tensor> = { out: normed(result.out), sums: result.carry!.sums };
          if (layout) kept.document = tf.clone(columns(layout.ids, n - 1, 1));
          return kept;
        });
        return { out: out as tf.Tensor4D, state: { maxLength: state.maxLength, length: position + q.shape[2], tensors: next } };
      },
      dispose() {
        tf.dispose([gateDown, gateUp, gateBias, normWeight]);
      },
    };
  },
});
