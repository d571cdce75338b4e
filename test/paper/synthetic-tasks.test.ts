// The 22 synthetic-task generators, each checked against an independent re-derivation of its rule;
// the task model learns an easy task; the benchmark summary's per-category statistics.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { summarizeTaskResults, taskResultsMarkdown, trainOnTask } from '../../src/paper/task-runner.ts';
import type { TaskRunResult } from '../../src/paper/task-runner.ts';
import { TASK_NAMES, TaskGenerator, taskSpec, tasksInCategory } from '../../src/paper/synthetic-tasks.ts';
import type { TaskBatch } from '../../src/paper/synthetic-tasks.ts';
import { PAPER_TASK_MODEL, TaskModel } from '../../src/paper/task-model.ts';
import { IGNORE_LABEL } from '../../src/model/lm.ts';
import { crossEntropyRef } from '../helpers/reference.ts';

// The paper's table (docs/notes/slay-task-benchmark.md): name, category, T, V, mode.
const TABLE: [string, string, number, number, string][] = [
  ['copy', 'basic', 32, 32, 'sequence'],
  ['sort', 'basic', 16, 32, 'sequence'],
  ['reverse', 'basic', 32, 32, 'sequence'],
  ['retrieval', 'memory', 64, 64, 'last'],
  ['kv_recall', 'memory', 22, 64, 'last'],
  ['first_token', 'memory', 64, 32, 'last'],
  ['selective_copy', 'memory', 64, 32, 'sequence'],
  ['long_copy', 'long_range', 256, 32, 'sequence'],
  ['distant_match', 'long_range', 128, 32, 'position'],
  ['multihop', 'long_range', 64, 32, 'last'],
  ['stack', 'reasoning', 32, 32, 'sequence'],
  ['induction', 'reasoning', 64, 64, 'last'],
  ['pattern', 'reasoning', 32, 16, 'sequence'],
  ['counting', 'arithmetic', 32, 32, 'last'],
  ['parity', 'arithmetic', 32, 2, 'last'],
  ['addition', 'arithmetic', 16, 32, 'last'],
  ['modular', 'arithmetic', 16, 8, 'last'],
  ['bigram', 'pattern', 32, 32, 'sequence'],
  ['majority', 'pattern', 32, 8, 'last'],
  ['noisy_copy', 'robustness', 64, 32, 'sequence'],
  ['compression', 'robustness', 32, 16, 'sequence'],
  ['histogram', 'other', 32, 16, 'sequence'],
];

/** Rows of a batch as plain arrays. */
function rows(batch: TaskBatch): { x: number[]; y: number[]; m: number[] }[] {
  const T = batch.seqLen;
  return Array.from({ length: batch.batchSize }, (_, b) => ({
    x: [...batch.inputs.subarray(b * T, (b + 1) * T)],
    y: [...batch.targets.subarray(b * T, (b + 1) * T)],
    m: [...batch.mask.subarray(b * T, (b + 1) * T)],
  }));
}

const sample = (task: string, n = 64, seed = 7) => rows(new TaskGenerator(task, seed).trainBatch(n));
const count = (xs: number[], v: number) => xs.filter((x) => x === v).length;
const lastOf = (xs: number[]) => xs[xs.length - 1];

describe('task table', () => {
  it('has the 22 tasks of the paper with their lengths, vocabularies, categories and modes', () => {
    expect([...TASK_NAMES]).toEqual(TABLE.map((r) => r[0]));
    for (const [name, category, T, V, mode] of TABLE) {
      expect(taskSpec(name)).toMatchObject({ name, category, seqLen: T, vocabSize: V, mode });
    }
    expect(tasksInCategory('memory')).toEqual(['retrieval', 'kv_recall', 'first_token', 'selective_copy']);
    expect(() => taskSpec('sorting')).toThrow(/unknown task 'sorting'; allowed: copy, sort/);
  });

  it('every generator gives the right shapes, tokens inside the vocabulary and the mask of its mode', () => {
    for (const name of TASK_NAMES) {
      const { seqLen: T, vocabSize: V, mode } = taskSpec(name);
      const batch = new TaskGenerator(name, 3).trainBatch(5);
      expect(batch.inputs.length).toBe(5 * T);
      expect(batch.targets.length).toBe(5 * T);
      for (const v of [...batch.inputs, ...batch.targets]) expect(v >= 0 && v < V, `${name}: token ${v} outside [0, ${V})`).toBe(true);
      for (const { m } of rows(batch)) {
        if (mode === 'sequence') expect(m.every((v) => v === 1)).toBe(true);
        if (mode === 'last') expect(m).toEqual([...Array(T - 1).fill(0), 1]);
        if (mode === 'position') expect(m.map((v, i) => (v ? i : -1)).filter((i) => i >= 0)).toEqual([T / 2]);
      }
    }
    expect(() => new TaskGenerator('copy', 1).trainBatch(0)).toThrow(/batch size must be an integer ≥ 1/);
  });

  it('is deterministic per seed, and the training and evaluation streams differ', () => {
    for (const name of TASK_NAMES) {
      const a = new TaskGenerator(name, 11);
      const b = new TaskGenerator(name, 11);
      const a1 = a.trainBatch(4);
      expect(b.trainBatch(4)).toEqual(a1);
      expect(b.evalBatch(4)).toEqual(a.evalBatch(4));
      expect(new TaskGenerator(name, 11).evalBatch(4).inputs).not.toEqual(a1.inputs);
      expect(new TaskGenerator(name, 12).trainBatch(4).inputs).not.toEqual(a1.inputs);
    }
  });
});

describe('task rules', () => {
  it('copy, long_copy, sort, reverse', () => {
    for (const { x, y } of sample('copy')) expect(y).toEqual(x);
    for (const { x, y } of sample('long_copy', 8)) expect(y).toEqual(x);
    for (const { x, y } of sample('sort')) expect(y).toEqual([...x].sort((a, b) => a - b));
    for (const { x, y } of sample('reverse')) expect(y).toEqual([...x].reverse());
  });

  it('retrieval: one needle before T−2, the query last, the answer is the needle', () => {
    for (const { x, y } of sample('retrieval')) {
      const needle = x.indexOf(63);
      expect(count(x, 63)).toBe(1);
      expect(needle).toBeLessThan(62);
      expect(lastOf(x)).toBe(62);
      expect(count(x, 62)).toBe(1);
      expect(lastOf(y)).toBe(63);
    }
  });

  it('kv_recall: distinct keys, SEP, a queried key; the target is its value', () => {
    for (const { x, y } of sample('kv_recall')) {
      const keys = x.slice(0, 20).filter((_, i) => i % 2 === 0);
      expect(new Set(keys).size).toBe(10);
      expect(Math.max(...x.slice(0, 20))).toBeLessThan(63);
      expect(x[20]).toBe(63);
      const queried = keys.indexOf(x[21]);
      expect(queried).toBeGreaterThanOrEqual(0);
      expect(lastOf(y)).toBe(x[2 * queried + 1]);
    }
  });

  it('first_token and distant_match point back to token 0', () => {
    for (const { x, y } of sample('first_token')) expect(lastOf(y)).toBe(x[0]);
    for (const { x, y } of sample('distant_match')) {
      expect(y[64]).toBe(x[0]);
      expect(y.filter((_, i) => i !== 64).every((v) => v === 0)).toBe(true);
    }
  });

  it('selective_copy: 8 markers in the first half; the second half lists the tokens after them', () => {
    for (const { x, y } of sample('selective_copy')) {
      const markers = x.map((v, i) => (v === 31 ? i : -1)).filter((i) => i >= 0);
      expect(markers.length).toBe(8);
      expect(Math.max(...markers)).toBeLessThan(32);
      const expected = Array(64).fill(0);
      markers.forEach((p, i) => (expected[32 + i] = p + 1 < 32 ? x[p + 1] : 0));
      expect(y).toEqual(expected);
    }
  });

  it('multihop: one pointer per third; the target is the token after the second pointer', () => {
    for (const { x, y } of sample('multihop')) {
      expect(count(x, 30)).toBe(1);
      expect(count(x, 31)).toBe(1);
      expect(x.indexOf(30)).toBeLessThan(21);
      const second = x.indexOf(31);
      expect(second >= 21 && second < 42).toBe(true);
      expect(lastOf(y)).toBe(x[second + 1]);
    }
  });

  it('stack: POP only on a non-empty stack, popped values are pushed values (< V−2), target 0 elsewhere', () => {
    let pops = 0;
    for (const { x, y } of sample('stack')) {
      let depth = 0;
      x.forEach((v, t) => {
        if (v === 30) depth++;
        if (v === 31) {
          expect(depth).toBeGreaterThan(0);
          depth--;
          pops++;
          expect(y[t]).toBeLessThan(30);
        } else {
          expect(y[t]).toBe(0);
        }
      });
    }
    expect(pops).toBeGreaterThan(100);
  });

  it('induction: the token at T−2 repeats an earlier trigger; the target is what followed it', () => {
    for (const { x, y } of sample('induction')) {
      const candidates = x
        .slice(1, 32)
        .map((v, i) => (v === x[62] ? i + 1 : -1))
        .filter((i) => i >= 0);
      expect(candidates.length).toBeGreaterThan(0);
      expect(candidates.map((p) => x[p + 1])).toContain(lastOf(y));
    }
  });

  it('pattern: period 4, target = next element', () => {
    for (const { x, y } of sample('pattern')) {
      x.forEach((v, t) => {
        expect(v).toBe(x[t % 4]);
        expect(y[t]).toBe(x[(t + 1) % 4]);
      });
    }
  });

  it('counting, parity, addition, modular, majority, histogram', () => {
    for (const { x, y } of sample('counting')) {
      expect(Math.max(...x)).toBeLessThan(10);
      expect(lastOf(y)).toBe(count(x, 0));
    }
    for (const { x, y } of sample('parity')) expect(lastOf(y)).toBe(count(x, 1) % 2);
    for (const { x, y } of sample('addition')) expect(lastOf(y)).toBe(x.reduce((a, b) => a + b, 0) % 32);
    for (const { x, y } of sample('modular')) {
      expect(Math.max(...x)).toBeLessThan(7);
      expect(lastOf(y)).toBe(x.reduce((a, b) => a + b, 0) % 7);
    }
    for (const { x, y } of sample('majority')) {
      const counts = [0, 1, 2, 3, 4].map((v) => count(x, v));
      const best = counts.indexOf(Math.max(...counts));
      expect(lastOf(y)).toBe(best);
    }
    for (const { x, y } of sample('histogram')) {
      expect(y.slice(0, 5)).toEqual([0, 1, 2, 3, 4].map((v) => Math.min(count(x, v), 15)));
      expect(y.slice(5).every((v) => v === 0)).toBe(true);
    }
  });

  it('bigram: target = table[input], one fixed table for every batch of a seed, another for another seed', () => {
    const tableOf = (seed: number) => {
      const g = new TaskGenerator('bigram', seed);
      const table = new Map<number, number>();
      for (const batch of [g.trainBatch(16), g.evalBatch(16), g.trainBatch(16)]) {
        for (const { x, y } of rows(batch)) {
          x.forEach((v, t) => {
            if (table.has(v)) expect(table.get(v)).toBe(y[t]);
            table.set(v, y[t]);
          });
        }
      }
      expect(table.size).toBe(32);
      return [...Array(32).keys()].map((v) => table.get(v));
    };
    const a = tableOf(42);
    expect(tableOf(42)).toEqual(a);
    expect(tableOf(43)).not.toEqual(a);
  });

  it('noisy_copy: noise only in the second half; target = first half in place, 0 after', () => {
    let noise = 0;
    for (const { x, y } of sample('noisy_copy')) {
      expect(x.slice(0, 32).every((v) => v < 31)).toBe(true);
      noise += count(x.slice(32), 31);
      expect(y).toEqual([...x.slice(0, 32), ...Array(32).fill(0)]);
    }
    // 64 rows × 32 positions with p = 0.3: mean 614.4, sd √(2048·0.21) = 20.7.
    expect(Math.abs(noise - 614.4)).toBeLessThan(4 * 20.7);
  });

  it('compression: runs of length 1–3; target = the run-collapsed sequence, 0-padded', () => {
    for (const { x, y } of sample('compression')) {
      const collapsed = x.filter((v, t) => t === 0 || v !== x[t - 1]);
      expect(y).toEqual([...collapsed, ...Array(32 - collapsed.length).fill(0)]);
    }
  });
});

describe('task model and runner', () => {
  beforeAll(async () => {
    await initBackend('wasm', { quiet: true });
  });

  it('softmax learns copy within 40 steps (accuracy far above chance 1/32) and leaks no tensors', async () => {
    const before = tf.memory().numTensors;
    const result = await trainOnTask({ task: 'copy', attention: 'softmax', seed: 42, steps: 40, batchSize: 16, evalSamples: 32, lr: 1e-3, weightDecay: 0.01 });
    expect(tf.memory().numTensors).toBe(before);
    expect(result.error).toBeUndefined();
    expect(result.accuracy).toBeGreaterThan(0.5);
    expect(result.lossCurve[0]).toBeGreaterThan(3);
    expect(result.loss!).toBeLessThan(result.lossCurve[0] / 2);
    // Embeddings 32·64 + 32·64, two blocks of four 64×64 projections with biases, head 64·32 + 32.
    expect(result.params).toBe(2 * 32 * 64 + 2 * 4 * (64 * 64 + 64) + 64 * 32 + 32);
  }, 60_000);

  it('the task model as the training step sees it: a batch labelled where the mask scores gives the masked loss and hits, against float64', async () => {
    // distant_match scores a few positions per row (position mode), so unscored positions must count for nothing.
    const spec = taskSpec('distant_match');
    const batch = new TaskGenerator('distant_match', 42).trainBatch(3);
    const model = new TaskModel({ vocabSize: spec.vocabSize, seqLen: spec.seqLen, ...PAPER_TASK_MODEL, attention: 'softmax', attentionOptions: {}, seed: 42 });
    try {
      const labels = Int32Array.from(batch.targets, (t, i) => (batch.mask[i] ? t : IGNORE_LABEL));
      const stepBatch = { batchSize: 3, seqLen: spec.seqLen, inputIds: batch.inputs, labels };
      // The mechanism keeps what its first call makes (a causal mask): count after it.
      tf.tidy(() => model.logits(tf.tensor2d(batch.inputs, [3, spec.seqLen], 'int32')));
      const before = tf.memory().numTensors;
      const [logits, loss, sums] = tf.tidy(() => {
        const inputs = model.lossInputs(stepBatch)!;
        const evalSums = model.evalSums(stepBatch);
        return [
          Array.from(model.logits(inputs.ids).dataSync()),
          model.lossOf(inputs).dataSync()[0],
          { loss: evalSums.loss.dataSync()[0], correct: evalSums.correct.dataSync()[0], count: evalSums.count },
        ] as const;
      });
      expect(tf.memory().numTensors).toBe(before);
      const scored = batch.mask.reduce((n, m) => n + m, 0);
      const expected = crossEntropyRef(logits, Array.from(batch.targets), spec.vocabSize, Array.from(batch.mask)).value;
      expect(Math.abs(loss - expected)).toBeLessThan(1e-5 * expected);
      expect(Math.abs(sums.loss - expected)).toBeLessThan(1e-5 * expected);
      let hits = 0;
      for (let i = 0; i < batch.mask.length; i++) {
        const row = logits.slice(i * spec.vocabSize, (i + 1) * spec.vocabSize);
        if (batch.mask[i] && row.indexOf(Math.max(...row)) === batch.targets[i]) hits++;
      }
      expect(sums).toMatchObject({ correct: hits, count: scored });
      expect(model.lossInputs({ ...stepBatch, labels: new Int32Array(labels.length).fill(IGNORE_LABEL) })).toBeNull();
      expect(() => model.lossInputs({ ...stepBatch, labels: labels.map(() => spec.vocabSize) })).toThrow(
        /task batch: label 32 at position 0 is outside the vocabulary \[0, 32\)/,
      );
    } finally {
      model.dispose();
    }
  });

  it("the runner trains through the training step: its first loss is the fresh model's masked mean cross-entropy on the first batch", async () => {
    const spec = taskSpec('sort');
    const batch = new TaskGenerator('sort', 7).trainBatch(4);
    const model = new TaskModel({ vocabSize: spec.vocabSize, seqLen: spec.seqLen, ...PAPER_TASK_MODEL, attention: 'softmax', attentionOptions: {}, seed: 7 });
    let logits: number[];
    try {
      logits = tf.tidy(() => Array.from(model.logits(tf.tensor2d(batch.inputs, [4, spec.seqLen], 'int32')).dataSync()));
    } finally {
      model.dispose();
    }
    const scored = batch.mask.reduce((n, m) => n + m, 0);
    const expected = crossEntropyRef(logits, Array.from(batch.targets), spec.vocabSize, Array.from(batch.mask)).value / scored;
    const result = await trainOnTask({ task: 'sort', attention: 'softmax', seed: 7, steps: 1, batchSize: 4, evalSamples: 4, lr: 1e-3, weightDecay: 0.01 });
    expect(Math.abs(result.lossCurve[0] - expected)).toBeLessThan(1e-5 * expected);
    expect(result.execution).toBe('eager'); // wasm has no TensorFlow functions
  });

  it('summarises per task and per category: per-seed category means, then mean ± sd over seeds', () => {
    const run = (task: string, seed: number, accuracy: number | null, error?: string): TaskRunResult => ({
      task,
      category: taskSpec(task).category,
      attention: 'softmax',
      seed,
      accuracy,
      loss: accuracy === null ? null : 1,
      lossCurve: [],
      params: 1,
      trainSeconds: 2,
      execution: 'eager',
      error,
    });
    const results = [run('copy', 1, 1.0), run('sort', 1, 0.5), run('copy', 2, 0.8), run('sort', 2, 0.3), run('parity', 1, null, 'boom')];
    const summary = summarizeTaskResults(results);
    const copy = summary.tasks.find((r) => r.task === 'copy')!;
    expect(copy.accuracy.mean).toBeCloseTo(0.9, 12);
    expect(copy.accuracy.sd).toBeCloseTo(Math.sqrt(0.02), 12);
    const basic = summary.categories.find((r) => r.category === 'basic')!;
    // seed 1: (1.0 + 0.5)/2 = 0.75, seed 2: (0.8 + 0.3)/2 = 0.55 → mean 0.65, sd √0.02.
    expect(basic.accuracy).toMatchObject({ n: 2 });
    expect(basic.accuracy.mean).toBeCloseTo(0.65, 12);
    expect(basic.accuracy.sd).toBeCloseTo(Math.sqrt(0.02), 12);
    expect(summary.categories.find((r) => r.category === 'arithmetic')).toBeUndefined();
    const md = taskResultsMarkdown(summary);
    expect(md).toContain('| copy | basic | 0.90 ± 0.14 |');
    expect(md).toContain('| parity | arithmetic | error |');
    expect(md).toContain('| basic | 0.65 ± 0.14 |');
    expect(md).toContain('parity / softmax, seed 1: boom');
  });
});
