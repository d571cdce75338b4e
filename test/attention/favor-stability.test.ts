// Performer and DARKFormer at the GPT-2-small head size (64) with an adversarial key: one key nearly
// aligned with the longest projection row and about as long, whose stabiliser shift (~40) is far
// above every other key's (~3). With one key scale over all positions, earlier rows' terms were
// rescaled by e^(−40) and lost to a floor: a *future* key moved earlier outputs by 60–100%. The
// contraction now scales the keys a query sees by the running maximum of their shifts, so every
// output equals the float64 un-stabilised estimator and nothing depends on later or padded keys.
import * as tf from '@tensorflow/tfjs';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import '../../src/model/attention/index.ts';
import type { RandomFeatureModule } from '../../src/model/attention/performer.ts';
import type { AttentionState } from '../../src/model/attention/types.ts';
import { Rng } from '../../src/core/rng.ts';
import { attentionTracker } from '../helpers/modules.ts';
import { dot, favorAttentionRef, prfRef, randomArray4, relL2, tensor4, toArray4, type Array4 } from '../helpers/reference.ts';

beforeAll(async () => {
  await initBackend(testBackend());
});

const modules = attentionTracker<RandomFeatureModule>();
afterEach(() => modules.disposeAll());

const [H, L, D] = [2, 24, 64];
const AT = 14; // position of the adversarial key
const DELTA = 1e-6;

describe.each(['performer', 'darkformer'])('%s, head size 64, one key aligned with a projection row', (name) => {
  const make = (causal: boolean) => modules.create<RandomFeatureModule>(name, { numHeads: H, headDim: D, causal, seed: 7, chunkSize: 8 });
  const rng = new Rng(64);
  const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [1, H, L, D]));

  /** k with the key at AT replaced by d^(1/4)·0.98·ω_j (+ small noise), ω_j the head's longest projection row. */
  function adversarial(module: RandomFeatureModule): Array4 {
    const omega = module.buffers[0].arraySync() as number[][][];
    return k.map((kb) =>
      kb.map((kh, head) =>
        kh.map((row, i) => {
          if (i !== AT) return row;
          const columns = omega[head][0].map((_, j) => omega[head].map((r) => r[j]));
          const longest = columns.reduce((a, c) => (dot(c, c) > dot(a, a) ? c : a));
          return longest.map((x) => D ** 0.25 * (0.98 * x + 0.01 * rng.normal()));
        }),
      ),
    );
  }
  const omegaOf = (module: RandomFeatureModule) => module.buffers[0].arraySync() as number[][][];
  const run = (module: RandomFeatureModule, keys: Array4, keyMask?: number[][]) =>
    tf.tidy(() => toArray4(module.apply(tensor4(q), tensor4(keys), tensor4(v), keyMask ? { keyMask: tf.tensor2d(keyMask) } : {})));
  const rows = (a: Array4, from: number, to: number) => a.map((b) => b.map((h) => h.slice(from, to)));

  it('the key really is adversarial: its stabiliser shift exceeds every other key’s by > 30', () => {
    const module = make(true);
    const keys = adversarial(module);
    const omega = omegaOf(module);
    const shift = (x: number[], head: number) =>
      Math.log(
        Math.sqrt(omega[0][0].length) *
          Math.max(
            ...prfRef(
              x.map((c) => c * D ** -0.25),
              omega[head],
            ),
          ),
      );
    for (let head = 0; head < H; head++) {
      const others = keys[0][head].filter((_, i) => i !== AT).map((x) => shift(x, head));
      expect(shift(keys[0][head][AT], head) - Math.max(...others)).toBeGreaterThan(30);
      expect(shift(keys[0][head][AT], head) + Math.max(...q[0][head].map((x) => shift(x, head)))).toBeGreaterThan(32); // past the old floor
    }
  });

  it('causal: every output equals the float64 estimator, and rows before the key do not change with it', () => {
    const module = make(true);
    const keys = adversarial(module);
    const out = run(module, keys);
    expect(relL2(out, favorAttentionRef(q, keys, v, omegaOf(module), { causal: true, delta: DELTA }))).toBeLessThan(1e-5);
    expect(relL2(rows(out, 0, AT), rows(run(module, k), 0, AT))).toBeLessThan(1e-6);
    for (let i = 0; i < AT; i++) expect(relL2(rows(out, i, i + 1), rows(run(module, k), i, i + 1)), `row ${i}`).toBeLessThan(1e-5);
  });

  it('bidirectional: a padded adversarial key changes nothing', () => {
    const module = make(false);
    const keys = adversarial(module);
    const keyMask = [Array.from({ length: L }, (_, j) => (j === AT ? 0 : 1))];
    const out = run(module, keys, keyMask);
    expect(relL2(out, favorAttentionRef(q, keys, v, omegaOf(module), { causal: false, delta: DELTA, keyMask }))).toBeLessThan(1e-5);
    expect(relL2(out, run(module, k, keyMask))).toBeLessThan(1e-6);
  });

  it('decoding position by position (running maximum) equals the causal apply', () => {
    const module = make(true);
    const keys = adversarial(module);
    const full = run(module, keys);
    let state: AttentionState = module.initState(1, L);
    const stepped: Array4 = [Array.from({ length: H }, () => [])];
    for (let t = 0; t < L; t++) {
      const at = (a: Array4) => tensor4(a.map((b) => b.map((h) => [h[t]])));
      const [qt, kt, vt] = [at(q), at(keys), at(v)];
      const { out, state: next } = module.step(qt, kt, vt, state, t);
      toArray4(out)[0].forEach((h, head) => stepped[0][head].push(h[0]));
      tf.dispose([qt, kt, vt, out, ...Object.values(state.tensors)]);
      state = next;
    }
    tf.dispose(Object.values(state.tensors));
    for (let t = 0; t < L; t++) expect(relL2(rows(stepped, t, t + 1), rows(full, t, t + 1)), `position ${t}`).toBeLessThan(1e-5);
  });
});
