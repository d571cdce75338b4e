// Properties every registered mechanism must have: strict causality, key masking, finite
// gradients that match finite differences, trainability on cpu and wasm, and no tensor leaks.
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend, testBackends } from '../helpers/backend.ts';
import {
  attentionIsCausalOnly,
  attentionIsQuadratic,
  attentionNames,
  attentionOptionSpecs,
  attentionTensors,
  createAttention,
  type AttentionModule,
  type AttentionState,
  type TensorDeclaration,
} from '../../src/model/attention/index.ts';
import { SLAY_POLY_VARIANTS } from '../../src/model/attention/slay.ts';
import { dense } from '../../src/model/ops.ts';
import { Rng } from '../../src/core/rng.ts';
import { flat, randomArray4, relL2, tensor4, type Array4 } from '../helpers/reference.ts';
import { mechanismRef } from '../helpers/mechanisms.ts';

/** Small feature counts and a chunk smaller than the sequence, so chunking is exercised. */
const SMALL: Record<string, Record<string, unknown>> = {
  softmax: {},
  'yat-spherical': {},
  slay: { prfFeatures: 8, anchors: 4, chunkSize: 4 },
  performer: { features: 16, chunkSize: 4 },
  darkformer: { features: 16, chunkSize: 4 },
  schoenbat: { features: 16, chunkSize: 4 },
  'linear-elu': { chunkSize: 4 },
  cosformer: { chunkSize: 4 },
  gla: { chunkSize: 4, gateRank: 3 },
};
const MECHANISMS = Object.keys(SMALL);
/** Coordinates per input (and parameter) of the float64 gradient check. */
const COORDINATES = 16;
const [B, H, L, D] = [2, 2, 11, 8];

function make(name: string, causal: boolean, seed = 3): AttentionModule {
  return createAttention(name, { numHeads: H, headDim: D, causal, seed, ...SMALL[name] });
}

it('the table above covers every registered mechanism', () => {
  expect([...attentionNames()].sort()).toEqual([...MECHANISMS].sort());
});

describe('declared tensors', () => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });
  /** Options whose tensors differ: every SLAY polynomial variant, a DARKFormer rank below headDim, SchoenbAt's drawn degrees. */
  const variants: [string, Record<string, unknown>][] = [
    ...MECHANISMS.map((name): [string, Record<string, unknown>] => [name, SMALL[name]]),
    ...SLAY_POLY_VARIANTS.map((poly): [string, Record<string, unknown>] => ['slay', { ...SMALL.slay, poly, quadratureNodes: 3 }]),
    ['darkformer', { features: 16, rank: 3 }],
    ['schoenbat', { features: 40, maxDegree: 6 }],
  ];

  it('every mechanism declares the names, shapes and kinds of the tensors it creates, without allocating any', () => {
    const byName = (list: TensorDeclaration[]) => [...list].sort((a, b) => (a.name < b.name ? -1 : 1));
    for (const [name, options] of variants) {
      for (const seed of [1, 2, 3]) {
        const config = { numHeads: H, headDim: D, causal: true, seed, ...options };
        const tensors = tf.memory().numTensors;
        const declared = attentionTensors(name, config);
        expect(tf.memory().numTensors, name).toBe(tensors);
        const attn = createAttention(name, { ...config, scope: 'probe' });
        const created = [
          ...attn.trainableVariables.map((v) => ({ name: v.name.slice('probe.'.length), shape: v.shape, trainable: true })),
          ...attn.buffers.map((v) => ({ name: v.name.slice('probe.'.length), shape: v.shape, trainable: false })),
        ];
        expect(byName(declared), `${name} ${JSON.stringify(options)} seed ${seed}`).toEqual(byName(created));
        attn.dispose();
        // Built outside tf.tidy and disposed: nothing left (namedVariable takes its initial tensor over).
        expect(tf.memory().numTensors, `${name} created and disposed`).toBe(tensors);
      }
    }
  });
});

describe.each(MECHANISMS)('%s', (name) => {
  beforeAll(async () => {
    await initBackend(testBackend());
  });

  it('is strictly causal: outputs up to i ignore every later token, even huge ones', () => {
    const attn = make(name, true);
    const rng = new Rng(11);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const cut = 6;
    const changed = [q, k, v].map((x, n) => x.map((b) => b.map((h) => h.map((row, i) => (i <= cut ? row : row.map(() => rng.normal() * (n === 1 ? 30 : 3)))))));
    const prefix = (t: tf.Tensor4D) => tf.slice(t, [0, 0, 0, 0], [B, H, cut + 1, D]).arraySync();
    const a = tf.tidy(() => prefix(attn.apply(tensor4(q), tensor4(k), tensor4(v))));
    const b = tf.tidy(() => prefix(attn.apply(tensor4(changed[0]), tensor4(changed[1]), tensor4(changed[2]))));
    expect(relL2(b, a)).toBeLessThan(1e-5);
    attn.dispose();
  });

  it('declares quadratic exactly when its decoding state grows with the positions (a key/value cache) and it has no segmentLength', () => {
    const attn = make(name, true);
    const rng = new Rng(14);
    const stateSize = (state: AttentionState) => Object.values(state.tensors).reduce((n, t) => n + t.size, 0);
    let state = attn.initState(1, 4);
    const sizes = [stateSize(state)];
    for (let position = 0; position < 2; position++) {
      const [q, k, v] = [0, 1, 2].map(() => tensor4(randomArray4(rng, [1, H, 1, D])));
      const next = attn.step(q, k, v, state, position);
      tf.dispose([q, k, v, next.out, ...Object.values(state.tensors)]);
      state = next.state;
      sizes.push(stateSize(state));
    }
    tf.dispose(Object.values(state.tensors));
    attn.dispose();
    expect(attentionIsQuadratic(name), `state sizes ${sizes.join(', ')}`).toBe(sizes[0] < sizes[1] && sizes[1] < sizes[2]);
    if (!attentionIsQuadratic(name)) expect(new Set(sizes).size).toBe(1);
    expect('segmentLength' in attentionOptionSpecs(name)).toBe(!attentionIsQuadratic(name));
  });

  it.skipIf(!attentionIsCausalOnly(name))('is causal only: a bidirectional request is refused, naming it', () => {
    expect(() => make(name, false)).toThrow(new RegExp(`attention '${name}' is causal only`));
    expect(() => attentionTensors(name, { numHeads: H, headDim: D, causal: false, ...SMALL[name] })).toThrow(/causal only/);
  });

  it.skipIf(attentionIsCausalOnly(name))('bidirectional outputs ignore padded keys given a key mask', () => {
    const attn = make(name, false);
    const rng = new Rng(12);
    const [q, k, v] = [0, 1, 2].map(() => randomArray4(rng, [B, H, L, D]));
    const real = [8, 11];
    const mask = tf.tensor2d(real.map((n) => Array.from({ length: L }, (_, j) => (j < n ? 1 : 0))));
    const changed = [k, v].map((x) => x.map((bb, b) => bb.map((h) => h.map((row, j) => (j < real[b] ? row : row.map(() => rng.normal() * 5))))));
    const a = tf.tidy(() => attn.apply(tensor4(q), tensor4(k), tensor4(v), { keyMask: mask }).arraySync());
    const b = tf.tidy(() => attn.apply(tensor4(q), tensor4(changed[0]), tensor4(changed[1]), { keyMask: mask }).arraySync());
    expect(relL2(b, a)).toBeLessThan(1e-5);
    mask.dispose();
    attn.dispose();
  });

  // The gradient of Σ w ⊙ attention with respect to q, k, v (and the mechanism's own parameters),
  // against float64 central differences of the mechanism's float64 reference (test/helpers/mechanisms.ts):
  // causal, and bidirectional with a key mask, in one segment and in segments (recomputing gradient).
  // (A causal-only mechanism takes the key mask causally.)
  const masked: [boolean, boolean] = attentionIsCausalOnly(name) ? [true, true] : [false, true];
  const gradientCases: Array<[boolean, boolean, number]> = [
    [true, false, 0],
    [...masked, 0],
  ];
  if (!attentionIsQuadratic(name)) gradientCases.push([true, false, 4], [...masked, 4]);
  it.each(gradientCases)(
    'gradients equal float64 central differences of the float64 reference (causal %s, key mask %s, segmentLength %i)',
    (causal, masked, segmentLength) => {
      const [b, l] = [2, 6];
      const attn = createAttention(name, {
        numHeads: H,
        headDim: D,
        causal,
        seed: 3,
        ...SMALL[name],
        ...(attentionIsQuadratic(name) ? {} : { segmentLength }),
      });
      const rng = new Rng(13);
      // Entries kept ≥ 0.05 away from 0: no finite difference straddles cosFormer's ReLU kink.
      const awayFromZero = (a: Array4) => a.map((bb) => bb.map((h) => h.map((row) => row.map((x) => x + 0.05 * Math.sign(x)))));
      const [q, k, v] = [0, 1, 2].map(() => awayFromZero(randomArray4(rng, [b, H, l, D])));
      const w = randomArray4(rng, [b, H, l, D]);
      const keyMask = masked
        ? [
            [1, 1, 1, 1, 1, 1],
            [1, 1, 0, 1, 1, 0],
          ]
        : undefined;
      const params = attentionParameters(attn, rng);
      const flatW = flat(w);
      const reference = (x: Array4[], p: ParameterValues) =>
        flat(mechanismRef(attn, x[0], x[1], x[2], { causal, keyMask, seed: 3, ...p })).reduce((s, y, i) => s + y * flatW[i], 0);
      const auto = tf.tidy(() => {
        const inputs = [q, k, v].map(tensor4);
        const mask = keyMask && tf.tensor2d(keyMask);
        const variables = inputs.map((t) => tf.variable(t));
        const lossOf = () =>
          tf.sum(
            tf.mul(
              attn.apply(variables[0] as tf.Tensor4D, variables[1] as tf.Tensor4D, variables[2] as tf.Tensor4D, mask ? { keyMask: mask } : {}),
              tensor4(w),
            ),
          ) as tf.Scalar;
        const { grads } = tf.variableGrads(lossOf, [...variables, ...attn.trainableVariables]);
        const result = [...variables, ...attn.trainableVariables].map((x) => Array.from(grads[x.name].dataSync()));
        variables.forEach((x) => x.dispose());
        return result;
      });
      const numeric = centralDifferences(reference, [q, k, v], params.values, rng);
      const names = ['q', 'k', 'v', ...params.names];
      // Measured ≤ 3.3e-7 (float32 autodiff against float64); a 2% error in one gradient term gives ~1e-2.
      numeric.forEach(({ at, values }, i) =>
        expect(
          relL2(
            at.map((j) => auto[i][j]),
            values,
          ),
          names[i],
        ).toBeLessThan(1e-5),
      );
      attn.dispose();
    },
  );
});

type ParameterValues = {
  covarianceFactor?: number[][][];
  gamma?: number;
  beta?: number[];
  gateDown?: number[][];
  gateUp?: number[][];
  gateBias?: number[];
  normWeight?: number[];
};

/** The trainable parameters the references take, set to random values away from their initialisation. */
function attentionParameters(attn: AttentionModule, rng: Rng): { names: string[]; values: ParameterValues } {
  if (attn.name === 'darkformer') {
    const m = Array.from({ length: H }, () =>
      Array.from({ length: D }, (_, i) => Array.from({ length: D }, (_, j) => (i === j ? 0.8 : 0) + 0.3 * rng.normal())),
    );
    attn.trainableVariables[0].assign(tf.tensor3d(m));
    return { names: ['M'], values: { covarianceFactor: m } };
  }
  if (attn.name === 'schoenbat') {
    const gamma = 1.3;
    const beta = Array.from({ length: D }, () => rng.normal());
    attn.trainableVariables[0].assign(tf.tensor1d([gamma]));
    attn.trainableVariables[1].assign(tf.tensor1d(beta));
    return { names: ['γ', 'β'], values: { gamma, beta } };
  }
  if (attn.name === 'gla') {
    // Gate factors large enough that the decay varies from position to position and channel to channel.
    const matrix = (rows: number, cols: number) => Array.from({ length: rows }, () => Array.from({ length: cols }, () => 0.5 * rng.normal()));
    const [down, up] = [matrix(H * D, 3), matrix(3, H * D)];
    const bias = Array.from({ length: H * D }, () => rng.normal());
    const weight = Array.from({ length: D }, () => 1 + 0.3 * rng.normal());
    [down, up, bias, weight].forEach((value, i) => attn.trainableVariables[i].assign(tf.tensor(value)));
    return { names: ['W↓', 'W↑', 'b', 'w'], values: { gateDown: down, gateUp: up, gateBias: bias, normWeight: weight } };
  }
  return { names: [], values: {} };
}

/**
 * Float64 central differences (step 1e-5) of f at (inputs, parameters) on COORDINATES random
 * coordinates of each input and each parameter (all of it when smaller). Returns, per input then per
 * parameter, the coordinates and the derivatives there.
 */
function centralDifferences(
  f: (x: Array4[], p: ParameterValues) => number,
  inputs: Array4[],
  params: ParameterValues,
  rng: Rng,
): Array<{ at: number[]; values: number[] }> {
  const h = 1e-5;
  const sample = (size: number) => (size <= COORDINATES ? Array.from({ length: size }, (_, i) => i) : Array.from({ length: COORDINATES }, () => rng.int(size)));
  const differences = (values: number[], evaluate: (moved: number[]) => number) => {
    const at = sample(values.length);
    return {
      at,
      values: at.map((i) => {
        const nudged = (delta: number) => {
          const moved = values.slice();
          moved[i] += delta;
          return evaluate(moved);
        };
        return (nudged(h) - nudged(-h)) / (2 * h);
      }),
    };
  };
  const perInput = inputs.map((input, which) =>
    differences(flat(input), (moved) =>
      f(
        inputs.map((x, n) => (n === which ? reshapeLike(moved, x) : x)),
        params,
      ),
    ),
  );
  const perParameter = Object.entries(params).map(([key, value]) =>
    differences(flat([value]), (moved) => f(inputs, { ...params, [key]: typeof value === 'number' ? moved[0] : reshapeLike(moved, value) })),
  );
  return [...perInput, ...perParameter];
}

/** Flat values back into the nesting of `like`. */
function reshapeLike<T>(values: number[], like: T): T {
  let i = 0;
  const rebuild = (x: unknown): unknown => (Array.isArray(x) ? x.map(rebuild) : values[i++]);
  return rebuild(like) as T;
}

/** A toy regression: x → attention(xWq, xWk, xWv) should fit a fixed random target a little. */
function trainToy(name: string, steps: number, segmentLength: number) {
  const rng = new Rng(21);
  const width = H * D;
  const init = (rows: number, cols: number, scale: number) =>
    tf.variable(
      tf.tensor2d(
        Float32Array.from(rng.normalArray(rows * cols), (x) => x * scale),
        [rows, cols],
      ),
    );
  const [wq, wk, wv] = [0, 1, 2].map(() => init(width, width, 0.3));
  const x = tf.tensor3d(Float32Array.from(rng.normalArray(B * L * width)), [B, L, width]);
  const target = tf.tensor3d(
    Float32Array.from(rng.normalArray(B * L * width), (t) => 0.5 * t),
    [B, L, width],
  );
  const attn = createAttention(name, { numHeads: H, headDim: D, causal: true, seed: 3, ...SMALL[name], ...(segmentLength ? { segmentLength } : {}) });
  const heads = (t: tf.Tensor) => tf.transpose(tf.reshape(t, [B, L, H, D]), [0, 2, 1, 3]) as tf.Tensor4D;
  const vars = [wq, wk, wv, ...attn.trainableVariables];
  const optimizer = tf.train.adam(0.03);
  const losses: number[] = [];
  const tensorsAfterStep: number[] = [];
  for (let s = 0; s < steps; s++) {
    const value = tf.tidy(() => {
      const { value, grads } = tf.variableGrads(() => {
        const out = attn.apply(heads(dense(x, wq)), heads(dense(x, wk)), heads(dense(x, wv)));
        const merged = tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [B, L, width]);
        return tf.mean(tf.square(tf.sub(merged, target))) as tf.Scalar;
      }, vars);
      optimizer.applyGradients(grads as Record<string, tf.Variable>);
      return value;
    });
    losses.push(value.dataSync()[0]);
    value.dispose();
    tensorsAfterStep.push(tf.memory().numTensors);
  }
  tf.dispose([x, target, ...vars.slice(0, 3)]);
  optimizer.dispose();
  attn.dispose();
  return { losses, tensorsAfterStep };
}

describe.each(testBackends())('training on %s', (backend) => {
  beforeAll(async () => {
    await initBackend(backend);
  });
  afterAll(async () => {
    await initBackend(testBackend());
  });

  it.each([...MECHANISMS.map((name) => [name, 0] as const), ...MECHANISMS.filter((name) => !attentionIsQuadratic(name)).map((name) => [name, 4] as const)])(
    '%s (segmentLength %i): a few Adam steps lower the loss, with no tensor leak',
    (name, segmentLength) => {
      const { losses, tensorsAfterStep } = trainToy(name, 12, segmentLength);
      expect(losses.every(Number.isFinite)).toBe(true);
      expect(losses[losses.length - 1]).toBeLessThan(0.9 * losses[0]);
      // After the optimizer has created its slots (first step), the count stays flat.
      expect(new Set(tensorsAfterStep.slice(1)).size).toBe(1);
    },
  );
});
