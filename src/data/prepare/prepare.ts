// `npm run prepare`: turns JSON Lines (C4's c4-*.json.gz), parquet or folders of .txt files into a
// HuggingFace DatasetDict.save_to_disk dataset with a seeded train/validation split.
import fs from 'node:fs';
import path from 'node:path';
import { writeOwnFile } from '../../core/own-file.ts';
import { Rng, deriveSeed } from '../../core/rng.ts';
import { SPLITS } from '../dataset.ts';
import type { Split } from '../dataset.ts';
import { ArrowShardWriter } from './arrow-writer.ts';
import { DOCUMENT_ORDER_FILE, describeOrder, orderDocuments } from './document-order.ts';
import type { DocumentOrderRecord } from './document-order.ts';
import { checkOutput, markPreparedOutput, replaceOutput } from './prepared-output.ts';
import { InputError } from './document-source.ts';
import type { SourceDocument } from './document-source.ts';
import { estimatedTextBytes, readDocuments, resolveInputs } from './source-registry.ts';
import { DEFAULT_SHARD_SIZE, SplitWriter, parseShardSize, writeDatasetDictJson } from './split-writer.ts';
import type { ShardSize } from './split-writer.ts';

export interface PrepareOptions {
  /** Input files, folders (searched recursively) or file-name globs. */
  inputs: string[];
  /** Output folder (DatasetDict.save_to_disk layout). */
  out: string;
  /** Name of the text field/column in the inputs and in the output. Default "text". */
  textColumn?: string;
  /** Extra input fields kept as string columns (e.g. ["url", "timestamp"] for C4). Default none. */
  keepColumns?: string[];
  /** Probability that a document goes to the validation split, in [0, 1). Default 0.05. */
  validationFraction?: number;
  /** Seed of the document order and of the split. Default 0. */
  seed?: number;
  /** Write the documents in input order instead of a seeded random order (docs/data.md, "Document order"). Default false. */
  keepOrder?: boolean;
  /** Rows per shard or bytes per shard ("100000", "500MB"). Default 500MB, as `datasets`. */
  shardSize?: ShardSize | string;
  /** Replace an existing output folder. Default false (an existing folder is an error). */
  overwrite?: boolean;
  /** Progress lines (default: none). */
  log?: (line: string) => void;
}

export interface SplitCounts {
  documents: number;
  /** UTF-8 bytes of the text column. */
  bytes: number;
  shards: string[];
}

export interface PrepareSummary {
  out: string;
  inputFiles: number;
  /** Documents written (train + validation). */
  documents: number;
  /** UTF-8 text bytes written (train + validation). */
  bytes: number;
  /** Shard files written (train + validation). */
  shards: number;
  /** Empty or whitespace-only (or null) documents that were skipped. */
  skippedEmpty: number;
  splits: Record<Split, SplitCounts>;
  /** The order the documents were written in (also in the dataset's document_order.json). */
  order?: DocumentOrderRecord;
}

export interface WriteDatasetOptions {
  out: string;
  textColumn: string;
  extraColumns: readonly string[];
  validationFraction: number;
  seed: number;
  shardSize: ShardSize;
  overwrite: boolean;
  description: string;
  /** The order of `documents`, complete once they are read: written to the dataset's document_order.json. */
  order?: () => DocumentOrderRecord;
}

function checkFraction(fraction: number): void {
  if (!(Number.isFinite(fraction) && fraction >= 0 && fraction < 1)) {
    throw new InputError(`--validation-fraction must be a number in [0, 1), got ${fraction}`);
  }
}

/**
 * Writes documents as a save_to_disk DatasetDict with a seeded split. Each non-empty document goes
 * to validation with probability `validationFraction` (a seeded Bernoulli draw per document, in
 * input order, so the split streams). The last document of each split is held back so that, when
 * one split would end up empty, it can move there: with a fraction in (0, 1) and at least two
 * documents both splits are non-empty.
 */
export async function writeSplitDataset(documents: AsyncIterable<SourceDocument>, options: WriteDatasetOptions): Promise<Omit<PrepareSummary, 'inputFiles'>> {
  const { out, textColumn, extraColumns, validationFraction, seed, shardSize } = options;
  checkFraction(validationFraction);
  checkOutput(out, options.overwrite);
  const columns = [textColumn, ...extraColumns];
  if (new Set(columns).size !== columns.length) throw new InputError(`duplicate column names: ${columns.join(', ')}`);
  const staging = `${out}.partial-${process.pid}`;
  fs.rmSync(staging, { recursive: true, force: true });
  const writers: Record<Split, SplitWriter> = {
    train: new SplitWriter(path.join(staging, 'train'), 'train', columns, textColumn, shardSize, options.description),
    validation: new SplitWriter(path.join(staging, 'validation'), 'validation', columns, textColumn, shardSize, options.description),
  };
  const held: Record<Split, (string | null)[] | null> = { train: null, validation: null };
  const rng = new Rng(deriveSeed(seed, 'train-validation-split'));
  let skippedEmpty = 0;
  try {
    for await (const doc of documents) {
      if (doc.text === null || doc.text.trim() === '') {
        skippedEmpty++;
        continue;
      }
      const split: Split = rng.uniform() < validationFraction ? 'validation' : 'train';
      const previous = held[split];
      held[split] = [doc.text, ...doc.extra];
      if (previous) await writers[split].append(previous);
    }
    const total = (s: Split) => writers[s].rows + (held[s] ? 1 : 0);
    if (validationFraction > 0) {
      for (const [empty, full] of [
        ['validation', 'train'],
        ['train', 'validation'],
      ] as const) {
        if (total(empty) === 0 && total(full) >= 2) {
          held[empty] = held[full];
          held[full] = null;
        }
      }
    }
    for (const split of SPLITS) if (held[split]) await writers[split].append(held[split]!);
    if (writers.train.rows + writers.validation.rows === 0) {
      throw new InputError(`no non-empty documents in the inputs${skippedEmpty ? ` (${skippedEmpty} empty documents skipped)` : ''}`);
    }
    const train = await writers.train.finish();
    const validation = await writers.validation.finish();
    writeDatasetDictJson(staging, SPLITS);
    const order = options.order?.();
    // The staging folder's files are written as a run folder's are (src/core/own-file.ts): never through a planted link.
    if (order) writeOwnFile(path.join(staging, DOCUMENT_ORDER_FILE), `${JSON.stringify(order)}\n`);
    markPreparedOutput(staging);
    replaceOutput(staging, out, options.overwrite);
    const moved = (files: string[]) => files.map((f) => path.join(out, path.relative(staging, f)));
    const splits: Record<Split, SplitCounts> = {
      train: { documents: train.rows, bytes: train.textBytes, shards: moved(train.shards) },
      validation: { documents: validation.rows, bytes: validation.textBytes, shards: moved(validation.shards) },
    };
    return {
      out,
      documents: train.rows + validation.rows,
      bytes: train.textBytes + validation.textBytes,
      shards: train.shards.length + validation.shards.length,
      skippedEmpty,
      splits,
      ...(order ? { order } : {}),
    };
  } catch (err) {
    await writers.train.abort();
    await writers.validation.abort();
    fs.rmSync(staging, { recursive: true, force: true });
    throw err;
  }
}

/** Reads the inputs and writes the dataset; see PrepareOptions for defaults. */
export async function prepareDataset(options: PrepareOptions): Promise<PrepareSummary> {
  const textColumn = options.textColumn ?? 'text';
  const keepColumns = options.keepColumns ?? [];
  const shardSize = typeof options.shardSize === 'string' ? parseShardSize(options.shardSize) : (options.shardSize ?? DEFAULT_SHARD_SIZE);
  const validationFraction = options.validationFraction ?? 0.05;
  checkFraction(validationFraction);
  checkOutput(options.out, options.overwrite ?? false);
  const files = resolveInputs(options.inputs);
  const log = options.log ?? (() => undefined);
  async function* allDocuments(): AsyncGenerator<SourceDocument> {
    for (const [i, file] of files.entries()) {
      if (files.length > 1) log(`[${i + 1}/${files.length}] ${file}`);
      yield* readDocuments(file, textColumn, keepColumns);
    }
  }
  const seed = options.seed ?? 0;
  const keepOrder = options.keepOrder ?? false;
  const ordered = orderDocuments(allDocuments(), {
    seed,
    keepOrder,
    estimatedBytes: estimatedTextBytes(files),
    workDir: `${options.out}.order-${process.pid}`,
  });
  const summary = await writeSplitDataset(ordered.documents, {
    out: options.out,
    textColumn,
    extraColumns: keepColumns,
    validationFraction,
    seed,
    shardSize,
    overwrite: options.overwrite ?? false,
    description: `Prepared by slayformer from ${files.length} input file(s). ${describeOrder(keepOrder, seed)}`,
    order: ordered.record,
  });
  return { ...summary, inputFiles: files.length };
}

function megabytes(bytes: number): string {
  return `${(bytes / 1e6).toFixed(2)} MB`;
}

/** The lines `npm run prepare` prints. */
export function formatSummary(summary: PrepareSummary): string[] {
  const lines = [
    `wrote ${summary.documents} documents, ${summary.bytes} bytes of text (${megabytes(summary.bytes)}), ${summary.shards} shards to ${summary.out}`,
  ];
  for (const split of SPLITS) {
    const s = summary.splits[split];
    lines.push(`  ${split}: ${s.documents} documents, ${s.bytes} bytes, ${s.shards.length} shard(s)`);
  }
  if (summary.skippedEmpty > 0) lines.push(`skipped ${summary.skippedEmpty} empty documents`);
  const { order } = summary;
  if (order) {
    const how = order.order === 'input' ? 'in input order (--keep-order)' : `in a seeded random order (seed ${order.seed})`;
    lines.push(`documents ${how}; order sha256 ${order.sha256.slice(0, 16)}… in ${path.join(summary.out, DOCUMENT_ORDER_FILE)}`);
  }
  return lines;
}

const SYNTHETIC_WORDS = (() => {
  // A fixed pseudo-vocabulary with a Zipf-like frequency (short words are drawn more often).
  const rng = new Rng(12345);
  const letters = 'etaoinshrdlcumwfgypbvkjxqz';
  const words: string[] = [];
  for (let i = 0; i < 4000; i++) {
    const length = 1 + Math.min(11, Math.floor(-Math.log(1 - rng.uniform()) * 4));
    let w = '';
    for (let j = 0; j < length; j++) w += letters[Math.min(25, Math.floor(-Math.log(1 - rng.uniform()) * 6))];
    words.push(w);
  }
  return words;
})();

/**
 * Writes one C4-like Arrow shard (IPC stream format, columns text/timestamp/url, 1,000-row
 * batches, `huggingface` metadata) with at least `megabytes` MB of pseudo-English text, for
 * throughput benchmarks. Deterministic for a seed.
 */
export async function generateSyntheticShard(file: string, megabytes: number, seed: number): Promise<{ rows: number; textBytes: number }> {
  if (!(megabytes > 0)) throw new Error(`generateSyntheticShard: megabytes must be positive, got ${megabytes}`);
  const rng = new Rng(deriveSeed(seed, 'synthetic-shard'));
  const writer = new ArrowShardWriter(file, ['text', 'timestamp', 'url'], 'text');
  const target = megabytes * 1e6;
  let bytes = 0;
  let row = 0;
  while (bytes < target) {
    const wordsInDoc = 40 + rng.int(800);
    const parts: string[] = [];
    for (let w = 0; w < wordsInDoc; w++) {
      const word = SYNTHETIC_WORDS[Math.floor(SYNTHETIC_WORDS.length * rng.uniform() ** 3)];
      parts.push(w % 17 === 16 ? `${word}.` : word);
    }
    const text = parts.join(' ');
    bytes += text.length; // ASCII only, so characters = bytes
    const day = String(1 + (row % 28)).padStart(2, '0');
    await writer.append([text, `2019-04-${day}T12:00:00Z`, `https://example.com/doc/${row}`]);
    row++;
  }
  await writer.close();
  return { rows: writer.rows, textBytes: writer.textBytes };
}
