// Child-process part of the long-document memory test (tokenizer.test.ts): streams one shard holding a document of
// `mb` megabytes through openBatchStream and prints the batches and the peak RSS. A process of its own, so that
// the peak is this stream's and not the test runner's.
//   node --import tsx long-document.mts <project root> <work dir> <tokenizer.json> <mb>
import { join } from 'node:path';
const [root, dir, tokPath, mbArg] = process.argv.slice(2);
const { openBatchStream } = await import(join(root, 'src/data/stream.ts'));
const { TextTokenizer } = await import(join(root, 'src/data/tokenizer.ts'));
const { syntheticDocuments, writeDataset } = await import(join(root, 'test/data/stream-fixtures.ts'));
const docs = syntheticDocuments(400, 2);
let long = '';
while (long.length < Number(mbArg) * 1e6) long += docs.join(' ');
await writeDataset(join(dir, 'data'), { train: [[long, ...docs.slice(0, 10)]], validation: [docs.slice(10, 20)] }, 4);
long = '';
const tokenizer = await TextTokenizer.load(tokPath);
const before = process.resourceUsage().maxRSS;
const t0 = performance.now();
const stream = await openBatchStream({
  dataset: join(dir, 'data'),
  split: 'train',
  textColumn: 'text',
  tokenizer,
  kind: 'gpt',
  seqLen: 64,
  batchSize: 8,
  seed: 1,
  shuffleBuffer: 16,
  readAhead: 2,
});
let batches = 0;
while (await stream.next()) batches++;
await stream.close();
console.log(JSON.stringify({ batches, seconds: (performance.now() - t0) / 1000, maxRssMiB: process.resourceUsage().maxRSS / 1024, beforeMiB: before / 1024 }));
