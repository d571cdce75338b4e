// Trains a byte-level BPE tokenizer with the native `tokenizers` bindings and rewrites the saved
// tokenizer.json so that it is usable. The bindings expose only `Tokenizer.train(files)` with the default
// BpeTrainer (30 000 tokens, no special tokens, only the bytes seen in training), so the raw result
// drops unseen bytes silently and has no decoder. The post-processing below rebuilds the vocabulary as
// [specials][all 256 byte symbols][merges in rank order] cut at exactly the vocabulary size asked for.
import { createWriteStream } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { once } from 'node:events';
import { BPE, Tokenizer, byteLevelAlphabet, byteLevelPreTokenizer } from 'tokenizers';
import { BOUNDS, boundProblem } from '../core/bounds.ts';
import { listShards } from './dataset.ts';
import type { Split } from './dataset.ts';
import { shardFormatOf } from './shard-registry.ts';

/** Special tokens of our byte-level tokenizers, ids 0, 1, 2. `<mask>`/`<pad>` serve BERT-style training,
 *  `<|endoftext|>` separates documents (and stands in for [CLS]/[SEP]). */
export const BYTE_LEVEL_SPECIALS = ['<|endoftext|>', '<pad>', '<mask>'] as const;

/** The native trainer's BpeTrainer::default() stops at 30 000 tokens, merges included. */
const NATIVE_TRAINER_VOCAB = 30_000;

export interface TokenizerJsonDoc {
  model: { type: string; vocab: Record<string, number>; merges: ([string, string] | string)[]; [k: string]: unknown };
  added_tokens: unknown[];
  [k: string]: unknown;
}

/** Rewrites a freshly trained byte-level BPE tokenizer.json to exactly `vocabSize` ids:
 *  specials first, then the full 256-symbol byte alphabet (so every byte round-trips), then the
 *  trained merges in rank order until the size is reached. Adds the ByteLevel decoder. */
export function finalizeByteLevelBpe(raw: TokenizerJsonDoc, vocabSize: number, specials: readonly string[] = BYTE_LEVEL_SPECIALS): TokenizerJsonDoc {
  checkVocabSize(vocabSize, specials.length);
  if (raw.model?.type !== 'BPE') throw new Error(`expected a BPE model to post-process, got ${raw.model?.type}`);
  // A null-prototype object: token strings such as "constructor" must not hit Object.prototype.
  const vocab: Record<string, number> = Object.create(null);
  const has = (token: string) => Object.hasOwn(vocab, token);
  let nextId = 0;
  for (const s of specials) vocab[s] = nextId++;
  // Sorting by code point puts printable ASCII in byte order; the order only has to be deterministic.
  for (const symbol of [...byteLevelAlphabet()].sort((a, b) => a.codePointAt(0)! - b.codePointAt(0)!)) vocab[symbol] = nextId++;
  const merges: [string, string][] = [];
  for (const merge of raw.model.merges) {
    if (nextId >= vocabSize) break;
    const [left, right] = Array.isArray(merge) ? merge : (merge.split(' ') as [string, string]);
    if (!has(left) || !has(right)) continue;
    const merged = left + right;
    if (!has(merged)) vocab[merged] = nextId++;
    merges.push([left, right]);
  }
  if (nextId < vocabSize) {
    throw new Error(
      `the training corpus yields only ${nextId} tokens (${merges.length} merges) but vocab size ${vocabSize} was asked for: ` +
        `use a larger corpus or --vocab ≤ ${nextId}`,
    );
  }
  return {
    ...raw,
    normalizer: null,
    pre_tokenizer: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: null,
    decoder: { type: 'ByteLevel', add_prefix_space: false, trim_offsets: true, use_regex: true },
    added_tokens: specials.map((content, id) => ({
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    model: { ...raw.model, vocab, merges },
  };
}

/** Checks a requested vocabulary size before any (slow) training starts. */
export function checkVocabSize(vocabSize: number, specialCount: number = BYTE_LEVEL_SPECIALS.length): void {
  // At least the specials and the 256 byte symbols; at most the embedding rows any model here may have.
  const problem = boundProblem('the vocabulary size (--vocab)', vocabSize, BOUNDS.embeddingRows, specialCount + 256);
  if (problem) throw new Error(problem);
  if (vocabSize > NATIVE_TRAINER_VOCAB) {
    throw new Error(`vocab size ${vocabSize} is above ${NATIVE_TRAINER_VOCAB}, the fixed limit of the native tokenizers trainer`);
  }
}

/** Trains on plain-text files (one or more documents per line) and writes the finished tokenizer.json. */
async function trainByteLevelBpeFromFiles(files: string[], vocabSize: number, out: string): Promise<{ vocabSize: number; merges: number }> {
  checkVocabSize(vocabSize);
  const dir = await mkdtemp(join(tmpdir(), 'slay-tok-'));
  try {
    const tokenizer = new Tokenizer(BPE.empty());
    tokenizer.setPreTokenizer(byteLevelPreTokenizer(false, true));
    tokenizer.train(files);
    const rawPath = join(dir, 'raw.json');
    tokenizer.save(rawPath);
    const raw = JSON.parse(await readFile(rawPath, 'utf8')) as TokenizerJsonDoc;
    const finished = finalizeByteLevelBpe(raw, vocabSize);
    await writeFile(out, JSON.stringify(finished));
    return { vocabSize, merges: finished.model.merges.length };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Writes texts to a temp file (the native trainer reads only files) and trains on it. */
export async function trainByteLevelBpeFromTexts(
  texts: Iterable<string | null> | AsyncIterable<string | null>,
  vocabSize: number,
  out: string,
  maxBytes = Infinity,
): Promise<TrainSummary> {
  checkVocabSize(vocabSize);
  const dir = await mkdtemp(join(tmpdir(), 'slay-tok-'));
  const corpus = join(dir, 'corpus.txt');
  try {
    const sink = createWriteStream(corpus);
    let documents = 0;
    let bytes = 0;
    let skippedEmpty = 0;
    for await (const text of texts) {
      if (bytes >= maxBytes) break;
      if (text === null || text.trim().length === 0) {
        skippedEmpty++;
        continue;
      }
      // Internal newlines stay: the trainer keeps line endings, and documents are separated by one.
      const line = text.endsWith('\n') ? text : text + '\n';
      bytes += Buffer.byteLength(line);
      documents++;
      if (!sink.write(line)) await once(sink, 'drain');
    }
    sink.end();
    await once(sink, 'finish');
    const { merges } = await trainByteLevelBpeFromFiles([corpus], vocabSize, out);
    return { path: out, vocabSize, merges, documents, bytes, skippedEmpty };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export interface TrainSummary {
  path: string;
  vocabSize: number;
  merges: number;
  documents: number;
  bytes: number;
  skippedEmpty: number;
}

export interface TrainTokenizerOptions {
  dataset: string;
  vocabSize: number;
  out: string;
  textColumn?: string;
  split?: Split;
  /** Stop reading after this many UTF-8 bytes of text (training on all of C4 is unnecessary). */
  maxBytes?: number;
}

/** Trains on the text column of a dataset split (shards of any registered format, see dataset.ts). */
export async function trainTokenizer(opts: TrainTokenizerOptions): Promise<TrainSummary> {
  checkVocabSize(opts.vocabSize);
  const shards = await listShards(opts.dataset, opts.split ?? 'train');
  const column = opts.textColumn ?? 'text';
  async function* texts(): AsyncGenerator<string | null> {
    for (const shard of shards) {
      for await (const { texts: batch } of shardFormatOf(shard).readTextBatches(shard, column)) yield* batch;
    }
  }
  return trainByteLevelBpeFromTexts(texts(), opts.vocabSize, opts.out, opts.maxBytes ?? Infinity);
}
