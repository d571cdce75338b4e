// npm run bench:startup [-- --gb 2] [--dir <folder>] [--backend cpu]  (also: npm run bench -- startup …)
// Start-up time of a training run on a generated multi-GB dataset (C4-like shards of 500 MB, train split only large):
//  1. the header scan of the train split (describeSplit: text bytes and rows from the IPC headers);
//  2. the epoch estimate (the scan plus a tokenized sample of the first documents);
//  3. runTraining of a tiny GPT until its first step is logged (tokenizer, estimate, validation batches, model,
//     stream); for comparison, the time a whole-split count would need at the sample's tokenize rate.
// The dataset goes to --dir (kept and reused when it already holds one of the same size) or a temp folder.
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { initBackend } from '../src/backend/start.ts';
import { chooseBackend } from '../src/backend/device.ts';
import { backendOption } from '../src/cli/backend-option.ts';
import { parseOrExit } from '../src/cli/command.ts';
import { describeSplit } from '../src/data/dataset.ts';
import { generateSyntheticShard } from '../src/data/prepare/prepare.ts';
import { estimateEpoch } from '../src/data/epoch.ts';
import { TextTokenizer } from '../src/data/tokenizer.ts';
import { trainTokenizer } from '../src/data/train-tokenizer.ts';
import { parseRecipe } from '../src/store/recipes.ts';
import { streamOptions } from '../src/train/plan.ts';
import { describeEpoch, runTraining } from '../src/train/trainer.ts';

const { values } = parseOrExit({
  name: 'bench:startup',
  usage: '[options]',
  description: `Start-up time of a training run on a generated multi-GB dataset: header scan of the train split, epoch
estimate, and runTraining of a tiny GPT until its first step is logged.`,
  options: {
    gb: { type: 'string', value: 'N', number: { min: 0.001 }, default: '2', help: 'GB of text to generate' },
    dir: { type: 'string', value: 'FOLDER', help: 'where the dataset goes (kept and reused); default a temporary folder, removed' },
    backend: backendOption('cpu'),
  },
});
const gigabytes = values.gb;
const SHARD_MB = 500;
const seconds = (start: number) => (performance.now() - start) / 1000;

const dir = values.dir ?? (await mkdtemp(join(tmpdir(), 'bench-startup-')));
const data = join(dir, `c4-like-${gigabytes}gb`);
try {
  await initBackend(chooseBackend({ flag: values.backend, recipe: 'cpu' }).choice, { quiet: true });
  const shards = Math.max(1, Math.ceil((gigabytes * 1000) / SHARD_MB));
  const name = (split: string, i: number, n: number) => join(data, `c4-${split}-${String(i).padStart(5, '0')}-of-${String(n).padStart(5, '0')}.arrow`);
  let t = performance.now();
  if (!existsSync(name('train', shards - 1, shards))) {
    await mkdir(data, { recursive: true });
    for (let i = 0; i < shards; i++) await generateSyntheticShard(name('train', i, shards), Math.min(SHARD_MB, gigabytes * 1000 - i * SHARD_MB), 1 + i);
    await generateSyntheticShard(name('validation', 0, 1), 5, 99);
    console.log(`generated ${shards} train shards (${gigabytes} GB of text) and a 5 MB validation shard in ${seconds(t).toFixed(0)} s: ${data}`);
  }
  const tokenizerPath = join(dir, 'tokenizer.json');
  if (!existsSync(tokenizerPath)) await trainTokenizer({ dataset: data, vocabSize: 4096, out: tokenizerPath, maxBytes: 5e6 });
  const tokenizer = await TextTokenizer.load(tokenizerPath);

  t = performance.now();
  const described = await describeSplit(data, 'train', 'text');
  const scanSeconds = seconds(t);
  console.log(
    `header scan:     ${scanSeconds.toFixed(2)} s for ${described.shards.length} shards, ${described.rows!.toLocaleString('en-US')} rows, ${(described.bytes! / 1e9).toFixed(2)} GB of text`,
  );

  const recipeText = `
backend: ${values.backend}
model: { kind: gpt, dModel: 32, numLayers: 1, numHeads: 2, attention: { name: softmax } }
data: { dataset: ${data}, tokenizer: ${tokenizerPath}, seqLen: 64, shuffleBuffer: 64 }
train: { batchSize: 4, maxTokens: 1024, evalTokens: 2048, logInterval: 1, checkpointInterval: 0, runDir: ${join(dir, 'runs')} }
wandb: { enabled: false }
`;
  const recipe = parseRecipe(recipeText, join(dir, 'bench-startup.yaml'));
  t = performance.now();
  const epoch = await estimateEpoch({ ...streamOptions(recipe, tokenizer), split: 'train' });
  const estimateSeconds = seconds(t);
  console.log(`epoch estimate:  ${estimateSeconds.toFixed(2)} s (${describeEpoch(epoch)})`);
  // What counting by tokenizing the whole split (the old estimate whenever the header scan could not tell the text
  // bytes, or the split was under 32 MB) would take at the sample's rate:
  const sampleRate = epoch.sample.bytes / Math.max(1e-9, estimateSeconds - scanSeconds);
  console.log(
    `whole-split count: ≈ ${(described.bytes! / sampleRate).toFixed(0)} s at the sample's tokenize rate of ${(sampleRate / 1e6).toFixed(1)} MB/s (not done)`,
  );

  let firstStep = NaN;
  t = performance.now();
  await runTraining(recipe, {
    logger: {
      dir: join(dir, 'runs', 'bench'),
      log: () => {},
      line: (text) => {
        if (!Number.isNaN(firstStep)) return;
        console.log(`  +${seconds(t).toFixed(1)} s  ${text.slice(0, 110)}`);
        if (text.startsWith('step 1/')) firstStep = seconds(t);
      },
      finish: async () => {},
    },
  });
  console.log(`runTraining:     first step logged ${firstStep.toFixed(2)} s after the call (backend ${values.backend}; the host's load moves these figures)`);
  await writeFile(join(dir, 'last-run.txt'), `${new Date().toISOString()} scan ${scanSeconds} estimate ${estimateSeconds} first-step ${firstStep}\n`);
} finally {
  if (!values.dir) await rm(dir, { recursive: true, force: true });
}
