// The 22 synthetic tasks of the SLAY paper's task benchmark (Tables 3–9), as deterministic seeded
// generators. Definitions follow the paper's benchmark script (docs/notes/slay-task-benchmark.md)
// with three deliberate differences, all documented on the task:
//  - bigram: the lookup table is drawn from the run seed (the reference reset the global seed and
//    crashed on GPU, so the paper has no bigram numbers);
//  - "position" mode scores the positions the generator marks (the reference inferred them as
//    target ≠ 0, which silently drops every sample whose answer is token 0);
//  - selective_copy: the target is the token that follows each marker in the final input (the
//    reference read it before later markers were written, so adjacent markers gave a target the
//    model never sees).
import { Rng, deriveSeed } from '../core/rng.ts';

/** Which positions the loss and the accuracy count. */
export type TaskMode = 'sequence' | 'last' | 'position';

export const TASK_CATEGORIES = ['basic', 'memory', 'long_range', 'reasoning', 'arithmetic', 'pattern', 'robustness', 'other'] as const;
export type TaskCategory = (typeof TASK_CATEGORIES)[number];

export interface TaskSpec {
  name: string;
  category: TaskCategory;
  seqLen: number;
  vocabSize: number;
  mode: TaskMode;
  description: string;
}

/** One batch, row-major [batchSize, seqLen]. `mask` is 1 where the loss and the accuracy count. */
export interface TaskBatch {
  batchSize: number;
  seqLen: number;
  inputs: Int32Array;
  targets: Int32Array;
  mask: Float32Array;
}

/** Fills one row: `x` (input) and `y` (targets, zero-initialised); returns the scored positions in position mode. */
type RowFiller = (rng: Rng, x: Int32Array, y: Int32Array, constants: TaskConstants) => number[] | void;

/** Per-seed constants shared by every batch of one generator (only bigram has any). */
interface TaskConstants {
  bigramTable?: Int32Array;
}

interface TaskDefinition extends TaskSpec {
  fill: RowFiller;
  constants?: (seed: number, spec: TaskSpec) => TaskConstants;
}

function uniformTokens(rng: Rng, x: Int32Array, high: number): void {
  for (let t = 0; t < x.length; t++) x[t] = rng.int(high);
}

/** Uniform tokens below 32, target = input (copy and long_copy differ only in length). */
function copyTokens(rng: Rng, x: Int32Array, y: Int32Array): void {
  uniformTokens(rng, x, 32);
  y.set(x);
}

function countOf(x: Int32Array, token: number): number {
  let n = 0;
  for (const v of x) if (v === token) n++;
  return n;
}

function histogram(x: Int32Array, bins: number): number[] {
  const counts = new Array<number>(bins).fill(0);
  for (const v of x) counts[v]++;
  return counts;
}

/** k distinct values of [0, n) in random order (a partial Fisher–Yates shuffle). */
function sampleDistinct(rng: Rng, n: number, k: number): number[] {
  const pool = Array.from({ length: n }, (_, i) => i);
  for (let i = 0; i < k; i++) {
    const j = i + rng.int(n - i);
    [pool[i], pool[j]] = [pool[j], pool[i]];
  }
  return pool.slice(0, k);
}

const last = (x: Int32Array) => x.length - 1;

const DEFINITIONS: TaskDefinition[] = [
  {
    name: 'copy',
    category: 'basic',
    seqLen: 32,
    vocabSize: 32,
    mode: 'sequence',
    description: 'uniform tokens; target = input',
    fill: copyTokens,
  },
  {
    name: 'sort',
    category: 'basic',
    seqLen: 16,
    vocabSize: 32,
    mode: 'sequence',
    description: 'target = the input sorted ascending (a causal model cannot know later tokens: ceiling well below 1)',
    fill(rng, x, y) {
      uniformTokens(rng, x, 32);
      y.set(Int32Array.from(x).sort());
    },
  },
  {
    name: 'reverse',
    category: 'basic',
    seqLen: 32,
    vocabSize: 32,
    mode: 'sequence',
    description: 'target = the input reversed (causal ceiling ≈ 0.5)',
    fill(rng, x, y) {
      uniformTokens(rng, x, 32);
      for (let t = 0; t < x.length; t++) y[t] = x[x.length - 1 - t];
    },
  },
  {
    name: 'retrieval',
    category: 'memory',
    seqLen: 64,
    vocabSize: 64,
    mode: 'last',
    description: 'tokens in [0,V−2); NEEDLE=V−1 at a random position < T−2; QUERY=V−2 last; target at last = NEEDLE',
    fill(rng, x, y) {
      const V = 64;
      uniformTokens(rng, x, V - 2);
      x[rng.int(x.length - 2)] = V - 1;
      x[last(x)] = V - 2;
      y[last(x)] = V - 1;
    },
  },
  {
    name: 'kv_recall',
    category: 'memory',
    seqLen: 22,
    vocabSize: 64,
    mode: 'last',
    description: '10 (key, value) pairs with distinct keys in [0,V−1), values in [0,V−1); then SEP=V−1 and a queried key; target = its value',
    fill(rng, x, y) {
      const V = 64;
      const pairs = (x.length - 2) >> 1;
      const keys = sampleDistinct(rng, V - 1, pairs);
      for (let i = 0; i < pairs; i++) {
        x[2 * i] = keys[i];
        x[2 * i + 1] = rng.int(V - 1);
      }
      const queried = rng.int(pairs);
      x[x.length - 2] = V - 1;
      x[last(x)] = keys[queried];
      y[last(x)] = x[2 * queried + 1];
    },
  },
  {
    name: 'first_token',
    category: 'memory',
    seqLen: 64,
    vocabSize: 32,
    mode: 'last',
    description: 'uniform tokens; target at last = the first token',
    fill(rng, x, y) {
      uniformTokens(rng, x, 32);
      y[last(x)] = x[0];
    },
  },
  {
    name: 'selective_copy',
    category: 'memory',
    seqLen: 64,
    vocabSize: 32,
    mode: 'sequence',
    description:
      'tokens in [0,V−1); MARKER=V−1 at T/8 sorted random positions of the first half; target at half+i = the token after the i-th marker (0 past the half), 0 elsewhere',
    fill(rng, x, y) {
      const V = 32;
      const half = x.length >> 1;
      uniformTokens(rng, x, V - 1);
      const markers = sampleDistinct(rng, half, Math.max(1, half >> 2)).sort((a, b) => a - b);
      for (const p of markers) x[p] = V - 1;
      markers.forEach((p, i) => {
        y[half + i] = p + 1 < half ? x[p + 1] : 0;
      });
    },
  },
  {
    name: 'long_copy',
    category: 'long_range',
    seqLen: 256,
    vocabSize: 32,
    mode: 'sequence',
    description: 'copy at length 256',
    fill: copyTokens,
  },
  {
    name: 'distant_match',
    category: 'long_range',
    seqLen: 128,
    vocabSize: 32,
    mode: 'position',
    description: 'uniform tokens; target at T/2 = token 0 (only that position is scored)',
    fill(rng, x, y) {
      uniformTokens(rng, x, 32);
      const at = x.length >> 1;
      y[at] = x[0];
      return [at];
    },
  },
  {
    name: 'multihop',
    category: 'long_range',
    seqLen: 64,
    vocabSize: 32,
    mode: 'last',
    description: 'tokens in [0,V−2); pointer V−2 in the first third, pointer V−1 in the middle third; target at last = the token after the 2nd pointer',
    fill(rng, x, y) {
      const V = 32;
      const T = x.length;
      const third = Math.floor(T / 3);
      uniformTokens(rng, x, V - 2);
      const first = rng.int(third);
      const second = third + rng.int(Math.floor((2 * T) / 3) - third);
      x[first] = V - 2;
      x[second] = V - 1;
      y[last(x)] = x[second + 1];
    },
  },
  {
    name: 'stack',
    category: 'reasoning',
    seqLen: 32,
    vocabSize: 32,
    mode: 'sequence',
    description:
      'per step: POP=V−1 with p=0.3 if the stack is non-empty (target = popped value), else PUSH=V−2 with p=0.5 of a hidden value (as in the paper, the pushed value is not in the input); other steps keep a random token, target 0',
    fill(rng, x, y) {
      const V = 32;
      uniformTokens(rng, x, V - 2);
      const stack: number[] = [];
      for (let t = 0; t < x.length; t++) {
        if (rng.uniform() < 0.3 && stack.length > 0) {
          x[t] = V - 1;
          y[t] = stack.pop()!;
        } else if (rng.uniform() < 0.5) {
          x[t] = V - 2;
          stack.push(rng.int(V - 2));
        }
      }
    },
  },
  {
    name: 'induction',
    category: 'reasoning',
    seqLen: 64,
    vocabSize: 64,
    mode: 'last',
    description: 'uniform tokens; a trigger at a random position in [1,T/2) is repeated at T−2; target at T−1 = the token that followed the trigger',
    fill(rng, x, y) {
      uniformTokens(rng, x, 64);
      const trigger = 1 + rng.int((x.length >> 1) - 1);
      x[x.length - 2] = x[trigger];
      y.set(x);
      y[last(x)] = x[trigger + 1];
    },
  },
  {
    name: 'pattern',
    category: 'reasoning',
    seqLen: 32,
    vocabSize: 16,
    mode: 'sequence',
    description: 'a random period-4 pattern repeated; target = the next element',
    fill(rng, x, y) {
      const pattern = [0, 1, 2, 3].map(() => rng.int(16));
      for (let t = 0; t < x.length; t++) {
        x[t] = pattern[t % 4];
        y[t] = pattern[(t + 1) % 4];
      }
    },
  },
  {
    name: 'counting',
    category: 'arithmetic',
    seqLen: 32,
    vocabSize: 32,
    mode: 'last',
    description: 'tokens in [0,10); target at last = the number of zeros (clamped to V−1)',
    fill(rng, x, y) {
      uniformTokens(rng, x, 10);
      y[last(x)] = Math.min(countOf(x, 0), 31);
    },
  },
  {
    name: 'parity',
    category: 'arithmetic',
    seqLen: 32,
    vocabSize: 2,
    mode: 'last',
    description: 'bits; target at last = parity of the number of ones',
    fill(rng, x, y) {
      uniformTokens(rng, x, 2);
      y[last(x)] = countOf(x, 1) % 2;
    },
  },
  {
    name: 'addition',
    category: 'arithmetic',
    seqLen: 16,
    vocabSize: 32,
    mode: 'last',
    description: 'bits; target at last = their sum mod V',
    fill(rng, x, y) {
      uniformTokens(rng, x, 2);
      y[last(x)] = countOf(x, 1) % 32;
    },
  },
  {
    name: 'modular',
    category: 'arithmetic',
    seqLen: 16,
    vocabSize: 8,
    mode: 'last',
    description: 'tokens in [0,7); target at last = their sum mod 7',
    fill(rng, x, y) {
      uniformTokens(rng, x, 7);
      y[last(x)] = x.reduce((a, b) => a + b, 0) % 7;
    },
  },
  {
    name: 'bigram',
    category: 'pattern',
    seqLen: 32,
    vocabSize: 32,
    mode: 'sequence',
    description: 'a fixed random map table[x] drawn from the run seed; target = table[input]',
    constants: (seed, spec) => {
      const rng = new Rng(deriveSeed(seed, 'bigram.table'));
      return { bigramTable: Int32Array.from({ length: spec.vocabSize }, () => rng.int(spec.vocabSize)) };
    },
    fill(rng, x, y, { bigramTable }) {
      uniformTokens(rng, x, 32);
      for (let t = 0; t < x.length; t++) y[t] = bigramTable![x[t]];
    },
  },
  {
    name: 'majority',
    category: 'pattern',
    seqLen: 32,
    vocabSize: 8,
    mode: 'last',
    description: 'tokens in [0,5); target at last = the most frequent token (the smallest on ties)',
    fill(rng, x, y) {
      uniformTokens(rng, x, 5);
      const counts = histogram(x, 5);
      y[last(x)] = counts.indexOf(Math.max(...counts));
    },
  },
  {
    name: 'noisy_copy',
    category: 'robustness',
    seqLen: 64,
    vocabSize: 32,
    mode: 'sequence',
    description: 'tokens in [0,V−1); in the 2nd half each token becomes NOISE=V−1 with p=0.3; target = the first half copied in place, 0 elsewhere',
    fill(rng, x, y) {
      const V = 32;
      const half = x.length >> 1;
      uniformTokens(rng, x, V - 1);
      for (let t = half; t < x.length; t++) if (rng.uniform() < 0.3) x[t] = V - 1;
      for (let t = 0; t < half; t++) y[t] = x[t];
    },
  },
  {
    name: 'compression',
    category: 'robustness',
    seqLen: 32,
    vocabSize: 16,
    mode: 'sequence',
    description: 'runs of length 1–3 of random tokens; target = the run-collapsed sequence, left-aligned, 0-padded',
    fill(rng, x, y) {
      for (let pos = 0; pos < x.length; ) {
        const value = rng.int(16);
        const runLength = 1 + rng.int(3);
        for (let i = 0; i < runLength && pos + i < x.length; i++) x[pos + i] = value;
        pos += runLength;
      }
      let out = 0;
      for (let t = 0; t < x.length; t++) if (t === 0 || x[t] !== x[t - 1]) y[out++] = x[t];
    },
  },
  {
    name: 'histogram',
    category: 'other',
    seqLen: 32,
    vocabSize: 16,
    mode: 'sequence',
    description: 'tokens in [0,5); targets at positions 0…4 = the count of each token (clamped to V−1), 0 elsewhere',
    fill(rng, x, y) {
      uniformTokens(rng, x, 5);
      histogram(x, 5).forEach((count, token) => {
        y[token] = Math.min(count, 15);
      });
    },
  },
];

const BY_NAME = new Map(DEFINITIONS.map((d) => [d.name, d]));

export const TASK_NAMES: readonly string[] = DEFINITIONS.map((d) => d.name);

export function taskSpec(name: string): TaskSpec {
  const d = BY_NAME.get(name);
  if (!d) throw new Error(`unknown task '${name}'; allowed: ${TASK_NAMES.join(', ')}`);
  const { fill: _fill, constants: _constants, ...spec } = d;
  return spec;
}

export function tasksInCategory(category: TaskCategory): string[] {
  return DEFINITIONS.filter((d) => d.category === category).map((d) => d.name);
}

/**
 * The batches of one task for one seed: two independent deterministic streams (training and
 * evaluation) that share the per-seed constants (bigram's table).
 */
export class TaskGenerator {
  readonly spec: TaskSpec;
  private readonly definition: TaskDefinition;
  private readonly constants: TaskConstants;
  private readonly trainRng: Rng;
  private readonly evalRng: Rng;

  constructor(name: string, seed: number) {
    this.spec = taskSpec(name);
    this.definition = BY_NAME.get(name)!;
    this.constants = this.definition.constants?.(seed, this.spec) ?? {};
    this.trainRng = new Rng(deriveSeed(seed, `task.${name}.train`));
    this.evalRng = new Rng(deriveSeed(seed, `task.${name}.eval`));
  }

  trainBatch(batchSize: number): TaskBatch {
    return this.batch(this.trainRng, batchSize);
  }

  evalBatch(batchSize: number): TaskBatch {
    return this.batch(this.evalRng, batchSize);
  }

  private batch(rng: Rng, batchSize: number): TaskBatch {
    if (!Number.isInteger(batchSize) || batchSize < 1) {
      throw new Error(`task '${this.spec.name}': batch size must be an integer ≥ 1 (got ${batchSize})`);
    }
    const T = this.spec.seqLen;
    const inputs = new Int32Array(batchSize * T);
    const targets = new Int32Array(batchSize * T);
    const mask = new Float32Array(batchSize * T);
    for (let b = 0; b < batchSize; b++) {
      const x = inputs.subarray(b * T, (b + 1) * T);
      const y = targets.subarray(b * T, (b + 1) * T);
      const scored = this.definition.fill(rng, x, y, this.constants);
      const m = mask.subarray(b * T, (b + 1) * T);
      if (this.spec.mode === 'sequence') m.fill(1);
      else if (this.spec.mode === 'last') m[T - 1] = 1;
      else for (const p of scored ?? []) m[p] = 1;
    }
    return { batchSize, seqLen: T, inputs, targets, mask };
  }
}
