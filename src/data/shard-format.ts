// The shard-format contract: what the dataset listing, the batch stream and tokenizer training need from a shard
// file, so that they read any registered format (src/data/shard-registry.ts; Arrow in src/data/arrow.ts is the
// first). A shard is cut into batches of rows — the format's own chunks (Arrow record batches, Parquet row groups) —
// that the data cursor addresses by index, so a resumed stream starts at the batch it stopped in (docs/data.md).

/** Rows and text bytes of one shard, told without reading its text where the format allows. */
export interface ShardScan {
  rows: number;
  batches: number;
  /** Rows of each batch, in order: the same counts `readTextBatches` yields. */
  batchRows: number[];
  /** UTF-8 bytes of the text column (exact), null when it cannot be told cheaply. */
  textBytes: number | null;
}

/** One batch of the text column: its index in the shard, its rows (null = a null value), invalid UTF-8 replaced. */
export interface TextBatch {
  batchIndex: number;
  texts: (string | null)[];
  /** Invalid UTF-8 sequences replaced by U+FFFD in this batch (reported once per shard by the stream). */
  invalidUtf8: number;
}

/**
 * A shard file format. Errors name the file (and the batch when known); a file that is not of the format, a missing
 * or non-string text column, and a cut-short file are errors, never fewer rows.
 */
export interface ShardFormat {
  /** Shown in messages, e.g. "Arrow IPC". */
  readonly name: string;
  /** File name endings the format claims, e.g. [".arrow"]; no two formats claim the same ending. */
  readonly extensions: readonly string[];
  /** Counts rows per batch and the text bytes of `column`, reading as little as the format allows. */
  scan(file: string, column: string): Promise<ShardScan>;
  /** The `column` of the shard batch by batch from batch `fromBatch` on, never holding the whole shard. */
  readTextBatches(file: string, column: string, fromBatch?: number): AsyncGenerator<TextBatch>;
}
