// The batch stream: shards (of any registered format, src/data/shard-registry.ts) → documents → tokens → GPT windows
// or BERT sequences → bounded shuffle → batches, with a cursor that restores the stream exactly.
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
import { Rng, deriveSeed } from '../core/rng.ts';
import type { Batch } from './batch.ts';
import { checkCursor, decodeTokenArrays, encodeTokenArrays, parseCursor } from './cursor.ts';
import type { DataCursor, StreamStats } from './cursor.ts';
import { listShards } from './dataset.ts';
import { mlmBatch, mlmSpecials, ordinaryTokenIds } from './mlm.ts';
import type { MlmOptions } from './mlm.ts';
import { WindowPacker, gptBatch } from './packing.ts';
import { DocumentWalker, ShardProducers } from './reader.ts';
import type { Position } from './reader.ts';
import { shardFormatOf } from './shard-registry.ts';
import { ShuffleBuffer } from './shuffle.ts';
import { validateStreamOptions } from './stream-options.ts';
import type { StreamOptions } from './stream-options.ts';

export type { DataCursor, StreamStats };
export { parseCursor } from './cursor.ts';

export interface BatchStream {
  next(): Promise<Batch | null>;
  cursor(): DataCursor;
  readonly stats: StreamStats;
  close(): Promise<void>;
}

/** Fixed masking seed for the validation split, so validation losses compare across runs and seeds. */
export const VALIDATION_MASK_SEED = 0x5eed;

/** checkCursor against this stream's settings and its shards. */
function checkCursorAgainst(cursor: DataCursor, opts: StreamOptions, shards: string[], source: string): Promise<void> {
  const isTrain = opts.split === 'train';
  return checkCursor(
    cursor,
    {
      kind: opts.kind,
      split: opts.split,
      seqLen: opts.seqLen,
      batchSize: opts.batchSize,
      seed: isTrain ? opts.seed : 0,
      shuffleBuffer: isTrain ? opts.shuffleBuffer : 0,
      tokenizerSha256: opts.tokenizer.sha256,
      vocabSize: opts.tokenizer.vocabSize,
      dataset: opts.dataset,
      shardCount: shards.length,
      recordBatchRows: async (shard) => (await shardFormatOf(shards[shard]).scan(shards[shard], opts.textColumn)).batchRows,
    },
    source,
  );
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
  validateStreamOptions(opts);
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

/**
 * The stages of one open stream and the counters its cursor records. Exported for the evaluation sample
 * (eval-sample.ts), which reads it example by example (nextRow); everything else opens it with openBatchStream.
 */
export class ShardBatchStream implements BatchStream {
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
    this.producers = new ShardProducers(
      this.shardOrder.map((i) => shards[i]),
      opts,
    );
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
      return kind === 'gpt'
        ? gptBatch(examples, seqLen, (id) => tokenizer.tokenBytes(id), this.documentEos)
        : mlmBatch(examples, this.masking!.mlm, this.masking!.maskRng);
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
    const row =
      kind === 'gpt' ? gptBatch([example], seqLen, (id) => tokenizer.tokenBytes(id), this.documentEos) : mlmBatch([example], this.masking!.mlm, maskRng);
    return { row, firstDocument, lastDocument };
  }

  /** The end-of-text token that separates documents, when batches carry their documents (documentMask). */
  private get documentEos(): number | undefined {
    return this.opts.documentMask ? this.opts.tokenizer.specialIds.eos : undefined;
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
      shuffle:
        this.shuffleCapacity > 0
          ? { ...encodeTokenArrays(shuffleState.items, tokenizer.vocabSize), rng: shuffleState.rng, exhausted: shuffleState.exhausted }
          : null,
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
