// Hugging Face folders written by transformers itself load into models that reproduce PyTorch's
// logits and GPT-2's loss, in every variant of the format real checkpoints use: bare base models,
// original GPT-2 names, TF-era LayerNorm names, sharded weights, half precision, extra buffers.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend, testBackends } from '../helpers/backend.ts';
import { readHfFolder } from '../../src/hf/folder.ts';
import { readHfInitFrom } from '../../src/store/model-folder.ts';
import { toFloat32 } from '../../src/hf/safetensors.ts';
import { IGNORE_LABEL } from '../../src/model/lm.ts';
import { loadModel } from '../../src/store/load-model.ts';
import {
  BERT_DIR,
  f32,
  GPT2_DIR,
  logitsOf,
  maxAbsDiff,
  rawF32,
  readRaw,
  readReference,
  renamed,
  sameBytes,
  variant,
  writeRaw,
  type RawTensor,
} from './fixtures.ts';

let dir: string;
let count = 0;
const fresh = () => path.join(dir, `v${count++}`);
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = mkdtempSync(path.join(tmpdir(), 'slay-hf-import-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** max |ours − PyTorch| over the reference logits of the folder (a Hugging Face folder, loaded as eval does). */
async function logitError(folder: string, reference = readReference(GPT2_DIR)): Promise<number> {
  const { model } = await loadModel(folder);
  try {
    return maxAbsDiff(logitsOf(model, reference.input_ids), reference.logits);
  } finally {
    model.dispose();
  }
}

describe('the transformers fixtures', () => {
  // Observed: 3.0e-7 (GPT-2) and 2.1e-7 (BERT) on cpu, 2.4e-7 on wasm; float32 summation order only.
  const TOLERANCE = 1e-5;
  for (const backend of testBackends()) {
    it(`GPT2LMHeadModel reproduces PyTorch's logits (≤ ${TOLERANCE}) and loss on ${backend}`, async () => {
      await initBackend(backend, { quiet: true });
      try {
        const reference = readReference(GPT2_DIR);
        const { model, recipe } = await loadModel(`hf:${GPT2_DIR}`);
        expect(model.config).toMatchObject({
          kind: 'gpt',
          vocabSize: 320,
          maxSeqLen: 32,
          dModel: 64,
          numLayers: 2,
          numHeads: 4,
          mlpRatio: 4,
          activation: 'gelu-tanh',
          layerNormEps: 1e-5,
        });
        expect(maxAbsDiff(logitsOf(model, reference.input_ids), reference.logits)).toBeLessThan(TOLERANCE);
        // transformers' loss: mean cross-entropy of logits[:, :-1] against input_ids[:, 1:].
        const ids = reference.input_ids;
        const labels = ids.flatMap((row) => [...row.slice(1), IGNORE_LABEL]);
        const loss = tf.tidy(() => {
          const { loss: sum, count: n } = model.lossSum({
            batchSize: ids.length,
            seqLen: ids[0].length,
            inputIds: Int32Array.from(ids.flat()),
            labels: Int32Array.from(labels),
          });
          return sum.dataSync()[0] / n;
        });
        expect(Math.abs(loss - reference.loss!)).toBeLessThan(TOLERANCE);
        expect(recipe.data.tokenizer).toBe(path.join(GPT2_DIR, 'tokenizer.json'));
        model.dispose();
      } finally {
        await initBackend(testBackend(), { quiet: true });
      }
    });

    it(`BertForMaskedLM (post-LN, embedding LayerNorm, token types, erf GELU, ε 1e-12) reproduces PyTorch's logits on ${backend}`, async () => {
      await initBackend(backend, { quiet: true });
      try {
        const reference = readReference(BERT_DIR);
        const { model } = await loadModel(BERT_DIR); // recognised by its config.json, without hf:
        expect(model.config).toMatchObject({
          kind: 'bert',
          normPosition: 'post',
          embeddingNorm: true,
          typeVocabSize: 2,
          activation: 'gelu-erf',
          layerNormEps: 1e-12,
          mlpRatio: 2,
        });
        expect(maxAbsDiff(logitsOf(model, reference.input_ids), reference.logits)).toBeLessThan(TOLERANCE);
        model.dispose();
      } finally {
        await initBackend(testBackend(), { quiet: true });
      }
    });
  }

  it('maps every fixture tensor: GPT-2’s fused c_attn splits into q, k, v by columns; BERT’s [out, in] weights are transposed', async () => {
    const gpt = await readHfFolder(GPT2_DIR);
    const raw = readRaw(path.join(GPT2_DIR, 'model.safetensors'));
    const cAttn = f32(raw.get('transformer.h.1.attn.c_attn.weight')!); // [64, 192]
    const k = gpt.tensors.get('blocks.1.attn.k.weight')!;
    expect(k.shape).toEqual([64, 64]);
    for (const [r, c] of [
      [0, 0],
      [5, 63],
      [63, 17],
    ])
      expect(k.data[r * 64 + c]).toBe(cAttn[r * 192 + 64 + c]);
    expect(gpt.tensors.get('blocks.1.attn.v.bias')!.data).toEqual(f32(raw.get('transformer.h.1.attn.c_attn.bias')!).slice(128));
    const bert = await readHfFolder(BERT_DIR);
    const fc = f32(readRaw(path.join(BERT_DIR, 'model.safetensors')).get('bert.encoder.layer.0.intermediate.dense.weight')!); // [128, 64]
    const ours = bert.tensors.get('blocks.0.mlp.fc.weight')!;
    expect(ours.shape).toEqual([64, 128]);
    for (const [i, o] of [
      [0, 0],
      [3, 100],
      [63, 127],
    ])
      expect(ours.data[i * 128 + o]).toBe(fc[o * 64 + i]);
    expect([gpt.tensors.size, bert.tensors.size]).toEqual([36, 42]);
    expect([gpt.fresh, bert.fresh, gpt.ignored, bert.ignored]).toEqual([[], [], [], []]);
  });
});

describe('format variants of real checkpoints', () => {
  it('original GPT-2 names (no transformer. prefix), causal-mask buffers and a stored tied lm_head load as the fixture', async () => {
    const folder = variant(GPT2_DIR, fresh(), {
      tensors: (t) => {
        const out = renamed(t, (n) => n.replace(/^transformer\./, ''));
        out.set('h.0.attn.bias', rawF32([1, 1, 32, 32], new Float32Array(1024).fill(1)));
        out.set('h.0.attn.masked_bias', { dtype: 'F32', shape: [], bytes: Buffer.from(new Float32Array([-1e4]).buffer) });
        out.set('lm_head.weight', t.get('transformer.wte.weight')!);
        return out;
      },
    });
    expect(await logitError(folder)).toBeLessThan(1e-5);
    const hf = await readHfFolder(folder);
    expect(hf.ignored.map((i) => i.name).sort()).toEqual(['transformer.h.0.attn.bias', 'transformer.h.0.attn.masked_bias']);
  });

  it('a bare GPT2Model loads completely (its head is the tied embedding)', async () => {
    const folder = variant(GPT2_DIR, fresh(), {
      config: (c) => ({ ...c, architectures: ['GPT2Model'] }),
      tensors: (t) => renamed(t, (n) => n.replace(/^transformer\./, '')),
    });
    expect(await logitError(folder)).toBeLessThan(1e-5);
  });

  it('a bare BertModel: TF-era gamma/beta names, pooler and int64 position ids are read or ignored; the MLM head is initialised fresh (and said so); eval refuses it', async () => {
    const folder = variant(BERT_DIR, fresh(), {
      config: (c) => ({ ...c, architectures: ['BertModel'] }),
      tensors: (t) => {
        const out = renamed(t, (n) =>
          n.startsWith('cls.')
            ? null
            : n
                .replace(/^bert\./, '')
                .replace(/LayerNorm\.weight$/, 'LayerNorm.gamma')
                .replace(/LayerNorm\.bias$/, 'LayerNorm.beta'),
        );
        out.set('pooler.dense.weight', rawF32([64, 64], new Float32Array(4096)));
        out.set('pooler.dense.bias', rawF32([64], new Float32Array(64)));
        out.set('embeddings.position_ids', { dtype: 'I64', shape: [1, 64], bytes: Buffer.alloc(512) });
        return out;
      },
    });
    const { source, description } = await readHfInitFrom(folder, 320);
    expect([...source.fresh!].sort()).toEqual(['mlm.decoder.bias', 'mlm.dense.bias', 'mlm.dense.weight', 'mlm.norm.bias', 'mlm.norm.weight']);
    expect(description).toContain('initialised fresh (not in the checkpoint): mlm.dense.weight');
    expect(description).toContain("ignored: 2 × BertModel's pooler (not used by the MLM model), 1 × index buffers");
    const full = await readHfFolder(BERT_DIR);
    for (const [name, t] of full.tensors) if (!name.startsWith('mlm.')) expect(sameBytes(source.tensors.get(name)!.data, t.data), name).toBe(true);
    await expect(loadModel(folder)).rejects.toThrow(/holds a bare BertModel without its language-model head \(mlm\.dense\.weight.*finetune it first/);
  });

  it('BERT checkpoints that store the tied decoder (weight and bias) load; a decoder that differs from the embedding is refused', async () => {
    const folder = variant(BERT_DIR, fresh(), {
      tensors: (t) => {
        const out = renamed(t, (n) => (n === 'cls.predictions.bias' ? 'cls.predictions.decoder.bias' : n)); // older files keep only the decoder's copy
        out.set('cls.predictions.decoder.weight', t.get('bert.embeddings.word_embeddings.weight')!);
        return out;
      },
    });
    expect(await logitError(folder, readReference(BERT_DIR))).toBeLessThan(1e-5);
    const untied = variant(BERT_DIR, fresh(), {
      tensors: (t) => {
        const w = f32(t.get('bert.embeddings.word_embeddings.weight')!).map((v) => v * 2);
        return new Map([...t, ['cls.predictions.decoder.weight', rawF32([320, 64], w)]]);
      },
    });
    await expect(readHfFolder(untied)).rejects.toThrow(
      /model\.safetensors: cls\.predictions\.decoder\.weight differs from bert\.embeddings\.word_embeddings\.weight: untied output weights \(tie_word_embeddings false\) are not supported/,
    );
  });

  it('sharded weights (model.safetensors.index.json) load as one file', async () => {
    const folder = variant(GPT2_DIR, fresh(), {
      writeWeights: (d, t) => {
        const names = [...t.keys()];
        const shards = [names.slice(0, 10), names.slice(10)];
        const weightMap: Record<string, string> = {};
        shards.forEach((part, i) => {
          const file = `model-0000${i + 1}-of-00002.safetensors`;
          writeRaw(path.join(d, file), new Map(part.map((n) => [n, t.get(n)!])));
          for (const n of part) weightMap[n] = file;
        });
        writeFileSync(path.join(d, 'model.safetensors.index.json'), JSON.stringify({ metadata: { total_size: 0 }, weight_map: weightMap }));
      },
    });
    expect(await logitError(folder)).toBeLessThan(1e-5);
  });

  it('bfloat16 and float16 weights are converted exactly', async () => {
    // bfloat16 of a float32 = its top 16 bits: the expected float32 is the original with the low bits cleared.
    const truncate = (raw: RawTensor): RawTensor => {
      const bits = new Uint32Array(f32(raw).buffer);
      const out = Buffer.alloc(bits.length * 2);
      bits.forEach((b, i) => out.writeUInt16LE(b >>> 16, 2 * i));
      return { dtype: 'BF16', shape: raw.shape, bytes: out };
    };
    const folder = variant(GPT2_DIR, fresh(), { tensors: (t) => new Map([...t].map(([n, r]) => [n, truncate(r)])) });
    const hf = await readHfFolder(folder);
    const wte = f32(readRaw(path.join(GPT2_DIR, 'model.safetensors')).get('transformer.wte.weight')!);
    const expected = new Float32Array(new Uint32Array(new Uint32Array(wte.buffer).map((b) => b & 0xffff0000)).buffer);
    expect(sameBytes(hf.tensors.get('embed.tokens.weight')!.data, expected)).toBe(true);
    // binary16 values by their definition: 1, −2, the largest normal 65504, the smallest subnormal 2^−24, 1/3 rounded, +∞.
    const halves = [0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555, 0x7c00];
    const bytes = Buffer.alloc(2 * halves.length);
    halves.forEach((h, i) => bytes.writeUInt16LE(h, 2 * i));
    expect(Array.from(toFloat32(bytes, 'F16'))).toEqual([1, -2, 65504, 2 ** -24, Math.fround(1365 / 4096), Infinity]);
  });
});
