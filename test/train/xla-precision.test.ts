// train.precision (docs/xla.md "Mixed precision") without jax: the recipe allows bf16 with the xla executor alone
// (an error naming the field and the fix otherwise); the program cache key and a compiled folder tell precisions
// apart. The programs themselves and runs in bf16: xla-precision-run.test.ts.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { programHash, type ProgramSpec } from '../../src/backend/xla/program-cache.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { CompiledBook, MANIFEST_FILE, modelTensors } from '../../src/train/xla-recording.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

const recipeText = (train: string) => `
model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2 }
data: { dataset: data, tokenizer: tokenizer.json, seqLen: 16 }
train: { ${train} }
`;

describe('train.precision', () => {
  it('bf16 with an executor other than xla is an error naming the field and the fix; with xla it loads', () => {
    for (const executor of ['auto', 'functions', 'op-by-op']) {
      expect(() => parseRecipe(recipeText(`precision: bf16, executor: ${executor}`), 'r.yaml')).toThrow(
        `train.precision bf16 runs on train.executor xla only (train.executor is ${executor}; TensorFlow.js has no bfloat16): set train.executor: xla, or train.precision: fp32`,
      );
    }
    expect(() => parseRecipe(recipeText('precision: bf16'), 'r.yaml', ['--train.executor=functions'])).toThrow(
      /train\.precision bf16 runs on train\.executor xla only/,
    );
    expect(parseRecipe(recipeText('precision: bf16, executor: xla'), 'r.yaml').train.precision).toBe('bf16');
    expect(parseRecipe(recipeText(''), 'r.yaml').train.precision).toBe('fp32');
  });

  it('the program cache key covers the precision', () => {
    const spec: ProgramSpec = { graphDef: Uint8Array.of(1, 2), feeds: [], fetches: ['f:0'], inputs: [], outputs: ['x'] };
    expect(programHash({ ...spec, precision: 'fp32' })).toBe(programHash(spec));
    expect(programHash({ ...spec, precision: 'bf16' })).not.toBe(programHash(spec));
  });

  it('a compiled folder of another precision is an error naming the folder, both precisions and the fix', async () => {
    await initBackend('cpu', { quiet: true });
    const model = createLanguageModel(tinyGptConfig());
    const folder = mkdtempSync(join(tmpdir(), 'slay-xla-precision-'));
    try {
      const manifest = { format: 1, recipe: 'tiny', tensors: modelTensors(model).map(([n, t]) => [n, t.shape]), programs: [] };
      writeFileSync(join(folder, MANIFEST_FILE), JSON.stringify(manifest));
      // A folder from before train.precision holds fp32 programs.
      expect(() => new CompiledBook(folder, model, { precision: 'fp32' })).not.toThrow();
      expect(() => new CompiledBook(folder, model, { precision: 'bf16' })).toThrow(
        `xla: ${join(folder, MANIFEST_FILE)} was compiled for train.precision fp32, this run asks bf16 (npm run compile -- <recipe> --train.executor=xla --train.precision=bf16 --out <folder> writes programs for it)`,
      );
      writeFileSync(join(folder, MANIFEST_FILE), JSON.stringify({ ...manifest, precision: 'bf16' }));
      expect(() => new CompiledBook(folder, model, { precision: 'bf16' })).not.toThrow();
      expect(() => new CompiledBook(folder, model)).toThrow(/was compiled for train\.precision bf16, this run asks fp32/);
    } finally {
      model.dispose();
      rmSync(folder, { recursive: true, force: true });
    }
  });
});
