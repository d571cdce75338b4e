// The eval and generate commands on a tiny checkpoint written by saveFinalModel: eval's numbers are
// evaluate() on the same validation batches, generate at temperature 0 is deterministic and equals
// greedy decoding by full forward, and bad checkpoints fail with errors naming the folder.
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { copyFile, cp, mkdir, mkdtemp, rename, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { evalCheckpoint, formatEval } from '../../src/cli/eval.ts';
import { generateFromCheckpoint } from '../../src/cli/generate.ts';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { createLanguageModel, type LanguageModel } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { collectEvalBatches, evaluate } from '../../src/train/evaluate.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { type Recipe } from '../../src/recipe/schema.ts';
import { decodeSafetensors, encodeSafetensors } from '../../src/hf/safetensors.ts';
import { saveFinalModel } from '../../src/store/model-folder.ts';
import { streamOptions } from '../../src/train/plan.ts';
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
    tf.tidy(() =>
      v.assign(
        tf.add(
          v,
          tf.tensor(
            Array.from(rng.normalArray(v.size), (x) => 0.2 * x),
            v.shape,
          ),
        ),
      ),
    );
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
  it('prints evaluate() of the loaded model on the spread sample of the recipe’s validation split', async () => {
    const result = await evalCheckpoint({ checkpoint: gptFinal, tokens: 128 });
    const { model } = await loadModel(gptFinal);
    const { batches } = await collectEvalBatches(streamOptions(gptRecipe, tokenizer), 128, 'spread');
    const expected = await evaluate(model, batches);
    model.dispose();
    expect(result).toMatchObject(expected);
    expect(result.tokens).toBeGreaterThanOrEqual(128);
    expect(result.loss).toBeGreaterThan(0);
    expect(result.bpb).toBeCloseTo((result.loss * result.tokens) / (Math.LN2 * result.bytes), 6);

    const all = await evalCheckpoint({ checkpoint: join(dir, 'runs', 'gpt'), tokens: Infinity });
    expect(all.tokens).toBeGreaterThan(result.tokens);
    expect(formatEval(all)).toContain(`${all.tokens.toLocaleString('en-US')} labelled tokens from 20 documents (the whole split)`);
    expect(formatEval(result)).toContain('(drawn across the split)');

    const run = cli('eval', gptFinal, '--tokens', '128');
    expect(run.stderr).toBe('[eval] backend cpu\n'); // one short line
    expect(run.status).toBe(0);
    expect(run.stdout.trim()).toBe(formatEval(result));
    expect(run.stdout).toMatch(/loss \d+\.\d{4} {2}ppl \d+\.\d{2} {2}bpb \d+\.\d{4} {2}acc [01]\.\d{4} {2}tokens \d+/);
    expect(result.accuracy).toBeGreaterThanOrEqual(0);
    expect(result.accuracy).toBeLessThanOrEqual(1);
  }, 60_000);

  it('--by-position prints the loss by position bucket and --json writes the result with by_position', async () => {
    const result = await evalCheckpoint({ checkpoint: gptFinal, tokens: 128, byPosition: true });
    const plain = await evalCheckpoint({ checkpoint: gptFinal, tokens: 128 });
    expect(result.loss).toBeCloseTo(plain.loss, 6);
    expect(result.byPosition!.map((r) => [r.from, r.to])).toEqual([
      [0, 1],
      [1, 2],
      [2, 4],
      [4, 8],
      [8, 16],
    ]);
    expect(result.byPosition!.reduce((n, r) => n + r.tokens, 0)).toBe(result.tokens);
    const json = join(dir, 'eval-by-position.json');
    const run = cli('eval', gptFinal, '--tokens', '128', '--by-position', '--json', json);
    expect(run.status).toBe(0);
    expect(run.stdout.trim()).toBe(formatEval(result));
    expect(run.stdout).toMatch(/loss by position in the sequence:\npositions +loss +ppl +tokens\n\[0, 1\) +\d+\.\d{4} +\d+\.\d{2} +\d+\n/);
    const written = JSON.parse(readFileSync(json, 'utf8'));
    // The command runs on cpu, this process on the backend under test: equal up to float rounding.
    expect(written.loss).toBeCloseTo(result.loss, 5);
    expect(written.by_position.map((r: { from: number; to: number; tokens: number }) => [r.from, r.to, r.tokens])).toEqual(
      result.byPosition!.map((r) => [r.from, r.to, r.tokens]),
    );
    written.by_position.forEach((r: { loss: number }, i: number) => expect(r.loss).toBeCloseTo(result.byPosition![i].loss, 5));
    expect(written.byPosition).toBeUndefined();
    const missing = cli('eval', gptFinal, '--by-position', '--json', join(dir, 'nowhere', 'eval.json'));
    expect(missing.status).not.toBe(0);
    expect(missing.stderr).toContain(`the folder ${join(dir, 'nowhere')} does not exist`);
  }, 60_000);

  it('a run folder moved together with its data still evaluates (paths recorded relative to the run too)', async () => {
    const project = join(dir, 'project');
    await mkdir(project);
    await cp(join(dir, 'data'), join(project, 'data'), { recursive: true });
    await copyFile(join(dir, 'tokenizer.json'), join(project, 'tokenizer.json'));
    const recipe = parseRecipe(
      JSON.stringify({
        ...gptRecipe,
        name: 'moved',
        data: { ...gptRecipe.data, dataset: join(project, 'data'), tokenizer: join(project, 'tokenizer.json') },
        train: { ...gptRecipe.train, runDir: join(project, 'runs') },
        wandb: { ...gptRecipe.wandb, enabled: false },
      }),
      join(dir, 'moved.yaml'),
    );
    const logger = await RunLogger.create(recipe, { echo: false });
    const model = perturbedModel(recipe);
    await saveFinalModel(logger.dir, model, recipe, { tokenizer_sha256: tokenizer.sha256 });
    model.dispose();
    const before = await evalCheckpoint({ checkpoint: logger.dir });
    await rename(project, join(dir, 'project-moved'));
    const movedRun = join(dir, 'project-moved', 'runs', basename(logger.dir));
    const after = await evalCheckpoint({ checkpoint: movedRun });
    expect(after.dataset).toBe(join(dir, 'project-moved', 'data'));
    expect(after.loss).toBe(before.loss);
  });

  it('final/ carries the tokenizer: copied alone elsewhere, without the run’s tokenizer file, it evaluates, generates and exports', async () => {
    const ownTokenizer = join(dir, 'tokenizer-to-delete.json');
    await copyFile(join(dir, 'tokenizer.json'), ownTokenizer);
    const recipe = { ...gptRecipe, data: { ...gptRecipe.data, tokenizer: ownTokenizer } };
    const model = perturbedModel(recipe);
    const finalDir = await saveFinalModel(
      join(dir, 'runs', 'standalone-run'),
      model,
      recipe,
      { tokenizer_sha256: tokenizer.sha256 },
      await TextTokenizer.load(ownTokenizer),
    );
    model.dispose();
    expect(readFileSync(join(finalDir, 'tokenizer.json'))).toEqual(readFileSync(ownTokenizer));
    expect(readFileSync(join(finalDir, 'COMPLETE'), 'utf8')).toMatch(/^[0-9a-f]{64} {2}tokenizer\.json$/m);
    const standalone = join(dir, 'elsewhere', 'my-model');
    await cp(finalDir, standalone, { recursive: true });
    await rm(ownTokenizer);
    const generated = await generateFromCheckpoint({ checkpoint: standalone, prompt: 'the', maxTokens: 4, temperature: 0, topK: 0, seed: 0 });
    expect(generated.newTokens.length).toBeGreaterThan(0);
    const evaluated = await evalCheckpoint({ checkpoint: standalone, data: join(dir, 'data') });
    expect(evaluated.loss).toBeGreaterThan(0);
    const exported = cli('export', standalone, '--out', join(dir, 'elsewhere', 'hf'));
    expect(exported.status, exported.stderr).toBe(0);
    // One default for the run's model and its export (the recipe's train.evalTokens is 128, the default 32,768, more
    // than this split holds): both measure the whole split, at their own sequence lengths.
    const hf = `hf:${join(dir, 'elsewhere', 'hf')}`;
    const hfDefault = await evalCheckpoint({ checkpoint: hf, data: join(dir, 'data') });
    expect(evaluated.tokens).toBe((await evalCheckpoint({ checkpoint: standalone, data: join(dir, 'data'), tokens: Infinity })).tokens);
    expect(hfDefault.tokens).toBe((await evalCheckpoint({ checkpoint: hf, data: join(dir, 'data'), tokens: Infinity })).tokens);
    expect(formatEval(hfDefault)).toContain(`${hfDefault.tokens.toLocaleString('en-US')} labelled tokens from ${hfDefault.documents} documents`);
    expect(hfDefault.documents).toBe(20);
    expect(readFileSync(join(dir, 'elsewhere', 'hf', 'tokenizer.json'))).toEqual(readFileSync(join(standalone, 'tokenizer.json')));
    // The copy is checked against COMPLETE like the weights.
    writeFileSync(join(standalone, 'tokenizer.json'), '{}');
    await expect(loadModel(standalone)).rejects.toThrow(/tokenizer\.json does not match the sha256/);
  }, 60_000);

  it('says which backend runs in one short line; --verbose adds why auto skipped the backends before it', () => {
    const evalAuto = (...extra: string[]) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/eval.ts', gptFinal, '--backend', 'auto', ...extra], { encoding: 'utf8', timeout: 60_000 });
    const quiet = evalAuto();
    expect(quiet.status, quiet.stderr).toBe(0);
    const lines = quiet.stderr.trim().split('\n');
    expect(lines).toEqual([expect.stringMatching(/^\[eval\] backend auto → (tensorflow|wasm|cpu)$/)]);
    const verbose = evalAuto('--verbose');
    expect(verbose.status, verbose.stderr).toBe(0);
    expect(verbose.stderr).toContain(lines[0]);
    if (!lines[0].endsWith('tensorflow')) expect(verbose.stderr).toMatch(/skipped tensorflow: /);
  }, 60_000);

  it('names a missing or incomplete checkpoint folder', async () => {
    await expect(evalCheckpoint({ checkpoint: join(dir, 'nowhere') })).rejects.toThrow(/checkpoint .*nowhere: no such folder/);
    const partial = join(dir, 'partial');
    await mkdir(partial);
    await copyFile(join(gptFinal, 'model.safetensors'), join(partial, 'model.safetensors'));
    await expect(evalCheckpoint({ checkpoint: partial })).rejects.toThrow(/model folder .*partial is incomplete: .*recipe\.json does not exist/);
    const run = cli('eval', partial);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/^\[eval\] backend cpu\neval: model folder .*partial is incomplete/);
  }, 30_000);
});

describe('a model folder cut short (a copy or a download that stopped)', () => {
  /** A copy of `source` without its COMPLETE checksums (a copy of the files alone), `file` cut to half its length. */
  async function cutCopy(source: string, name: string, file: string, keepChecksums = false): Promise<string> {
    const folder = join(dir, 'cut', name);
    await cp(source, folder, { recursive: true });
    if (!keepChecksums) await rm(join(folder, 'COMPLETE'), { force: true });
    const bytes = readFileSync(join(folder, file));
    writeFileSync(join(folder, file), bytes.subarray(0, Math.floor(bytes.length / 2)));
    return folder;
  }

  it('eval names the folder and the broken file, and says it is cut short, not a recipe error', async () => {
    const recipeCut = await cutCopy(gptFinal, 'recipe', 'recipe.json');
    await expect(evalCheckpoint({ checkpoint: recipeCut })).rejects.toThrow(
      new RegExp(`^${join(recipeCut, 'recipe.json')} is cut short or damaged: not the JSON this project writes there \\(`),
    );
    const run = cli('eval', recipeCut);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(new RegExp(`^\\[eval\\] backend cpu\neval: ${join(recipeCut, 'recipe.json')} is cut short or damaged`));
    expect(run.stderr.trim().split('\n')).toHaveLength(2); // the backend's line and the error: no YAML parser's complaints
    expect(run.stderr).not.toMatch(/YAML/);
    const weightsCut = await cutCopy(gptFinal, 'weights', 'model.safetensors');
    await expect(evalCheckpoint({ checkpoint: weightsCut })).rejects.toThrow(
      new RegExp(`^${join(weightsCut, 'model.safetensors')}: cut short: tensor '[\\w.]+' ends at byte \\d+ of the data part, but the file holds \\d+`),
    );
    // With its checksums, any damage is named against COMPLETE.
    const checked = await cutCopy(gptFinal, 'checked', 'recipe.json', true);
    await expect(evalCheckpoint({ checkpoint: checked })).rejects.toThrow(`${join(checked, 'recipe.json')} does not match the sha256`);
  }, 60_000);

  it('a Hugging Face export cut short names its config.json or weights, not a missing recipe.json', async () => {
    const exported = join(dir, 'cut', 'hf-export');
    const run = cli('export', gptFinal, '--out', exported);
    expect(run.status, run.stderr).toBe(0);
    const configCut = await cutCopy(exported, 'hf-config', 'config.json');
    await expect(evalCheckpoint({ checkpoint: configCut, data: join(dir, 'data') })).rejects.toThrow(
      new RegExp(`^${join(configCut, 'config.json')} is not valid JSON`),
    );
    const weightsCut = await cutCopy(exported, 'hf-weights', 'model.safetensors');
    await expect(evalCheckpoint({ checkpoint: weightsCut, data: join(dir, 'data') })).rejects.toThrow(
      new RegExp(`^${join(weightsCut, 'model.safetensors')}: cut short`),
    );
  }, 60_000);
});

describe('untrusted model folders', () => {
  /** A copy of the GPT's final/ whose safetensors metadata config (or recipe.json) is replaced; no checksums. */
  async function crafted(name: string, change: { config?: unknown; recipe?: string }): Promise<string> {
    const folder = join(dir, 'crafted', name);
    await mkdir(folder, { recursive: true });
    const { tensors, metadata } = decodeSafetensors(readFileSync(join(gptFinal, 'model.safetensors')));
    const config = change.config === undefined ? metadata.config : typeof change.config === 'string' ? change.config : JSON.stringify(change.config);
    writeFileSync(join(folder, 'model.safetensors'), encodeSafetensors(tensors, { ...metadata, config }));
    writeFileSync(join(folder, 'recipe.json'), change.recipe ?? readFileSync(join(gptFinal, 'recipe.json')));
    return folder;
  }
  const saved = () => JSON.parse(decodeSafetensors(readFileSync(join(gptFinal, 'model.safetensors'))).metadata.config);

  it('a config that does not fit the file is refused before any model is built, naming the file (time and memory bounded)', async () => {
    const cases: [string, { config?: unknown; recipe?: string }, RegExp][] = [
      [
        'huge',
        { config: { ...saved(), dModel: 65536, numLayers: 512 } },
        /model\.safetensors \(metadata 'config'\): the saved model config is not valid:\n {2}model\.dModel × model\.mlpRatio·model\.dModel \(an MLP weight\) = 17,179,869,184 elements/,
      ],
      [
        'large',
        { config: { ...saved(), dModel: 2048, numLayers: 24 } },
        /model\.safetensors: the tensors do not match the model config:[\s\S]*other shape: embed\.tokens\.weight \[300, 16\], the config builds \[300, 2048\]/,
      ],
      [
        'deep',
        { config: { ...saved(), numLayers: 1024 } },
        /model\.safetensors: the tensors do not match the model config:\n {2}missing: blocks\.2\.ln1\.weight/,
      ],
      ['typed', { config: { ...saved(), dModel: 'big' } }, /the saved model config is not valid:\n {2}model\.dModel must be an integer \(got "big"\)/],
      ['options', { config: { ...saved(), attention: { name: 'performer', options: { features: -3 } } } }, /model\.attention\.options\.features/],
      ['no-json', { config: '{"dModel": ' }, /model\.safetensors: metadata 'config' is not valid JSON/],
      ['null', { config: 'null' }, /model\.safetensors \(metadata 'config'\): the model config must be a JSON object \(got null\)/],
      ['recipe', { recipe: '{"model": {"dModel": "x"}' }, /recipe\.json is cut short or damaged: not the JSON this project writes there/],
      ['recipe-value', { recipe: '{"model": {"dModel": "x"}}' }, /recipe\.json: .*model\.dModel/],
    ];
    for (const [name, change, message] of cases) {
      const folder = await crafted(name, change);
      const before = process.memoryUsage().rss;
      const t0 = performance.now();
      const tensors = tf.memory().numTensors;
      await expect(loadModel(folder), name).rejects.toThrow(message);
      expect(performance.now() - t0, name).toBeLessThan(3000);
      expect(process.memoryUsage().rss - before, name).toBeLessThan(200 * 2 ** 20);
      expect(tf.memory().numTensors, name).toBe(tensors);
    }
  });
  it("attention options are held to the bounds table, and the mechanism's tensors compared with the file before any is drawn", async () => {
    const performer = (features: number) =>
      crafted(`performer-${features}`, { config: { ...saved(), attention: { name: 'performer', options: { features } } } });
    // Just past the bound (the 2²¹ fails alike): the old code drew the projections first, for seconds.
    await expect(loadModel(await performer(2 ** 16 + 1))).rejects.toThrow(
      /model\.safetensors \(metadata 'config'\): the saved model config is not valid:\n {2}model\.attention\.options\.features: attention 'performer': option 'features' must be an integer ≤ 65536 \(got 65537\)/,
    );
    // Within the bounds, but the file's projections have 64 features: refused before a tensor is made (tensor ids are sequential).
    const folder = await performer(65536);
    const nextTensorId = () => tf.tidy(() => tf.scalar(0).id);
    const before = nextTensorId();
    await expect(loadModel(folder)).rejects.toThrow(
      /model\.safetensors: the tensors do not match the model config:\n {2}other shape: blocks\.0\.attn\.projection \[2, 8, 64\], the config builds \[2, 8, 65536\]/,
    );
    expect(nextTensorId()).toBe(before + 1);
  });

  it('a model saved before the architecture options existed (config without them) loads as GPT-2 style and evaluates alike', async () => {
    const old = saved();
    for (const key of ['normPosition', 'embeddingNorm', 'typeVocabSize', 'activation', 'layerNormEps']) delete old[key];
    const folder = await crafted('pre-architecture', { config: old });
    const current = await evalCheckpoint({ checkpoint: gptFinal });
    const before = await evalCheckpoint({ checkpoint: folder });
    expect(before.loss).toBe(current.loss);
  });
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
    expect(run.stderr).not.toMatch(/stopped/); // the asked tokens fit: no stop line
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

  it('says in one line on stderr that the context length stopped it; --top-p samples reproducibly', async () => {
    // Greedy, from a prompt of most of the 32 positions: the stop comes from maxSeqLen, not from end-of-text.
    const prompt = 'the quick brown fox jumps';
    const opts = { checkpoint: gptFinal, prompt, maxTokens: 100, temperature: 0, topK: 0, seed: 0 };
    const result = await generateFromCheckpoint(opts);
    expect(result.truncated).toBe(true);
    expect(result.promptTokens.length + result.newTokens.length).toBe(33);
    const run = cli('generate', gptFinal, '--prompt', prompt, '--max-tokens', '100', '--temperature', '0');
    expect(run.status, run.stderr).toBe(0);
    expect(run.stdout).toBe(`${result.text}\n`);
    const stops = run.stderr.split('\n').filter((line) => /stopped/.test(line));
    expect(stops).toEqual([`[generate] stopped at the model's context length (maxSeqLen 32) after ${result.newTokens.length} of the 100 new tokens asked`]);

    const sampled = ['--prompt', 'a', '--max-tokens', '6', '--temperature', '1', '--top-p', '0.8', '--seed', '4'];
    const first = cli('generate', gptFinal, ...sampled);
    expect(first.status, first.stderr).toBe(0);
    expect(cli('generate', gptFinal, ...sampled).stdout).toBe(first.stdout);
    const own = await generateFromCheckpoint({ checkpoint: gptFinal, prompt: 'a', maxTokens: 6, temperature: 1, topK: 50, topP: 0.8, seed: 4 });
    expect(first.stdout).toBe(`${own.text}\n`);
    await expect(generateFromCheckpoint({ ...opts, topP: 1.5 })).rejects.toThrow(/top-p must be a number > 0 and ≤ 1 \(got 1\.5\)/);
  }, 120_000);

  it('refuses a BERT checkpoint and bad sampling options', async () => {
    const base = { prompt: 'x', maxTokens: 3, temperature: 1, topK: 5, seed: 0 };
    await expect(generateFromCheckpoint({ ...base, checkpoint: bertFinal })).rejects.toThrow(/holds a 'bert' model; generation needs a GPT/);
    await expect(generateFromCheckpoint({ ...base, checkpoint: gptFinal, temperature: -1 })).rejects.toThrow(/temperature must be a number ≥ 0/);
    await expect(generateFromCheckpoint({ ...base, checkpoint: gptFinal, topK: 1.5 })).rejects.toThrow(/top-k must be an integer ≥ 0/);
  });
});
