// Reading a split's shards (of any registered format, src/data/shard-registry.ts) as tokenized documents, for the batch
// stream (src/data/stream.ts).
//
// Pipeline. The stream visits the shards in a seeded order (train) or sorted order (validation). For each shard a
// producer reads record batches with its format's readTextBatches and tokenizes them (the native encodeBatch runs on
// the libuv pool) into a small bounded queue; p-limit caps how many shards have producers at once
// (`readAhead`), and a shard's slot is released only when the consumer has finished it, so memory stays
// bounded by readAhead × QUEUED_RECORD_BATCHES tokenized record batches.
import pLimit from 'p-limit';
import type { SequenceKind } from './batch.ts';
import { BoundedQueue } from './bounded-queue.ts';
import { checkRestoredOffset } from './cursor.ts';
import type { StreamStats } from './cursor.ts';
import { shardFormatOf } from './shard-registry.ts';
import type { StreamOptions } from './stream-options.ts';

/** Tokenized record batches a shard producer may hold ahead of the consumer. */
const QUEUED_RECORD_BATCHES = 2;

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

/** Where the consumer is: shardOrder[shard], record batch, row, token offset inside that document. */
export interface Position {
  shard: number;
  recordBatch: number;
  row: number;
  offset: number;
}

/**
 * Reads and tokenizes the shards ahead of the consumer: one bounded queue per shard position (the index into the
 * visiting order), at most readAhead shards with a producer at once.
 */
export class ShardProducers {
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
export class DocumentWalker {
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
