// Passkey retrieval (src/train/passkey.ts): the prompt holds the needle at the depth asked and fits the length; the
// teacher-forced score through the incremental decoder equals the full forward's argmax and cross-entropy at the
// answer positions (softmax and a kernel mechanism, prefilled in blocks); lengths beyond the position table are
// reported, not run, and lengths beyond the trained context are marked; the eval command's --passkey end to end.
import { mkdtemp, rm } from 'node:fs/promises';
import { readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { formatPasskey } from '../../src/cli/eval.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import type { LanguageModel } from '../../src/model/lm.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { saveFinalModel } from '../../src/store/model-folder.ts';
import { passkeyCheckpoint, passkeyEval, passkeyPrompt, scorePasskey } from '../../src/train/passkey.ts';
import { perturbParameters } from '../helpers/perturb.ts';

let dir: string;
let tokenizer: TextTokenizer;
const encode = (texts: string[]) => tokenizer.encodeBatch(texts);

function recipeFor(attention: string) {
  const text = `
model: { kind: gpt, dModel: 16, numLayers: 2, numHeads: 2, maxSeqLen: 640, attention: { name: ${attention} } }
data: { dataset: ${join(dir, 'data')}, tokenizer: ${join(dir, 'tokenizer.json')}, seqLen: 256 }
train: { batchSize: 4, runDir: ${join(dir, 'runs')}, seed: 3 }
`;
  return parseRecipe(text, join(dir, `${attention}.yaml`));
}

const modelOf = (attention: string): LanguageModel =>
  perturbParameters(createLanguageModel(modelConfigFromRecipe(recipeFor(attention), tokenizer.vocabSize)), 5);

beforeAll(async () => {
  await initBackend('cpu', { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'passkey-'));
  const texts = Array.from(
    { length: 40 },
    (_, i) => `The grass is green. The sky is blue. The pass key is ${10000 + 137 * i}. What is the pass key? There and back again.`,
  );
  await trainByteLevelBpeFromTexts(texts, 300, join(dir, 'tokenizer.json'));
  tokenizer = await TextTokenizer.load(join(dir, 'tokenizer.json'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe('passkey prompt', () => {
  it('fits the length, holds the needle at the depth asked and asks for the key; the answer is the key', async () => {
    for (const depth of [0, 0.5, 1]) {
      const p = await passkeyPrompt(encode, 400, depth, '48213');
      expect(p.prompt.length + p.answer.length).toBeLessThanOrEqual(400);
      const [filler] = await encode([' The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.']);
      expect(p.prompt.length + p.answer.length).toBeGreaterThan(400 - filler.length);
      const text = await tokenizer.decode(p.prompt);
      expect(text.startsWith('There is an important info hidden')).toBe(true);
      expect(text.endsWith(' What is the pass key? The pass key is')).toBe(true);
      const needle = ' The pass key is 48213. Remember it. 48213 is the pass key.';
      expect(text).toContain(needle);
      expect(await tokenizer.decode(p.prompt.slice(p.needleAt))).toMatch(/^ The pass key is 48213\./);
      // Whole fillers before the needle: round(depth × fillers), the pieces counted in tokens.
      const [intro, needleIds, question] = await encode([
        'There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. I will quiz you about the important information there.',
        needle,
        ' What is the pass key? The pass key is',
      ]);
      const fillers = (p.prompt.length - intro.length - needleIds.length - question.length) / filler.length;
      expect(Number.isInteger(fillers) && fillers > 1).toBe(true);
      expect((p.needleAt - intro.length) / filler.length).toBe(Math.round(depth * fillers));
      expect(await tokenizer.decode(p.answer)).toBe(' 48213');
    }
    await expect(passkeyPrompt(encode, 40, 0.5, '48213')).rejects.toThrow(/a prompt of 40 tokens cannot hold the passkey task \(it needs at least \d+/);
  });
});

describe('passkey score', () => {
  it('equals the full forward’s top-1 and cross-entropy at the answer positions, prefilled in blocks', async () => {
    for (const attention of ['softmax', 'linear-elu']) {
      const model = modelOf(attention);
      try {
        const p = await passkeyPrompt(encode, 300, 0.5, '73105');
        const scored = scorePasskey(model, p, 97);
        const ids = [...p.prompt, ...p.answer.slice(0, -1)];
        const { correct, lossSum } = tf.tidy(() => {
          const logits = model.logits(tf.tensor2d(ids, [1, ids.length], 'int32')).squeeze([0]) as tf.Tensor2D;
          const rows = tf.slice(logits, [p.prompt.length - 1, 0], [p.answer.length, -1]);
          const argmax = rows.argMax(1).arraySync() as number[];
          const logp = tf.logSoftmax(rows).arraySync() as number[][];
          return { correct: argmax.filter((a, i) => a === p.answer[i]).length, lossSum: -p.answer.reduce((s, a, i) => s + logp[i][a], 0) };
        });
        expect(scored.correctTokens, attention).toBe(correct);
        expect(scored.lossSum, attention).toBeCloseTo(lossSum, 3);
        expect(scored.retrieved).toBe(correct === p.answer.length);
        expect(scored.tokens).toBe(p.prompt.length + p.answer.length);
      } finally {
        model.dispose();
      }
    }
  });

  it('runs every length within the position table, marks those beyond the trained context, and reports the rest as not run', async () => {
    const model = modelOf('linear-elu');
    try {
      const before = tf.memory().numTensors;
      const rows = await passkeyEval(model, encode, { lengths: [250, 600, 1024], depths: [0, 1], trialsPerDepth: 2, seed: 1, trainedLength: 256 });
      expect(tf.memory().numTensors).toBe(before);
      expect(rows.map((r) => [r.length, r.status, r.beyondTrainedContext, r.trials])).toEqual([
        [250, 'run', false, 4],
        [600, 'run', true, 4],
        [1024, 'beyond the position table', true, 0],
      ]);
      for (const row of rows.slice(0, 2)) {
        expect(row.retrieval).toBeGreaterThanOrEqual(0);
        expect(row.retrieval).toBeLessThanOrEqual(1);
        expect(row.loss).toBeGreaterThan(0);
        expect(row.byDepth.map((d) => d.depth)).toEqual([0, 1]);
      }
      expect(rows[2]).toMatchObject({ retrieval: null, loss: null, byDepth: [] });
    } finally {
      model.dispose();
    }
  });
});

describe('eval --passkey', () => {
  it('evaluates a saved GPT, prints the table and says which lengths it could not run', async () => {
    const recipe = recipeFor('softmax');
    const model = modelOf('softmax');
    const final = await saveFinalModel(join(dir, 'runs', 'gpt'), model, recipe, { tokenizer_sha256: tokenizer.sha256, step: '7' });
    model.dispose();
    const result = await passkeyCheckpoint({ checkpoint: final, lengths: [300, 2048], trialsPerDepth: 1 });
    expect(result.rows.map((r) => r.status)).toEqual(['run', 'beyond the position table']);
    const text = formatPasskey(result);
    expect(text).toMatch(/trained on sequences of 256 tokens; position table 640/);
    expect(text).toMatch(/\n\s*300\s+\d\.\d{2}\s+\d\.\d{3}\s+\d+\.\d{3}\s+[\d./]+\s+beyond the trained context/);
    expect(text).toMatch(/\n\s*2048\s+—.*beyond the position table \(640\): not run/);
    expect(readFileSync(join(final, 'model.safetensors')).length).toBeGreaterThan(0);
  });
});
