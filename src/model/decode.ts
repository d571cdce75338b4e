// Incremental decoding of a GPT: a block of tokens (the prompt) or one token per step, each attention
// layer carrying its recurrent state (linear mechanisms: the O(1) sums Σ φ(k)[v, 1]ᵀ; softmax and
// exact Yat: a key/value cache), so a new token costs the same whatever the length for linear
// mechanisms — the prefix is never re-run. Plus sampling (temperature, top-k, top-p, seeded) and a generate
// loop over token ids.
import * as tf from '@tensorflow/tfjs';
import type { AttentionState } from './attention/types.ts';
import type { LanguageModel } from './lm.ts';
import { Rng } from '../core/rng.ts';

export class IncrementalDecoder {
  private states: AttentionState[];
  private consumed = 0;

  /** `batch` sequences decoded side by side; the model must be a GPT. */
  constructor(
    readonly model: LanguageModel,
    readonly batch = 1,
  ) {
    if (model.kind !== 'gpt') throw new Error(`incremental decoding needs a GPT (causal) model; this one is '${model.kind}'`);
    this.states = model.body.attention.map((a) => a.initState(batch, model.config.maxSeqLen));
  }

  /** Tokens fed so far (= the position the next token goes to). */
  get position(): number {
    return this.consumed;
  }

  /** Room left before model.maxSeqLen. */
  get remaining(): number {
    return this.model.config.maxSeqLen - this.consumed;
  }

  /** Feeds one token per sequence; returns the next-token logits [batch, V] (the caller disposes them). */
  feed(tokens: ArrayLike<number>): tf.Tensor2D {
    if (tokens.length !== this.batch) throw new Error(`IncrementalDecoder.feed: expected ${this.batch} tokens (one per sequence), got ${tokens.length}`);
    return this.feedBlock(Array.from(tokens, (id) => [id]));
  }

  /**
   * Feeds the next n tokens of every sequence at once (rows[b], all of length n: a prompt, or a block
   * of it) through the whole-sequence form of each layer, from its state; returns the next-token
   * logits after the last of them [batch, V] (the caller disposes them).
   */
  feedBlock(rows: ArrayLike<number>[]): tf.Tensor2D {
    const n = rows[0]?.length ?? 0;
    if (rows.length !== this.batch || n < 1 || rows.some((row) => row.length !== n)) {
      throw new Error(`IncrementalDecoder.feedBlock: expected ${this.batch} rows of the same length ≥ 1 (one per sequence)`);
    }
    if (this.remaining < n) {
      throw new Error(
        this.remaining === 0
          ? `IncrementalDecoder.feed: the model's maxSeqLen ${this.model.config.maxSeqLen} is reached`
          : `IncrementalDecoder.feedBlock: ${n} tokens do not fit: ${this.remaining} positions left before maxSeqLen ${this.model.config.maxSeqLen}`,
      );
    }
    const vocab = this.model.config.vocabSize;
    const ids = rows.flatMap((row) => Array.from(row));
    for (const id of ids) {
      if (!(Number.isInteger(id) && id >= 0 && id < vocab)) throw new Error(`IncrementalDecoder.feed: token id ${id} is outside the vocabulary [0, ${vocab})`);
    }
    const position = this.consumed;
    const next: AttentionState[] = [];
    const logits = tf.tidy(() =>
      this.model.stepLogits(tf.tensor2d(ids, [this.batch, n], 'int32'), position, (layer, q, k, v) => {
        const { out, state } = this.model.body.attention[layer].step(q, k, v, this.states[layer], position);
        for (const t of Object.values(state.tensors)) tf.keep(t); // the state outlives this tidy
        next[layer] = state;
        return out;
      }),
    );
    for (const state of this.states) tf.dispose(Object.values(state.tensors));
    this.states = next;
    this.consumed += n;
    return logits;
  }

  /** The layers' states (read-only; for tests and diagnostics). */
  get layerStates(): readonly AttentionState[] {
    return this.states;
  }

  dispose(): void {
    for (const state of this.states) tf.dispose(Object.values(state.tensors));
    this.states = [];
  }
}

export interface SamplingOptions {
  /** Softmax temperature; 0 = greedy (argmax). */
  temperature: number;
  /** Sample among the k most likely tokens only; 0 = the whole vocabulary. */
  topK: number;
  /** Nucleus sampling: among the fewest most likely tokens whose probability sums to ≥ p (after temperature and top-k); 1 (the default) = all. */
  topP?: number;
}

export function validateSampling(opts: SamplingOptions): void {
  if (!(Number.isFinite(opts.temperature) && opts.temperature >= 0)) throw new Error(`temperature must be a number ≥ 0 (got ${opts.temperature})`);
  if (!(Number.isInteger(opts.topK) && opts.topK >= 0)) throw new Error(`top-k must be an integer ≥ 0 (got ${opts.topK})`);
  const topP = opts.topP ?? 1;
  if (!(typeof topP === 'number' && topP > 0 && topP <= 1)) throw new Error(`top-p must be a number > 0 and ≤ 1 (got ${opts.topP})`);
}

/**
 * The nucleus of a distribution: the indices of the fewest most likely entries whose probabilities sum to
 * ≥ p, most likely first (lowest index first among equal probabilities). `probabilities` need not be
 * normalised: p is taken of their sum.
 */
export function nucleus(probabilities: readonly number[], p: number): number[] {
  const order = probabilities.map((_, i) => i).sort((a, b) => probabilities[b] - probabilities[a] || a - b);
  const target = p * probabilities.reduce((a, b) => a + b, 0);
  let mass = 0;
  for (let j = 0; j < order.length; j++) {
    mass += probabilities[order[j]];
    if (mass >= target) return order.slice(0, j + 1);
  }
  return order;
}

/**
 * Draws a token id from one row of logits: argmax at temperature 0 (lowest id on ties), otherwise
 * from softmax(logits / temperature) restricted to the top k, then to the top-p nucleus (in float64 on
 * the host: one row).
 */
export function sampleToken(logits: ArrayLike<number>, opts: SamplingOptions, rng: Rng): number {
  const n = logits.length;
  if (opts.temperature === 0) {
    let best = 0;
    for (let i = 1; i < n; i++) if (logits[i] > logits[best]) best = i;
    return best;
  }
  let candidates = Array.from({ length: n }, (_, i) => i);
  if (opts.topK > 0 && opts.topK < n) candidates = candidates.sort((a, b) => logits[b] - logits[a] || a - b).slice(0, opts.topK);
  const max = Math.max(...candidates.map((i) => logits[i]));
  let weights = candidates.map((i) => Math.exp((logits[i] - max) / opts.temperature));
  const topP = opts.topP ?? 1;
  if (topP < 1) {
    const kept = nucleus(weights, topP);
    candidates = kept.map((j) => candidates[j]);
    weights = kept.map((j) => weights[j]);
  }
  let u = rng.uniform() * weights.reduce((a, b) => a + b, 0);
  for (let j = 0; j < candidates.length; j++) {
    u -= weights[j];
    if (u < 0) return candidates[j];
  }
  return candidates[candidates.length - 1];
}

export interface GenerateOptions extends SamplingOptions {
  maxNewTokens: number;
  seed: number;
  /** Stop early after this token (e.g. end of text); it is included in the output. */
  stopToken?: number;
  /** The prompt goes in blocks of this many tokens (each through the layers' whole-sequence form); default PREFILL_BLOCK. */
  prefillBlock?: number;
}

/** Prompt tokens per block: long enough to run at the whole-sequence speed, short enough that one block's activations stay small. */
export const PREFILL_BLOCK = 512;

/**
 * Feeds the prompt in blocks (prefill: each layer's whole-sequence form, from its state), then samples
 * up to maxNewTokens more one token at a time (O(1) per token for linear mechanisms), stopping at
 * model.maxSeqLen. Returns the new token ids and whether the length
 * limit cut generation short.
 */
export function generateTokens(model: LanguageModel, prompt: ArrayLike<number>, opts: GenerateOptions): { tokens: number[]; truncated: boolean } {
  validateSampling(opts);
  if (prompt.length === 0) throw new Error('generate: the prompt must hold at least one token');
  if (prompt.length > model.config.maxSeqLen) {
    throw new Error(`generate: the prompt has ${prompt.length} tokens, more than the model's maxSeqLen ${model.config.maxSeqLen}`);
  }
  const rng = new Rng(opts.seed);
  const decoder = new IncrementalDecoder(model, 1);
  const tokens: number[] = [];
  try {
    let logits: tf.Tensor2D | null = null;
    const ids = Array.from(prompt);
    const block = opts.prefillBlock ?? PREFILL_BLOCK;
    for (let start = 0; start < ids.length; start += block) {
      logits?.dispose();
      logits = decoder.feedBlock([ids.slice(start, start + block)]);
    }
    while (tokens.length < opts.maxNewTokens) {
      const row = logits!.dataSync();
      logits!.dispose();
      logits = null;
      const next = sampleToken(row, opts, rng);
      tokens.push(next);
      if (next === opts.stopToken || tokens.length === opts.maxNewTokens || decoder.remaining === 0) break;
      logits = decoder.feed([next]);
    }
    logits?.dispose();
  } finally {
    decoder.dispose();
  }
  return { tokens, truncated: tokens.length < opts.maxNewTokens && tokens[tokens.length - 1] !== opts.stopToken };
}
