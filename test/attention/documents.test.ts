// Document masking (docs/attention.md, "Documents kept apart"): a row packing several documents, run with their
// document ids, gives each document exactly what running it alone gives — for every registered mechanism, causal and
// bidirectional, whole and in segments (with the segments' recomputing gradient), and step by step (decoding) — and
// softmax's equals a float64 reference run per document.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import { attentionIsCausalOnly, attentionIsQuadratic, attentionNames, createAttention, type AttentionModule } from '../../src/model/attention/index.ts';
import type { AttentionState, DocumentLayout } from '../../src/model/attention/types.ts';
import { testBackend } from '../helpers/backend.ts';
import { randomArray4, softmaxAttentionRef, type Array4 } from '../helpers/reference.ts';

/** Small feature counts and chunks of 4, so that document boundaries fall inside chunks and documents span chunks. */
const CASES: Array<[label: string, name: string, options: Record<string, unknown>]> = [
  ['softmax', 'softmax', {}],
  ['yat-spherical', 'yat-spherical', {}],
  ['slay', 'slay', { prfFeatures: 8, anchors: 4, chunkSize: 4 }],
  ['slay laplace-only', 'slay', { prfFeatures: 8, poly: 'laplace-only', chunkSize: 4 }],
  ['performer', 'performer', { features: 16, chunkSize: 4 }],
  ['darkformer', 'darkformer', { features: 16, chunkSize: 4 }],
  ['schoenbat', 'schoenbat', { features: 16, chunkSize: 4 }],
  ['linear-elu', 'linear-elu', { chunkSize: 4 }],
  ['cosformer (M = 16)', 'cosformer', { chunkSize: 4, reweightLength: 16 }],
  ['cosformer (M = length)', 'cosformer', { chunkSize: 4 }],
  ['gla', 'gla', { chunkSize: 4 }],
];
const [B, H, L, D] = [2, 2, 9, 8];
/** Document lengths of each row: boundaries inside a chunk, several in one chunk, a document over two chunks. */
const LENGTHS = [
  [3, 5, 1],
  [1, 1, 7],
];

it('the cases cover every registered mechanism', () => {
  expect(new Set(CASES.map(([, name]) => name))).toEqual(new Set(attentionNames()));
});

/** Document ids and positions within documents of rows with these document lengths, for positions from..from+n−1. */
function layoutOf(lengths: number[][], from = 0, n = L): DocumentLayout {
  const ids: number[][] = [];
  const positions: number[][] = [];
  for (const row of lengths) {
    const rowIds = row.flatMap((len, doc) => Array.from({ length: len }, () => doc));
    const rowPositions = row.flatMap((len) => Array.from({ length: len }, (_, i) => i));
    ids.push(rowIds.slice(from, from + n));
    positions.push(rowPositions.slice(from, from + n));
  }
  return { ids: tf.tensor2d(ids), positions: tf.tensor2d(positions) };
}

/** [start, length] of each document of a row. */
const spans = (row: number[]) => row.map((len, i) => [row.slice(0, i).reduce((a, x) => a + x, 0), len] as const);

const slicePositions = (x: Array4, b: number, start: number, len: number): Array4 => [x[b].map((h) => h.slice(start, start + len))];

/** The largest |a − e| over every value, relative to the root mean square of e (float32 rounding: ~1e-7). */
function relativeError(actual: number[], expected: number[]): number {
  const rms = Math.sqrt(expected.reduce((s, x) => s + x * x, 0) / expected.length);
  return Math.max(...actual.map((a, i) => Math.abs(a - expected[i]))) / rms;
}

/** Each document's rows of `packed` [B, H, L, D] against `alone(b, start, len)` (that document run by itself). */
function worstDocumentError(packed: Array4, alone: (b: number, start: number, len: number) => Array4): number {
  let worst = 0;
  LENGTHS.forEach((row, b) => {
    for (const [start, len] of spans(row)) worst = Math.max(worst, relativeError(slicePositions(packed, b, start, len).flat(3), alone(b, start, len).flat(3)));
  });
  return worst;
}

const applyArrays = (attn: AttentionModule, q: Array4, k: Array4, v: Array4, documents?: DocumentLayout): Array4 =>
  tf.tidy(() => attn.apply(tf.tensor4d(q), tf.tensor4d(k), tf.tensor4d(v), documents ? { documents } : {}).arraySync() as Array4);

/** Steps through the packed rows in blocks of positions, each block with its documents. */
function stepWithDocuments(attn: AttentionModule, q: Array4, k: Array4, v: Array4, blocks: number[]): Array4 {
  let state: AttentionState = attn.initState(B, L);
  const outputs: tf.Tensor4D[] = [];
  let t = 0;
  for (const n of blocks) {
    const at = (x: Array4) => tf.tensor4d(x.map((bb) => bb.map((hh) => hh.slice(t, t + n))));
    const [qt, kt, vt] = [at(q), at(k), at(v)];
    const documents = layoutOf(LENGTHS, t, n);
    const { out, state: next } = attn.step(qt, kt, vt, state, t, { documents });
    tf.dispose([qt, kt, vt, documents.ids, documents.positions, ...Object.values(state.tensors)]);
    state = next;
    outputs.push(out);
    t += n;
  }
  tf.dispose(Object.values(state.tensors));
  const joined = tf.concat(outputs, 2);
  const result = joined.arraySync() as Array4;
  tf.dispose([joined, ...outputs]);
  return result;
}

describe.each(CASES)('%s', (_label, name, options) => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });
  const make = (causal: boolean, extra: Record<string, unknown> = {}) =>
    createAttention(name, { numHeads: H, headDim: D, causal, seed: 5, ...options, ...extra });
  /** The module that runs a document alone: cosFormer with M = length keeps the packed row's M (docs/attention.md). */
  const makeAlone = (causal: boolean) => make(causal, name === 'cosformer' && !options.reweightLength ? { reweightLength: L } : {});
  const linear = !attentionIsQuadratic(name);

  for (const causal of attentionIsCausalOnly(name) ? [true] : [true, false]) {
    const form = causal ? 'causal' : 'bidirectional';
    it(`${form}: a packed row with its documents equals each document run alone (whole${linear ? ' and in segments' : ''})`, () => {
      const rng = new Rng(31);
      const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
      const alone = makeAlone(causal);
      const expected = (b: number, start: number, len: number) =>
        applyArrays(alone, slicePositions(q, b, start, len), slicePositions(k, b, start, len), slicePositions(v, b, start, len));
      for (const segmentLength of linear ? [undefined, 2, 3] : [undefined]) {
        const attn = make(causal, { segmentLength });
        const documents = layoutOf(LENGTHS);
        const packed = applyArrays(attn, q, k, v, documents);
        expect(worstDocumentError(packed, expected)).toBeLessThan(1e-5);
        // Without its documents the row mixes them: the check above could fail.
        expect(worstDocumentError(applyArrays(attn, q, k, v), expected)).toBeGreaterThan(1e-3);
        tf.dispose([documents.ids, documents.positions]);
        attn.dispose();
      }
      alone.dispose();
    });
  }

  if (linear) {
    it('causal in segments: the recomputing gradient with documents equals the whole form’s', () => {
      const rng = new Rng(32);
      const [q, k, v, w] = [0, 1, 2, 3].map(() => tf.tensor4d(randomArray4(rng, [B, H, L, D])));
      const documents = layoutOf(LENGTHS);
      const gradsOf = (segmentLength?: number) => {
        const attn = make(true, { segmentLength });
        const grads = tf.grads((a, b, c) => tf.sum(tf.mul(attn.apply(a as tf.Tensor4D, b as tf.Tensor4D, c as tf.Tensor4D, { documents }), w)))([q, k, v]);
        const values = grads.map((g) => Array.from(g.dataSync()));
        tf.dispose(grads);
        attn.dispose();
        return values;
      };
      const whole = gradsOf();
      const segmented = gradsOf(3);
      whole.forEach((g, i) => expect(relativeError(segmented[i], g)).toBeLessThan(1e-4));
      tf.dispose([q, k, v, w, documents.ids, documents.positions]);
    });
  }

  it('decoding with documents (a prompt block, single positions, a block across boundaries) equals each document alone', () => {
    const rng = new Rng(33);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const attn = make(true);
    const alone = makeAlone(true);
    const expected = (b: number, start: number, len: number) =>
      applyArrays(alone, slicePositions(q, b, start, len), slicePositions(k, b, start, len), slicePositions(v, b, start, len));
    for (const blocks of [[5, 1, 3], Array.from({ length: L }, () => 1)]) {
      expect(worstDocumentError(stepWithDocuments(attn, q, k, v, blocks), expected)).toBeLessThan(1e-5);
    }
    attn.dispose();
    alone.dispose();
  });

  if (name === 'performer' || name === 'darkformer') {
    it('a document with huge keys does not set the scale of the next one (per-document running maximum)', () => {
      const rng = new Rng(34);
      const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
      // Row 0's second document (positions 3 … 7) gets keys 30× larger.
      const scaled = k.map((bb, b) => bb.map((hh) => hh.map((row, t) => row.map((x) => (b === 0 && t >= 3 && t < 8 ? 30 * x : x)))));
      const alone = makeAlone(true);
      const expected = (b: number, start: number, len: number) =>
        applyArrays(alone, slicePositions(q, b, start, len), slicePositions(scaled, b, start, len), slicePositions(v, b, start, len));
      const attn = make(true);
      const documents = layoutOf(LENGTHS);
      expect(worstDocumentError(applyArrays(attn, q, scaled, v, documents), expected)).toBeLessThan(1e-5);
      expect(worstDocumentError(stepWithDocuments(attn, q, scaled, v, [2, 4, 3]), expected)).toBeLessThan(1e-5);
      tf.dispose([documents.ids, documents.positions]);
      attn.dispose();
      alone.dispose();
    });
  }
});

describe('softmax with documents against float64', () => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it.each([true, false])('causal %s: equals the float64 reference run per document', (causal) => {
    const rng = new Rng(35);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const attn = createAttention('softmax', { numHeads: H, headDim: D, causal });
    const documents = layoutOf(LENGTHS);
    const packed = applyArrays(attn, q, k, v, documents);
    const reference = (b: number, start: number, len: number) =>
      softmaxAttentionRef(slicePositions(q, b, start, len), slicePositions(k, b, start, len), slicePositions(v, b, start, len), causal);
    expect(worstDocumentError(packed, reference)).toBeLessThan(1e-5);
    tf.dispose([documents.ids, documents.positions]);
    attn.dispose();
  });
});

describe('document masking leaks no tensors', () => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it.each<[string, Record<string, unknown>]>([
    ['softmax', {}],
    ['performer', { chunkSize: 4, features: 16 }],
    ['slay', { chunkSize: 4, prfFeatures: 8, anchors: 4 }],
  ])('%s: apply and steps', (name, options) => {
    const rng = new Rng(36);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const attn = createAttention(name, { numHeads: H, headDim: D, causal: true, seed: 5, ...options });
    const documents = layoutOf(LENGTHS);
    applyArrays(attn, q, k, v, documents); // warms constant caches
    stepWithDocuments(attn, q, k, v, [5, 1, 3]);
    const before = tf.memory().numTensors;
    applyArrays(attn, q, k, v, documents);
    stepWithDocuments(attn, q, k, v, [5, 1, 3]);
    expect(tf.memory().numTensors).toBe(before);
    tf.dispose([documents.ids, documents.positions]);
    attn.dispose();
  });
});
