// The order `npm run prepare` writes documents in (docs/data.md, "Document order"): a seeded random permutation of the
// input documents by default, or their input order (--keep-order). The trainer streams a split in file order through a
// bounded shuffle and evaluation reads the validation split in file order, so inputs in a meaningful order (years,
// chapters, sources) would otherwise train on one era after another and evaluate on the first.
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { Rng, deriveSeed } from '../../core/rng.ts';
import type { SourceDocument } from './document-source.ts';

/** The file at the dataset's root that records the order (beside dataset_dict.json; `datasets` ignores it). */
export const DOCUMENT_ORDER_FILE = 'document_order.json';
/** Inputs of up to this many documents have their whole permutation recorded; larger ones only its sha256. */
const RECORDED_PERMUTATION_MAX = 100_000;
/** Text up to this size is shuffled in memory; more goes through bucket files of about half this size each. */
export const IN_MEMORY_SHUFFLE_BYTES = 512e6;
/** Bytes of pending lines a bucket holds before they are appended to its file. */
const BUCKET_FLUSH_BYTES = 1 << 20;

export interface DocumentOrderRecord {
  /** `seeded-random`: a permutation drawn from `seed`; `input`: the inputs' order (--keep-order). */
  order: 'seeded-random' | 'input';
  seed: number | null;
  /** Input documents, empty ones included (prepare skips those after ordering). */
  documents: number;
  /** sha256 of the order: each written document's input index (0-based, input order) as a uint32, little-endian. */
  sha256: string;
  /** The input index of each document in written order, when there are at most RECORDED_PERMUTATION_MAX. */
  permutation?: number[];
}

export interface DocumentOrderOptions {
  seed: number;
  keepOrder: boolean;
  /** Estimated text bytes of the inputs: above IN_MEMORY_SHUFFLE_BYTES the shuffle goes through bucket files. */
  estimatedBytes: number;
  /** Folder for the bucket files (created and removed here; must not exist). */
  workDir: string;
}

/**
 * The documents in the order prepare writes them, and the record of that order (complete once the documents are
 * exhausted). Small inputs are shuffled in memory (Fisher–Yates from deriveSeed(seed, 'document-order'), the
 * permutation the offline corpora have always been written in); large ones by the two-pass shuffle: each document
 * goes to one of B bucket files at random, then each bucket is read and shuffled in memory, so memory holds one
 * bucket and the permutation is still uniform.
 */
export function orderDocuments(
  source: AsyncIterable<SourceDocument>,
  options: DocumentOrderOptions,
): { documents: AsyncGenerator<SourceDocument>; record: () => DocumentOrderRecord } {
  const hash = createHash('sha256');
  const word = Buffer.alloc(4);
  const permutation: number[] = [];
  let count = 0;
  const note = (index: number) => {
    word.writeUInt32LE(index);
    hash.update(word);
    if (permutation.length <= RECORDED_PERMUTATION_MAX) permutation.push(index);
    count++;
  };
  async function* documents(): AsyncGenerator<SourceDocument> {
    if (options.keepOrder) {
      for await (const doc of source) {
        note(count);
        yield doc;
      }
      return;
    }
    const rng = new Rng(deriveSeed(options.seed, 'document-order'));
    if (options.estimatedBytes <= IN_MEMORY_SHUFFLE_BYTES) {
      const all: SourceDocument[] = [];
      for await (const doc of source) all.push(doc);
      for (const index of rng.shuffle(all.map((_, i) => i))) {
        note(index);
        yield all[index];
      }
      return;
    }
    yield* bucketShuffle(source, rng, Math.ceil(options.estimatedBytes / (IN_MEMORY_SHUFFLE_BYTES / 2)), options.workDir, note);
  }
  const record = (): DocumentOrderRecord => ({
    order: options.keepOrder ? 'input' : 'seeded-random',
    seed: options.keepOrder ? null : options.seed,
    documents: count,
    sha256: hash.copy().digest('hex'),
    ...(count <= RECORDED_PERMUTATION_MAX ? { permutation } : {}),
  });
  return { documents: documents(), record };
}

async function* bucketShuffle(
  source: AsyncIterable<SourceDocument>,
  rng: Rng,
  buckets: number,
  workDir: string,
  note: (index: number) => void,
): AsyncGenerator<SourceDocument> {
  fs.mkdirSync(workDir);
  try {
    const file = (b: number) => path.join(workDir, `bucket-${String(b).padStart(5, '0')}.jsonl`);
    const pending: string[][] = Array.from({ length: buckets }, () => []);
    const pendingBytes = new Array<number>(buckets).fill(0);
    const flush = (b: number) => {
      if (pending[b].length > 0) fs.appendFileSync(file(b), pending[b].join(''));
      [pending[b], pendingBytes[b]] = [[], 0];
    };
    let index = 0;
    for await (const doc of source) {
      const b = rng.int(buckets);
      const line = `${JSON.stringify([index++, doc.text, doc.extra, doc.where])}\n`;
      pending[b].push(line);
      pendingBytes[b] += line.length;
      if (pendingBytes[b] >= BUCKET_FLUSH_BYTES) flush(b);
    }
    for (let b = 0; b < buckets; b++) flush(b);
    for (let b = 0; b < buckets; b++) {
      if (!fs.existsSync(file(b))) continue;
      const lines = fs.readFileSync(file(b), 'utf8').split('\n');
      lines.pop(); // after the last newline
      fs.rmSync(file(b));
      const docs = rng.shuffle(lines.map((line) => JSON.parse(line) as [number, string | null, (string | null)[], string]));
      for (const [i, text, extra, where] of docs) {
        note(i);
        yield { text, extra, where };
      }
    }
  } finally {
    fs.rmSync(workDir, { recursive: true, force: true });
  }
}

/** What the dataset's description says of the order, e.g. "Documents in a seeded random order (seed 0)." */
export function describeOrder(keepOrder: boolean, seed: number): string {
  return keepOrder ? 'Documents in input order.' : `Documents in a seeded random order (seed ${seed}).`;
}
