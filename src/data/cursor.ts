// The data cursor: the exact position of a batch stream, as JSON (see the top of stream.ts for what it holds).
// A cursor read from a checkpoint is untrusted: parseCursor checks its structure, checkCursor checks it against the
// stream it is to restore and the dataset (shard count and order, record batch and row inside the shard); every
// error names the cursor file and the field.
import { showValue } from '../core/bounds.ts';
import { isRecord } from '../core/json.ts';
import type { RngState } from '../core/rng.ts';
import type { Split } from './dataset.ts';

export interface StreamStats {
  /** Documents whose tokens entered the stream. */
  documents: number;
  /** Tokens of those documents as the tokenizer produced them (no eos/[CLS]/[SEP] added). */
  tokens: number;
  /** Null, empty or whitespace-only documents passed over. */
  skippedEmpty: number;
  /** UTF-8 bytes of those documents. */
  bytes: number;
}

export interface DataCursor {
  version: 1;
  kind: 'gpt' | 'bert';
  split: Split;
  seqLen: number;
  batchSize: number;
  seed: number;
  shuffleBuffer: number;
  tokenizerSha256: string;
  /** Shard visiting order (indices into the sorted shard list). */
  shardOrder: number[];
  /** Position of the next token to consume: shardOrder[shard], record batch, row, token offset in that document. */
  shard: number;
  recordBatch: number;
  row: number;
  offset: number;
  /** GPT: tokens of the window under construction. */
  carry: number[];
  shuffle: { items: string; lengths: number[]; width: 2 | 4; rng: RngState; exhausted: boolean } | null;
  maskRng: RngState | null;
  done: boolean;
  batches: number;
  stats: StreamStats;
}

/** The stream settings a cursor must match: its seed and shuffle buffer are the split's (0 for validation). */
const STREAM_FIELDS = ['kind', 'split', 'seqLen', 'batchSize', 'seed', 'shuffleBuffer', 'tokenizerSha256'] as const;

/** What a cursor is checked against: the stream to restore and its dataset. */
export interface CursorContext extends Pick<DataCursor, (typeof STREAM_FIELDS)[number]> {
  vocabSize: number;
  dataset: string;
  shardCount: number;
  /** Rows of each record batch of shard i (of the sorted shard list). */
  recordBatchRows(shard: number): Promise<number[]>;
}

class CursorError extends Error {}

const isCount = (v: unknown): v is number => Number.isSafeInteger(v) && (v as number) >= 0;
/** xoshiro128 state words; all zero is no state (the generator would only ever yield 0). */
const isRngState = (v: unknown) => Array.isArray(v) && v.length === 4 && v.every((w) => Number.isInteger(w) && w >= 0 && w < 2 ** 32) && v.some((w) => w !== 0);

/** A cursor's JSON, checked field by field; `source` (the file) is named in every error. */
export function parseCursor(value: unknown, source: string): DataCursor {
  const fail = (field: string, expected: string, got: unknown): never => {
    throw new CursorError(`${source}: ${field} must be ${expected} (got ${showValue(got, 80)})`);
  };
  if (!isRecord(value)) return fail('the data cursor', 'a JSON object', value);
  const c = value;
  if (c.version !== 1) fail('version', '1', c.version);
  if (c.kind !== 'gpt' && c.kind !== 'bert') fail('kind', '"gpt" or "bert"', c.kind);
  if (c.split !== 'train' && c.split !== 'validation') fail('split', '"train" or "validation"', c.split);
  for (const field of ['seqLen', 'batchSize', 'seed', 'shuffleBuffer', 'shard', 'recordBatch', 'row', 'offset', 'batches']) {
    if (!isCount(c[field])) fail(field, 'an integer ≥ 0', c[field]);
  }
  if (typeof c.tokenizerSha256 !== 'string') fail('tokenizerSha256', 'a string', c.tokenizerSha256);
  for (const field of ['shardOrder', 'carry']) {
    if (!Array.isArray(c[field]) || !(c[field] as unknown[]).every(isCount)) fail(field, 'a list of integers ≥ 0', c[field]);
  }
  if (c.shuffle !== null) {
    const s = c.shuffle as Record<string, unknown>;
    if (!isRecord(s)) fail('shuffle', 'null or an object {items, lengths, width, rng, exhausted}', s);
    if (typeof s.items !== 'string') fail('shuffle.items', 'a base64 string', s.items);
    if (!Array.isArray(s.lengths) || !s.lengths.every(isCount)) fail('shuffle.lengths', 'a list of integers ≥ 0', s.lengths);
    if (s.width !== 2 && s.width !== 4) fail('shuffle.width', '2 or 4', s.width);
    if (!isRngState(s.rng)) fail('shuffle.rng', 'four 32-bit words, not all zero', s.rng);
    if (typeof s.exhausted !== 'boolean') fail('shuffle.exhausted', 'true or false', s.exhausted);
  }
  if (c.maskRng !== null && !isRngState(c.maskRng)) fail('maskRng', 'null or four 32-bit words, not all zero', c.maskRng);
  if (typeof c.done !== 'boolean') fail('done', 'true or false', c.done);
  const stats = c.stats as Record<string, unknown>;
  if (!isRecord(stats)) fail('stats', 'an object', stats);
  for (const field of ['documents', 'tokens', 'skippedEmpty', 'bytes']) {
    if (!isCount(stats[field])) fail(`stats.${field}`, 'an integer ≥ 0', stats[field]);
  }
  return value as unknown as DataCursor;
}

/**
 * Checks a parsed cursor against the stream it restores and the dataset: the stream's settings, a shard order that
 * is a permutation of the dataset's shards, a position inside them (shard, record batch, row), an end (done, an
 * exhausted shuffle) only at the end of the split, tokens inside the vocabulary. Errors name `source` and the field.
 * The offset inside the document is checked when the stream opens (reader.ts, checkRestoredOffset).
 */
export async function checkCursor(cursor: DataCursor, context: CursorContext, source: string): Promise<void> {
  const fail = (message: string): never => {
    throw new CursorError(`${source}: ${message}`);
  };
  for (const field of STREAM_FIELDS) {
    if (cursor[field] !== context[field])
      fail(`the data cursor does not match this stream: ${field} = ${JSON.stringify(cursor[field])}, the stream has ${JSON.stringify(context[field])}`);
  }
  const n = context.shardCount;
  if (cursor.shardOrder.length !== n) fail(`shardOrder lists ${cursor.shardOrder.length} shards but ${context.dataset} (${context.split}) has ${n}`);
  if (new Set(cursor.shardOrder).size !== n || cursor.shardOrder.some((i) => i >= n))
    fail(`shardOrder must be an order of the shards 0…${n - 1} (got ${JSON.stringify(cursor.shardOrder).slice(0, 80)})`);
  if (cursor.shard > n) fail(`shard = ${cursor.shard} is past the dataset's ${n} shards`);
  if (cursor.shard < n) {
    const rows = await context.recordBatchRows(cursor.shardOrder[cursor.shard]);
    if (cursor.recordBatch > rows.length || (cursor.recordBatch === rows.length && cursor.row > 0)) {
      fail(
        `recordBatch = ${cursor.recordBatch}, row = ${cursor.row} is past the end of shard ${cursor.shardOrder[cursor.shard]}, which has ${rows.length} record batches`,
      );
    }
    if (cursor.recordBatch < rows.length && cursor.row >= rows[cursor.recordBatch]) {
      fail(
        `row = ${cursor.row} is past the end of record batch ${cursor.recordBatch} (${rows[cursor.recordBatch]} rows) of shard ${cursor.shardOrder[cursor.shard]}`,
      );
    }
  } else if (cursor.recordBatch !== 0 || cursor.row !== 0 || cursor.offset !== 0) {
    fail(`shard = ${cursor.shard} (the end of the split) with recordBatch ${cursor.recordBatch}, row ${cursor.row}, offset ${cursor.offset}: expected 0, 0, 0`);
  }
  // A cursor never ends an epoch early: the stream is done, and the shuffle buffer's source ended, only at the end of
  // the split, with nothing left in the buffer once done (what the stream itself records there).
  const atEnd = cursor.shard === n;
  const position = `shard ${cursor.shard} of ${n}, record batch ${cursor.recordBatch}, row ${cursor.row}`;
  if (cursor.done && !atEnd) fail(`done = true, but the position (${position}) is not the end of the split`);
  if (cursor.shuffle?.exhausted && !atEnd) fail(`shuffle.exhausted = true, but the position (${position}) is not the end of the split`);
  if (cursor.done && cursor.shuffle && cursor.shuffle.lengths.length > 0)
    fail(`done = true, but the shuffle buffer still holds ${cursor.shuffle.lengths.length} items`);
  if (cursor.kind === 'gpt' && cursor.carry.length > cursor.seqLen) fail(`carry holds ${cursor.carry.length} tokens, more than seqLen ${cursor.seqLen}`);
  if (cursor.kind === 'bert' && cursor.carry.length > 0) fail('carry must be empty for a BERT stream');
  if (cursor.carry.some((t) => t >= context.vocabSize)) fail(`carry holds a token id ≥ the vocabulary size ${context.vocabSize}`);
  if ((cursor.kind === 'bert') !== (cursor.maskRng !== null))
    fail(`maskRng must be ${cursor.kind === 'bert' ? 'four 32-bit words for a BERT stream' : 'null for a GPT stream'}`);
  if (context.shuffleBuffer > 0 !== (cursor.shuffle !== null))
    fail(`shuffle must be ${context.shuffleBuffer > 0 ? 'an object' : 'null'} for shuffleBuffer ${context.shuffleBuffer}`);
  if (cursor.shuffle) {
    const { lengths, width } = cursor.shuffle;
    if (lengths.length > context.shuffleBuffer) fail(`shuffle holds ${lengths.length} items, more than shuffleBuffer ${context.shuffleBuffer}`);
    if (lengths.some((l) => l > cursor.seqLen + 1)) fail(`shuffle.lengths holds an item longer than ${cursor.seqLen + 1} tokens`);
    if (width !== (context.vocabSize <= 65536 ? 2 : 4)) fail(`shuffle.width = ${width} does not fit a vocabulary of ${context.vocabSize}`);
  }
}

/** Throws, naming the cursor file and its offset, when the restored document is shorter than the offset into it. */
export function checkRestoredOffset(offset: number, documentTokens: number | null, source: string): void {
  if (offset > 0 && (documentTokens === null || offset >= documentTokens)) {
    const doc = documentTokens === null ? 'an empty document' : `a document of ${documentTokens} tokens`;
    throw new CursorError(`${source}: offset = ${offset} is past the end of the document it points into (${doc}): the cursor does not belong to this dataset`);
  }
}

/** Token arrays (the shuffle buffer) as one base64 string of 16- or 32-bit ids. */
export function encodeTokenArrays(arrays: Int32Array[], vocabSize: number): { items: string; lengths: number[]; width: 2 | 4 } {
  const total = arrays.reduce((n, a) => n + a.length, 0);
  const width = vocabSize <= 65536 ? 2 : 4;
  const flat = width === 2 ? new Uint16Array(total) : new Int32Array(total);
  let at = 0;
  for (const a of arrays) {
    flat.set(a, at);
    at += a.length;
  }
  return { items: Buffer.from(flat.buffer, flat.byteOffset, flat.byteLength).toString('base64'), lengths: arrays.map((a) => a.length), width };
}

export function decodeTokenArrays(items: string, lengths: number[], width: 2 | 4, vocabSize: number, source: string): Int32Array[] {
  const raw = Buffer.from(items, 'base64');
  if (raw.byteLength % width !== 0) throw new CursorError(`${source}: shuffle.items holds ${raw.byteLength} bytes, not a whole number of ${width}-byte ids`);
  const bytes = new Uint8Array(raw.byteLength);
  bytes.set(raw); // copy to an aligned buffer for the typed-array view
  const flat = width === 2 ? new Uint16Array(bytes.buffer) : new Int32Array(bytes.buffer);
  const total = lengths.reduce((n, l) => n + l, 0);
  if (total !== flat.length) throw new CursorError(`${source}: shuffle.items holds ${flat.length} tokens but shuffle.lengths add up to ${total}`);
  if (flat.some((t) => t < 0 || t >= vocabSize)) throw new CursorError(`${source}: shuffle.items holds a token id outside the vocabulary of ${vocabSize}`);
  const out: Int32Array[] = [];
  let at = 0;
  for (const n of lengths) {
    out.push(Int32Array.from(flat.subarray(at, at + n)));
    at += n;
  }
  return out;
}
