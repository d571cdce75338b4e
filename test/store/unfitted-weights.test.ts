// A crafted featureLogWeights buffer (dataInit 'variance-optimal'): in a checkpoint's model.safetensors or in a Hugging
// Face export, NaN, ±∞, a finite value no fit gives, or a wrong length is refused naming the file and the buffer,
// before a model is built; the fitted buffer loads.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { decodeSafetensors, encodeSafetensors } from '../../src/hf/safetensors.ts';
import { Rng } from '../../src/core/rng.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';
import { exportHf } from '../../src/store/hf-export.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { saveFinalModel } from '../../src/store/model-folder.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { initializeLayersFromData } from '../../src/train/finetune.ts';
import { testBackend } from '../helpers/backend.ts';
import { f32, GPT2_DIR, rawF32, readRaw, writeRaw } from '../hf/fixtures.ts';

const TOKENIZER = path.join(GPT2_DIR, 'tokenizer.json');
const BUFFER = 'blocks.1.attn.featureLogWeights';
let dir: string;
let count = 0;
let checkpoint: string;
let exported: string;

beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = mkdtempSync(path.join(tmpdir(), 'slay-unfitted-'));
  const recipe = parseRecipe(
    `model: { kind: gpt, dModel: 16, numLayers: 2, numHeads: 2, maxSeqLen: 8, attention: { name: performer, options: { features: 8, dataInit: variance-optimal } } }\n` +
      `data: { dataset: d, tokenizer: ${TOKENIZER}, seqLen: 8 }`,
    path.join(dir, 'recipe.yaml'),
  );
  const tokenizer = await TextTokenizer.load(TOKENIZER);
  const model = createLanguageModel(modelConfigFromRecipe(recipe, tokenizer.vocabSize));
  const rng = new Rng(3);
  const ids = () => Int32Array.from({ length: 4 * 8 }, () => rng.int(tokenizer.vocabSize));
  initializeLayersFromData(model, [{ batchSize: 4, seqLen: 8, inputIds: ids(), labels: ids() }], new Set([0, 1]));
  checkpoint = await saveFinalModel(path.join(dir, 'run'), model, recipe, { tokenizer_sha256: tokenizer.sha256, step: '1' }, tokenizer);
  model.dispose();
  exported = path.join(dir, 'export');
  await exportHf(checkpoint, { out: exported });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The fitted values of the buffer in the checkpoint. */
const fitted = () => decodeSafetensors(readFileSync(path.join(checkpoint, 'model.safetensors'))).tensors.get(BUFFER)!;

/** A copy of the checkpoint's final/ (without COMPLETE's checksums) whose buffer is `values` of `shape`. */
function craftedCheckpoint(values: Float32Array, shape: number[]): string {
  const folder = path.join(dir, `checkpoint-${count++}`);
  mkdirSync(folder);
  const { tensors, metadata } = decodeSafetensors(readFileSync(path.join(checkpoint, 'model.safetensors')));
  tensors.set(BUFFER, { shape, data: values });
  writeFileSync(path.join(folder, 'model.safetensors'), encodeSafetensors(tensors, metadata), { flag: 'wx' });
  for (const file of ['recipe.json', 'tokenizer.json']) writeFileSync(path.join(folder, file), readFileSync(path.join(checkpoint, file)));
  return folder;
}

/** A copy of the Hugging Face export whose buffer is `values` of `shape`. */
function craftedExport(values: Float32Array, shape: number[]): string {
  const folder = path.join(dir, `export-${count++}`);
  mkdirSync(folder);
  const tensors = readRaw(path.join(exported, 'model.safetensors'));
  const name = [...tensors.keys()].find((n) => n.endsWith(BUFFER))!;
  tensors.set(name, rawF32(shape, values));
  writeRaw(path.join(folder, 'model.safetensors'), tensors);
  for (const file of ['config.json', 'tokenizer.json']) writeFileSync(path.join(folder, file), readFileSync(path.join(exported, file)));
  return folder;
}

/** The fitted buffer with `value` at index 5 ([0, 5]). */
const withValue = (value: number) => {
  const values = fitted().data.slice();
  values[5] = value;
  return values;
};

describe('featureLogWeights crafted in a saved model', () => {
  it('the fitted buffer loads from the checkpoint and from the export, unchanged', async () => {
    const expected = fitted();
    expect(Math.max(...expected.data.map(Math.abs))).toBeGreaterThan(0.01); // fitted, not the zeros of a new model
    for (const folder of [checkpoint, `hf:${exported}`]) {
      const { model } = await loadModel(folder);
      expect(Array.from(model.buffers().get(BUFFER)!.dataSync()), folder).toEqual(Array.from(expected.data));
      model.dispose();
    }
    const raw = readRaw(path.join(exported, 'model.safetensors'));
    expect(Array.from(f32(raw.get([...raw.keys()].find((n) => n.endsWith(BUFFER))!)!))).toEqual(Array.from(expected.data));
  });

  it('NaN, ±∞, a huge or far too small finite value, and a wrong length are refused naming the file and the buffer, with no tensor made', async () => {
    const { shape } = fitted();
    const nextTensorId = () => tf.tidy(() => tf.scalar(0).id);
    const cases: [string, Float32Array, number[], RegExp, RegExp][] = [
      [
        'NaN',
        withValue(NaN),
        shape,
        /tensor 'blocks\.1\.attn\.featureLogWeights' holds a non-finite value \(NaN at index 5\)/,
        /holds a non-finite value \(NaN at index 5\)/,
      ],
      [
        '+∞',
        withValue(Infinity),
        shape,
        /'blocks\.1\.attn\.featureLogWeights' holds a non-finite value \(Infinity at index 5\)/,
        /non-finite value \(Infinity at index 5\)/,
      ],
      [
        '−∞',
        withValue(-Infinity),
        shape,
        /'blocks\.1\.attn\.featureLogWeights' holds a non-finite value \(-Infinity at index 5\)/,
        /non-finite value \(-Infinity at index 5\)/,
      ],
      [
        'huge',
        withValue(1e30),
        shape,
        /blocks\.1\.attn\.featureLogWeights holds 1\.0000000150474662e\+30 at \[0, 5\], outside \[-[\d.]+, 8\.789\]: no fit gives that log importance weight/,
        /'slayformer\.blocks\.1\.attn\.featureLogWeights' holds 1\.0000000150474662e\+30 at \[0, 5\], outside/,
      ],
      // Beyond ½·d·ln 9 (d = 8 here: 8.79): more than any proposal's weight.
      ['just above', withValue(9), shape, /featureLogWeights holds 9 at \[0, 5\], outside \[-[\d.]+, 8\.789\]/, /featureLogWeights' holds 9 at \[0, 5\]/],
      ['far below', withValue(-1e6), shape, /featureLogWeights holds -1000000 at \[0, 5\], outside \[-[\d.]+, 8\.789\]/, /holds -1000000 at \[0, 5\]/],
      [
        'wrong length',
        new Float32Array(2 * 9),
        [2, 9],
        /the tensors do not match the model config:\n {2}other shape: blocks\.1\.attn\.featureLogWeights \[2, 9\], the config builds \[2, 8\]/,
        /featureLogWeights is \[2, 9\] but config\.json implies \[2, 8\]/,
      ],
    ];
    for (const [name, values, bufferShape, checkpointError, exportError] of cases) {
      const folder = craftedCheckpoint(values, bufferShape);
      const before = nextTensorId();
      await expect(loadModel(folder), name).rejects.toThrow(new RegExp(`${path.join(folder, 'model.safetensors')}: [\\s\\S]*${checkpointError.source}`));
      expect(nextTensorId(), name).toBe(before + 1);
      const hf = craftedExport(values, bufferShape);
      await expect(loadModel(`hf:${hf}`), name).rejects.toThrow(new RegExp(`${path.join(hf, 'model.safetensors')}: [\\s\\S]*${exportError.source}`));
    }
  });
});
