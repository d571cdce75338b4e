// The batch stream: shards (of any registered format, src/data/shard-registry.ts) → documents → tokens → GPT windows
// or BERT sequences → bounded shuffle → batches, with a cursor that restores the stream exactly.
//
// Pipeline. Shards are visited in a seeded order (train) or sorted order (validation). For each shard a
// producer reads record batches with its format's readTextBatches and tokenizes them (the native encodeBatch runs on
// the libuv pool) into a small bounded queue; p-limit caps how many shards have producers at once
// (`readAhead`), and a shard's slot is released only when the consumer has finished it, so memory stays
// bounded by readAhead × QUEUED_RECORD_BATCHES tokenized record batches.
//
// Cursor. The consumer pulls examples one at a time, so between two batches the state is:
//  - the input position (shard position, record batch index, row, token offset inside that document);
//    on restore the producer starts at that record batch (earlier ones are skipped undecoded by
//    readTextBatches) and re-tokenizes only the rows from `row` on, so nothing consumed is read again;
//  - GPT: the window under construction, which between windows is just the one overlap token;
//  - the shuffle buffer's items (stored as base64 token arrays: the buffer is small, and storing the
//    tokens avoids re-reading the record batches they came from), its RNG words and an exhausted flag;
//  - BERT: the masking RNG's words; counters; a done flag.
// The cursor's size is dominated by the shuffle buffer: about shuffleBuffer × (seqLen + 1) × 2.7 bytes
// of JSON for vocabularies ≤ 65 536.
import pLimit from 'p-limit';
import { Rng, deriveSeed } from '../core/rng.ts';
import { seqLenProblem } from './batch.ts';
import type { Batch, SequenceKind } from './batch.ts';
import { checkCursor, checkRestoredOffset, decodeTokenArrays, encodeTokenArrays, parseCursor } from './cursor.ts';
import type { DataCursor, StreamStats } from './cursor.ts';
import { describeSplit, listShards } from './dataset.ts';
import type { Split } from './dataset.ts';
import { mlmBatch, mlmSpecials, ordinaryTokenIds } from './mlm.ts';
import type { MlmOptions } from './mlm.ts';
import { WindowPacker, gptBatch, windowCount } from './packing.ts';
import { shardFormatOf } from './shard-registry.ts';
import { ShuffleBuffer } from './shuffle.ts';
import { SmallestKeys } from './smallest-keys.ts';
import type { TextTokenizer } from './tokenizer.ts';

export interface StreamOptions {
  dataset: string;
  split: Split;
  textColumn: string;
  tokenizer: TextTokenizer;
  kind: SequenceKind;
  seqLen: number;
  batchSize: number;
  seed: number;
  shuffleBuffer: number;
  readAhead: number;
  mlmProbability?: number;
  cursor?: DataCursor;
  /** Where the cursor was read from, named in its errors (default 'data cursor'). */
  cursorFile?: string;
  /** Problems that do not stop the stream (invalid UTF-8, once per shard); default: a line on stderr. */
  onWarning?: (message: string) => void;
}

export type { DataCursor, StreamStats };
export { parseCursor } from './cursor.ts';

export interface BatchStream {
  next(): Promise<Batch | null>;
  cursor(): DataCursor;
  readonly stats: StreamStats;
  close(): Promise<void>;
}

/** Tokenized record batches a shard producer may hold ahead of the consumer. */
const QUEUED_RECORD_BATCHES = 2;
/** Fixed masking seed for the validation split, so validation losses compare across runs and seeds. */
const VALIDATION_MASK_SEED = 0x5eed;

/**
 * A record batch's tokens in one buffer, no object per row (a record batch may hold millions of short rows): row r's
 * document is ids[starts[r], starts[r + 1]) (GPT: followed by EOS), an empty range an empty document. Rows before
 * the restore row are left empty and never visited.
 */
interface TokenizedBatch {
  batchIndex: number;
  ids: Int32Array;
  starts: Int32Array;
  bytes: Int32Array;
}

/** Rows of a tokenized record batch. */
const rowCount = (batch: TokenizedBatch) => batch.starts.length - 1;

/** Single-producer single-consumer bounded async queue. */
class BoundedQueue<T> {
  private readonly items: T[] = [];
  private ended = false;
  private error: unknown = null;
  private cancelled = false;
  private wakeConsumer: (() => void) | null = null;
  private wakeProducer: (() => void) | null = null;
  private drainedResolve!: () => void;
  /** Resolves when the consumer has taken the end marker (or the queue was cancelled). */
  readonly drained = new Promise<void>((resolve) => (this.drainedResolve = resolve));

  constructor(private readonly capacity: number) {}

  get isCancelled(): boolean {
    return this.cancelled;
  }

  async push(item: T): Promise<void> {
    while (this.items.length >= this.capacity && !this.cancelled) {
      await new Promise<void>((resolve) => (this.wakeProducer = resolve));
    }
    if (this.cancelled) return;
    this.items.push(item);
    this.wake('consumer');
  }

  end(error: unknown = null): void {
    this.ended = true;
    this.error = error;
    this.wake('consumer');
  }

  /** Next item; null after the producer ended. Rethrows a producer error. */
  async pull(): Promise<T | null> {
    while (this.items.length === 0 && !this.ended) {
      await new Promise<void>((resolve) => (this.wakeConsumer = resolve));
    }
    if (this.items.length > 0) {
      const item = this.items.shift()!;
      this.wake('producer');
      return item;
    }
    if (this.error !== null) throw this.error;
    this.drainedResolve();
    return null;
  }

  cancel(): void {
    this.cancelled = true;
    this.items.length = 0;
    this.wake('producer');
    this.drainedResolve();
  }

  private wake(who: 'consumer' | 'producer'): void {
    const wake = who === 'consumer' ? this.wakeConsumer : this.wakeProducer;
    if (who === 'consumer') this.wakeConsumer = null;
    else this.wakeProducer = null;
    wake?.();
  }
}

function validateOptions(opts: StreamOptions): void {
  const positiveInt = (name: string, v: number, min: number) => {
    if (!Number.isInteger(v) || v < min) throw new Error(`stream option ${name} must be an integer ≥ ${min}, got ${v}`);
  };
  if (opts.kind !== 'gpt' && opts.kind !== 'bert') throw new Error(`stream option kind must be 'gpt' or 'bert', got ${String(opts.kind)}`);
  if (opts.split !== 'train' && opts.split !== 'validation') {
    throw new Error(`stream option split must be 'train' or 'validation', got ${String(opts.split)}`);
  }
  const seqLen = seqLenProblem(opts.seqLen, opts.kind);
  if (seqLen !== null) throw new Error(`stream option seqLen must be ${seqLen}, got ${opts.seqLen}`);
  positiveInt('batchSize', opts.batchSize, 1);
  positiveInt('shuffleBuffer', opts.shuffleBuffer, 0);
  positiveInt('readAhead', opts.readAhead, 1);
  if (opts.mlmProbability !== undefined && !(opts.mlmProbability > 0 && opts.mlmProbability < 1)) {
    throw new Error(`stream option mlmProbability must be in (0, 1), got ${opts.mlmProbability}`);
  }
  if (!Number.isInteger(opts.seed)) throw new Error(`stream option seed must be an integer, got ${opts.seed}`);
  if (opts.kind === 'gpt' && opts.tokenizer.specialIds.eos === undefined) {
    throw new Error(`tokenizer ${opts.tokenizer.path} has no end-of-text token (<|endoftext|> or </s>) to join GPT documents`);
  }
}

/** Where the consumer is: shardOrder[shard], record batch, row, token offset inside that document. */
interface Position {
  shard: number;
  recordBatch: number;
  row: number;
  offset: number;
}

/**
 * Reads and tokenizes the shards ahead of the consumer: one bounded queue per shard position (the index into the
 * visiting order), at most readAhead shards with a producer at once.
 */
class ShardProducers {
  private readonly limit: ReturnType<typeof pLimit>;
  private readonly queues = new Map<number, BoundedQueue<TokenizedBatch>>();
  private readonly running = new Set<Promise<void>>();
  private closed = false;

  constructor(
    /** Shard files in visiting order. */
    private readonly files: readonly string[],
    private readonly opts: Pick<StreamOptions, 'textColumn' | 'tokenizer' | 'kind' | 'readAhead' | 'onWarning'>,
  ) {
    this.limit = pLimit(opts.readAhead);
  }

  /** Queues a producer for every shard from `from.shard` on; the first starts at the record batch and row of `from`. */
  start(from: Position): void {
    for (let position = from.shard; position < this.files.length; position++) {
      const queue = new BoundedQueue<TokenizedBatch>(QUEUED_RECORD_BATCHES);
      this.queues.set(position, queue);
      const fromBatch = position === from.shard ? from.recordBatch : 0;
      const fromRow = position === from.shard ? from.row : 0;
      // Errors travel through the queue; this catch only keeps a cleared task from being unhandled.
      this.limit(() => {
        if (this.closed) return;
        const task = this.produce(position, queue, fromBatch, fromRow);
        this.running.add(task);
        return task.finally(() => this.running.delete(task));
      }).catch(() => undefined);
    }
  }

  /** The next tokenized record batch of the shard at `position`; null when that shard is finished. */
  async pull(position: number): Promise<TokenizedBatch | null> {
    const next = await this.queues.get(position)!.pull();
    if (next === null) this.queues.delete(position);
    return next;
  }

  private async produce(position: number, queue: BoundedQueue<TokenizedBatch>, fromBatch: number, fromRow: number): Promise<void> {
    const { textColumn, tokenizer, kind } = this.opts;
    const eos = tokenizer.specialIds.eos ?? -1;
    const invalid = { count: 0, firstBatch: -1 };
    try {
      const file = this.files[position];
      for await (const { batchIndex, texts, invalidUtf8 } of shardFormatOf(file).readTextBatches(file, textColumn, fromBatch)) {
        if (invalidUtf8 > 0 && invalid.count === 0) invalid.firstBatch = batchIndex;
        invalid.count += invalidUtf8;
        const skipRows = batchIndex === fromBatch ? fromRow : 0;
        const bytes = new Int32Array(texts.length);
        const toEncode: string[] = [];
        const rowsEncoded: number[] = [];
        for (let r = skipRows; r < texts.length; r++) {
          const text = texts[r];
          if (text === null || text.trim().length === 0) continue;
          toEncode.push(text);
          rowsEncoded.push(r);
          bytes[r] = Buffer.byteLength(text, 'utf8');
        }
        const encoded = await tokenizer.encodeFlat(toEncode);
        // Row by row, with EOS after each GPT document that has tokens.
        const ids = new Int32Array(encoded.ids.length + (kind === 'gpt' ? toEncode.length : 0));
        const starts = new Int32Array(texts.length + 1);
        let end = 0;
        for (let r = 0, next = 0; r < texts.length; r++) {
          starts[r] = end;
          if (rowsEncoded[next] !== r) continue;
          const tokens = encoded.ids.subarray(encoded.starts[next], encoded.starts[next + 1]);
          next++;
          if (tokens.length === 0) continue;
          ids.set(tokens, end);
          end += tokens.length;
          if (kind === 'gpt') ids[end++] = eos;
        }
        starts[texts.length] = end;
        await queue.push({ batchIndex, ids, starts, bytes });
        if (queue.isCancelled) break;
      }
      queue.end();
    } catch (err) {
      queue.end(err);
    }
    if (invalid.count > 0) {
      const warn = this.opts.onWarning ?? ((message: string) => process.stderr.write(`warning: ${message}\n`));
      warn(
        `${this.files[position]}: ${invalid.count.toLocaleString('en-US')} invalid UTF-8 sequence${invalid.count === 1 ? ' was' : 's were'} replaced by U+FFFD ` +
          `(the first in record batch ${invalid.firstBatch}); the text around them was kept`,
      );
    }
    await queue.drained;
  }

  async close(): Promise<void> {
    this.closed = true;
    this.limit.clearQueue();
    for (const queue of this.queues.values()) queue.cancel();
    this.queues.clear();
    // Wait for producers mid-read, so no file stays open and nothing is read after close().
    await Promise.allSettled([...this.running]);
  }
}

/** Walks the tokenized documents in corpus order, keeping the Position and the StreamStats of what it passed. */
class DocumentWalker {
  private current: TokenizedBatch | null = null;
  /** A restored position inside a document: checked against that document once it is read (the cursor file). */
  private offsetToCheck: string | null;

  constructor(
    private readonly producers: ShardProducers,
    private readonly shardCount: number,
    private readonly kind: SequenceKind,
    readonly position: Position,
    readonly stats: StreamStats,
    cursorFile: string,
  ) {
    this.offsetToCheck = position.offset > 0 ? cursorFile : null;
  }

  /** The document at the current position (advancing past empty ones and finished record batches/shards), or null at the end of the split. */
  async document(): Promise<Int32Array | null> {
    const at = this.position;
    for (;;) {
      if (this.current === null) {
        if (at.shard >= this.shardCount) return null;
        const next = await this.producers.pull(at.shard);
        if (next === null) {
          at.shard++;
          at.recordBatch = 0;
          at.row = 0;
          continue;
        }
        this.current = next;
        at.recordBatch = next.batchIndex;
      }
      if (at.row >= rowCount(this.current)) {
        this.finishRecordBatch();
        continue;
      }
      const { ids, starts } = this.current;
      const doc = starts[at.row + 1] > starts[at.row] ? ids.subarray(starts[at.row], starts[at.row + 1]) : null;
      if (this.offsetToCheck !== null) {
        checkRestoredOffset(at.offset, doc?.length ?? null, this.offsetToCheck);
        this.offsetToCheck = null;
      }
      if (doc === null) {
        this.stats.skippedEmpty++;
        at.row++;
        continue;
      }
      if (at.offset === 0) {
        this.stats.documents++;
        this.stats.tokens += this.kind === 'gpt' ? doc.length - 1 : doc.length;
        this.stats.bytes += this.current.bytes[at.row];
      }
      return doc;
    }
  }

  /** Moves past a fully consumed document; leaves the position normalised (never at a document's end). */
  finishDocument(): void {
    this.position.row++;
    this.position.offset = 0;
    if (this.current !== null && this.position.row >= rowCount(this.current)) this.finishRecordBatch();
  }

  private finishRecordBatch(): void {
    this.position.recordBatch = this.current!.batchIndex + 1;
    this.position.row = 0;
    this.current = null;
  }
}

/** checkCursor against this stream's settings and its shards. */
function checkCursorAgainst(cursor: DataCursor, opts: StreamOptions, shards: string[], source: string): Promise<void> {
  const isTrain = opts.split === 'train';
  return checkCursor(cursor, {
    kind: opts.kind, split: opts.split, seqLen: opts.seqLen, batchSize: opts.batchSize, seed: isTrain ? opts.seed : 0,
    shuffleBuffer: isTrain ? opts.shuffleBuffer : 0, tokenizerSha256: opts.tokenizer.sha256, vocabSize: opts.tokenizer.vocabSize,
    dataset: opts.dataset, shardCount: shards.length,
    recordBatchRows: async (shard) => (await shardFormatOf(shards[shard]).scan(shards[shard], opts.textColumn)).batchRows,
  }, source);
}

/** BERT's masking options for this tokenizer and its masking RNG (restored from the cursor, else seeded). */
function bertMasking(opts: StreamOptions, seed: number): { mlm: MlmOptions; maskRng: Rng } {
  const { tokenizer } = opts;
  const specials = mlmSpecials(tokenizer);
  const specialIds = [...Object.values(tokenizer.specialIds), specials.cls, specials.sep, specials.pad, specials.mask];
  const mlm: MlmOptions = {
    seqLen: opts.seqLen,
    specials,
    randomPool: ordinaryTokenIds(tokenizer.vocabSize, specialIds),
    probability: opts.mlmProbability ?? 0.15,
    tokenBytes: (id) => tokenizer.tokenBytes(id),
  };
  const maskRng = new Rng(opts.cursor?.maskRng ?? (opts.split === 'train' ? deriveSeed(seed, 'mlm') : VALIDATION_MASK_SEED));
  return { mlm, maskRng };
}

/**
 * Opens the split as a stream of batches: shards in (seeded) order → documents (DocumentWalker) →
 * GPT windows or BERT chunks → the bounded shuffle → batches. A cursor restores every stage.
 */
export async function openBatchStream(opts: StreamOptions): Promise<BatchStream> {
  validateOptions(opts);
  const shards = await listShards(opts.dataset, opts.split);
  const cursorFile = opts.cursorFile ?? 'data cursor';
  const cursor = opts.cursor ? parseCursor(opts.cursor, cursorFile) : undefined;
  if (cursor) await checkCursorAgainst(cursor, opts, shards, cursorFile);
  const stream = new ShardBatchStream(opts, shards, cursor, cursorFile);
  try {
    await stream.readRestoredDocument();
  } catch (err) {
    await stream.close();
    throw err;
  }
  return stream;
}

/** The stages of one open stream and the counters its cursor records. */
class ShardBatchStream implements BatchStream {
  private readonly seed: number;
  private readonly shardOrder: number[];
  private readonly producers: ShardProducers;
  private readonly walker: DocumentWalker;
  private readonly statistics: StreamStats;
  private readonly packer: WindowPacker | null;
  private readonly shuffleCapacity: number;
  private readonly shuffle: ShuffleBuffer<Int32Array>;
  private readonly masking: { mlm: MlmOptions; maskRng: Rng } | null;
  private done: boolean;
  private batches: number;
  private busy = false;
  private closed = false;

  constructor(
    private readonly opts: StreamOptions,
    shards: string[],
    cursor: DataCursor | undefined,
    cursorFile: string,
  ) {
    const { kind, seqLen, tokenizer, split } = opts;
    const isTrain = split === 'train';
    this.seed = isTrain ? opts.seed : 0;
    this.shardOrder = cursor
      ? [...cursor.shardOrder]
      : isTrain
        ? new Rng(deriveSeed(this.seed, 'shard-order')).shuffle(shards.map((_, i) => i))
        : shards.map((_, i) => i);
    this.done = cursor?.done ?? false;
    this.batches = cursor?.batches ?? 0;
    this.producers = new ShardProducers(this.shardOrder.map((i) => shards[i]), opts);
    const start: Position = { shard: cursor?.shard ?? 0, recordBatch: cursor?.recordBatch ?? 0, row: cursor?.row ?? 0, offset: cursor?.offset ?? 0 };
    this.statistics = cursor ? { ...cursor.stats } : { documents: 0, tokens: 0, skippedEmpty: 0, bytes: 0 };
    this.walker = new DocumentWalker(this.producers, this.shardOrder.length, kind, start, this.statistics, cursorFile);
    if (!this.done) this.producers.start(start);
    this.packer = kind === 'gpt' ? new WindowPacker(seqLen, cursor?.carry ?? []) : null;
    this.shuffleCapacity = isTrain ? opts.shuffleBuffer : 0;
    this.shuffle = new ShuffleBuffer<Int32Array>(
      this.shuffleCapacity,
      cursor?.shuffle
        ? { ...cursor.shuffle, items: decodeTokenArrays(cursor.shuffle.items, cursor.shuffle.lengths, cursor.shuffle.width, tokenizer.vocabSize, cursorFile) }
        : deriveSeed(this.seed, 'shuffle'),
    );
    this.masking = kind === 'bert' ? bertMasking(opts, this.seed) : null;
  }

  /**
   * A restored position inside a document: reads that document now, so that a cursor whose offset does not fit it
   * fails when the stream opens (before a resume changes its run folder), not at the first batch. The document stays
   * current: the first batch starts from it without reading it again.
   */
  async readRestoredDocument(): Promise<void> {
    if (!this.done && this.walker.position.offset > 0) await this.walker.document();
  }

  async next(): Promise<Batch | null> {
    if (this.closed) throw new Error('batch stream is closed');
    if (this.busy) throw new Error('batch stream next() called again before the previous call finished');
    if (this.done) return null;
    this.busy = true;
    try {
      const { batchSize, kind, seqLen, tokenizer, split } = this.opts;
      const examples: Int32Array[] = [];
      while (examples.length < batchSize) {
        const example = await this.shuffle.next(() => this.nextExample());
        if (example === null) break;
        examples.push(example);
      }
      // Train drops the incomplete last batch (constant shapes, no tiny noisy step); validation keeps it.
      if (examples.length < batchSize) {
        this.done = true;
        if (examples.length === 0 || split === 'train') return null;
      }
      this.batches++;
      return kind === 'gpt' ? gptBatch(examples, seqLen, (id) => tokenizer.tokenBytes(id)) : mlmBatch(examples, this.masking!.mlm, this.masking!.maskRng);
    } finally {
      this.busy = false;
    }
  }

  /**
   * The next example (shuffle buffer and batching bypassed) as a one-row batch, with the documents (0-based, in split
   * order) its tokens were cut from; BERT masks it with `maskRng`. For sampling examples across a split (spreadSample).
   */
  async nextRow(maskRng: Rng): Promise<ExampleRow | null> {
    const documentsBefore = this.statistics.documents;
    const firstDocument = this.walker.position.offset > 0 ? documentsBefore - 1 : documentsBefore;
    const example = await this.nextExample();
    if (example === null) return null;
    const lastDocument = Math.max(firstDocument, this.statistics.documents - 1);
    const { kind, seqLen, tokenizer } = this.opts;
    const row = kind === 'gpt' ? gptBatch([example], seqLen, (id) => tokenizer.tokenBytes(id)) : mlmBatch([example], this.masking!.mlm, maskRng);
    return { row, firstDocument, lastDocument };
  }

  /** Next GPT window or BERT chunk in corpus order; null at the end of the split. */
  private async nextExample(): Promise<Int32Array | null> {
    const at = this.walker.position;
    if (this.packer) {
      while (!this.packer.full) {
        const doc = await this.walker.document();
        if (doc === null) return null; // the tail shorter than a window is dropped
        at.offset = this.packer.fill(doc, at.offset);
        if (at.offset >= doc.length) this.walker.finishDocument();
      }
      return this.packer.take();
    }
    const doc = await this.walker.document();
    if (doc === null) return null;
    const end = Math.min(doc.length, at.offset + this.opts.seqLen - 2);
    const chunk = doc.slice(at.offset, end);
    at.offset = end;
    if (at.offset >= doc.length) this.walker.finishDocument();
    return chunk;
  }

  cursor(): DataCursor {
    const { kind, split, seqLen, batchSize, tokenizer } = this.opts;
    const shuffleState = this.shuffle.state();
    return {
      version: 1,
      kind,
      split,
      seqLen,
      batchSize,
      seed: this.seed,
      shuffleBuffer: this.shuffleCapacity,
      tokenizerSha256: tokenizer.sha256,
      shardOrder: [...this.shardOrder],
      ...this.walker.position,
      carry: this.packer ? this.packer.carry() : [],
      shuffle: this.shuffleCapacity > 0 ? { ...encodeTokenArrays(shuffleState.items, tokenizer.vocabSize), rng: shuffleState.rng, exhausted: shuffleState.exhausted } : null,
      maskRng: this.masking ? this.masking.maskRng.state() : null,
      done: this.done,
      batches: this.batches,
      stats: { ...this.statistics },
    };
  }

  get stats(): StreamStats {
    return { ...this.statistics };
  }

  async close(): Promise<void> {
    this.closed = true;
    await this.producers.close();
  }
}

/** One example of a split as a one-row batch and the documents (0-based, split order) its tokens come from. */
export interface ExampleRow {
  row: Batch;
  firstDocument: number;
  lastDocument: number;
}

/** The evaluation sample: whole batches of validation examples and how many documents their tokens come from. */
export interface EvalSample {
  batches: Batch[];
  documents: number;
}

/** Seed of the spread sample's choice of examples: fixed, so every run on the same data and tokenizer sees the same tokens. */
const SPREAD_SAMPLE_SEED = 0x5eed;

/**
 * `evalTokens` labelled tokens drawn across the whole validation split (docs/training.md, "Validation"): every example
 * (GPT window, BERT chunk) of the split, read once in split order, gets a seeded random key, and the examples with the
 * smallest keys are kept until they hold `evalTokens` labels (SmallestKeys: memory bounded by the sample, not the split).
 * BERT masks each example with a generator seeded by its index, so the masks do not depend on which examples are kept.
 * The kept examples are batched in split order, `batchSize` rows a batch (the last may be smaller).
 */
export async function spreadSample(opts: Omit<StreamOptions, 'split' | 'cursor' | 'shuffleBuffer'>, evalTokens: number): Promise<EvalSample> {
  const full: StreamOptions = { ...opts, split: 'validation', shuffleBuffer: 0 };
  validateOptions(full);
  const shards = await listShards(full.dataset, 'validation');
  const stream = new ShardBatchStream(full, shards, undefined, 'data cursor');
  const keys = new Rng(SPREAD_SAMPLE_SEED);
  const kept = new SmallestKeys<ExampleRow & { index: number }>(evalTokens);
  try {
    for (let index = 0; ; index++) {
      const example = await stream.nextRow(new Rng(deriveSeed(VALIDATION_MASK_SEED, index)));
      if (example === null) break;
      kept.offer(keys.uniform(), example.row.tokens, { ...example, index });
    }
  } finally {
    await stream.close();
  }
  const rows = kept.items().sort((a, b) => a.index - b.index);
  const documents = new Set<number>();
  for (const { firstDocument, lastDocument } of rows) for (let d = firstDocument; d <= lastDocument; d++) documents.add(d);
  const batches: Batch[] = [];
  for (let start = 0; start < rows.length; start += opts.batchSize) batches.push(joinRows(rows.slice(start, start + opts.batchSize).map((r) => r.row)));
  return { batches, documents: documents.size };
}

/** One-row batches of the same kind and sequence length as one batch. */
export function joinRows(rows: readonly Batch[]): Batch {
  const { kind, seqLen } = rows[0];
  const width = seqLen;
  const inputIds = new Int32Array(rows.length * width);
  const labels = new Int32Array(rows.length * width);
  const attentionMask = kind === 'bert' ? new Float32Array(rows.length * width) : undefined;
  let tokens = 0;
  let bytes = 0;
  rows.forEach((row, r) => {
    inputIds.set(row.inputIds, r * width);
    labels.set(row.labels, r * width);
    if (attentionMask) attentionMask.set(row.attentionMask!, r * width);
    tokens += row.tokens;
    bytes += row.bytes;
  });
  return { kind, batchSize: rows.length, seqLen, inputIds, labels, ...(attentionMask ? { attentionMask } : {}), tokens, bytes };
}

/** The sample estimateEpoch reads: the first documents of the split, up to either limit. */
export interface EpochSample {
  documents: number;
  bytes: number;
}
export const DEFAULT_EPOCH_SAMPLE: EpochSample = { documents: 1000, bytes: 4e6 };

export interface EpochEstimate {
  /** Document tokens (as StreamStats.tokens counts them) and batches of one epoch. */
  tokens: number;
  batches: number;
  /** True when the sample was the whole split (then the counts are exact). */
  exact: boolean;
  /** What the estimate rests on: the sample's documents and text bytes, and the split's text bytes (null: unknown, rows used). */
  sample: { documents: number; bytes: number };
  splitBytes: number | null;
}

/**
 * Counts of one epoch, estimated without reading the split: the split's text bytes come from the shards' scans (Arrow:
 * the IPC headers, a few small reads per record batch; rows when the bytes cannot be told, e.g. dictionary-encoded text), and tokens
 * and examples per byte (or per row) from the first documents of the split, at most `sample.documents` documents or
 * `sample.bytes` of text. When the sample reaches the end of the split the counts are exact. `tokens` counts
 * document tokens as StreamStats.tokens does. A train split without one full batch is an error.
 */
export async function estimateEpoch(opts: Omit<StreamOptions, 'cursor'>, sample: EpochSample = DEFAULT_EPOCH_SAMPLE): Promise<EpochEstimate> {
  validateOptions(opts);
  const { tokenizer, kind, seqLen, batchSize } = opts;
  const described = await describeSplit(opts.dataset, opts.split, opts.textColumn);
  let tokens = 0;
  let documents = 0;
  let bytes = 0;
  let rows = 0;
  let bertChunks = 0;
  outer: for (const shard of described.shards) {
    for await (const { texts } of shardFormatOf(shard).readTextBatches(shard, opts.textColumn)) {
      rows += texts.length;
      const kept = texts.filter((t): t is string => t !== null && t.trim().length > 0);
      const { starts } = await tokenizer.encodeFlat(kept);
      for (let i = 0; i < kept.length; i++) {
        const length = starts[i + 1] - starts[i];
        if (length === 0) continue;
        tokens += length;
        documents++;
        bertChunks += Math.ceil(length / (seqLen - 2));
      }
      for (const t of kept) bytes += Buffer.byteLength(t, 'utf8');
      if (documents >= sample.documents || bytes >= sample.bytes) break outer;
    }
  }
  const exact = rows === described.rows;
  // Scale the sample to the split: by text bytes when the headers tell them, else by rows.
  const scale = exact ? 1 : described.bytes !== null && bytes > 0 ? described.bytes / bytes : described.rows! / Math.max(1, rows);
  const examples = kind === 'gpt' ? windowCount(Math.round((tokens + documents) * scale), seqLen) : Math.round(bertChunks * scale);
  const batches = opts.split === 'train' ? Math.floor(examples / batchSize) : Math.ceil(examples / batchSize);
  // As collectEvalBatches refuses a validation split without a batch: a run of no step is no run.
  if (opts.split === 'train' && batches === 0) {
    const how = exact ? 'gave' : `is estimated (from its first ${documents} documents) to give`;
    throw new Error(`${opts.dataset}: the train split ${how} no batch of ${batchSize}×${seqLen} tokens; a train split with enough text is needed`);
  }
  return { tokens: Math.round(tokens * scale), batches, exact, sample: { documents, bytes }, splitBytes: described.bytes };
}
