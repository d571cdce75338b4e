// The recurrent (decoding) form of every mechanism: stepping position by position reproduces the
// causal whole-sequence apply at every position, linear mechanisms keep a state whose size does
// not depend on the position, and steps leak no tensors.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { attentionIsQuadratic, attentionNames, createAttention, type AttentionModule } from '../../src/model/attention/index.ts';
import type { AttentionState } from '../../src/model/attention/types.ts';
import { Rng } from '../../src/core/rng.ts';
import { randomArray4, tensor4, type Array4 } from '../helpers/reference.ts';

/** Small feature counts and chunks shorter than the sequence, so the chunked apply is exercised. */
const CASES: Array<[label: string, name: string, options: Record<string, unknown>]> = [
  ['softmax', 'softmax', {}],
  ['yat-spherical', 'yat-spherical', {}],
  ['slay', 'slay', { prfFeatures: 8, anchors: 4, chunkSize: 4 }],
  ['slay laplace-only', 'slay', { prfFeatures: 8, poly: 'laplace-only', chunkSize: 4 }],
  ['performer', 'performer', { features: 16, chunkSize: 4 }],
  ['darkformer', 'darkformer', { features: 16, chunkSize: 4 }],
  ['schoenbat', 'schoenbat', { features: 16, chunkSize: 4 }],
  ['linear-elu', 'linear-elu', { chunkSize: 4 }],
  ['cosformer (M = length)', 'cosformer', { chunkSize: 4 }],
  ['cosformer (M = 16)', 'cosformer', { chunkSize: 4, reweightLength: 16 }],
  ['gla', 'gla', { chunkSize: 4, gateRank: 3 }],
];
const [B, H, L, D] = [2, 2, 9, 8];

it('the cases cover every registered mechanism', () => {
  expect(new Set(CASES.map(([, name]) => name))).toEqual(new Set(attentionNames()));
});

/**
 * Runs step over all positions, `blocks[i]` positions per call (default one at a time); returns the
 * outputs [B, H, L, D] and each state's tensor shapes.
 */
function stepThrough(attn: AttentionModule, q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, onStep?: () => void, blocks?: number[]) {
  const [b, h, l, d] = q.shape;
  let state: AttentionState = attn.initState(b, l);
  const outputs: tf.Tensor4D[] = [];
  const shapes: string[] = [];
  for (const [t, n] of (blocks ?? Array.from({ length: l }, () => 1)).map((n, i, all) => [all.slice(0, i).reduce((a, x) => a + x, 0), n])) {
    const at = (x: tf.Tensor4D) => tf.slice(x, [0, 0, t, 0], [b, h, n, d]);
    const [qt, kt, vt] = [at(q), at(k), at(v)];
    const { out, state: next } = attn.step(qt, kt, vt, state, t);
    tf.dispose([qt, kt, vt, ...Object.values(state.tensors)]);
    state = next;
    outputs.push(out);
    shapes.push(JSON.stringify(Object.entries(state.tensors).map(([name, x]) => [name, x.shape])));
    onStep?.();
  }
  tf.dispose(Object.values(state.tensors));
  const stepped = tf.concat(outputs, 2);
  tf.dispose(outputs);
  const result = stepped.arraySync() as Array4;
  stepped.dispose();
  return { outputs: result, shapes };
}

/** Per position t: ‖stepped_t − full_t‖ / max(‖full_t‖, 1e-3·rms of full), the largest over (b, h). */
function worstPositionError(stepped: Array4, full: Array4): number[] {
  const all = full.flat(3);
  const rms = Math.sqrt(all.reduce((s, x) => s + x * x, 0) / all.length);
  return Array.from({ length: full[0][0].length }, (_, t) => {
    let worst = 0;
    for (let b = 0; b < full.length; b++) {
      for (let h = 0; h < full[b].length; h++) {
        const [a, e] = [stepped[b][h][t], full[b][h][t]];
        const diff = Math.hypot(...a.map((x, i) => x - e[i]));
        worst = Math.max(worst, diff / Math.max(Math.hypot(...e), 1e-3 * rms));
      }
    }
    return worst;
  });
}

function compare(attn: AttentionModule, q: Array4, k: Array4, v: Array4, blocks?: number[]) {
  const [tq, tk, tv] = [tensor4(q), tensor4(k), tensor4(v)];
  const full = tf.tidy(() => attn.apply(tq, tk, tv).arraySync() as Array4);
  const stepped = stepThrough(attn, tq, tk, tv, undefined, blocks);
  tf.dispose([tq, tk, tv]);
  return { errors: worstPositionError(stepped.outputs, full), shapes: stepped.shapes, full };
}

describe.each(CASES)('%s', (_label, name, options) => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });
  const make = () => createAttention(name, { numHeads: H, headDim: D, causal: true, seed: 5, ...options });

  it('step at every position equals the causal apply', () => {
    const attn = make();
    const rng = new Rng(21);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const { errors, full } = compare(attn, q, k, v);
    expect(full.flat(3).some((x) => Math.abs(x) > 1e-2)).toBe(true);
    for (const e of errors) expect(e).toBeLessThan(1e-5);
    attn.dispose();
  });

  it('blocks of positions at once (a prompt, then single tokens), from any state, equal the causal apply', () => {
    // Linear mechanisms also with segments of 2 positions, so that a block runs in segments from the state.
    for (const segmentLength of attentionIsQuadratic(name) ? [undefined] : [undefined, 2]) {
      const attn = createAttention(name, { numHeads: H, headDim: D, causal: true, seed: 5, ...options, segmentLength });
      const rng = new Rng(25);
      const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
      const { errors } = compare(attn, q, k, v, [5, 1, 3]);
      for (const e of errors) expect(e).toBeLessThan(1e-5);
      attn.dispose();
    }
  });

  it('linear mechanisms keep a state whose size does not depend on the position; caches grow by one', () => {
    const attn = make();
    const rng = new Rng(22);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const { shapes } = compare(attn, q, k, v);
    if (attentionIsQuadratic(name)) {
      shapes.forEach((s, t) =>
        expect(JSON.parse(s)).toEqual([
          ['keys', [B, H, t + 1, D]],
          ['values', [B, H, t + 1, D]],
        ]),
      );
    } else {
      expect(new Set(shapes).size).toBe(1);
      const [[, sums]] = JSON.parse(shapes[0]) as [string, number[]][];
      // Σ φ(k)[v, 1]ᵀ carries the denominator as a last column; GLA (no denominator) keeps Σ k vᵀ, decayed.
      expect(sums.slice(0, 2).concat(sums[3])).toEqual([B, H, name === 'gla' ? D : D + 1]);
    }
    attn.dispose();
  });

  it('steps leak no tensors', () => {
    const attn = make();
    const rng = new Rng(23);
    const [q, k, v] = [0, 1, 2].map(() => tensor4(randomArray4(rng, [B, H, L, D])));
    stepThrough(attn, q, k, v); // warms constant caches (cosFormer's first-position weights)
    const before = tf.memory().numTensors;
    const during: number[] = [];
    stepThrough(attn, q, k, v, () => during.push(tf.memory().numTensors));
    expect(tf.memory().numTensors).toBe(before);
    // After each step the slices and the previous state are freed: only the outputs so far (one
    // more per step) and the current state remain.
    during.forEach((n, t) => expect(n - during[0]).toBe(t));
    tf.dispose([q, k, v]);
    attn.dispose();
  });

  if (name === 'performer' || name === 'darkformer') {
    it.each([
      ['later keys huge', (t: number) => (t >= 5 ? 30 : 1)],
      ['first key huge', (t: number) => (t === 0 ? 30 : 1)],
      ['keys growing', (t: number) => 0.5 + 0.4 * t],
    ])('matches the apply with %s (running key maximum)', (_, keyScale) => {
      const attn = make();
      const rng = new Rng(24);
      const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
      const scaled = k.map((bb) => bb.map((hh) => hh.map((row, t) => row.map((x) => x * keyScale(t)))));
      const { errors } = compare(attn, q, scaled, v);
      for (const e of errors) expect(e).toBeLessThan(1e-5);
      attn.dispose();
    });
  }
});

describe('decoding errors', () => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it('bidirectional mechanisms refuse initState; steps must come in order and within maxLength', () => {
    const bidirectional = createAttention('performer', { numHeads: 1, headDim: 4, causal: false, features: 4 });
    expect(() => bidirectional.initState(1, 4)).toThrow(/needs causal: true/);
    bidirectional.dispose();
    for (const name of ['softmax', 'linear-elu']) {
      const attn = createAttention(name, { numHeads: 1, headDim: 4, causal: true });
      const state = attn.initState(1, 1);
      const x = tf.ones([1, 1, 1, 4]) as tf.Tensor4D;
      expect(() => attn.step(x, x, x, state, 1)).toThrow(/position 1 given, but the state has consumed 0/);
      const { out, state: next } = attn.step(x, x, x, state, 0);
      expect(() => attn.step(x, x, x, next, 1)).toThrow(/past the state's maxLength 1/);
      tf.dispose([x, out, ...Object.values(state.tensors), ...Object.values(next.tensors)]);
      attn.dispose();
    }
  });

  it('cosFormer with a fixed reweightLength refuses a longer state', () => {
    const attn = createAttention('cosformer', { numHeads: 1, headDim: 4, causal: true, reweightLength: 8 });
    expect(() => attn.initState(1, 9)).toThrow(/exceeds option 'reweightLength' = 8/);
    attn.dispose();
  });
});
