import { mkdir, mkdtemp, rename, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import type { DarkformerModule } from '../../src/model/attention/darkformer.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import type { LanguageModel, LanguageModelConfig, ModelBatch } from '../../src/model/lm.ts';
import { Rng } from '../../src/core/rng.ts';
import { initializeLayersFromData, partitionParameters, prepareFinetune } from '../../src/train/finetune.ts';
import { resolveModelSource } from '../../src/store/resolve.ts';
import { loadWeights } from '../../src/store/load-weights.ts';
import { readModelFolder, saveFinalModel } from '../../src/store/model-folder.ts';
import type { FreezeSpec } from '../../src/recipe/freeze.ts';
import { AdamW } from '../../src/train/optimizer.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { RecipeError } from '../../src/recipe/load.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { encodeSafetensors, readSafetensors } from '../../src/hf/safetensors.ts';
import { trainStep } from '../../src/train/step.ts';
import { runTraining } from '../../src/train/trainer.ts';
import type { NamedArray } from '../../src/hf/safetensors.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';

const initFromDir = (spec: string, runDir: string) => resolveModelSource('initFrom', spec, { runDir }).dir;

let dir: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-finetune-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const VOCAB = 23;
const SEQ = 8;

function config(attention: string, options: Record<string, unknown> = {}, extra: Partial<LanguageModelConfig> = {}): LanguageModelConfig {
  return {
    kind: 'gpt',
    vocabSize: VOCAB,
    maxSeqLen: SEQ,
    dModel: 16,
    numLayers: 2,
    numHeads: 2,
    mlpRatio: 2,
    dropout: 0,
    bias: true,
    attention: { name: attention, options },
    seed: 5,
    ...extra,
  };
}

// Only recipe.json's presence matters to the loader (the safetensors header holds the model config).
const RECIPE = parseRecipe('data: { dataset: d, tokenizer: t }', 'source.yaml');

let folderCount = 0;
/** Saves `model` (after a few noisy updates, so no tensor sits at its init) as a run's final/ folder. */
async function savedModel(
  c: LanguageModelConfig,
  metadata: Record<string, string> = { step: '7' },
): Promise<{ folder: string; tensors: Map<string, NamedArray> }> {
  const model = createLanguageModel(c);
  const rng = new Rng(99);
  for (const v of model.parameters().values()) {
    tf.tidy(() =>
      v.assign(
        tf.add(
          v,
          tf.tensor(
            Float32Array.from({ length: v.size }, () => 0.05 * rng.normal()),
            v.shape,
          ),
        ),
      ),
    );
  }
  const runDir = join(dir, `run-${folderCount++}`);
  const folder = await saveFinalModel(runDir, model, RECIPE, metadata);
  model.dispose();
  return { folder, tensors: (await readSafetensors(join(folder, 'model.safetensors'))).tensors };
}

function randomBatch(rng: Rng, b = 2): ModelBatch {
  return {
    batchSize: b,
    seqLen: SEQ,
    inputIds: Int32Array.from({ length: b * SEQ }, () => rng.int(VOCAB)),
    labels: Int32Array.from({ length: b * SEQ }, () => rng.int(VOCAB)),
  };
}

const bytesOf = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
const valuesOf = (v: tf.Variable) => v.dataSync() as Float32Array;

/** Parameters and buffers of a freshly built model of `c` (variable names are global: built, read, disposed). */
function freshValues(c: LanguageModelConfig): { parameters: Map<string, Float32Array>; buffers: Map<string, Float32Array> } {
  const model = createLanguageModel(c);
  const read = (m: Map<string, tf.Variable>) => new Map([...m].map(([n, v]) => [n, valuesOf(v).slice()]));
  const out = { parameters: read(model.parameters()), buffers: read(model.buffers()) };
  model.dispose();
  return out;
}

async function finetune(model: LanguageModel, initFrom: string | null, freeze: FreezeSpec = 'none') {
  const lines: string[] = [];
  const setup = await prepareFinetune(model, { initFrom, train: { freeze, runDir: dir } }, { line: (t) => lines.push(t) });
  return { ...setup, lines };
}

describe('train.freeze all-but-qkv after a softmax → darkformer swap', () => {
  it('trains only q/k/v and M; every frozen tensor keeps the checkpoint bytes; no optimizer state for frozen ones', async () => {
    const source = await savedModel(config('softmax'));
    const model = createLanguageModel(config('darkformer', { features: 8 }));
    const { trainable, frozen, lines } = await finetune(model, source.folder, 'all-but-qkv');
    const expectedTrainable = [0, 1].flatMap((i) => [
      ...['q', 'k', 'v'].flatMap((p) => [`blocks.${i}.attn.${p}.weight`, `blocks.${i}.attn.${p}.bias`]),
      `blocks.${i}.attn.covarianceFactor`,
    ]);
    expect([...trainable.keys()].sort()).toEqual(expectedTrainable.sort());
    expect(trainable.size + frozen.size).toBe(model.parameters().size);
    // 2 layers × (3·(16·16 + 16) + M 2·8·8) = 1,888 trained; the rest of 2,656 + … frozen.
    const size = (m: Map<string, tf.Variable>) => [...m.values()].reduce((n, v) => n + v.size, 0);
    expect(size(trainable)).toBe(2 * (3 * (16 * 16 + 16) + 2 * 8 * 8));
    expect(
      lines.some((l) =>
        l.includes(
          `training ${size(trainable).toLocaleString('en-US')} parameters in ${trainable.size} tensors, ${size(frozen).toLocaleString('en-US')} frozen in ${frozen.size} tensors`,
        ),
      ),
    ).toBe(true);
    expect(
      lines.some((l) =>
        /attention softmax → darkformer: loaded \d+ tensors; new mechanism parameters blocks\.\*\.attn\.covarianceFactor ×2; buffers from the new seed blocks\.\*\.attn\.projection ×2/.test(
          l,
        ),
      ),
    ).toBe(true);

    const optimizer = new AdamW(trainable, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
    expect([...optimizer.getState().m.keys()].sort()).toEqual(expectedTrainable.sort());
    expect([...optimizer.getState().v.keys()].sort()).toEqual(expectedTrainable.sort());
    const before = new Map([...trainable].map(([n, v]) => [n, valuesOf(v).slice()]));
    const rng = new Rng(3);
    for (let step = 0; step < 4; step++) {
      // An optimizer over the trainable set throws on a gradient for anything else: this also checks
      // that the step differentiates only the trainable variables.
      const result = await trainStep(model, optimizer, [randomBatch(rng)], { lr: 1e-2, clip: 1, dropoutSeed: null, trainable });
      expect(result.applied).toBe(true);
    }
    for (const [name, v] of frozen) expect(bytesOf(valuesOf(v)).equals(bytesOf(source.tensors.get(name)!.data)), name).toBe(true);
    for (const [name, v] of trainable) expect(bytesOf(valuesOf(v)).equals(bytesOf(before.get(name)!)), name).toBe(false);
    optimizer.dispose();
    model.dispose();
  });

  it('globs freeze their matches; a glob that matches nothing and freezing everything are errors', async () => {
    const model = createLanguageModel(config('softmax'));
    const { trainable, frozen } = partitionParameters(model, ['embed.*', 'blocks.0.*']);
    expect([...frozen.keys()].every((n) => n.startsWith('embed.') || n.startsWith('blocks.0.'))).toBe(true);
    expect([...trainable.keys()].some((n) => n.startsWith('blocks.0.') || n.startsWith('embed.'))).toBe(false);
    expect(trainable.has('blocks.1.mlp.fc.weight') && trainable.has('norm.weight')).toBe(true);
    expect(() => partitionParameters(model, ['embed.*', 'block.1.*'])).toThrow(/train\.freeze: "block\.1\.\*" match no parameter/);
    expect(() => partitionParameters(model, ['*'])).toThrow(/freezes every parameter/);
    model.dispose();
  });

  it('the recipe accepts none, all-but-qkv and glob lists (also as overrides) and rejects anything else, naming the key', () => {
    const base = 'data: { dataset: d, tokenizer: t }\n';
    expect(parseRecipe(base, 'r.yaml').train.freeze).toBe('none');
    expect(parseRecipe(base, 'r.yaml').initFrom).toBeNull();
    expect(parseRecipe(base + 'initFrom: auto:gpt-softmax\ntrain: { freeze: all-but-qkv }', 'r.yaml')).toMatchObject({
      initFrom: 'auto:gpt-softmax',
      train: { freeze: 'all-but-qkv' },
    });
    expect(parseRecipe(base, 'r.yaml', ['--train.freeze=[embed.*, "blocks.0.*"]', '--initFrom=runs/x/final'])).toMatchObject({
      initFrom: 'runs/x/final',
      train: { freeze: ['embed.*', 'blocks.0.*'] },
    });
    expect(() => parseRecipe(base + 'train: { freeze: qkv }', 'r.yaml')).toThrow(RecipeError);
    expect(() => parseRecipe(base + 'train: { freeze: qkv }', 'r.yaml')).toThrow(
      /train\.freeze must be one of none, all-but-qkv or a non-empty list of parameter-name globs .*\(got "qkv"\)/,
    );
    expect(() => parseRecipe(base + 'train: { freeze: [] }', 'r.yaml')).toThrow(/train\.freeze must be/);
  });
});

describe('initFrom with an attention swap', () => {
  for (const [attention, options] of [
    ['darkformer', { features: 8 }],
    ['performer', { features: 8 }],
    ['slay', { prfFeatures: 4, anchors: 4 }],
    ['schoenbat', {}],
  ] as const) {
    it(`softmax → ${attention}: shared weights equal the checkpoint's, the mechanism's parameters and buffers are its own init, and it trains`, async () => {
      const source = await savedModel(config('softmax'));
      const fresh = freshValues(config(attention, options));
      const model = createLanguageModel(config(attention, options));
      const { trainable } = await finetune(model, source.folder);
      const mechanismParams = new Set(model.body.attention.flatMap((m) => m.trainableVariables.map((v) => v.name)));
      for (const [name, v] of model.parameters()) {
        const expected = mechanismParams.has(name) ? fresh.parameters.get(name)! : source.tensors.get(name)!.data;
        expect(bytesOf(valuesOf(v)).equals(bytesOf(expected)), name).toBe(true);
      }
      // Buffers: drawn from the model's own seed, exactly as a fresh model of this recipe.
      expect(model.buffers().size).toBe(fresh.buffers.size);
      for (const [name, v] of model.buffers()) expect(bytesOf(valuesOf(v)).equals(bytesOf(fresh.buffers.get(name)!)), name).toBe(true);
      if (attention === 'darkformer') {
        const m = model.parameters().get('blocks.0.attn.covarianceFactor')!;
        expect(Array.from(valuesOf(m))).toEqual(Array.from(tf.tidy(() => tf.tile(tf.expandDims(tf.eye(8), 0), [2, 1, 1]).dataSync())));
      }
      const optimizer = new AdamW(trainable, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0 });
      const batch = randomBatch(new Rng(4), 4);
      const losses: number[] = [];
      for (let step = 0; step < 8; step++) losses.push((await trainStep(model, optimizer, [batch], { lr: 1e-2, clip: 1, dropoutSeed: null, trainable })).loss);
      expect(losses.every(Number.isFinite)).toBe(true);
      expect(losses[7]).toBeLessThan(losses[0] - 0.05); // fits the one batch
      optimizer.dispose();
      model.dispose();
    });
  }

  it("same mechanism with the same options loads the buffers too (not the new seed's); other options draw new ones", async () => {
    const source = await savedModel(config('performer', { features: 8 }));
    const same = createLanguageModel(config('performer', { features: 8 }, { seed: 77 }));
    await finetune(same, source.folder);
    const projection = 'blocks.1.attn.projection';
    expect(bytesOf(valuesOf(same.buffers().get(projection)!)).equals(bytesOf(source.tensors.get(projection)!.data))).toBe(true);
    same.dispose();
    const fresh = freshValues(config('performer', { features: 4 }, { seed: 77 }));
    const other = createLanguageModel(config('performer', { features: 4 }, { seed: 77 }));
    const { lines } = await finetune(other, source.folder);
    expect(bytesOf(valuesOf(other.buffers().get(projection)!)).equals(bytesOf(fresh.buffers.get(projection)!))).toBe(true);
    expect(lines.join('\n')).toMatch(/dropped blocks\.\*\.attn\.projection ×2/);
    other.dispose();
  });

  it('darkformer → darkformer keeps the trained M (it is not re-initialised)', async () => {
    const source = await savedModel(config('darkformer', { features: 8 }));
    const model = createLanguageModel(config('darkformer', { features: 8 }));
    await finetune(model, source.folder);
    const name = 'blocks.0.attn.covarianceFactor';
    expect(bytesOf(valuesOf(model.parameters().get(name)!)).equals(bytesOf(source.tensors.get(name)!.data))).toBe(true);
    model.dispose();
  });
});

describe('unmappable checkpoints', () => {
  const cases: [string, LanguageModelConfig, LanguageModelConfig, RegExp[]][] = [
    [
      'another dModel and vocabulary',
      config('softmax', {}, { dModel: 8, vocabSize: 30 }),
      config('softmax'),
      [
        /shape differs: embed\.tokens\.weight checkpoint \[30, 8\] vs model \[23, 16\]; embed\.positions\.weight checkpoint \[8, 8\] vs model \[8, 16\]/,
        // A few names however many tensors differ, not listed again as not in the model.
        /^[^\n]*\n {2}shape differs: [^\n]*blocks\.0\.attn\.q\.bias checkpoint \[8\] vs model \[16\]; … \(36 in all\)$/,
      ],
    ],
    [
      'fewer layers',
      config('softmax', {}, { numLayers: 1 }),
      config('darkformer'),
      [/missing in the checkpoint: blocks\.1\.ln1\.weight, blocks\.1\.ln1\.bias, blocks\.1\.attn\.q\.weight/],
    ],
    [
      'a BERT checkpoint for a GPT',
      config('softmax', {}, { kind: 'bert' }),
      config('softmax'),
      [/in the checkpoint but not in the model: mlm\.dense\.weight, mlm\.dense\.bias, mlm\.norm\.weight, mlm\.norm\.bias, mlm\.decoder\.bias/],
    ],
    ['no biases', config('softmax', {}, { bias: false }), config('softmax'), [/missing in the checkpoint: blocks\.0\.attn\.q\.bias/]],
    ['another head count', config('softmax', {}, { numHeads: 4 }), config('softmax'), [/checkpoint has 4 heads per block but model\.numHeads is 2/]],
  ];
  for (const [what, from, to, messages] of cases) {
    it(`${what}: an error naming the tensors, and the model is left untouched`, async () => {
      const source = await savedModel(from);
      const fresh = freshValues(to);
      const model = createLanguageModel(to);
      const error = await finetune(model, source.folder).then(
        () => null,
        (err: Error) => err,
      );
      expect(error).not.toBeNull();
      expect(error!.message).toContain(`initFrom ${source.folder}`);
      for (const m of messages) expect(error!.message).toMatch(m);
      for (const [name, v] of model.parameters()) expect(bytesOf(valuesOf(v)).equals(bytesOf(fresh.parameters.get(name)!)), name).toBe(true);
      model.dispose();
    });
  }

  it("a saved model config that eval refuses is refused by initFrom too, with eval's message (one check)", async () => {
    const source = await savedModel(config('softmax'));
    const file = join(source.folder, 'model.safetensors');
    const { tensors, metadata } = await readSafetensors(file);
    // The tensors fit; the config does not: a width that is not a number, options the bounds refuse.
    const crafted = { ...JSON.parse(metadata.config), dModel: 'wide', attention: { name: 'performer', options: { features: 2 ** 21 } } };
    await writeFile(file, encodeSafetensors(tensors, { ...metadata, config: JSON.stringify(crafted) }));
    await rm(join(source.folder, 'COMPLETE')); // its checksums no longer hold; a folder without them is checked all the same
    const evalError = await loadModel(source.folder).then(
      () => null,
      (err: Error) => err.message,
    );
    expect(evalError).toMatch(/model\.safetensors \(metadata 'config'\): the saved model config is not valid:\n {2}model\.dModel must be an integer/);
    await expect(readModelFolder(source.folder)).rejects.toThrow(evalError!);
    const model = createLanguageModel(config('softmax'));
    await expect(finetune(model, source.folder)).rejects.toThrow(evalError!);
    model.dispose();
  });

  it('a checkpoint trained with another tokenizer is refused', async () => {
    const source = await savedModel(config('softmax'), { tokenizer_sha256: 'a'.repeat(64) });
    const model = createLanguageModel(config('softmax'));
    expect(() =>
      loadWeights(
        model,
        { ...source, dir: source.folder, metadata: { tokenizer_sha256: 'a'.repeat(64) }, config: config('softmax') },
        { tokenizerSha256: 'b'.repeat(64) },
      ),
    ).toThrow(/another tokenizer \(sha256 aaaaaaaaaaaa…\) than data\.tokenizer \(bbbbbbbbbbbb…\)/);
    expect(loadWeights(model, await readModelFolder(source.folder), { tokenizerSha256: 'a'.repeat(64) }).loaded.length).toBe(model.parameters().size);
    model.dispose();
  });

  it('initFrom resolution: auto: = final/ of the newest finished run of exactly that name; a run folder = its final/, else its newest complete checkpoint', async () => {
    const root = join(dir, 'resolve');
    const touch = async (...parts: string[]) => {
      await mkdir(join(root, ...parts.slice(0, -1)), { recursive: true });
      await writeFile(join(root, ...parts), '');
    };
    await touch('gpt-a-20260101-000000', 'final', 'model.safetensors');
    await touch('gpt-a-20260102-000000', 'final', 'model.safetensors');
    await touch('gpt-a-20260102-000000-2', 'final', 'model.safetensors'); // same second, created later
    await touch('gpt-a-20260103-000000', 'log.txt'); // still running: no final/
    await touch('gpt-a-large-20260104-000000', 'final', 'model.safetensors'); // another recipe
    expect(initFromDir('auto:gpt-a', root)).toBe(join(root, 'gpt-a-20260102-000000-2', 'final'));
    expect(initFromDir(join(root, 'gpt-a-20260101-000000'), dir)).toBe(join(root, 'gpt-a-20260101-000000', 'final'));
    await touch('run-b', 'checkpoints', 'step-000010', 'model.safetensors');
    await touch('run-b', 'checkpoints', 'step-000010', 'COMPLETE');
    await touch('run-b', 'checkpoints', 'step-000020', 'model.safetensors'); // interrupted: no COMPLETE
    expect(initFromDir(join(root, 'run-b'), dir)).toBe(join(root, 'run-b', 'checkpoints', 'step-000010'));
    expect(() => initFromDir(join(root, 'run-b', 'checkpoints', 'step-000020'), dir)).toThrow(/is incomplete \(no COMPLETE marker/);
  });

  it('initFrom auto: passes over a newer run shortened below its recipe’s budget, and says which run it chose and why', async () => {
    const root = join(dir, 'auto-budget');
    const recipeFile = join(root, 'gpt-b.yaml');
    await mkdir(root, { recursive: true });
    await writeFile(recipeFile, 'train:\n  maxTokens: 256000\n');
    /** A finished run folder as the trainer leaves it, started from recipeFile with train.maxTokens = `budget`. */
    const finished = async (entry: string, budget: number, valLoss: number) => {
      const folder = join(root, entry);
      await mkdir(join(folder, 'final'), { recursive: true });
      await writeFile(join(folder, 'final', 'model.safetensors'), '');
      await writeFile(join(folder, 'config.json'), JSON.stringify({ name: 'gpt-b', train: { maxTokens: budget } }));
      const argv = ['src/cli/train.ts', recipeFile, ...(budget === 256000 ? [] : [`--train.maxTokens=${budget}`])];
      await writeFile(join(folder, 'env.json'), JSON.stringify({ argv, cwd: root }));
      await writeFile(join(folder, 'summary.json'), JSON.stringify({ tokens: budget, val_loss: valLoss }));
    };
    await finished('gpt-b-20260101-000000', 256000, 5.3553);
    await finished('gpt-b-20260102-000000', 10240, 7.18); // a smoke run, newer
    const choice = resolveModelSource('initFrom', 'auto:gpt-b', { runDir: root });
    expect(choice.dir).toBe(join(root, 'gpt-b-20260101-000000', 'final'));
    expect(choice.reason).toBe(
      `initFrom auto:gpt-b: using gpt-b-20260101-000000 (256,000 tokens, final val loss 5.3553), the newest finished run of 'gpt-b' that trained its recipe's budget ` +
        `(256,000 tokens in ${recipeFile}); passed over the newer gpt-b-20260102-000000 (10,240 tokens, final val loss 7.1800): trained 10,240 tokens, less than the 256,000 tokens of ${recipeFile}`,
    );
    // Only shortened runs: the newest, saying so.
    const onlySmoke = join(dir, 'auto-smoke');
    await mkdir(onlySmoke, { recursive: true });
    await rename(join(root, 'gpt-b-20260102-000000'), join(onlySmoke, 'gpt-b-20260102-000000'));
    const fallback = resolveModelSource('initFrom', 'auto:gpt-b', { runDir: onlySmoke });
    expect(fallback.dir).toBe(join(onlySmoke, 'gpt-b-20260102-000000', 'final'));
    expect(fallback.reason).toMatch(
      /^initFrom auto:gpt-b: none of the 1 finished runs of 'gpt-b' trained its recipe's budget; using the newest, gpt-b-20260102-000000 \(10,240 tokens/,
    );
  });

  it('initFrom: a folder without a model, an unknown auto: recipe', async () => {
    expect(() => initFromDir(join(dir, 'nowhere'), dir)).toThrow(/^initFrom .*nowhere: no such folder/);
    expect(() => initFromDir(dir, dir)).toThrow(/holds no model\.safetensors, final\/ or complete checkpoint/);
    expect(() => initFromDir('auto:never-trained', dir)).toThrow(/no finished run of 'never-trained' .* under /);
    await expect(readModelFolder(dir)).rejects.toThrow(/model\.safetensors does not exist/);
  });
});

describe('whitening init', () => {
  it("sets each layer's M so that M·Λ·M = I for the covariance Λ of that layer's own queries and keys (later layers calibrated after earlier ones)", async () => {
    const source = await savedModel(config('softmax'));
    const model = createLanguageModel(config('darkformer', { features: 8, init: 'whitening' }));
    const tensorsBefore = tf.memory().numTensors;
    loadWeights(model, await readModelFolder(source.folder)); // M stays the identity until whitened below
    const rng = new Rng(8);
    const batches = [randomBatch(rng, 3), randomBatch(rng, 3)];
    initializeLayersFromData(model, batches, new Set([0, 1]));
    expect(tf.memory().numTensors).toBe(tensorsBefore); // loading and calibrating leak nothing
    // Capture every layer's q, k on the same inputs with the final M (layer 1's inputs depend on layer 0's M).
    const captured: { q: Float32Array; k: Float32Array; shape: number[] }[] = [];
    const ids = new Int32Array([...batches[0].inputIds, ...batches[1].inputIds]);
    tf.tidy(() => {
      model.body.forward(tf.tensor2d(ids, [6, SEQ], 'int32'), {
        onAttentionInputs: (_i, q, k) => void captured.push({ q: q.dataSync() as Float32Array, k: k.dataSync() as Float32Array, shape: q.shape }),
      });
    });
    expect(captured).toHaveLength(2);
    for (let layer = 0; layer < 2; layer++) {
      const mechanism = model.body.attention[layer] as DarkformerModule;
      const m = valuesOf(mechanism.covarianceFactor);
      const [b, h, l, d] = captured[layer].shape;
      for (let head = 0; head < h; head++) {
        // Float64 reference: Λ = ½(Cov q + Cov k) (centred, 1/(n − 1)).
        const cov = (data: Float32Array) => {
          const rows: number[][] = [];
          for (let bi = 0; bi < b; bi++)
            for (let li = 0; li < l; li++) rows.push(Array.from(data.subarray(((bi * h + head) * l + li) * d, ((bi * h + head) * l + li + 1) * d)));
          const mean = Array.from({ length: d }, (_, j) => rows.reduce((s, r) => s + r[j], 0) / rows.length);
          return Array.from({ length: d }, (_, i) =>
            Array.from({ length: d }, (_, j) => rows.reduce((s, r) => s + (r[i] - mean[i]) * (r[j] - mean[j]), 0) / (rows.length - 1)),
          );
        };
        const cq = cov(captured[layer].q);
        const ck = cov(captured[layer].k);
        const lambda = cq.map((row, i) => row.map((x, j) => (x + ck[i][j]) / 2));
        const M = Array.from({ length: d }, (_, i) => Array.from({ length: d }, (_, j) => m[(head * d + i) * d + j]));
        const mul = (a: number[][], c: number[][]) => a.map((row) => c[0].map((_, j) => row.reduce((s, x, t) => s + x * c[t][j], 0)));
        const whitened = mul(mul(M, lambda), M); // M is symmetric
        let maxError = 0;
        let offIdentity = 0;
        for (let i = 0; i < d; i++) {
          for (let j = 0; j < d; j++) {
            maxError = Math.max(maxError, Math.abs(whitened[i][j] - (i === j ? 1 : 0)));
            offIdentity = Math.max(offIdentity, Math.abs(M[i][j] - (i === j ? 1 : 0)));
          }
        }
        expect(maxError, `layer ${layer} head ${head}`).toBeLessThan(2e-3); // the ridge (1e-4 of the mean eigenvalue) and float32
        expect(offIdentity).toBeGreaterThan(0.5); // M moved far from the identity
      }
    }
    model.dispose();
  });
});

describe("dataInit 'variance-optimal'", () => {
  it('keeps M = I, stores the fitted projection and weights (a saved model reloads them), and starts as near the softmax source as Performer (unbiased), unlike whitening', async () => {
    // A source with anisotropic queries and keys at a trained model's scale (E‖d^(−1/4)q‖² ≈ 1.4; the q/k weights'
    // output coordinate i of a head scaled by 0.3·0.6^i, [in, out] weights), where isotropic features err most.
    const sourceModel = createLanguageModel(config('softmax'));
    const rng = new Rng(17);
    const headDim = 16 / 2;
    for (const [name, v] of sourceModel.parameters()) {
      const qk = /attn\.[qk]\.weight/.test(name);
      const gain = (i: number) => (qk ? 0.3 * 0.6 ** ((i % v.shape[1]!) % headDim) : 0.05);
      tf.tidy(() =>
        v.assign(
          tf.add(
            v,
            tf.tensor(
              Float32Array.from({ length: v.size }, (_, i) => gain(i) * rng.normal()),
              v.shape,
            ),
          ),
        ),
      );
    }
    const source = await saveFinalModel(join(dir, `run-${folderCount++}`), sourceModel, RECIPE, { step: '7' });
    const batches = [randomBatch(rng, 4), randomBatch(rng, 4)];
    const evalIds = tf.tensor2d(randomBatch(rng, 4).inputIds, [4, SEQ], 'int32');
    const logitsOf = (model: LanguageModel) => tf.tidy(() => model.logits(evalIds).dataSync() as Float32Array);
    const exact = logitsOf(sourceModel);
    sourceModel.dispose(); // variable names are global: one model at a time
    const relError = (a: Float32Array) => Math.hypot(...a.map((x, i) => x - exact[i])) / Math.hypot(...exact);
    const errors = { performer: 0, 'variance-optimal': 0, whitening: 0 };
    const seeds = [1, 2, 3, 4, 5, 6];
    for (const seed of seeds) {
      for (const arm of ['performer', 'variance-optimal', 'whitening'] as const) {
        const options = {
          performer: { features: 16 },
          'variance-optimal': { features: 16, dataInit: 'variance-optimal' },
          whitening: { features: 16, init: 'whitening' },
        }[arm];
        const model = createLanguageModel(config('darkformer', options, { seed }));
        loadWeights(model, await readModelFolder(source));
        if (arm === 'whitening') initializeLayersFromData(model, batches, new Set([0, 1]));
        if (arm === 'variance-optimal') {
          const tensorsBefore = tf.memory().numTensors;
          initializeLayersFromData(model, batches, new Set([0, 1]));
          expect(tf.memory().numTensors).toBe(tensorsBefore);
          for (const layer of model.body.attention) {
            const m = (layer as DarkformerModule).covarianceFactor.arraySync() as number[][][];
            m.forEach((head) => head.forEach((row, i) => row.forEach((x, j) => expect(x).toBe(i === j ? 1 : 0))));
          }
        }
        errors[arm] += relError(logitsOf(model)) / seeds.length;
        if (arm === 'variance-optimal' && seed === 1) {
          // Recorded with the model: a saved folder reloads the fitted projection and weights into a new model.
          const saved = await saveFinalModel(join(dir, `run-${folderCount++}`), model, RECIPE, { step: '0' });
          const fitted = new Map([...model.buffers()].map(([name, v]) => [name, Array.from(valuesOf(v))]));
          model.dispose();
          expect([...fitted.keys()].filter((n) => n.endsWith('featureLogWeights'))).toHaveLength(2);
          expect(Math.max(...fitted.get('blocks.0.attn.featureLogWeights')!.map(Math.abs))).toBeGreaterThan(0.1);
          const reloaded = createLanguageModel(config('darkformer', options, { seed }));
          loadWeights(reloaded, await readModelFolder(saved));
          for (const [name, values] of fitted) expect(Array.from(valuesOf(reloaded.buffers().get(name)!)), name).toEqual(values);
          reloaded.dispose();
        } else model.dispose();
      }
    }
    expect(errors['variance-optimal'], JSON.stringify(errors)).toBeLessThan(1.5 * errors.performer);
    expect(errors.whitening).toBeGreaterThan(3 * errors.performer); // a changed M changes the function: this test can tell
    evalIds.dispose();
  });
});

describe('runTraining with initFrom: auto:<recipe>', () => {
  it("softmax run → darkformer finetune with whitening and all-but-qkv: validates before training, frozen tensors of the saved model are the source's bytes", async () => {
    const docs = syntheticDocuments(300, 6);
    const data = join(dir, 'data');
    await writeDataset(data, { train: [docs.slice(0, 270)], validation: [docs.slice(270)] }, 50);
    const tokenizer = join(dir, 'tokenizer.json');
    await trainByteLevelBpeFromTexts(docs.slice(0, 270), 280, tokenizer);
    const runs = join(dir, 'runs');
    const common = `data: { dataset: ${data}, tokenizer: ${tokenizer}, seqLen: 16, shuffleBuffer: 8 }`;
    const quiet = (lines: string[], runDir: string) => ({ dir: runDir, log: () => {}, line: (t: string) => lines.push(t), finish: async () => {} });
    const source = parseRecipe(
      `
model: { kind: gpt, dModel: 16, numLayers: 2, numHeads: 2, attention: { name: softmax } }
${common}
train: { batchSize: 4, lr: 1e-2, warmupSteps: 2, evalInterval: 0, evalTokens: 128, logInterval: 5, runDir: ${runs}, maxTokens: 640, checkpointInterval: 0 }
`,
      join(dir, 'tiny-softmax.yaml'),
    );
    const sourceResult = await runTraining(source, { logger: quiet([], join(runs, 'tiny-softmax-20260101-000000')) });
    const finetuneRecipe = parseRecipe(
      `
initFrom: auto:tiny-softmax
model: { kind: gpt, dModel: 16, numLayers: 2, numHeads: 2, attention: { name: darkformer, options: { features: 8, init: whitening } } }
${common}
train: { batchSize: 4, lr: 1e-2, warmupSteps: 2, evalInterval: 0, evalTokens: 128, logInterval: 5, runDir: ${runs}, maxTokens: 640, freeze: all-but-qkv, checkpointInterval: 0 }
`,
      join(dir, 'tiny-finetune.yaml'),
    );
    const lines: string[] = [];
    const result = await runTraining(finetuneRecipe, { logger: quiet(lines, join(runs, 'tiny-finetune-20260101-000001')) });
    const text = lines.join('\n');
    expect(text).toContain(`initFrom ${sourceResult.finalDir} (step 10), attention softmax → darkformer`);
    expect(text).toMatch(/darkformer init 'whitening': M of 2 layers from the queries and keys of 2 training batches/);
    expect(text).toMatch(/train\.freeze all-but-qkv: training [\d,]+ parameters in 14 tensors, [\d,]+ frozen in \d+ tensors/);
    expect(text).toMatch(/val {3}step 0: loss/); // the loaded model, before finetuning
    expect(result.steps).toBe(10);
    const before = (await readSafetensors(join(sourceResult.finalDir, 'model.safetensors'))).tensors;
    const after = await readSafetensors(join(result.finalDir, 'model.safetensors'));
    expect(after.metadata.init_from).toBe(sourceResult.finalDir);
    expect(after.metadata.freeze).toBe('all-but-qkv');
    for (const [name, t] of after.tensors) {
      const frozen = !/attn\.([qkv]\.|covarianceFactor|projection)/.test(name);
      if (frozen) expect(bytesOf(t.data).equals(bytesOf(before.get(name)!.data)), name).toBe(true);
      // Layer 0 only: after whitening a barely trained source, layer 1's features can underflow below δ, flat in its q/k/v.
      else if (/^blocks\.0\.attn\.[qkv]\./.test(name)) expect(bytesOf(t.data).equals(bytesOf(before.get(name)!.data)), name).toBe(false);
    }
  });
});
