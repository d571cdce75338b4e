// Graph execution on the native backend (src/backend/tf-graph.ts): a recorded computation,
// registered as a TensorFlow function, computes the function of its feeds (checked on new feed
// values against a float64 reference, gradient included, with and without XLA), freezes what is not
// a feed, and the cache only builds a graph for a program that repeats. The binding's function entry
// points (native/tfjs_functions.cc) refuse a second registration, a call after removal and a tensor
// that is not live, with errors that name the function.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { isTensorflowSetUp, SETUP_COMMAND } from '../../src/backend/native-build.ts';
import { CompiledGraph, DUMP_GRAPHS_ENV, GraphCache, graphsAvailable, recordTrace } from '../../src/backend/tf-graph.ts';
import { Rng } from '../../src/core/rng.ts';

const available = isTensorflowSetUp();

/** y = ½ Σ relu(x·w) and ∂y/∂w = ½ xᵀ·[x·w > 0], in float64. */
function reference(x: number[][], w: number[][]): { y: number; dw: number[][] } {
  const [n, k, m] = [x.length, w.length, w[0].length];
  let y = 0;
  const dw = Array.from({ length: k }, () => new Array<number>(m).fill(0));
  for (let i = 0; i < n; i++) {
    for (let j = 0; j < m; j++) {
      let s = 0;
      for (let t = 0; t < k; t++) s += x[i][t] * w[t][j];
      if (s <= 0) continue;
      y += 0.5 * s;
      for (let t = 0; t < k; t++) dw[t][j] += 0.5 * x[i][t];
    }
  }
  return { y, dw };
}

const randomMatrix = (rng: Rng, rows: number, cols: number) => Array.from({ length: rows }, () => Array.from({ length: cols }, () => rng.normal()));
const maxDiff = (a: number[], b: number[]) => Math.max(...a.map((v, i) => Math.abs(v - b[i])));

describe.skipIf(!available)(`graph execution on the tensorflow backend (skipped when not built: ${SETUP_COMMAND})`, () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
  });
  afterAll(async () => {
    await initBackend('cpu', { quiet: true });
  });

  const program = (x: tf.Tensor2D, w: tf.Tensor2D) => () => {
    const f = (v: tf.Tensor) => tf.mul(tf.sum(tf.relu(tf.matMul(x, v as tf.Tensor2D))), 0.5);
    const { value, grads } = tf.variableGrads(() => f(w) as tf.Scalar, [w as tf.Variable]);
    return [value, grads[(w as tf.Variable).name]];
  };

  it.each([false, true])('runs a recorded value and gradient as a function on new feed values, equal to a float64 reference (XLA: %s)', (xla) => {
    expect(graphsAvailable()).toBe(true);
    const rng = new Rng(3);
    const w = tf.variable(tf.tensor2d(randomMatrix(rng, 4, 3)), true, 'graph-test.w');
    const x = tf.tensor2d(randomMatrix(rng, 5, 4));
    const { outputs, trace } = recordTrace([x, w], program(x, w));
    tf.dispose(outputs);
    const graph = CompiledGraph.load(trace);
    try {
      const [x2, w2] = [randomMatrix(rng, 5, 4), randomMatrix(rng, 4, 3)];
      tf.tidy(() => void graph.run([tf.tensor2d(x2), tf.tensor2d(w2)], xla)); // the first XLA call compiles
      const before = tf.memory().numTensors;
      const [y, dw] = tf.tidy(() => graph.run([tf.tensor2d(x2), tf.tensor2d(w2)], xla).map((t) => Array.from(t.dataSync())));
      expect(tf.memory().numTensors).toBe(before);
      const want = reference(x2, w2);
      expect(Math.abs(y[0] - want.y)).toBeLessThan(1e-5 * Math.max(1, Math.abs(want.y)));
      expect(maxDiff(dw, want.dw.flat())).toBeLessThan(1e-5);
      expect(() => tf.tidy(() => graph.run([tf.zeros([5, 3]), tf.tensor2d(w2)]))).toThrow(/feed 0 is float32 \[5,3\], the graph takes float32 \[5,4\]/);
    } finally {
      graph.dispose();
      tf.dispose([w, x]);
    }
  });

  it("registers a function once, calls it by name on the backend's device, and refuses misuse with errors naming it", () => {
    const binding = (tf.backend() as unknown as { binding: Record<string, (...args: unknown[]) => unknown> }).binding;
    const x = tf.tensor1d([1, 2, 3]);
    const { outputs, trace } = recordTrace([x], () => [tf.mul(x, x)]);
    tf.dispose(outputs);
    const graph = CompiledGraph.load(trace);
    try {
      expect(binding.deviceName()).toMatch(/^\/job:localhost\/replica:0\/task:0\/device:(CPU|GPU):0$/);
      expect(binding.hasFunction(graph.name)).toBe(true);
      expect(tf.tidy(() => Array.from(graph.run([tf.tensor1d([4, 5, 6])])[0].dataSync()))).toEqual([16, 25, 36]);
      // Registering the same name again is refused; nothing else is registered.
      expect(() => binding.registerFunction(graph.name, new Uint8Array(), [], [])).toThrow(`a function named '${graph.name}' is already registered`);
      expect(() => binding.callFunction(graph.name, [123456789], 1, false)).toThrow(`function '${graph.name}': input 0 is not a live tensor (id 123456789)`);
      expect(() => binding.registerFunction('slayformer_bad', new Uint8Array([1, 2, 3]), [], [])).toThrow(/importing the graph of function 'slayformer_bad'/);
      expect(binding.hasFunction('slayformer_bad')).toBe(false);
    } finally {
      graph.dispose();
      x.dispose();
    }
    expect(binding.hasFunction(graph.name)).toBe(false);
    expect(() => binding.removeFunction(graph.name)).toThrow(`no function named '${graph.name}' is registered`);
    expect(() => tf.tidy(() => graph.run([tf.tensor1d([1, 2, 3])]))).toThrow(new RegExp(`calling function '${graph.name}'`));
  });

  it(`writes each function's GraphDef and its feeds where ${DUMP_GRAPHS_ENV} says`, () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'dump-graphs-'));
    const x = tf.tensor2d([
      [1, 2],
      [3, 4],
    ]);
    const build = () => {
      const { outputs, trace } = recordTrace([x], () => [tf.sum(tf.square(x))]);
      tf.dispose(outputs);
      return CompiledGraph.load(trace);
    };
    try {
      process.env[DUMP_GRAPHS_ENV] = path.join(dir, 'graphs');
      const graph = build();
      graph.dispose();
      const files = fs.readdirSync(path.join(dir, 'graphs')).sort();
      expect(files).toEqual([`${graph.name}.json`, `${graph.name}.pb`]);
      const meta = JSON.parse(fs.readFileSync(path.join(dir, 'graphs', `${graph.name}.json`), 'utf8'));
      expect(meta.feeds).toEqual([{ name: 'feed_0:0', dtype: 'float32', shape: [2, 2] }]);
      expect(meta.fetches).toHaveLength(1);
      expect(fs.statSync(path.join(dir, 'graphs', `${graph.name}.pb`)).size).toBeGreaterThan(0);
    } finally {
      delete process.env[DUMP_GRAPHS_ENV];
      x.dispose();
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('freezes what is not a feed: a tensor uploaded inside keeps its recorded value', () => {
    const x = tf.tensor1d([1, 2, 3]);
    let offset = 10;
    const { outputs, trace } = recordTrace([x], () => [tf.add(x, tf.scalar(offset))]);
    tf.dispose(outputs);
    const graph = CompiledGraph.load(trace);
    offset = 20;
    try {
      const got = tf.tidy(() => Array.from(graph.run([tf.tensor1d([4, 5, 6])])[0].dataSync()));
      expect(got).toEqual([14, 15, 16]);
    } finally {
      graph.dispose();
      x.dispose();
    }
  });

  it('builds a graph once two calls repeat the program, and keeps a changing program eager with its results right', () => {
    const cache = new GraphCache();
    const w = tf.variable(
      tf.tensor2d([
        [1, -1],
        [2, 0.5],
      ]),
      true,
      'graph-test.cache',
    );
    const stable = (x: tf.Tensor2D) => () => program(x, w)();
    const states: string[] = [];
    const counts: number[] = [];
    try {
      for (let step = 0; step < 5; step++) {
        const xs = [
          [step + 1, -1],
          [0.5, step],
        ];
        const got = tf.tidy(() => {
          const x = tf.tensor2d(xs);
          return Array.from(cache.call('stable', [x, w], stable(x))[0].dataSync());
        });
        expect(got[0]).toBeCloseTo(reference(xs, w.arraySync()).y, 5);
        states.push(cache.status('stable'));
        counts.push(tf.memory().numTensors);
      }
      expect(states).toEqual(['graph', 'graph', 'graph', 'graph', 'graph']); // recorded twice within the first call
      expect(new Set(counts.slice(1)).size).toBe(1);

      let calls = 0;
      for (let step = 0; step < 4; step++) {
        const got = tf.tidy(() => {
          const x = tf.tensor1d([1, 2]);
          return Array.from(cache.call('changing', [x], () => [tf.mul(x, tf.scalar(++calls))])[0].dataSync());
        });
        expect(got).toEqual([calls, 2 * calls]);
      }
      expect(cache.status('changing')).toMatch(/^eager: 3 recordings differed in their programs or constants/);
    } finally {
      cache.dispose();
      w.dispose();
    }
  });
});
