// An imported model trains and finetunes like a native one: the shipped fixture recipe (GPT-2 →
// DARKFormer, whitening init, train.freeze all-but-qkv) runs end to end with every frozen tensor
// bit-identical to transformers' file; an imported BERT learns with no tensor leak; eval and generate
// take the Hugging Face folder; the shipped GPT-2 recipes are valid.
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { evalCheckpoint } from '../../src/cli/eval.ts';
import { generateFromCheckpoint } from '../../src/cli/generate.ts';
import { readHfFolder } from '../../src/hf/folder.ts';
import type { ModelBatch } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { collectEvalBatches, evaluate } from '../../src/train/evaluate.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { loadRecipe } from '../../src/store/recipes.ts';
import { readSafetensors } from '../../src/hf/safetensors.ts';
import { streamOptions } from '../../src/train/plan.ts';
import { trainStep } from '../../src/train/step.ts';
import { runTraining } from '../../src/train/trainer.ts';
import type { MetricRecord } from '../../src/store/run-record.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';
import { BERT_DIR, GPT2_DIR, sameBytes } from './fixtures.ts';

let dir: string;
let data: string;
beforeAll(async () => {
  // wasm: these are training runs, not numerical comparisons (the fixtures' logits are checked on cpu and wasm in import.test.ts).
  await initBackend(testBackend('wasm'), { quiet: true });
  dir = mkdtempSync(path.join(tmpdir(), 'slay-hf-finetune-'));
  data = path.join(dir, 'data');
  const docs = syntheticDocuments(400, 11);
  await writeDataset(data, { train: [docs.slice(0, 340)], validation: [docs.slice(340)] }, 50);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('recipes/hf/tiny-gpt2-darkformer.yaml', () => {
  it('finetunes the transformers GPT-2 into DARKFormer: only q, k, v and M move, every other tensor keeps the bytes transformers wrote', async () => {
    const runDir = path.join(dir, 'runs');
    const recipe = loadRecipe('recipes/hf/tiny-gpt2-darkformer.yaml', [`--data.dataset=${data}`, `--train.runDir=${runDir}`]);
    const lines: string[] = [];
    const records: MetricRecord[] = [];
    const logDir = path.join(runDir, 'tiny');
    mkdirSync(logDir, { recursive: true });
    const result = await runTraining(recipe, { logger: { dir: logDir, log: (r) => records.push(r), line: (t) => lines.push(t), finish: async () => {} } });
    expect(result.steps).toBe(8);
    const log = lines.join('\n');
    expect(log).toContain(`initFrom Hugging Face GPT2LMHeadModel from ${GPT2_DIR}`);
    expect(log).toMatch(/attention softmax → darkformer: loaded 36 tensors; new mechanism parameters blocks\.\*\.attn\.covarianceFactor ×2/);
    expect(log).toContain("darkformer init 'whitening': M of 2 layers");
    expect(log).toMatch(/train\.freeze all-but-qkv: training 27,008 parameters in 14 tensors/); // 2 × (3 × (64·64 + 64) + M 4·16·16)
    expect(records.filter((r) => r.split === 'val').map((r) => r.step)).toEqual([0, 4, 8]);

    const original = (await readHfFolder(GPT2_DIR)).tensors;
    const final = (await readSafetensors(path.join(result.finalDir, 'model.safetensors'))).tensors;
    for (const [name, values] of original) {
      const trained = /\.attn\.[qkv]\./.test(name);
      expect(sameBytes(final.get(name)!.data, values.data), name).toBe(!trained);
    }
    expect(final.get('blocks.0.attn.covarianceFactor')!.shape).toEqual([4, 16, 16]);

    // eval and generate take the finetuned run like any other.
    const evaluated = await evalCheckpoint({ checkpoint: result.finalDir, tokens: recipe.train.evalTokens });
    expect(evaluated.loss).toBeCloseTo(result.finalVal.loss, 5);
    const generated = await generateFromCheckpoint({ checkpoint: result.finalDir, prompt: 'The state of', maxTokens: 5, temperature: 0, topK: 0, seed: 0 });
    expect(generated.newTokens.length).toBeGreaterThan(0);
  });

  it('the shipped GPT-2 recipes are valid (checked on the fixture: their model keys all come from config.json)', () => {
    for (const name of ['darkformer', 'performer', 'slay']) {
      const r = loadRecipe(`recipes/hf/gpt2-${name}.yaml`, [`--initFrom=hf:${GPT2_DIR}`, '--data.seqLen=32']);
      expect(r.model).toMatchObject({ kind: 'gpt', dModel: 64, maxSeqLen: 32, attention: { name } });
      expect(r.train.freeze).toBe('all-but-qkv');
      expect(r.data.tokenizer).toBe(path.join(GPT2_DIR, 'tokenizer.json'));
    }
  });
});

describe('an imported BERT', () => {
  it('learns a fixed masked batch with all parameters trained, and no tensor leaks', async () => {
    const { model } = await loadModel(`hf:${BERT_DIR}`);
    const rng = new Rng(5);
    const b = 4;
    const l = 16;
    const inputIds = Int32Array.from({ length: b * l }, (_, i) => (i % l === 0 ? 3 : i % l === l - 1 ? 4 : 5 + rng.int(315)));
    const labels = new Int32Array(b * l).fill(-100);
    for (let i = 0; i < b * l; i += 5) if (i % l !== 0 && i % l !== l - 1) [labels[i], inputIds[i]] = [inputIds[i], 2]; // [MASK] = 2
    const batch: ModelBatch = { batchSize: b, seqLen: l, inputIds, labels, attentionMask: new Float32Array(b * l).fill(1) };
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0 });
    const losses: number[] = [];
    let tensors = 0;
    for (let step = 0; step < 12; step++) {
      losses.push((await trainStep(model, optimizer, [batch], { lr: 3e-3, clip: 1, dropoutSeed: null })).loss);
      if (step === 1) tensors = tf.memory().numTensors;
    }
    expect(tf.memory().numTensors).toBe(tensors);
    expect(losses[11]).toBeLessThan(0.5 * losses[0]);
    optimizer.dispose();
    model.dispose();
  });
});

describe('eval and generate on a Hugging Face folder', () => {
  it('eval needs --data, then reads validation batches at the model’s full context with the folder’s tokenizer', async () => {
    await expect(evalCheckpoint({ checkpoint: `hf:${GPT2_DIR}` })).rejects.toThrow(`${GPT2_DIR} names no dataset (a Hugging Face folder): give --data PATH`);
    const result = await evalCheckpoint({ checkpoint: `hf:${GPT2_DIR}`, data, tokens: 512 });
    const { model, recipe } = await loadModel(GPT2_DIR);
    expect(recipe.data.seqLen).toBe(32);
    const tokenizer = await TextTokenizer.load(path.join(GPT2_DIR, 'tokenizer.json'));
    const expected = await evaluate(model, (await collectEvalBatches({ ...streamOptions(recipe, tokenizer), dataset: data }, 512)).batches);
    model.dispose();
    expect(result).toMatchObject(expected);
    // Random weights over 320 tokens: close to the uniform ln 320 = 5.77, as transformers' reference loss.
    expect(Math.abs(result.loss - Math.log(320))).toBeLessThan(0.3);
  });

  it('generate continues a prompt with the folder’s tokenizer, greedy decoding equal to argmax of the full forward', async () => {
    const out = await generateFromCheckpoint({ checkpoint: `hf:${GPT2_DIR}`, prompt: 'The state of the', maxTokens: 6, temperature: 0, topK: 0, seed: 0 });
    const { model } = await loadModel(`hf:${GPT2_DIR}`);
    const ids = [...out.promptTokens];
    for (let i = 0; i < out.newTokens.length; i++) {
      const next = tf.tidy(() => {
        const logits = model.logits(tf.tensor2d([ids], undefined, 'int32'));
        return tf.argMax(logits.slice([0, ids.length - 1, 0], [1, 1, -1]).reshape([-1])).dataSync()[0];
      });
      expect(out.newTokens[i]).toBe(next);
      ids.push(next);
    }
    model.dispose();
  });
});
