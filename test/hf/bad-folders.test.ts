// Bad Hugging Face folders fail with one message naming the file and the field — before anything is
// allocated from what the files say — and recipes that contradict a folder's config.json name the key.
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { exportHf } from '../../src/store/hf-export.ts';
import { readHfFolder } from '../../src/hf/folder.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { prepareFinetune } from '../../src/train/finetune.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { syntheticDocuments } from '../data/stream-fixtures.ts';
import { BERT_DIR, f32, GPT2_DIR, rawF32, renamed, savedRun, variant, writeRaw, type RawTensor } from './fixtures.ts';

let dir: string;
let count = 0;
const fresh = () => path.join(dir, `v${count++}`);
let otherTokenizer: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = mkdtempSync(path.join(tmpdir(), 'slay-hf-bad-'));
  otherTokenizer = path.join(dir, 'other-tokenizer.json');
  await trainByteLevelBpeFromTexts(syntheticDocuments(100, 4), 300, otherTokenizer);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const failure = async (folder: string) =>
  (
    await readHfFolder(folder).then(
      () => null,
      (err: Error) => err,
    )
  )?.message ?? 'no error';
const gpt2 = (change: Parameters<typeof variant>[2]) => variant(GPT2_DIR, fresh(), change);

describe('missing and unreadable files', () => {
  it('a folder that does not exist, a folder without config.json, a config.json that is not JSON', async () => {
    await expect(loadModel(`hf:${path.join(dir, 'nowhere')}`)).rejects.toThrow(/Hugging Face folder .*nowhere does not exist/);
    const empty = fresh();
    mkdirSync(empty);
    await expect(loadModel(`hf:${empty}`)).rejects.toThrow(
      `${path.join(empty, 'config.json')} does not exist (a Hugging Face model folder holds config.json, model.safetensors and tokenizer.json)`,
    );
    const folder = gpt2({});
    writeFileSync(path.join(folder, 'config.json'), '{"model_type": "gpt2",');
    expect(await failure(folder)).toMatch(new RegExp(`^${path.join(folder, 'config.json')} is not valid JSON`));
  });

  it('no model.safetensors (a PyTorch .bin is named with the conversion), a shard outside the folder or missing', async () => {
    const folder = gpt2({ writeWeights: (d) => writeFileSync(path.join(d, 'pytorch_model.bin'), '') });
    expect(await failure(folder)).toBe(
      `${path.join(folder, 'model.safetensors')} does not exist, nor model.safetensors.index.json (it holds pytorch_model.bin: convert it with transformers, AutoModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True))`,
    );
    const index = (weightMap: Record<string, string>) =>
      gpt2({ writeWeights: (d) => writeFileSync(path.join(d, 'model.safetensors.index.json'), JSON.stringify({ weight_map: weightMap })) });
    expect(await failure(index({ 'transformer.wte.weight': '../elsewhere.safetensors' }))).toMatch(
      /model\.safetensors\.index\.json: weight_map names "\.\.\/elsewhere\.safetensors"; shards must be \.safetensors files in the same folder/,
    );
    expect(await failure(index({ 'transformer.wte.weight': 'model-00001-of-00002.safetensors' }))).toMatch(
      /model\.safetensors\.index\.json: the shard .*model-00001-of-00002\.safetensors does not exist/,
    );
  });

  it('a corrupt safetensors header is refused before anything is allocated from it', async () => {
    const hugeHeader = gpt2({
      writeWeights: (d) => {
        const bytes = Buffer.alloc(64);
        bytes.writeBigUInt64LE(2n ** 50n); // Buffer.alloc(2^50) would throw a RangeError: the check comes first
        writeFileSync(path.join(d, 'model.safetensors'), bytes);
      },
    });
    expect(await failure(hugeHeader)).toMatch(/model\.safetensors: the header length 1125899906842624 runs past the end of the file \(64 bytes\)/);
    const pastTheEnd = gpt2({
      writeWeights: (d) => {
        const json = Buffer.from(JSON.stringify({ 'transformer.wte.weight': { dtype: 'F32', shape: [1000000, 64], data_offsets: [0, 256000000] } }));
        const prefix = Buffer.alloc(8);
        prefix.writeBigUInt64LE(BigInt(json.length));
        writeFileSync(path.join(d, 'model.safetensors'), Buffer.concat([prefix, json, Buffer.alloc(16)]));
      },
    });
    expect(await failure(pastTheEnd)).toMatch(
      /model\.safetensors: cut short: tensor 'transformer\.wte\.weight' ends at byte 256000000 of the data part, but the file holds 16 bytes of it/,
    );
  });
});

describe('config.json', () => {
  it('an unsupported model_type or architecture', async () => {
    expect(await failure(gpt2({ config: (c) => ({ ...c, model_type: 'llama' }) }))).toMatch(
      /config\.json: model_type "llama" is not supported \(supported: gpt2, bert, slayformer-gpt2, slayformer-bert\)$/,
    );
    expect(await failure(gpt2({ config: (c) => ({ ...c, architectures: ['GPT2ForSequenceClassification'] }) }))).toMatch(
      /config\.json: settings this project does not compute: architectures: \["GPT2ForSequenceClassification"\] \(supported: GPT2LMHeadModel, GPT2Model\)$/,
    );
  });

  it('every setting that would change the computation is listed in one error; a field of the wrong type names it', async () => {
    const message = await failure(
      gpt2({
        config: (c) => ({
          ...c,
          scale_attn_weights: false,
          activation_function: 'relu',
          add_cross_attention: true,
          scale_attn_by_inverse_layer_idx: true,
          tie_word_embeddings: false,
        }),
      }),
    );
    expect(message.split('\n')).toHaveLength(1);
    expect(message).toMatch(/config\.json: settings this project does not compute: /);
    for (const field of [
      'activation_function: "relu" (supported: gelu_new, gelu_pytorch_tanh, gelu_fast, gelu, gelu_python)',
      'scale_attn_weights: false',
      'scale_attn_by_inverse_layer_idx: true',
      'add_cross_attention: true',
      'tie_word_embeddings: false',
    ]) {
      expect(message).toContain(field);
    }
    const bert = variant(BERT_DIR, fresh(), { config: (c) => ({ ...c, is_decoder: true, position_embedding_type: 'relative_key', hidden_act: 'quick_gelu' }) });
    const bertMessage = await failure(bert);
    expect(bertMessage).toMatch(/config\.json: settings this project does not compute: /);
    for (const field of ['hidden_act: "quick_gelu"', 'is_decoder: true (causal BERT)', 'position_embedding_type: "relative_key"'])
      expect(bertMessage).toContain(field);
    expect(await failure(gpt2({ config: (c) => ({ ...c, n_embd: '64', layer_norm_epsilon: -1 }) }))).toMatch(
      /config\.json: n_embd must be an integer ≥ 1, ≤ 65536 \(got "64"\)\n {2}layer_norm_epsilon must be a number > 0 \(got -1\)/,
    );
  });

  it('sizes beyond the bounds table are refused naming the field and the bound, before any tensor is listed (eval, initFrom)', async () => {
    const config = (folder: string) => path.join(folder, 'config.json');
    const deep = gpt2({ config: (c) => ({ ...c, n_layer: 1025 }) });
    const expected = `${config(deep)}: n_layer must be an integer ≥ 1, ≤ 1024 (got 1025; the bound: over 10× GPT-3's 96 layers)`;
    expect(await failure(deep)).toBe(expected);
    await expect(loadModel(`hf:${deep}`)).rejects.toThrow(expected);
    expect(() => parseRecipe(`initFrom: hf:${deep}\ndata: { dataset: d, seqLen: 16 }`, path.join(dir, 'r.yaml'))).toThrow(expected);
    const wide = await failure(gpt2({ config: (c) => ({ ...c, n_embd: 65537, n_head: 4097, vocab_size: 2 ** 20 + 1, n_positions: 2 ** 60 }) }));
    for (const line of [
      'n_embd must be an integer ≥ 1, ≤ 65536 (got 65537;',
      'n_head must be an integer ≥ 1, ≤ 4096 (got 4097;',
      'vocab_size must be an integer ≥ 1, ≤ 1048576 (got 1048577;',
      'n_positions must be an integer ≥ 1, ≤ 1048576 (got 1152921504606846976;',
    ]) {
      expect(wide).toContain(line);
    }
    expect(await failure(gpt2({ config: (c) => ({ ...c, n_inner: 65 * 64 }) }))).toMatch(
      /config\.json: n_inner \(4160\) must be ≤ 64 × n_embd \(64\) \(the bound: 16× the usual 4\)$/,
    );
    const bert = await failure(variant(BERT_DIR, fresh(), { config: (c) => ({ ...c, num_hidden_layers: 5000, type_vocab_size: 2 ** 21 }) }));
    expect(bert).toMatch(
      /config\.json: num_hidden_layers must be an integer ≥ 1, ≤ 1024 \(got 5000;.*\n {2}type_vocab_size must be an integer ≥ 1, ≤ 1048576 \(got 2097152;/,
    );
  });

  it("this project's exports: a slayformer section with an unknown attention is refused", async () => {
    const folder = gpt2({ config: (c) => ({ ...c, model_type: 'slayformer-gpt2', slayformer: { attention: { name: 'flash', options: {} }, bias: true } }) });
    expect(await failure(folder)).toMatch(/config\.json: slayformer\.attention\.name must be one of softmax, .* \(got "flash"\)/);
  });
});

describe('weights that do not fit config.json', () => {
  it('a tensor of another shape, a missing tensor, an unknown tensor and a non-float weight: all named in one error', async () => {
    const folder = gpt2({
      tensors: (t) => {
        const out = renamed(t, (n) => (n === 'transformer.h.1.ln_2.weight' ? null : n));
        out.set('transformer.h.0.mlp.c_fc.weight', rawF32([64, 255], new Float32Array(64 * 255)));
        out.set('transformer.h.0.attn.rotary.inv_freq', rawF32([8], new Float32Array(8)));
        out.set('transformer.ln_f.bias', { dtype: 'I32', shape: [64], bytes: Buffer.alloc(256) });
        return out;
      },
    });
    const message = await failure(folder);
    const file = path.join(folder, 'model.safetensors');
    expect(message).toContain(`Hugging Face folder ${folder}: the weights do not fit ${path.join(folder, 'config.json')}:`);
    expect(message).toContain('missing: transformer.h.1.ln_2.weight');
    expect(message).toContain(`${file}: transformer.h.0.mlp.c_fc.weight is [64, 255] but config.json implies [64, 256]`);
    expect(message).toContain(`${file}: transformer.ln_f.bias has dtype I32 (weights must be F32, F16, BF16, F64)`);
    expect(message).toContain('not part of a GPT2LMHeadModel this project can load: transformer.h.0.attn.rotary.inv_freq (model.safetensors)');
  });

  it('a config.json that promises a larger model than the weights hold is refused before the model is built', async () => {
    // n_embd 4096 with 64-wide weights: every shape differs; nothing of 4096 width is ever allocated.
    const message = await failure(gpt2({ config: (c) => ({ ...c, n_embd: 4096, n_layer: 48 }) }));
    expect(message).toContain('transformer.wte.weight is [320, 64] but config.json implies [320, 4096]');
    expect(message).toContain('missing: transformer.h.2.ln_1.weight');
  });

  it('a config.json within the bounds that promises many more tensors than the weights hold gets an error of a few lines', async () => {
    const message = await failure(gpt2({ config: (c) => ({ ...c, n_layer: 1024 }) }));
    expect(message).toMatch(
      /^Hugging Face folder .*: the weights do not fit .*config\.json:\n {2}missing: transformer\.h\.2\.ln_1\.weight, transformer\.h\.2\.ln_1\.bias, .*, … \(12,264 in all\)$/,
    );
    expect(message.split('\n')).toHaveLength(2);
    expect(message.length).toBeLessThan(1000);
  });

  it("this project's export whose config.json implies other mechanism tensors than it holds: refused before any is drawn", async () => {
    const recipe = parseRecipe(
      `model: { dModel: 16, numLayers: 2, numHeads: 2, maxSeqLen: 16, attention: { name: performer, options: { features: 8 } } }\ndata: { dataset: d, tokenizer: ${path.join(GPT2_DIR, 'tokenizer.json')}, seqLen: 16 }`,
      path.join(dir, 'performer.yaml'),
    );
    const out = fresh();
    await exportHf(await savedRun(recipe, fresh(), 1), { out });
    const configFile = path.join(out, 'config.json');
    const json = JSON.parse(readFileSync(configFile, 'utf8'));
    json.slayformer.attention.options.features = 65536;
    writeFileSync(configFile, JSON.stringify(json));
    const nextTensorId = () => tf.tidy(() => tf.scalar(0).id);
    const before = nextTensorId();
    expect(await failure(out)).toContain(
      `${path.join(out, 'model.safetensors')}: slayformer.blocks.0.attn.projection is [2, 8, 8] but config.json implies [2, 8, 65536]`,
    );
    await expect(loadModel(`hf:${out}`)).rejects.toThrow('slayformer.blocks.1.attn.projection is [2, 8, 8] but config.json implies [2, 8, 65536]');
    expect(nextTensorId()).toBe(before + 1);
  });

  it('a tokenizer.json whose vocabulary differs from the embedding', async () => {
    const folder = gpt2({ tokenizer: false });
    copyFileSync(otherTokenizer, path.join(folder, 'tokenizer.json'));
    expect(await failure(folder)).toBe(
      `${path.join(folder, 'tokenizer.json')} has 300 tokens but ${path.join(folder, 'config.json')} has vocab_size 320 (the rows of transformer.wte.weight): the tokenizer does not belong to these weights`,
    );
  });
});

describe('safetensors files that the format or this project refuses', () => {
  const file = (folder: string) => path.join(folder, 'model.safetensors');
  /** One F32 tensor's bytes with `value` at `index`. */
  const f32With = (raw: RawTensor, index: number, value: number) => {
    const values = f32(raw).slice();
    values[index] = value;
    return rawF32(raw.shape, values);
  };

  it('a NaN or infinite weight (F32, F16) is refused naming the file, the tensor and the index, before a model is built', async () => {
    const nan = gpt2({ tensors: (t) => new Map([...t].map(([n, raw]) => [n, n === 'transformer.h.1.mlp.c_fc.weight' ? f32With(raw, 77, NaN) : raw])) });
    expect(await failure(nan)).toBe(`${file(nan)}: tensor 'transformer.h.1.mlp.c_fc.weight' holds a non-finite value (NaN at index 77); refusing to load it`);
    await expect(loadModel(`hf:${nan}`)).rejects.toThrow(`tensor 'transformer.h.1.mlp.c_fc.weight' holds a non-finite value (NaN at index 77)`);
    const infinity = gpt2({
      tensors: (t) => {
        const half = Buffer.alloc(2 * 64); // F16 zeros, and +∞ (0x7c00) at index 5
        half.writeUInt16LE(0x7c00, 10);
        return new Map([...t].map(([n, raw]) => [n, n === 'transformer.ln_f.bias' ? { dtype: 'F16', shape: [64], bytes: half } : raw]));
      },
    });
    expect(await failure(infinity)).toBe(
      `${file(infinity)}: tensor 'transformer.ln_f.bias' holds a non-finite value (Infinity at index 5); refusing to load it`,
    );
  });

  it('overlapping data offsets, a gap, and a list as __metadata__ are refused from the header', async () => {
    const header = (entries: Record<string, unknown>, dataBytes: number) => (d: string) => {
      const json = Buffer.from(JSON.stringify(entries));
      const prefix = Buffer.alloc(8);
      prefix.writeBigUInt64LE(BigInt(json.length));
      writeFileSync(file(d), Buffer.concat([prefix, json, Buffer.alloc(dataBytes)]));
    };
    const bias = (begin: number) => ({ dtype: 'F32', shape: [64], data_offsets: [begin, begin + 256] });
    const overlap = gpt2({ writeWeights: header({ 'transformer.ln_f.weight': bias(0), 'transformer.ln_f.bias': bias(128) }, 384) });
    expect(await failure(overlap)).toBe(
      `${file(overlap)}: tensor 'transformer.ln_f.bias' starts at byte 128 of the data but the previous one ends at 256 (gap or overlap)`,
    );
    const same = gpt2({ writeWeights: header({ 'transformer.ln_f.weight': bias(0), 'transformer.ln_f.bias': bias(0) }, 256) });
    expect(await failure(same)).toMatch(
      /tensor 'transformer\.ln_f\.(weight|bias)' starts at byte 0 of the data but the previous one ends at 256 \(gap or overlap\)$/,
    );
    const gap = gpt2({ writeWeights: header({ 'transformer.ln_f.bias': bias(0) }, 512) });
    expect(await failure(gap)).toBe(`${file(gap)}: the tensors cover 256 of the 512 data bytes`);
    const list = gpt2({ writeWeights: (d, t) => writeRaw(file(d), t, ['format', 'pt'] as unknown as Record<string, string>) });
    expect(await failure(list)).toBe(`${file(list)}: __metadata__ must be a map of strings (got ["format","pt"])`);
  });

  it('a header length of 2⁶⁰ is printed exactly', async () => {
    const huge = gpt2({
      writeWeights: (d) => {
        const bytes = Buffer.alloc(64);
        bytes.writeBigUInt64LE(2n ** 60n);
        writeFileSync(file(d), bytes);
      },
    });
    expect(await failure(huge)).toMatch(/model\.safetensors: the header length 1152921504606846976 runs past the end of the file/);
  });
});

describe('recipes with a Hugging Face initFrom', () => {
  const recipe = (text: string, overrides: string[] = []) => parseRecipe(text, path.join(dir, 'r.yaml'), overrides);

  it("take every model setting from config.json and the folder's tokenizer; a contradicting key is an error naming it and the field", () => {
    const r = recipe(`initFrom: hf:${BERT_DIR}\nmodel: { attention: { name: performer } }\ndata: { dataset: d, seqLen: 16 }`);
    expect(r.model).toMatchObject({
      kind: 'bert',
      dModel: 64,
      numLayers: 2,
      numHeads: 4,
      mlpRatio: 2,
      maxSeqLen: 64,
      normPosition: 'post',
      embeddingNorm: true,
      typeVocabSize: 2,
      activation: 'gelu-erf',
      layerNormEps: 1e-12,
    });
    expect(r.model.attention.name).toBe('performer');
    expect(r.data.tokenizer).toBe(path.join(BERT_DIR, 'tokenizer.json'));
    expect(() => recipe(`initFrom: hf:${GPT2_DIR}\nmodel: { dModel: 128, numLayers: 2, layerNormEps: 1e-6 }\ndata: { dataset: d, seqLen: 16 }`)).toThrow(
      new RegExp(
        `r\\.yaml: model\\.dModel is 128 but ${GPT2_DIR}/config\\.json \\(initFrom\\) makes it 64 \\(from n_embd\\): leave model\\.dModel out or set it to that\\n` +
          `.*r\\.yaml: model\\.layerNormEps is 0\\.000001 but .*config\\.json \\(initFrom\\) makes it 0\\.00001 \\(from layer_norm_epsilon\\)`,
      ),
    );
    expect(() => recipe(`initFrom: hf:${GPT2_DIR}\ndata: { dataset: d, seqLen: 16 }`, ['--model.kind=bert'])).toThrow(
      /override --model\.kind=bert: model\.kind is "bert" but .*config\.json \(initFrom\) makes it "gpt" \(from model_type\)/,
    );
    expect(() => recipe(`initFrom: hf:${GPT2_DIR}\ndata: { dataset: d, seqLen: 64 }`)).toThrow(/model\.maxSeqLen \(32\) must be ≥ data\.seqLen \(64\)/);
  });

  it('a bad folder fails the recipe, naming initFrom', () => {
    const folder = gpt2({ config: (c) => ({ ...c, n_head: 5 }) });
    expect(() => recipe(`initFrom: hf:${folder}\ndata: { dataset: d, seqLen: 16 }`)).toThrow(
      /r\.yaml: initFrom hf:.*: .*config\.json: n_embd \(64\) must be divisible by n_head \(5\)/,
    );
  });

  it('a run whose tokenizer has another vocabulary than the folder is refused, naming data.tokenizer and vocab_size', async () => {
    const r = recipe(`initFrom: hf:${GPT2_DIR}\ndata: { dataset: d, seqLen: 16, tokenizer: ${otherTokenizer} }`);
    const model = createLanguageModel(modelConfigFromRecipe(r, 300));
    await expect(prepareFinetune(model, r)).rejects.toThrow(
      `initFrom ${GPT2_DIR}: the run's tokenizer (data.tokenizer) has 300 tokens but ${GPT2_DIR}/config.json has vocab_size 320: use the folder's tokenizer.json`,
    );
    model.dispose();
  });
});
