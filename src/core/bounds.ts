// The bounds table: the largest value of every size that a file can set — a recipe, a checkpoint's model
// config, a Hugging Face config.json, attention options, a sweep grid — checked before anything is allocated or
// listed from it (docs/bounds.md gives the values and why). It imports nothing, so that every layer, the model
// code included, reads the same table.

export interface Bound {
  max: number;
  /** Why this is the limit (in docs/bounds.md and in the errors that name it). */
  why: string;
}

export const BOUNDS = {
  /** model.numLayers, n_layer, num_hidden_layers. */
  layers: { max: 1024, why: "over 10× GPT-3's 96 layers" },
  /** model.numHeads, n_head, num_attention_heads. */
  heads: { max: 4096, why: "over 40× GPT-3's 96 heads" },
  /** model.dModel, n_embd, hidden_size. */
  width: { max: 65536, why: "over 5× GPT-3's 12,288" },
  /** model.mlpRatio (n_inner / n_embd, intermediate_size / hidden_size). */
  mlpRatio: { max: 64, why: '16× the usual 4' },
  /** model.maxSeqLen, n_positions, max_position_embeddings, data.seqLen, and attention options that are lengths. */
  positions: { max: 2 ** 20, why: "1,024× GPT-2's 1,024 positions; the position table and the activations grow with it" },
  /** Rows of an embedding table: the vocabulary (vocab_size) and token types (model.typeVocabSize, type_vocab_size). */
  embeddingRows: { max: 2 ** 20, why: 'over 4× the largest vocabularies in use (256k tokens)' },
  /** Random features, anchors or sketch size per head of an attention mechanism. */
  features: { max: 65536, why: "4× the most the tests use (16,384 PRF features per head in SLAY's convergence tests)" },
  /** SLAY's Gauss–Laguerre nodes. */
  quadratureNodes: { max: 64, why: 'the nodes come from an O(R³) eigen-solve, and beyond ~25 nodes the last weights (≈ e^(−4R)) are below float32' },
  /** Runs of a sweep: cases × the product of the grid's axes. */
  sweepRuns: { max: 10000, why: "each run is a recipe validated up front and a Slurm array task (Slurm's default MaxArraySize allows 1,001)" },
  /** Bytes the columns read from one Parquet row group may decompress to (`npm run prepare`'s Parquet input). */
  parquetRowGroupBytes: {
    max: 2 ** 28,
    why: '2× the 128 MB row groups of Spark and parquet-mr; a row group is decoded whole and its text held at ~3× its size',
  },
} as const satisfies Record<string, Bound>;

/**
 * Most ranks of one run across processes: `train.processes`, `--processes`, a sweep's Slurm `nodes × tasksPerNode`,
 * and the tasks (and hosts) of a Slurm step that a rank reads from its environment (docs/bounds.md). Not in BOUNDS,
 * which the exported Python configuration mirrors (this bound is no size of a model).
 */
export const MAX_RANKS = 4096;

/** Most elements one float32 tensor may hold: TensorFlow.js indexes tensors with 32-bit integers. */
export const MAX_TENSOR_ELEMENTS = 2 ** 31 - 1;

/** Names listed in an error before the rest are counted: an error stays a few lines however many there are. */
const LISTED_NAMES = 6;

/** `a, b, c, … (N in all)`: the first LISTED_NAMES items and the count of the rest. */
export function listSome(items: readonly string[], separator = ', '): string {
  if (items.length <= LISTED_NAMES) return items.join(separator);
  return `${items.slice(0, LISTED_NAMES).join(separator)}${separator}… (${items.length.toLocaleString('en-US')} in all)`;
}

/**
 * A value from a file as an error shows it: JSON cut to `maxChars`, integers beyond 2⁵³ written out exactly
 * (JSON.stringify(2 ** 60) gives 1152921504606847000, not the 1152921504606846976 that the file holds; from 10²¹
 * on JSON writes an exponent, which is exact enough to read).
 */
export function showValue(value: unknown, maxChars = 120): string {
  const inexact = (v: unknown): v is number => typeof v === 'number' && Number.isInteger(v) && !Number.isSafeInteger(v) && Math.abs(v) < 1e21;
  const marked = JSON.stringify(value, (_key, v: unknown) => (inexact(v) ? `\u0000${BigInt(v)}` : v));
  return String(marked)
    .replace(/"\\u0000(-?\d+)"/g, '$1')
    .slice(0, maxChars);
}

/**
 * `<key> must be an integer ≥ min, ≤ max (got v; the bound: why)`, or null when `value` is such an integer: one
 * wording for a size beyond its bound whichever entrance checks it (the Hugging Face config reader words it so too).
 */
export function boundProblem(key: string, value: unknown, bound: Bound, min = 1): string | null {
  if (typeof value === 'number' && Number.isSafeInteger(value) && value >= min && value <= bound.max) return null;
  const why = typeof value === 'number' && value > bound.max ? `; the bound: ${bound.why}` : '';
  return `${key} must be an integer ≥ ${min}, ≤ ${bound.max} (got ${showValue(value)}${why})`;
}
