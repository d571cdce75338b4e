// Tiny corpora and Arrow shards for the tokenizer/stream tests. Shards are written with small record
// batches (unlike the 1,000 rows of `datasets`) so that resuming across record batches is exercised
// on a few hundred documents.
import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { once } from 'node:events';
import { join } from 'node:path';
import { Field, RecordBatch, RecordBatchStreamWriter, Schema, Struct, Utf8, makeData, vectorFromArray } from 'apache-arrow';
import { Rng } from '../../src/core/rng.ts';

const WORDS = (
  'the of and to in is was for on that with as by at from his her an were which are this be had not ' +
  'or have but one their they has been its who more would new after also other some time first two ' +
  'about can into only year these over may people state government nation congress union country ' +
  'law war peace power public trade money great world years house report treaty states citizens'
).split(' ');

/** Seeded pseudo-English documents of 1–120 words, with punctuation, digits and newlines. */
export function syntheticDocuments(count: number, seed: number): string[] {
  const rng = new Rng(seed);
  const docs: string[] = [];
  for (let d = 0; d < count; d++) {
    const words: string[] = [];
    const n = 1 + rng.int(rng.uniform() < 0.2 ? 120 : 30);
    for (let w = 0; w < n; w++) {
      let word = WORDS[rng.int(WORDS.length)];
      if (w === 0) word = word[0].toUpperCase() + word.slice(1);
      if (rng.uniform() < 0.05) word = String(1789 + rng.int(230));
      words.push(word + (rng.uniform() < 0.08 ? (rng.uniform() < 0.5 ? ',' : '.\n') : ''));
    }
    docs.push(words.join(' ') + '.');
  }
  return docs;
}

/** Writes one Arrow IPC stream shard with a single nullable Utf8 column `text`. */
export async function writeShard(file: string, texts: (string | null)[], rowsPerBatch: number): Promise<void> {
  const schema = new Schema([new Field('text', new Utf8(), true)]);
  const writer = new RecordBatchStreamWriter();
  const sink = createWriteStream(file);
  writer.toNodeStream().pipe(sink);
  writer.reset(undefined, schema);
  for (let start = 0; start < texts.length; start += rowsPerBatch) {
    const slice = texts.slice(start, start + rowsPerBatch);
    const child = vectorFromArray(slice, new Utf8()).data[0];
    writer.write(new RecordBatch(schema, makeData({ type: new Struct(schema.fields), length: slice.length, nullCount: 0, children: [child] })));
  }
  const finished = once(sink, 'finish');
  writer.finish();
  await finished;
}

/** A folder of HF-cache-style shards `corpus-<split>-0000i-of-0000n.arrow`; returns the documents per split. */
export async function writeDataset(dir: string, splits: Record<'train' | 'validation', (string | null)[][]>, rowsPerBatch: number): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (const [split, shards] of Object.entries(splits)) {
    const n = String(shards.length).padStart(5, '0');
    for (let i = 0; i < shards.length; i++) {
      await writeShard(join(dir, `corpus-${split}-${String(i).padStart(5, '0')}-of-${n}.arrow`), shards[i], rowsPerBatch);
    }
  }
}
