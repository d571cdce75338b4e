// npm run bench:data [-- --mb 100 --seq-len 256 --batch-size 32 --read-ahead 2 --vocab 4096]
// Data-pipeline throughput on a generated C4-like shard (temp dir, removed afterwards):
//  1. Arrow read: MB/s of text decoded by readTextBatches;
//  2. tokenize + pack: document tokens/s through openBatchStream (GPT windows; then BERT masking),
//     i.e. everything the trainer waits for, with a byte-level BPE trained on the first 5 MB.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseOrExit } from '../src/cli/command.ts';
import { readTextBatches } from '../src/data/arrow.ts';
import { generateSyntheticShard } from '../src/data/prepare/prepare.ts';
import { openBatchStream } from '../src/data/stream.ts';
import type { StreamOptions } from '../src/data/stream-options.ts';
import { TextTokenizer } from '../src/data/tokenizer.ts';
import { trainTokenizer } from '../src/data/train-tokenizer.ts';

const { values } = parseOrExit({
  name: 'bench:data',
  usage: '[options]',
  description: `Data-pipeline throughput on a generated C4-like shard (in a temporary folder, removed afterwards): Arrow read
(MB/s of text), then tokenize + pack (tokens/s through the trainer's batch stream, GPT windows, then BERT masking).`,
  options: {
    mb: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '100', help: 'MB of text to generate' },
    'seq-len': { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '256', help: 'sequence length' },
    'batch-size': { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '32', help: 'batch size' },
    'read-ahead': { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '2', help: 'shards read and tokenized ahead' },
    vocab: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '4096', help: 'vocabulary of the BPE trained on the first 5 MB' },
  },
});
const { mb: megabytes, 'seq-len': seqLen, 'batch-size': batchSize, 'read-ahead': readAhead, vocab: vocabSize } = values;

const seconds = (start: number) => (performance.now() - start) / 1000;

const dir = await mkdtemp(join(tmpdir(), 'bench-data-'));
try {
  let t = performance.now();
  const shard = join(dir, 'bench-train-00000-of-00001.arrow');
  const written = await generateSyntheticShard(shard, megabytes, 1);
  console.log(`generated ${shard}: ${written.rows} rows, ${(written.textBytes / 1e6).toFixed(1)} MB of text in ${seconds(t).toFixed(1)} s`);

  t = performance.now();
  let textBytes = 0;
  for await (const { texts } of readTextBatches(shard, 'text')) {
    for (const s of texts) if (s !== null) textBytes += s.length; // ASCII: characters = bytes
  }
  const readSeconds = seconds(t);
  console.log(
    `read:            ${(textBytes / 1e6 / readSeconds).toFixed(0)} MB/s of text (${(textBytes / 1e6).toFixed(1)} MB in ${readSeconds.toFixed(2)} s)`,
  );

  t = performance.now();
  const tokenizerPath = join(dir, 'tokenizer.json');
  await trainTokenizer({ dataset: dir, vocabSize, out: tokenizerPath, maxBytes: 5e6 });
  const tokenizer = await TextTokenizer.load(tokenizerPath);
  console.log(`tokenizer:       byte-level BPE, vocab ${tokenizer.vocabSize}, trained on 5 MB in ${seconds(t).toFixed(1)} s`);

  for (const kind of ['gpt', 'bert'] as const) {
    const opts: StreamOptions = { dataset: dir, split: 'train', textColumn: 'text', tokenizer, kind, seqLen, batchSize, seed: 0, shuffleBuffer: 64, readAhead };
    t = performance.now();
    const stream = await openBatchStream(opts);
    let batches = 0;
    while ((await stream.next()) !== null) batches++;
    const s = seconds(t);
    const { tokens, bytes } = stream.stats;
    await stream.close();
    console.log(
      `tokenize+pack ${kind}: ${(tokens / s / 1e3).toFixed(0)}k tokens/s, ${(bytes / 1e6 / s).toFixed(1)} MB/s ` +
        `(${(tokens / 1e6).toFixed(1)} M tokens, ${(bytes / tokens).toFixed(2)} bytes/token, ${batches} batches of ${batchSize}×${seqLen}, ${s.toFixed(1)} s)`,
    );
  }
} finally {
  await rm(dir, { recursive: true, force: true });
}
