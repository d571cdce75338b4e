import { spawnSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { currentDevice } from '../../src/backend/current.ts';
import { testBackend } from '../helpers/backend.ts';
import type { Batch } from '../../src/data/batch.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { evaluate } from '../../src/train/evaluate.ts';
import type { MetricRecord, TrainingSummary } from '../../src/store/run-record.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { readSafetensors } from '../../src/hf/safetensors.ts';
import { trainStep } from '../../src/train/step.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { modelFlops } from '../../src/model/flops.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';

let dir: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-trainer-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function randomBatch(rng: Rng, kind: 'gpt' | 'bert', b: number, l: number, vocab: number): Batch {
  const inputIds = Int32Array.from({ length: b * l }, () => rng.int(vocab));
  // BERT: a different number of labelled positions in every batch (the head runs on those rows only).
  const labels = Int32Array.from({ length: b * l }, (_, i) => (kind === 'bert' && i > 0 && rng.uniform() < 0.6 ? -100 : rng.int(vocab)));
  const tokens = labels.filter((x) => x !== -100).length;
  return {
    kind,
    batchSize: b,
    seqLen: l,
    inputIds,
    labels,
    tokens,
    bytes: 3 * tokens,
    attentionMask: kind === 'bert' ? new Float32Array(b * l).fill(1) : undefined,
  };
}

describe('no tensor leaks', () => {
  for (const [kind, attention, options] of [
    ['gpt', 'performer', { redrawInterval: 5, features: 8 }],
    ['bert', 'softmax', {}],
  ] as const) {
    it(`${kind}/${attention}: numTensors stays flat over 22 train steps (dropout, accumulation, redraws) and evaluations`, async () => {
      const model = createLanguageModel({
        kind,
        vocabSize: 17,
        maxSeqLen: 6,
        dModel: 8,
        numLayers: 2,
        numHeads: 2,
        mlpRatio: 2,
        dropout: 0.1,
        bias: true,
        attention: { name: attention, options },
        seed: 1,
      });
      const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
      const rng = new Rng(2);
      const evalBatches = [randomBatch(rng, kind, 2, 6, 17), randomBatch(rng, kind, 1, 6, 17)];
      const counts: number[] = [];
      for (let step = 0; step < 22; step++) {
        model.onTrainStep(step);
        const micro = [randomBatch(rng, kind, 2, 6, 17), randomBatch(rng, kind, 2, 6, 17)];
        await trainStep(model, optimizer, micro, { lr: 1e-3, clip: 1, dropoutSeed: 100 + step });
        if (step % 5 === 4) await evaluate(model, evalBatches);
        counts.push(tf.memory().numTensors);
      }
      // Constant caches (masks, ones rows) fill during the first steps; after that nothing may grow.
      expect(new Set(counts.slice(5)).size).toBe(1);
      optimizer.dispose();
      model.dispose();
    });
  }
});

describe('runTraining', () => {
  it('trains one epoch of a small dataset: logs, validates on fixed tokens, lowers the loss, saves the final model', async () => {
    const docs = syntheticDocuments(400, 5);
    const data = join(dir, 'data');
    await writeDataset(data, { train: [docs.slice(0, 360)], validation: [docs.slice(360)] }, 50);
    const tokenizer = join(dir, 'tokenizer.json');
    await trainByteLevelBpeFromTexts(docs.slice(0, 360), 300, tokenizer);
    const recipeText = `
model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2, attention: { name: linear-elu } }
data: { dataset: ${data}, tokenizer: ${tokenizer}, seqLen: 16, shuffleBuffer: 8 }
train: { batchSize: 4, gradAccum: 2, lr: 1e-2, warmupSteps: 2, evalInterval: 10, evalTokens: 256, logInterval: 5, runDir: ${join(dir, 'runs')}, seed: 3 }
`;
    const recipe = parseRecipe(recipeText, join(dir, 'tiny.yaml'), ['--train.maxTokens=2560']);
    const records: MetricRecord[] = [];
    const lines: string[] = [];
    let summary: TrainingSummary | null = null;
    const runDir = join(dir, 'runs', 'tiny');
    const result = await runTraining(recipe, {
      logger: { dir: runDir, log: (r) => records.push(r), line: (t) => lines.push(t), finish: async (s) => void (summary = s) },
    });
    // 2560 tokens / (4·2·16 tokens per step) = 20 steps.
    expect(result.steps).toBe(20);
    expect(result.tokens).toBe(2560);
    const train = records.filter((r) => r.split === 'train');
    const val = records.filter((r) => r.split === 'val');
    expect(train.map((r) => r.step)).toEqual([5, 10, 15, 20]);
    // Step 0 is the model before training: curves start there.
    expect(val.map((r) => r.step)).toEqual([0, 10, 20]);
    expect(val[0]).toMatchObject({ tokens: 0 });
    expect(val[0].loss).toBeGreaterThan(val[2].loss);
    for (const r of train) {
      expect(r.grad_norm).toBeGreaterThan(0);
      expect(r.ppl).toBeCloseTo(Math.exp(r.loss), 6);
      expect(r.tokens_per_s).toBeGreaterThan(0);
    }
    // MFU: the model FLOPs per token (src/model/flops.ts) times the window's tokens/s, over the peak the log names.
    const flopsPerToken = modelFlops(modelConfigFromRecipe(recipe, 300), 16).perToken;
    expect(summary).toMatchObject({ model_flops_per_token: flopsPerToken });
    const peak = (summary as TrainingSummary | null)!.peak_flops_per_s!;
    expect(peak).toBeGreaterThan(0);
    for (const r of train) {
      expect(r.model_flops_per_s! / (flopsPerToken * r.tokens_per_s)).toBeCloseTo(1, 12);
      expect(r.mfu! / (r.model_flops_per_s! / peak)).toBeCloseTo(1, 12);
    }
    expect(lines).toContainEqual(expect.stringMatching(/^model FLOPs [\d.]+ M per trained token .*; MFU against [\d.]+ [GT]FLOP\/s: /));
    expect(lines.some((l) => /^step 5\/20 \| .* \| MFU [\d.]+%$/.test(l))).toBe(true);
    expect(val[2].loss).toBeLessThan(Math.log(300) - 0.5); // learned something beyond uniform
    expect(val[2].bpb).toBeGreaterThan(0);
    // Top-1 accuracy in every validation record and the summary, from the same evaluation as the loss.
    for (const r of val) expect(r.acc).toBeGreaterThan(0);
    expect(val[2].acc).toBeLessThan(1);
    expect(val[2].acc).toBe(result.finalVal.accuracy);
    expect(summary).toMatchObject({ val_acc: result.finalVal.accuracy, val_loss: result.finalVal.loss });
    expect(result.finalVal.bpb).toBeCloseTo((result.finalVal.loss * result.finalVal.tokens) / (Math.LN2 * result.finalVal.bytes), 6);
    expect(result.finalVal.tokens).toBeGreaterThanOrEqual(256);
    // The log says what the evaluation reads: its labelled tokens, drawn across the split, and how many documents.
    expect(lines).toContainEqual(
      expect.stringMatching(/^validation: [\d,]+ labelled tokens drawn across the validation split \(train\.evalSample: spread\), from \d+ documents$/),
    );
    expect(lines).toContainEqual(expect.stringMatching(/^val {3}step 20: .* \(\d+ tokens of \d+ documents\)$/));
    expect(
      lines.some((l) =>
        /^step 5\/20 \| epoch [\d.]+% \| loss [\d.]+ \| ppl [\d.]+ \| lr [\d.e+-]+ \| grad [\d.]+ \| [\d,]+ tok\/s( \| host reads \d+ values\/step)? \| ETA /.test(
          l,
        ),
      ),
    ).toBe(true);
    expect(lines.some((l) => /^step 5\/20 \| epoch [\d.]+% \| loss [\d.]+ \| ppl [\d.]+ \| lr [\d.e+-]+ \| grad [\d.]+ \| [\d,]+ tok\/s \| ETA /.test(l))).toBe(
      true,
    );
    // The sizes of a step are labelled; a constant (the host's reads per step, on the native backend) is said once.
    expect(lines.find((l) => l.startsWith('model '))).toMatch(/; 20 steps of 128 tokens \(batchSize 4 × gradAccum 2 × seqLen 16; epoch /);
    expect(lines.filter((l) => l.includes('host reads')).length).toBe(currentDevice().native ? 1 : 0);
    expect(lines.at(-1)).toMatch(/^done: 20 steps, 2,560 tokens .* final val loss [\d.]+ \| ppl/);
    // 2 warm-up steps of 20: no warning. Shortened to 2 steps, the same warm-up is the whole run: warned, with its cause.
    expect(lines.some((l) => l.startsWith('warning: warm-up'))).toBe(false);
    const short = parseRecipe(recipeText, join(dir, 'tiny.yaml'), ['--train.maxTokens=256']);
    const shortLines: string[] = [];
    await runTraining(short, { logger: { dir: join(dir, 'runs', 'short'), log: () => {}, line: (t) => shortLines.push(t), finish: async () => {} } });
    expect(shortLines).toContain(
      "warning: warm-up of 2 steps (train.warmupSteps 2) is 100% of the run's 2 steps: the run ends before the learning rate reaches train.lr (its last step uses 100% of it); set train.warmupFraction (e.g. 0.05) or lower train.warmupSteps",
    );
    expect(summary).toMatchObject({ steps: 20, val_loss: result.finalVal.loss });
    // The final folder: safetensors with the stable names, and the resolved recipe.
    expect(result.finalDir).toBe(join(runDir, 'final'));
    const { tensors, metadata } = await readSafetensors(join(result.finalDir, 'model.safetensors'));
    expect(metadata.format).toBe('slayformer');
    expect(tensors.get('blocks.0.attn.q.weight')!.shape).toEqual([16, 16]);
    expect(tensors.get('embed.tokens.weight')!.shape).toEqual([300, 16]);
    const saved = JSON.parse(readFileSync(join(result.finalDir, 'recipe.json'), 'utf8'));
    expect(saved.model.attention.name).toBe('linear-elu');
    expect(JSON.parse(metadata.config).vocabSize).toBe(300);
    expect(metadata.tokenizer_sha256).toMatch(/^[0-9a-f]{64}$/);
    expect(metadata.step).toBe('20');
    expect(existsSync(join(runDir, `.final.tmp-${process.pid}`))).toBe(false);
  });
});

describe('a dataset without a validation split', () => {
  // Genuine Dataset.from_dict(...).save_to_disk() output (test/fixtures/hf-datasets-5.0.1/make.py): state.json "_split": null.
  const single = join(import.meta.dirname, '..', 'fixtures', 'hf-datasets-5.0.1', 'large_string');

  it('is refused before the first step, naming the folder and the fix, instead of validating on training documents', async () => {
    const tokenizer = join(dir, 'single-split-tokenizer.json');
    await trainByteLevelBpeFromTexts(
      Array.from({ length: 200 }, (_, i) => `large ${i}`),
      300,
      tokenizer,
    );
    const recipe = parseRecipe(
      `
model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2, attention: { name: softmax } }
data: { dataset: ${single}, tokenizer: ${tokenizer}, seqLen: 16 }
train: { batchSize: 4, evalTokens: 64, runDir: ${join(dir, 'runs')} }
`,
      join(dir, 'single.yaml'),
    );
    const records: MetricRecord[] = [];
    const lines: string[] = [];
    const run = runTraining(recipe, {
      logger: { dir: join(dir, 'runs', 'single'), log: (r) => records.push(r), line: (t) => lines.push(t), finish: async () => {} },
    });
    await expect(run).rejects.toThrow(`${single}: is one dataset without splits (state.json "_split": null`);
    await expect(run).rejects.toThrow('train_test_split(test_size=0.05, seed=0)');
    expect(records).toEqual([]);
    expect(lines.filter((l) => l.startsWith('validation:'))).toEqual([]);
  });
});

describe('runTraining with train.dataParallel', () => {
  it('2 replicas log the same losses as 1 (no dropout: equal up to float summation order)', async () => {
    const docs = syntheticDocuments(200, 7);
    const data = join(dir, 'data-dp');
    await writeDataset(data, { train: [docs.slice(0, 180)], validation: [docs.slice(180)] }, 50);
    const tokenizer = join(dir, 'tokenizer-dp.json');
    await trainByteLevelBpeFromTexts(docs.slice(0, 180), 300, tokenizer);
    const recipeText = `
model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2, attention: { name: slay, options: { prfFeatures: 4, anchors: 4 } } }
data: { dataset: ${data}, tokenizer: ${tokenizer}, seqLen: 16, shuffleBuffer: 8 }
train: { batchSize: 4, lr: 1e-2, warmupSteps: 2, evalInterval: 5, evalTokens: 128, logInterval: 5, runDir: ${join(dir, 'runs-dp')}, seed: 3, maxTokens: 640 }
`;
    const run = async (replicas: number, executor = 'auto') => {
      const records: MetricRecord[] = [];
      const lines: string[] = [];
      const recipe = parseRecipe(recipeText, join(dir, 'dp.yaml'), [`--train.dataParallel=${replicas}`, `--train.executor=${executor}`]);
      await runTraining(recipe, {
        logger: { dir: join(dir, 'runs-dp', `r${replicas}-${executor}`), log: (r) => records.push(r), line: (t) => lines.push(t), finish: async () => {} },
      });
      return { records, lines };
    };
    const single = await run(1);
    const parallel = await run(2);
    expect(parallel.lines[0]).toMatch(/2 data-parallel replicas/);
    expect(single.lines[0]).not.toMatch(/data-parallel/);
    // Replicas are the 'replicas' executor's: a run whose steps another executor takes does not claim them.
    const others = await run(2, 'op-by-op');
    expect(others.lines[0]).not.toMatch(/data-parallel/);
    expect(parallel.records.map((r) => [r.step, r.split])).toEqual(single.records.map((r) => [r.step, r.split]));
    expect(single.records.length).toBeGreaterThanOrEqual(4);
    parallel.records.forEach((r, i) => expect(r.loss).toBeCloseTo(single.records[i].loss, 4));
    expect(() => parseRecipe(recipeText, join(dir, 'dp.yaml'), ['--train.dataParallel=0'])).toThrow(/train\.dataParallel/);
  });
});

describe('train CLI', () => {
  const cli = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/train.ts', ...args], { encoding: 'utf8', timeout: 120_000 });

  it('--dry-run of a GPU recipe works without its dataset and tokenizer', () => {
    const r = cli('recipes/gpu/gpt2-small-slay.yaml', '--dry-run', '--data.dataset=/nonexistent/c4', '--data.tokenizer=/nonexistent/tokenizer.json');
    expect(r.status, r.stderr).toBe(0);
    expect(r.stdout).toMatch(/parameters {2}124,439,808 /); // GPT-2 small with its 50,257-token vocabulary
    expect(r.stdout).toMatch(/dataset not found: tokens per epoch unknown/);
    expect(r.stdout).toMatch(/attention slay \{.*"quadratureNodes":2,"prfFeatures":16,"anchors":8/);
    expect(r.stdout).toMatch(/memory {6}≈ [\d,]+ MiB/);
    // 6 × 123,532,032 matrix weights + 3 × 12 layers × 12 heads × (2 × 5,608 for φ(q), φ(k) + 4 × 256 features × 65):
    // SLAY's φ at d_h 64, R 2, M 16, P 8 is 3·64 + 2·64·8 + 8 + 2·(2·64·16 + 16) + 256 = 5,608 FLOPs.
    expect(r.stdout).toMatch(/flops {7}774\.8 M per trained token/);
    expect(r.stdout).not.toMatch(/warning/);
    // Shortened to 100 optimizer steps, its 2,000 warm-up steps are warned about.
    const short = cli(
      'recipes/gpu/gpt2-small-slay.yaml',
      '--dry-run',
      '--data.dataset=/nonexistent/c4',
      '--data.tokenizer=/nonexistent/tokenizer.json',
      '--train.maxTokens=6553600',
    );
    expect(short.stdout).toMatch(/steps {7}100 optimizer steps of 65,536 tokens \(batchSize \d+ × gradAccum \d+ × seqLen 1024; train\.maxTokens 6,553,600\)/);
    expect(short.stdout).toMatch(
      /warning {5}warm-up of 2000 steps \(train\.warmupSteps 2000\) is 2000% of the run's 100 steps: the run ends before the learning rate reaches train\.lr/,
    );
  });

  it('--dry-run checks that the run will find both splits: a dataset without a validation split is reported, with the fix, and exits 1', () => {
    const fixtures = join(import.meta.dirname, '..', 'fixtures', 'hf-datasets-5.0.1');
    const single = join(fixtures, 'large_string');
    const refused = cli('recipes/demo/gpt-softmax.yaml', '--dry-run', `--data.dataset=${single}`);
    expect(refused.status, refused.stderr).toBe(1);
    expect(refused.stdout).toMatch(/data {8}the run will refuse this dataset \(the error below\): tokens per epoch unknown/);
    expect(refused.stderr).toContain(`train: ${single}: is one dataset without splits (state.json "_split": null`);
    expect(refused.stderr).toContain('train_test_split(test_size=0.05, seed=0)');
    expect(refused.stderr).toContain('npm run prepare -- <files> --out <new folder>');
    // A DatasetDict with both splits passes the check (the tokenizer is absent here: tokens unknown, no refusal).
    const dict = cli('recipes/demo/gpt-softmax.yaml', '--dry-run', `--data.dataset=${join(fixtures, 'dict')}`, '--data.tokenizer=/nonexistent/tokenizer.json');
    expect(dict.status, dict.stderr).toBe(0);
    expect(dict.stdout).toMatch(/data {8}tokenizer not found: tokens per epoch unknown/);
  });

  it('a bad recipe value prints the message naming the key and exits 2 without a stack trace', () => {
    const r = cli('recipes/demo/gpt-softmax.yaml', '--train.lr=fast');
    expect(r.status).toBe(2);
    expect(r.stderr).toMatch(/train\.lr must be a number \(got "fast"\)/);
    expect(r.stderr).not.toMatch(/\n\s+at /);
  });
});
