// Multi-query associative recall (MQAR), the recall task of Zoology (Arora, Eyuboglu et al., "Zoology: Measuring and
// improving recall in efficient language models", ICLR 2024), as a deterministic seeded generator of task batches
// (docs/experiments.md, "mqar"). A row is N key–value pairs, then a query region in which queried keys appear again;
// at each query the target (the next token) is that key's value:
//
//   k₁ v₁ k₂ v₂ … k_N v_N | · · k₂ · · · k₁ · · · …
//                                ↑ target v₂   ↑ target v₁
//
// As Zoology's generator: keys are distinct, drawn from [1, V/2), values distinct from [V/2, V); query i sits at an
// even offset 2·g of the query region, the gaps g drawn without replacement from [0, (T − 2N)/2) with
// P(g) ∝ a·(g + 1)^(a − 1) (a power law: most queries come soon after the pairs, as repeated bigrams do in text);
// every other position is token 0, or a uniform token of [0, V) with randomNonQueries. Only the query positions are
// scored.
import { deriveSeed, Rng } from '../core/rng.ts';
import type { TaskBatch, TaskSpec } from './synthetic-tasks.ts';

export interface MqarConfig {
  vocabSize: number;
  seqLen: number;
  /** Key–value pairs at the start of each row (N). */
  numKvPairs: number;
  /** Keys queried in the query region (Zoology queries all N; default N). */
  numQueries?: number;
  /** The power law's a: P(gap g) ∝ a·(g + 1)^(a − 1); 1 is uniform (Zoology: 0.01). */
  powerA?: number;
  /** Fill the positions that are neither pairs nor queries with uniform random tokens instead of 0 (Zoology's generator: true). */
  randomNonQueries?: boolean;
}

export type ResolvedMqarConfig = Required<MqarConfig>;

/** The config with its defaults, checked: every violated constraint named with its value. */
export function resolveMqarConfig(config: MqarConfig): ResolvedMqarConfig {
  const resolved: ResolvedMqarConfig = {
    ...config,
    numQueries: config.numQueries ?? config.numKvPairs,
    powerA: config.powerA ?? 0.01,
    randomNonQueries: config.randomNonQueries ?? true,
  };
  const { vocabSize: V, seqLen: T, numKvPairs: N, numQueries: Q, powerA } = resolved;
  for (const [key, value] of Object.entries({ vocabSize: V, seqLen: T, numKvPairs: N, numQueries: Q })) {
    if (!Number.isInteger(value) || value < 1) throw new Error(`mqar: ${key} must be an integer ≥ 1 (got ${value})`);
  }
  if (T % 2 !== 0) throw new Error(`mqar: seqLen must be even (got ${T})`);
  if (V <= T) throw new Error(`mqar: vocabSize (${V}) must exceed seqLen (${T}), as in Zoology`);
  if (Q > N) throw new Error(`mqar: numQueries (${Q}) must be at most numKvPairs (${N}): each key is queried once at most`);
  // With V > T ≥ 4N, [1, V/2) and [V/2, V) always hold N distinct keys and values.
  if (4 * N > T) throw new Error(`mqar: ${N} pairs and their queries need seqLen ≥ 4·${N} = ${4 * N} (got ${T})`);
  if (!(Number.isFinite(powerA) && powerA > 0 && powerA <= 1)) throw new Error(`mqar: powerA must be in (0, 1] (got ${powerA})`);
  if (typeof resolved.randomNonQueries !== 'boolean') throw new Error(`mqar: randomNonQueries must be true or false (got ${resolved.randomNonQueries})`);
  return resolved;
}

/** The query region's slots ((T − 2N)/2 even offsets) and their unnormalised power-law weights a·(g + 1)^(a − 1). */
function gapWeights(config: ResolvedMqarConfig): Float64Array {
  const slots = (config.seqLen - 2 * config.numKvPairs) / 2;
  const a = config.powerA;
  return Float64Array.from({ length: slots }, (_, g) => a * (g + 1) ** (a - 1));
}

/** k distinct values of [low, high) in random order (a partial Fisher–Yates shuffle). */
function distinct(rng: Rng, low: number, high: number, k: number): number[] {
  const pool = Array.from({ length: high - low }, (_, i) => low + i);
  for (let i = 0; i < k; i++) {
    const j = i + rng.int(pool.length - i);
    [pool[i], pool[j]] = [pool[j], pool[i]];
  }
  return pool.slice(0, k);
}

/** k distinct slots drawn one after the other, each with probability ∝ its weight among those left (numpy's choice without replacement). */
function weightedDistinct(rng: Rng, weights: Float64Array, k: number): number[] {
  const left = Float64Array.from(weights);
  let total = left.reduce((s, w) => s + w, 0);
  const chosen: number[] = [];
  for (let i = 0; i < k; i++) {
    let u = rng.uniform() * total;
    let slot = 0;
    // The last slot with weight left takes what rounding leaves over.
    while (slot < left.length - 1 && (left[slot] === 0 || u >= left[slot])) {
      u -= left[slot];
      slot++;
    }
    while (left[slot] === 0) slot--;
    chosen.push(slot);
    total -= left[slot];
    left[slot] = 0;
  }
  return chosen;
}

export class MqarGenerator {
  readonly config: ResolvedMqarConfig;
  /** As the task runner reads a task: its name, length, vocabulary, and the positions it scores. */
  readonly spec: TaskSpec;
  private readonly weights: Float64Array;
  private readonly trainRng: Rng;
  private readonly evalRng: Rng;

  constructor(config: MqarConfig, seed: number) {
    this.config = resolveMqarConfig(config);
    const { vocabSize, seqLen, numKvPairs, numQueries } = this.config;
    this.spec = {
      name: `mqar-T${seqLen}-kv${numKvPairs}`,
      category: 'memory',
      seqLen,
      vocabSize,
      mode: 'position',
      description: `Zoology's MQAR: ${numKvPairs} key–value pairs, ${numQueries} queries, length ${seqLen}, vocabulary ${vocabSize}`,
    };
    this.weights = gapWeights(this.config);
    this.trainRng = new Rng(deriveSeed(seed, 'mqar.train'));
    this.evalRng = new Rng(deriveSeed(seed, 'mqar.eval'));
  }

  trainBatch(batchSize: number): TaskBatch {
    return this.batch(this.trainRng, batchSize);
  }

  evalBatch(batchSize: number): TaskBatch {
    return this.batch(this.evalRng, batchSize);
  }

  private batch(rng: Rng, batchSize: number): TaskBatch {
    if (!Number.isInteger(batchSize) || batchSize < 1) throw new Error(`mqar: batch size must be an integer ≥ 1 (got ${batchSize})`);
    const { vocabSize: V, seqLen: T, numKvPairs: N, numQueries: Q, randomNonQueries } = this.config;
    const inputs = new Int32Array(batchSize * T);
    const targets = new Int32Array(batchSize * T);
    const mask = new Float32Array(batchSize * T);
    const half = Math.floor(V / 2);
    for (let b = 0; b < batchSize; b++) {
      const row = b * T;
      const keys = distinct(rng, 1, half, N);
      const values = distinct(rng, half, V, N);
      for (let i = 0; i < N; i++) {
        inputs[row + 2 * i] = keys[i];
        inputs[row + 2 * i + 1] = values[i];
      }
      const gaps = weightedDistinct(rng, this.weights, Q);
      // Which pairs are asked for: all of them in Zoology's order when Q = N, else Q of them at random.
      const asked = Q === N ? keys.map((_, i) => i) : distinct(rng, 0, N, Q);
      const scored = new Set<number>();
      for (let i = 0; i < Q; i++) {
        const at = 2 * N + 2 * gaps[i];
        inputs[row + at] = keys[asked[i]];
        targets[row + at] = values[asked[i]];
        mask[row + at] = 1;
        scored.add(at);
      }
      if (randomNonQueries) for (let t = 2 * N; t < T; t++) if (!scored.has(t)) inputs[row + t] = rng.int(V);
    }
    return { batchSize, seqLen: T, inputs, targets, mask };
  }
}
