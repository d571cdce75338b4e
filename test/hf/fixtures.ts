// The shared Hugging Face fixtures (../shared/fixtures/hf: tiny GPT2LMHeadModel and BertForMaskedLM
// folders written by transformers, with PyTorch's reference logits) and variants of them written here:
// safetensors files are encoded by hand (any dtype), independently of the project's reader and writer.
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { createLanguageModel, type LanguageModel } from '../../src/model/lm.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';
import { type Recipe } from '../../src/recipe/schema.ts';
import { saveFinalModel } from '../../src/store/model-folder.ts';
import { perturbParameters } from '../helpers/perturb.ts';
import { HF_FIXTURES } from '../helpers/shared.ts';

export const FIXTURES = HF_FIXTURES;
export const GPT2_DIR = path.join(FIXTURES, 'gpt2-tiny');
export const BERT_DIR = path.join(FIXTURES, 'bert-tiny');

export interface Reference {
  input_ids: number[][];
  logits: number[][][];
  loss?: number;
}

export const readReference = (dir: string): Reference => JSON.parse(readFileSync(path.join(dir, 'reference.json'), 'utf8')) as Reference;
export const readConfig = (dir: string): Record<string, unknown> => JSON.parse(readFileSync(path.join(dir, 'config.json'), 'utf8')) as Record<string, unknown>;

/** One raw safetensors entry: dtype, shape and little-endian bytes. */
export interface RawTensor {
  dtype: string;
  shape: number[];
  bytes: Buffer;
}

/** Every tensor of a safetensors file, raw (parsed here, not with the project's reader). */
export function readRaw(file: string): Map<string, RawTensor> {
  const buf = readFileSync(file);
  const n = Number(buf.readBigUInt64LE(0));
  const header = JSON.parse(buf.subarray(8, 8 + n).toString('utf8')) as Record<string, { dtype: string; shape: number[]; data_offsets: [number, number] }>;
  const out = new Map<string, RawTensor>();
  for (const [name, e] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    out.set(name, { dtype: e.dtype, shape: e.shape, bytes: buf.subarray(8 + n + e.data_offsets[0], 8 + n + e.data_offsets[1]) });
  }
  return out;
}

export function writeRaw(file: string, tensors: Map<string, RawTensor>, metadata: Record<string, string> = { format: 'pt' }): void {
  const header: Record<string, unknown> = { __metadata__: metadata };
  let offset = 0;
  for (const [name, t] of tensors) {
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [offset, offset + t.bytes.length] };
    offset += t.bytes.length;
  }
  const json = Buffer.from(JSON.stringify(header));
  const prefix = Buffer.alloc(8);
  prefix.writeBigUInt64LE(BigInt(json.length));
  writeFileSync(file, Buffer.concat([prefix, json, ...[...tensors.values()].map((t) => t.bytes)]));
}

export const f32 = (raw: RawTensor) => new Float32Array(raw.bytes.buffer.slice(raw.bytes.byteOffset, raw.bytes.byteOffset + raw.bytes.length));
export const rawF32 = (shape: number[], values: Float32Array): RawTensor => ({ dtype: 'F32', shape, bytes: Buffer.from(values.buffer.slice(0)) });

/**
 * A copy of a fixture folder in `dst` with its config.json, tensors and files changed by the callbacks
 * (reference.json is not copied; tokenizer.json is, unless `files` says otherwise).
 */
export function variant(
  src: string,
  dst: string,
  change: {
    config?: (c: Record<string, unknown>) => Record<string, unknown>;
    tensors?: (t: Map<string, RawTensor>) => Map<string, RawTensor>;
    /** Writes the weights itself (e.g. as shards); default model.safetensors. */
    writeWeights?: (dir: string, t: Map<string, RawTensor>) => void;
    tokenizer?: boolean;
  } = {},
): string {
  mkdirSync(dst, { recursive: true });
  const config = (change.config ?? ((c) => c))(readConfig(src));
  writeFileSync(path.join(dst, 'config.json'), JSON.stringify(config, null, 2));
  const tensors = (change.tensors ?? ((t) => t))(readRaw(path.join(src, 'model.safetensors')));
  (change.writeWeights ?? ((dir, t) => writeRaw(path.join(dir, 'model.safetensors'), t)))(dst, tensors);
  if (change.tokenizer !== false) copyFileSync(path.join(src, 'tokenizer.json'), path.join(dst, 'tokenizer.json'));
  return dst;
}

/** Renames tensors (entries for which `rename` returns null are dropped). */
export function renamed(t: Map<string, RawTensor>, rename: (name: string) => string | null): Map<string, RawTensor> {
  const out = new Map<string, RawTensor>();
  for (const [name, raw] of t) {
    const to = rename(name);
    if (to !== null) out.set(to, raw);
  }
  return out;
}

/** Our logits for the reference's input ids (all positions real). */
export function logitsOf(model: LanguageModel, ids: number[][]): number[][][] {
  return tf.tidy(() => model.logits(tf.tensor2d(ids, undefined, 'int32'), tf.ones([ids.length, ids[0].length]) as tf.Tensor2D).arraySync() as number[][][]);
}

export function maxAbsDiff(a: number[][][], b: number[][][]): number {
  let max = 0;
  a.forEach((rows, i) => rows.forEach((row, j) => row.forEach((v, k) => (max = Math.max(max, Math.abs(v - b[i][j][k]))))));
  return max;
}

/** Every parameter and buffer of a model, by name. */
export function valuesOf(model: LanguageModel): Map<string, Float32Array> {
  return new Map([...model.parameters(), ...model.buffers()].map(([n, v]) => [n, (v.dataSync() as Float32Array).slice()]));
}

export const sameBytes = (a: Float32Array, b: Float32Array) =>
  Buffer.from(a.buffer, a.byteOffset, a.byteLength).equals(Buffer.from(b.buffer, b.byteOffset, b.byteLength));

/** Moves every parameter by N(0, scale²) noise, so that a misplaced tensor changes the outputs. */
export function perturb(model: LanguageModel, seed: number, scale = 0.05): void {
  perturbParameters(model, seed, scale);
}

/** A model of the recipe with perturbed weights (N(0, scale²) noise), saved as a run's final/ folder the way training saves it. */
export async function savedRun(recipe: Recipe, runDir: string, seed: number, scale?: number): Promise<string> {
  const tokenizer = await TextTokenizer.load(recipe.data.tokenizer);
  const model = createLanguageModel(modelConfigFromRecipe(recipe, tokenizer.vocabSize));
  perturb(model, seed, scale);
  const folder = await saveFinalModel(runDir, model, recipe, { tokenizer_sha256: tokenizer.sha256, step: '3' });
  model.dispose();
  return folder;
}
