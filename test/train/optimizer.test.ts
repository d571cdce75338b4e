import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { Rng } from '../../src/core/rng.ts';
import { AdamW, clipByGlobalNorm, decays } from '../../src/train/optimizer.ts';
import type { AdamWOptions } from '../../src/train/optimizer.ts';

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
});

const SHAPES: Record<string, number[]> = {
  'blocks.0.mlp.fc.weight': [2, 3],
  'blocks.0.mlp.fc.bias': [3],
  'blocks.0.ln1.weight': [3],
  'embed.tokens.weight': [4, 2],
  'blocks.0.attn.covarianceFactor': [2, 2, 2],
};

function randomValues(rng: Rng, shape: number[]): Float64Array {
  return rng.normalArray(shape.reduce((a, b) => a * b, 1));
}

/** Float64 AdamW as torch.optim.AdamW, written independently of the implementation. */
function referenceAdamW(
  p0: Float64Array,
  grads: Float64Array[],
  lrs: number[],
  o: { beta1: number; beta2: number; eps: number; weightDecay: number },
  decay: boolean,
): Float64Array {
  const p = Float64Array.from(p0);
  const m = new Float64Array(p.length);
  const v = new Float64Array(p.length);
  grads.forEach((g, s) => {
    const t = s + 1;
    for (let i = 0; i < p.length; i++) {
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g[i];
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g[i] * g[i];
      if (decay) p[i] -= lrs[s] * o.weightDecay * p[i];
      const mHat = m[i] / (1 - o.beta1 ** t);
      const vHat = v[i] / (1 - o.beta2 ** t);
      p[i] -= (lrs[s] * mHat) / (Math.sqrt(vHat) + o.eps);
    }
  });
  return p;
}

describe('AdamW', () => {
  it('decays only linear weight matrices (embeddings only when asked)', () => {
    const vars = new Map(Object.entries(SHAPES).map(([n, s]) => [n, tf.variable(tf.zeros(s), true, `decay-test.${n}`)]));
    const chosen = [...vars].filter(([n, v]) => decays(n, v)).map(([n]) => n);
    expect(chosen).toEqual(['blocks.0.mlp.fc.weight']);
    const withEmbeddings = [...vars].filter(([n, v]) => decays(n, v, true)).map(([n]) => n);
    expect(withEmbeddings).toEqual(['blocks.0.mlp.fc.weight', 'embed.tokens.weight']);
    for (const v of vars.values()) v.dispose();
  });

  const cases: Array<[string, AdamWOptions]> = [
    ['with weight decay', { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 }],
    ['without weight decay', { beta1: 0.8, beta2: 0.999, eps: 1e-6, weightDecay: 0 }],
    ['decaying embeddings', { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.3, decayEmbeddings: true }],
  ];
  for (const [label, options] of cases) {
    it(`three steps match a float64 hand computation (${label})`, () => {
      const rng = new Rng(42);
      const initial = new Map(Object.entries(SHAPES).map(([n, s]) => [n, randomValues(rng, s)]));
      const grads = [0, 1, 2].map(() => new Map(Object.entries(SHAPES).map(([n, s]) => [n, randomValues(rng, s)])));
      const lrs = [1e-2, 3e-2, 5e-3];
      const params = new Map(
        Object.entries(SHAPES).map(([n, s]) => [n, tf.variable(tf.tensor(Float32Array.from(initial.get(n)!), s), true, `adamw-test.${label}.${n}`)]),
      );
      const opt = new AdamW(params, options);
      grads.forEach((g, s) => {
        const tensors = new Map([...g].map(([n, values]) => [n, tf.tensor(Float32Array.from(values), SHAPES[n])]));
        opt.applyGradients(tensors, lrs[s]);
        tf.dispose([...tensors.values()]);
      });
      expect(opt.getState().step).toBe(3);
      for (const [name, p] of params) {
        const shouldDecay = name === 'blocks.0.mlp.fc.weight' || (name === 'embed.tokens.weight' && options.decayEmbeddings === true);
        // Float32 initial values, as the variables hold them.
        const start = Float64Array.from(Float32Array.from(initial.get(name)!));
        const grads32 = grads.map((g) => Float64Array.from(Float32Array.from(g.get(name)!)));
        const expected = referenceAdamW(start, grads32, lrs, options, shouldDecay && options.weightDecay > 0);
        const got = p.dataSync();
        for (let i = 0; i < expected.length; i++) expect(Math.abs(got[i] - expected[i])).toBeLessThan(2e-6 * Math.max(1, Math.abs(expected[i])));
        // Moments: m after 3 steps is Σ (1−β1) β1^(2−s) g_s.
        const m = opt.getState().m.get(name)!.dataSync();
        const mExpected = grads32.reduce(
          (acc, g, s) => acc.map((a, i) => a + (1 - options.beta1) * options.beta1 ** (2 - s) * g[i]),
          new Float64Array(start.length),
        );
        for (let i = 0; i < m.length; i++) expect(m[i]).toBeCloseTo(mExpected[i], 5);
      }
      opt.dispose();
      for (const v of params.values()) v.dispose();
    });
  }

  it('rejects bad hyper-parameters and unknown gradients by name', () => {
    const p = new Map([['w.weight', tf.variable(tf.zeros([2, 2]), true, 'adamw-bad.w')]]);
    expect(() => new AdamW(p, { beta1: 1, beta2: 0.9, eps: 1e-8, weightDecay: 0 })).toThrow(/train.beta1 must be in \[0, 1\)/);
    const opt = new AdamW(p, { beta1: 0.9, beta2: 0.9, eps: 1e-8, weightDecay: 0 });
    expect(() => opt.applyGradients({ 'other.weight': tf.zeros([2, 2]) }, 1e-3)).toThrow(/unknown parameter 'other.weight'/);
    opt.dispose();
    p.get('w.weight')!.dispose();
  });
});

describe('global-norm clipping and skipped parameters', () => {
  const shapes = new Map([
    ['a.weight', [2]],
    ['b.weight', [1, 2]],
  ]);
  const params = () => new Map([...shapes].map(([n, s]) => [n, tf.variable(tf.zeros(s), true, `flat-test.${n}.${Math.random()}`)]));

  it('clips by the global norm over all parameters: the prepared update reports it, and equals AdamW on the clipped gradients', () => {
    const flat = tf.tensor1d([3, 0, 0, 4]); // global norm 5
    const clipped = clipByGlobalNorm(flat, 1);
    expect(clipped.norm.dataSync()[0]).toBeCloseTo(5, 6);
    expect(Array.from(clipped.grad.dataSync())).toEqual([expect.closeTo(0.6, 6), 0, 0, expect.closeTo(0.8, 6)]);
    expect(Array.from(clipByGlobalNorm(flat, 10).grad.dataSync())).toEqual([expect.closeTo(3, 5), 0, 0, expect.closeTo(4, 5)]);
    const off = clipByGlobalNorm(flat, 0);
    expect(off.grad).toBe(flat);
    const [clippedHere, clippedBefore] = [params(), params()];
    const [a, b] = [clippedHere, clippedBefore].map((vars) => new AdamW(vars, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 }));
    const before = tf.memory().numTensors;
    const pending = a.prepare(
      new Map<string, tf.Tensor>([
        ['b.weight', tf.tensor([[0, 4]])],
        ['a.weight', tf.tensor([3, 0])],
      ]),
      0.1,
      1,
    );
    expect(pending.norm.dataSync()[0]).toBeCloseTo(5, 6);
    expect(a.stepCount).toBe(0);
    pending.commit();
    expect(a.stepCount).toBe(1);
    b.applyGradients(
      new Map<string, tf.Tensor>([
        ['a.weight', tf.tensor([0.6, 0])],
        ['b.weight', tf.tensor([[0, 0.8]])],
      ]),
      0.1,
    );
    for (const name of shapes.keys()) {
      expect(Array.from(clippedHere.get(name)!.dataSync())).toEqual(Array.from(clippedBefore.get(name)!.dataSync()).map((x) => expect.closeTo(x, 6)));
    }
    // The given gradients are the caller's (4 here); the prepared update left nothing else behind.
    expect(tf.memory().numTensors).toBe(before + 4);
    const dropped = a.prepare(new Map([['a.weight', tf.tensor([1, 1])]]), 0.1, 1);
    const kept = Array.from(clippedHere.get('a.weight')!.dataSync());
    dropped.discard();
    expect(a.stepCount).toBe(1);
    expect(Array.from(clippedHere.get('a.weight')!.dataSync())).toEqual(kept);
    tf.dispose([flat, clipped.grad, clipped.norm, off.norm]);
    for (const [opt, vars] of [
      [a, clippedHere],
      [b, clippedBefore],
    ] as const) {
      opt.dispose();
      for (const v of vars.values()) v.dispose();
    }
  });

  it('across ranks: the gradients, the loss and the stop requests go through the sum as one packed vector, and the update is that of the sums', () => {
    const [across, summed] = [params(), params()];
    const [a, b] = [across, summed].map((vars) => new AdamW(vars, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 }));
    // A stand-in for the all-reduce over 3 ranks holding the same part: × 3, and what it was given.
    const seen: number[][] = [];
    const sum = (packed: tf.Tensor1D) => {
      seen.push(Array.from(packed.dataSync()));
      return tf.mul(packed, 3) as tf.Tensor1D;
    };
    const [loss, stop] = [tf.scalar(0.25), tf.scalar(1)];
    const pending = a.prepare(
      new Map<string, tf.Tensor>([
        ['a.weight', tf.tensor([3, 0])],
        ['b.weight', tf.tensor([[0, 4]])],
      ]),
      0.1,
      1,
      { loss, stop, sum },
    );
    // Parameter order (a, b), then the loss and the stop request: P + 2 values in one call (once per recording on tensorflow, which records the update twice).
    expect(seen.length).toBeGreaterThan(0);
    for (const packed of seen) expect(packed).toEqual([3, 0, 0, 4, 0.25, 1]);
    expect(pending.loss!.dataSync()[0]).toBeCloseTo(0.75, 6);
    expect(pending.stop!.dataSync()[0]).toBe(3);
    expect(pending.norm.dataSync()[0]).toBeCloseTo(15, 5); // the norm of the summed gradients decides clipping and the non-finite rule
    pending.commit();
    b.applyGradients(
      new Map<string, tf.Tensor>([
        ['a.weight', tf.tensor([9, 0])],
        ['b.weight', tf.tensor([[0, 12]])],
      ]),
      0.1,
      1,
    );
    for (const name of shapes.keys()) {
      expect(Array.from(across.get(name)!.dataSync())).toEqual(Array.from(summed.get(name)!.dataSync()).map((x) => expect.closeTo(x, 6)));
    }
    tf.dispose([loss, stop]);
    for (const [opt, vars] of [
      [a, across],
      [b, summed],
    ] as const) {
      opt.dispose();
      for (const v of vars.values()) v.dispose();
    }
  });

  it('leaves a parameter without a gradient, and its moments, exactly as they were', () => {
    const vars = params();
    vars.get('a.weight')!.assign(tf.tensor([1, -1]));
    vars.get('b.weight')!.assign(tf.tensor([[2, 5]]));
    const opt = new AdamW(vars, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.5 });
    opt.applyGradients(
      new Map([
        ['a.weight', tf.tensor([1, 1])],
        ['b.weight', tf.tensor([[1, 1]])],
      ]),
      0.1,
    );
    const before = { b: Array.from(vars.get('b.weight')!.dataSync()), m: opt.getState().m.get('b.weight')!.dataSync().slice() };
    opt.applyGradients(new Map([['a.weight', tf.tensor([1, 1])]]), 0.1);
    expect(Array.from(vars.get('b.weight')!.dataSync())).toEqual(before.b);
    expect(opt.getState().m.get('b.weight')!.dataSync()).toEqual(before.m);
    // a moved on: its second step changed it again.
    expect(Array.from(vars.get('a.weight')!.dataSync()).every((x, i) => x < [1, -1][i] - 0.1)).toBe(true);
    opt.dispose();
    for (const v of vars.values()) v.dispose();
  });
});

describe('ZeRO-1: moments sharded over ranks (train.shardOptimizer)', () => {
  // Op by op: a recorded TensorFlow function would freeze the simulated gather's result into its graph.
  const OPTIONS = { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1, update: 'op-by-op' as const };
  const RANKS = 3; // P = 28 parameters: slices of 10, the last one 8 values and 2 of padding
  const copyOf = (values: Map<string, Float64Array>) => new Map([...values].map(([n, x]) => [n, tf.variable(tf.tensor(Array.from(x), SHAPES[n]))] as const));
  const values = (t: Map<string, tf.Tensor>) => [...t.values()].flatMap((x) => Array.from(x.dataSync()));

  /**
   * An all-gather simulated in one process: `run(rank, gather)` is called for every rank twice, first with a gather
   * that records the rank's piece (and returns zeros), then with one returning every piece in rank order. Each run's
   * pieces must not depend on what the gather returned, as in the optimizer, where the gather is the last step.
   */
  function simulateGather(run: (rank: number, gather: (piece: tf.Tensor1D) => tf.Tensor1D, final: boolean) => void): void {
    const pieces: number[][] = [];
    for (let rank = 0; rank < RANKS; rank++)
      run(
        rank,
        (piece) => {
          pieces[rank] = Array.from(piece.dataSync());
          return tf.zeros([piece.size * RANKS]);
        },
        false,
      );
    for (let rank = 0; rank < RANKS; rank++) run(rank, () => tf.tensor1d(pieces.flat()), true);
  }

  it('N sharded ranks (collectives simulated in one process) end with the weights and moments of one unsharded AdamW, bit for bit; a checkpoint state resumes sharded', () => {
    const rng = new Rng(7);
    const initial = new Map(Object.entries(SHAPES).map(([n, s]) => [n, randomValues(rng, s)] as const));
    const whole = copyOf(initial);
    const reference = new AdamW(whole, OPTIONS);
    const ranks = Array.from({ length: RANKS }, (_, rank) => {
      const vars = copyOf(initial);
      return { vars, opt: new AdamW(vars, { ...OPTIONS, shard: { rank, worldSize: RANKS } }) };
    });
    expect(ranks.map((r) => [r.opt.shard!.start, r.opt.shard!.inside])).toEqual([
      [0, 10],
      [10, 10],
      [20, 8],
    ]);
    expect(() => ranks[0].opt.applyGradients(new Map([['blocks.0.ln1.weight', tf.ones([3])]]), 0.1)).toThrow(
      /rank 0 keeps only its slice of the moments: its updates run across ranks/,
    );
    // The second step skips three parameters (their values and moments must stay), both decay and clipping act.
    const steps = [Object.keys(SHAPES), ['blocks.0.mlp.fc.weight', 'embed.tokens.weight']];
    steps.forEach((names, s) => {
      const grads = () => new Map(names.map((n) => [n, tf.tensor(Array.from(randomValues(new Rng(100 + s), SHAPES[n])), SHAPES[n])] as const));
      const across = (gather?: (piece: tf.Tensor1D) => tf.Tensor1D) => ({ loss: tf.scalar(1), stop: tf.scalar(0), sum: (x: tf.Tensor1D) => x, gather });
      const pending = reference.prepare(grads(), 0.01, 0.5, across());
      expect(pending.norm.dataSync()[0]).toBeGreaterThan(0.5); // clipping changes the gradients
      pending.commit();
      simulateGather((rank, gather, final) => {
        const update = ranks[rank].opt.prepare(grads(), 0.01, 0.5, across(gather));
        if (final) update.commit();
        else update.discard();
      });
    });
    for (const { vars } of ranks) expect(values(vars)).toEqual(values(whole));
    // Rank 0 holds the whole moments once every rank gathered; they are the unsharded optimizer's.
    expect(() => ranks[0].opt.getState()).toThrow(/gather them at step 2 first/);
    simulateGather((rank, gather, final) => ranks[rank].opt.gatherMoments(gather, final && rank === 0));
    const gathered = ranks[0].opt.getState();
    const expected = reference.getState();
    expect(gathered.step).toBe(2);
    expect(values(gathered.m)).toEqual(values(expected.m));
    expect(values(gathered.v)).toEqual(values(expected.v));
    expect(values(gathered.m).some((x) => x !== 0)).toBe(true);
    // Taken by the checkpoint: a second read asks for a new gather.
    expect(() => ranks[0].opt.getState()).toThrow(/gather them/);
    // A checkpoint's whole moments restore into a sharded optimizer as its slice: gathered again, they are the same.
    const resumed = Array.from({ length: RANKS }, (_, rank) => {
      const opt = new AdamW(copyOf(initial), { ...OPTIONS, shard: { rank, worldSize: RANKS } });
      opt.setState(expected.step, expected.m, expected.v);
      return opt;
    });
    simulateGather((rank, gather, final) => resumed[rank].gatherMoments(gather, final && rank === 0));
    const again = resumed[0].getState();
    expect(values(again.m)).toEqual(values(expected.m));
    expect(values(again.v)).toEqual(values(expected.v));
    expect(() => ranks[1].opt.flatMoments()).toThrow(/flatMoments needs the whole moments, and rank 1 keeps only its slice/);
    tf.dispose([...gathered.m.values(), ...gathered.v.values(), ...expected.m.values(), ...expected.v.values(), ...again.m.values(), ...again.v.values()]);
    for (const opt of [reference, ...ranks.map((r) => r.opt), ...resumed]) opt.dispose();
  });
});
