// Passkey retrieval (Mohtashami & Jaggi, "Landmark Attention", 2023; the needle-in-a-haystack test of long-context
// GPTs): a pass key of 5 digits is hidden at a chosen depth of repeated filler text, and the model is asked for it at
// the end. Scored teacher-forced through the incremental decoder (prefill in blocks, then one answer token at a time):
// a trial retrieves the key when every answer token is the model's top-1 given the prompt and the answer's tokens
// before it (which is what greedy decoding would write), and its loss is the answer's mean cross-entropy. Lengths
// above the model's position table cannot run (its learned positions end there) and are reported so; lengths above
// the context it was trained on run, and are marked. docs/training.md, "Passkey retrieval".
import type { LanguageModel } from '../model/lm.ts';
import { IncrementalDecoder, PREFILL_BLOCK } from '../model/decode.ts';
import { Rng } from '../core/rng.ts';
import { loadModel, loadModelTokenizer } from '../store/load-model.ts';

/** The literature's lengths (1K … 32K tokens). */
export const PASSKEY_LENGTHS = [1024, 2048, 4096, 8192, 16384, 32768];
/** Where the key sits in the filler: 0 = right after the introduction, 1 = right before the question. */
export const PASSKEY_DEPTHS = [0, 0.25, 0.5, 0.75, 1];

const INTRO =
  'There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you about the important information there.';
const FILLER = ' The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.';
const needle = (key: string) => ` The pass key is ${key}. Remember it. ${key} is the pass key.`;
const QUESTION = ' What is the pass key? The pass key is';
const answer = (key: string) => ` ${key}`;

/** What a prompt is made of, as token ids: each piece encoded alone (so the filler repeats as whole tokens). */
export type EncodeTexts = (texts: string[]) => Promise<Int32Array[]>;

export interface PasskeyPrompt {
  prompt: number[];
  answer: number[];
  /** The needle's first token, and the key. */
  needleAt: number;
  key: string;
}

/**
 * A prompt of at most `length` tokens with its answer (prompt + answer ≤ length): the introduction, as many fillers as
 * fit, the needle after round(depth × fillers) of them, the question. Throws when the length cannot hold even one filler.
 */
export async function passkeyPrompt(encode: EncodeTexts, length: number, depth: number, key: string): Promise<PasskeyPrompt> {
  if (!(depth >= 0 && depth <= 1)) throw new Error(`passkey: depth must be in [0, 1] (got ${depth})`);
  const [intro, filler, needleIds, question, answerIds] = (await encode([INTRO, FILLER, needle(key), QUESTION, answer(key)])).map((ids) => Array.from(ids));
  const fixed = intro.length + needleIds.length + question.length + answerIds.length;
  const fillers = Math.floor((length - fixed) / filler.length);
  if (fillers < 1)
    throw new Error(`passkey: a prompt of ${length} tokens cannot hold the passkey task (it needs at least ${fixed + filler.length} with this tokenizer)`);
  const before = Math.round(depth * fillers);
  const prompt = [...intro];
  for (let i = 0; i < before; i++) prompt.push(...filler);
  const needleAt = prompt.length;
  prompt.push(...needleIds);
  for (let i = before; i < fillers; i++) prompt.push(...filler);
  prompt.push(...question);
  return { prompt, answer: answerIds, needleAt, key };
}

/**
 * The fewest tokens a passkey prompt with its answer takes with this tokenizer (one filler; `key` one of 5 digits):
 * shorter lengths cannot run (passkeyPrompt refuses them).
 */
export async function passkeyMinTokens(encode: EncodeTexts, key = '10000'): Promise<number> {
  const pieces = await encode([INTRO, FILLER, needle(key), QUESTION, answer(key)]);
  return pieces.reduce((sum, ids) => sum + ids.length, 0);
}

export interface PasskeyTrial {
  depth: number;
  /** Prompt + answer tokens. */
  tokens: number;
  /** Every answer token the top-1. */
  retrieved: boolean;
  /** Answer tokens that are the top-1, of answerTokens. */
  correctTokens: number;
  answerTokens: number;
  /** Σ of the answer tokens' cross-entropy (nats). */
  lossSum: number;
}

/** Scores one prompt: prefill in blocks, then the answer one token at a time (teacher-forced). Leaves no tensors. */
export function scorePasskey(
  model: LanguageModel,
  { prompt, answer }: Pick<PasskeyPrompt, 'prompt' | 'answer'>,
  prefillBlock = PREFILL_BLOCK,
): Omit<PasskeyTrial, 'depth'> {
  const decoder = new IncrementalDecoder(model, 1);
  let correctTokens = 0;
  let lossSum = 0;
  try {
    let logits: ReturnType<IncrementalDecoder['feedBlock']> | null = null;
    for (let start = 0; start < prompt.length; start += prefillBlock) {
      logits?.dispose();
      logits = decoder.feedBlock([prompt.slice(start, start + prefillBlock)]);
    }
    for (let i = 0; i < answer.length; i++) {
      const row = logits!.dataSync();
      logits!.dispose();
      logits = null;
      let best = 0;
      let max = -Infinity;
      for (let v = 0; v < row.length; v++) if (row[v] > max) [max, best] = [row[v], v];
      let sum = 0;
      for (let v = 0; v < row.length; v++) sum += Math.exp(row[v] - max);
      lossSum += Math.log(sum) + max - row[answer[i]];
      if (best === answer[i]) correctTokens++;
      if (i + 1 < answer.length) logits = decoder.feed([answer[i]]);
    }
  } finally {
    decoder.dispose();
  }
  return { tokens: prompt.length + answer.length, retrieved: correctTokens === answer.length, correctTokens, answerTokens: answer.length, lossSum };
}

export interface PasskeyOptions {
  lengths: number[];
  depths: number[];
  /** Keys tried at each depth of each length. */
  trialsPerDepth: number;
  seed: number;
  /** The sequence length the model was trained on (data.seqLen): longer prompts are marked. */
  trainedLength: number | null;
}

export interface PasskeyRow {
  length: number;
  /** 'run'; or why not: beyond the model's position table. */
  status: 'run' | 'beyond the position table';
  /** Longer than the sequences the model was trained on (it runs, on positions it was never trained at). */
  beyondTrainedContext: boolean;
  trials: number;
  /** Fraction of trials whose key was retrieved whole; null when not run. */
  retrieval: number | null;
  /** Fraction of answer tokens that were the top-1. */
  tokenAccuracy: number | null;
  /** Mean cross-entropy of the answer tokens (nats). */
  loss: number | null;
  /** Retrieval by depth. */
  byDepth: { depth: number; retrieval: number }[];
}

/** A 5-digit key, no leading zero. */
const drawKey = (rng: Rng) => String(10000 + rng.int(90000));

/** Every length: its trials over depths and keys, or why it cannot run. */
export async function passkeyEval(model: LanguageModel, encode: EncodeTexts, opts: PasskeyOptions): Promise<PasskeyRow[]> {
  const { maxSeqLen } = model.config;
  const rows: PasskeyRow[] = [];
  for (const length of opts.lengths) {
    const beyondTrainedContext = opts.trainedLength !== null && length > opts.trainedLength;
    if (length > maxSeqLen) {
      rows.push({
        length,
        status: 'beyond the position table',
        beyondTrainedContext,
        trials: 0,
        retrieval: null,
        tokenAccuracy: null,
        loss: null,
        byDepth: [],
      });
      continue;
    }
    // The same keys at every length: a length's rows differ by the haystack only.
    const rng = new Rng(opts.seed);
    const trials: PasskeyTrial[] = [];
    for (const depth of opts.depths) {
      for (let t = 0; t < opts.trialsPerDepth; t++) {
        const prompt = await passkeyPrompt(encode, length, depth, drawKey(rng));
        trials.push({ depth, ...scorePasskey(model, prompt) });
      }
    }
    const answerTokens = trials.reduce((s, t) => s + t.answerTokens, 0);
    rows.push({
      length,
      status: 'run',
      beyondTrainedContext,
      trials: trials.length,
      retrieval: trials.filter((t) => t.retrieved).length / trials.length,
      tokenAccuracy: trials.reduce((s, t) => s + t.correctTokens, 0) / answerTokens,
      loss: trials.reduce((s, t) => s + t.lossSum, 0) / answerTokens,
      byDepth: opts.depths.map((depth) => {
        const at = trials.filter((t) => t.depth === depth);
        return { depth, retrieval: at.filter((t) => t.retrieved).length / at.length };
      }),
    });
  }
  return rows;
}

export interface PasskeyCheckpointOptions {
  checkpoint: string;
  tokenizer?: string;
  /** Prompt lengths in tokens (default PASSKEY_LENGTHS). */
  lengths?: number[];
  /** Keys per depth at each length (default 2). */
  trialsPerDepth?: number;
}

export interface PasskeyCheckpointResult {
  dir: string;
  description: string;
  /** The recipe's data.seqLen: the longest sequences the model was trained on. */
  trainedLength: number;
  /** model.maxSeqLen: the longest prompt it can read (its learned positions end there). */
  positionTable: number;
  depths: number[];
  trialsPerDepth: number;
  rows: PasskeyRow[];
}

/** Loads a GPT checkpoint and scores passkey retrieval at each length (the backend must be initialised). */
export async function passkeyCheckpoint(opts: PasskeyCheckpointOptions): Promise<PasskeyCheckpointResult> {
  const loaded = await loadModel(opts.checkpoint);
  const { dir, model, recipe, metadata } = loaded;
  try {
    if (model.kind !== 'gpt') throw new Error(`${dir}: passkey retrieval needs a GPT (the key is asked for at the end); this model is a ${model.kind}`);
    const tokenizer = await loadModelTokenizer(loaded, opts.tokenizer);
    const trialsPerDepth = opts.trialsPerDepth ?? 2;
    const trainedLength = recipe.data.seqLen;
    const rows = await passkeyEval(model, (texts) => tokenizer.encodeBatch(texts), {
      lengths: opts.lengths ?? PASSKEY_LENGTHS,
      depths: PASSKEY_DEPTHS,
      trialsPerDepth,
      seed: 1,
      trainedLength,
    });
    const description = `${model.kind} ${model.config.attention.name}${metadata.step ? ` (step ${metadata.step})` : ''}`;
    return { dir, description, trainedLength, positionTable: model.config.maxSeqLen, depths: PASSKEY_DEPTHS, trialsPerDepth, rows };
  } finally {
    model.dispose();
  }
}
