// The batch contract: what the stream hands the trainer (Batch) and the one rule for its sequence length, which
// the recipe, the stream and the GPT packer all apply (docs/layout.md, "Data: batches and shard formats").
import { BOUNDS } from '../core/bounds.ts';

/** GPT: causal language modelling on packed windows; BERT: masked language modelling on padded sequences. */
export type SequenceKind = 'gpt' | 'bert';

export interface Batch {
  kind: SequenceKind;
  batchSize: number;
  seqLen: number;
  inputIds: Int32Array;
  labels: Int32Array;
  attentionMask?: Float32Array;
  /**
   * With data.documentMask (GPT): each input position's document within its row, [B·L] — a new document after each
   * end-of-text token — so that attention stays within documents (docs/data.md, "Documents kept apart").
   */
  documentIds?: Int32Array;
  tokens: number;
  bytes: number;
}

/** How evaluation draws its tokens from the validation split (train.evalSample; docs/training.md, "Validation"). */
export const EVAL_SAMPLES = ['spread', 'head'] as const;
export type EvalSampleKind = (typeof EVAL_SAMPLES)[number];
/** Labelled validation tokens of an evaluation unless told: train.evalTokens's default and `eval`'s, for every model. */
export const DEFAULT_EVAL_TOKENS = 32_768;

/**
 * Shortest sequence of each kind: a GPT window needs two positions for attention to mix anything, a BERT sequence
 * holds [CLS], at least one token and [SEP].
 */
const MIN_SEQ_LEN: Record<SequenceKind, number> = { gpt: 2, bert: 3 };
/** Longest: the position bound of the bounds table (src/core/bounds.ts, docs/bounds.md). */
const MAX_SEQ_LEN = BOUNDS.positions.max;

/** The rule in words, for documentation (docs/recipes.md). */
export const SEQ_LEN_RULE = `integer ≥ ${MIN_SEQ_LEN.gpt} (BERT: ≥ ${MIN_SEQ_LEN.bert}), ≤ ${MAX_SEQ_LEN}`;

/**
 * Null when `seqLen` is a valid sequence length for `kind` (no kind: for some kind), else what it must be
 * ("an integer ≥ 2, ≤ 1048576"), for the caller to put after the name of its field: the one seqLen rule of the
 * project, applied by the recipe, the stream and the GPT packer.
 */
export function seqLenProblem(seqLen: unknown, kind?: SequenceKind): string | null {
  const min = kind === undefined ? Math.min(...Object.values(MIN_SEQ_LEN)) : MIN_SEQ_LEN[kind];
  if (typeof seqLen === 'number' && Number.isInteger(seqLen) && seqLen >= min && seqLen <= MAX_SEQ_LEN) return null;
  return `an integer ≥ ${min}, ≤ ${MAX_SEQ_LEN}${kind === 'bert' ? ' for BERT ([CLS], a token, [SEP])' : ''}`;
}
