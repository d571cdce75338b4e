// The eval and generate commands on a tiny checkpoint written by saveFinalModel: eval's numbers are
// evaluate() on the same validation batches, generate at temperature 0 is deterministic and equals
// greedy decoding by full forward, and bad checkpoints fail with errors naming the folder.
import { spawnSync } from 'node:child_process';
import { copyFile, mkdir, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evalCheckpoint, formatEval } from '../../src/cli/eval.ts';
import { generateFromCheckpoint } from '../../src/cli/generate.ts';
import { initBackend } from '../../src/backend.ts';
import { testBackend } from '../helpers/backend.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { createLanguageModel, type LanguageModel } from '../../src/model/lm.ts';
import { Rng } from '../../src/model/rng.ts';
import { collectEvalBatches, evaluate } from '../../src/train/evaluate.ts';
import { loadModel } from '../../src/train/load-checkpoint.ts';
import { parseRecipe, type Recipe } from '../../src/train/recipe.ts';
import { modelConfigFromRecipe, saveFinalModel, streamOptions } from '../../src/train/trainer.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';

let dir: string;
let tokenizer: TextTokenizer;
let gptRecipe: Recipe;
let gptFinal: string;
let bertFinal: string;

function recipeFor(kind: 'gpt' | 'bert', attention: string): Recipe {
  const text = `
model: { kind: ${kind}, dModel: 16, numLayers: 2, numHeads: 2, maxSeqLen: 32, attention: { name: ${attention} } }
data: { dataset: ${join(dir, 'data')}, tokenizer: ${join(dir, 'tokenizer.json')}, seqLen: 16, shuffleBuffer: 8 }
train: { batchSize: 4, evalTokens: 128, runDir: ${join(dir, 'runs')}, seed: 3 }
`;
  return parseRecipe(text, join(dir, `${kind}.yaml`));
}

/** A model of the recipe with weights moved off the init (so its predictions depend on the input). */
function perturbedModel(recipe: Recipe): LanguageModel {
  const model = createLanguageModel(modelConfigFromRecipe(recipe, tokenizer.vocabSize));
  const rng = new Rng(8);
  for (const v of model.parameters().values()) {
    tf.tidy(() => v.assign(tf.add(v, tf.tensor(Array.from(rng.normalArray(v.size), (x) => 0.2 * x), v.shape))));
  }
  return model;
}

async function save(recipe: Recipe, name: string): Promise<string> {
  const model = perturbedModel(recipe);
  const finalDir = await saveFinalModel(join(dir, 'runs', name), model, recipe, { tokenizer_sha256: tokenizer.sha256, step: '7' });
  model.dispose();
  return finalDir;
}

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-eval-generate-'));
  const docs = syntheticDocuments(120, 9);
  await writeDataset(join(dir, 'data'), { train: [docs.slice(0, 100)], validation: [docs.slice(100)] }, 20);
  await trainByteLevelBpeFromTexts(docs.slice(0, 100), 300, join(dir, 'tokenizer.json'));
  tokenizer = await TextTokenizer.load(join(dir, 'tokenizer.json'));
  gptRecipe = recipeFor('gpt', 'performer');
  gptFinal = await save(gptRecipe, 'gpt');
  bertFinal = await save(recipeFor('bert', 'softmax'), 'bert');
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const cli = (script: string, ...args: string[]) =>
  spawnSync(process.execPath, ['--import', 'tsx', `src/cli/${script}.ts`, ...args, '--backend', 'cpu'], { encoding: 'utf8', timeout: 60_000 });

describe('eval', () => {
  it('prints evaluate() of the loaded model on the recipe’s validation batches', async () => {
    const result = await evalCheckpoint({ checkpoint: gptFinal });
    const { model } = await loadModel(gptFinal);
    const batches = await collectEvalBatches(streamOptions(gptRecipe, tokenizer), gptRecipe.train.evalTokens);
    const expected = await evaluate(model, batches);
    model.dispose();
    expect(result).toMatchObject(expected);
    expect(result.tokens).toBeGreaterThanOrEqual(128);
    expect(result.loss).toBeGreaterThan(0);
    expect(result.bpb).toBeCloseTo((result.loss * result.tokens) / (Math.LN2 * result.bytes), 6);

    const all = await evalCheckpoint({ checkpoint: join(dir, 'runs', 'gpt'), tokens: Infinity });
    expect(all.tokens).toBeGreaterThan(result.tokens);

    const run = cli('eval', gptFinal);
    expect(run.stderr).toBe('');
    expect(run.status).toBe(0);
    expect(run.stdout.trim()).toBe(formatEval(result));
    expect(run.stdout).toMatch(/loss \d+\.\d{4} {2}ppl \d+\.\d{2} {2}bpb \d+\.\d{4} {2}tokens \d+/);
  }, 60_000);

  it('names a missing or incomplete checkpoint folder', async () => {
    await expect(evalCheckpoint({ checkpoint: join(dir, 'nowhere') })).rejects.toThrow(/checkpoint folder .*nowhere does not exist/);
    const partial = join(dir, 'partial');
    await mkdir(partial);
    await copyFile(join(gptFinal, 'model.safetensors'), join(partial, 'model.safetensors'));
    await expect(evalCheckpoint({ checkpoint: partial })).rejects.toThrow(/checkpoint folder .*partial is incomplete: .*recipe\.json does not exist/);
    const run = cli('eval', partial);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^eval: checkpoint folder .*partial is incomplete/);
  }, 30_000);
});

describe('generate', () => {
  /** Greedy continuation recomputing the full forward for each token (stops after end-of-text). */
  async function greedyByFullForward(prompt: string, count: number): Promise<number[]> {
    const { model } = await loadModel(gptFinal);
    const ids = Array.from((await tokenizer.encodeBatch([prompt]))[0]);
    const start = ids.length;
    for (let i = 0; i < count; i++) {
      const next = tf.tidy(() => {
        const logits = model.logits(tf.tensor2d([ids], [1, ids.length], 'int32'));
        return tf.argMax(tf.reshape(tf.slice(logits, [0, ids.length - 1, 0], [1, 1, -1]), [-1])).dataSync()[0];
      });
      ids.push(next);
      if (next === tokenizer.specialIds.eos) break;
    }
    model.dispose();
    return ids.slice(start);
  }

  it('at temperature 0 is deterministic and equals greedy decoding by full forward; the CLI prints the text', async () => {
    const opts = { checkpoint: gptFinal, prompt: 'the quick brown', maxTokens: 8, temperature: 0, topK: 50, seed: 1 };
    const first = await generateFromCheckpoint(opts);
    const second = await generateFromCheckpoint({ ...opts, seed: 2 });
    expect(second.newTokens).toEqual(first.newTokens);
    expect(first.newTokens).toEqual(await greedyByFullForward(opts.prompt, 8));
    expect(first.text).toBe(await tokenizer.decode([...first.promptTokens, ...first.newTokens], true));

    const run = cli('generate', gptFinal, '--prompt', opts.prompt, '--max-tokens', '8', '--temperature', '0');
    expect(run.status).toBe(0);
    expect(run.stdout).toBe(`${first.text}\n`);
    expect(run.stderr).toMatch(/\[generate\] \d+ prompt \+ \d+ new tokens in/);
  }, 60_000);

  it('sampling is reproducible from the seed and stops at the model’s maxSeqLen', async () => {
    const opts = { checkpoint: gptFinal, prompt: 'a', maxTokens: 100, temperature: 1, topK: 20, seed: 5 };
    const a = await generateFromCheckpoint(opts);
    const b = await generateFromCheckpoint(opts);
    expect(b.newTokens).toEqual(a.newTokens);
    // maxSeqLen 32: after the last position, one more token is predicted; unless end-of-text came first.
    if (!a.newTokens.includes(tokenizer.specialIds.eos!)) {
      expect(a.truncated).toBe(true);
      expect(a.promptTokens.length + a.newTokens.length).toBe(33);
    }
  });

  it('refuses a BERT checkpoint and bad sampling options', async () => {
    const base = { prompt: 'x', maxTokens: 3, temperature: 1, topK: 5, seed: 0 };
    await expect(generateFromCheckpoint({ ...base, checkpoint: bertFinal })).rejects.toThrow(/holds a 'bert' model; generation needs a GPT/);
    await expect(generateFromCheckpoint({ ...base, checkpoint: gptFinal, temperature: -1 })).rejects.toThrow(/temperature must be a number ≥ 0/);
    await expect(generateFromCheckpoint({ ...base, checkpoint: gptFinal, topK: 1.5 })).rejects.toThrow(/top-k must be an integer ≥ 0/);
  });
});
