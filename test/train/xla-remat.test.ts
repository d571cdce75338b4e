// train.remat (docs/xla.md "Rematerialisation") without jax: the recipe allows it with the xla executor alone (an
// error naming the field and the fix otherwise), so does an execution plan made without a recipe; the program cache
// key and a compiled folder tell remat programs apart. The programs themselves: xla-remat-run.test.ts.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { currentDevice } from '../../src/backend/current.ts';
import { initBackend } from '../../src/backend/start.ts';
import { programHash, type ProgramSpec } from '../../src/backend/xla/program-cache.ts';
import { createLanguageModel } from '../../src/model/lm.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { resolveExecutionPlan } from '../../src/train/execution-plan.ts';
import { CompiledBook, MANIFEST_FILE, modelTensors } from '../../src/train/xla-recording.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

const recipeText = (train: string) => `
model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2 }
data: { dataset: data, tokenizer: tokenizer.json, seqLen: 16 }
train: { ${train} }
`;

describe('train.remat', () => {
  beforeAll(async () => {
    await initBackend('cpu', { quiet: true });
  });

  it('with an executor other than xla is an error naming the field and the fix; with xla it loads; default off', () => {
    for (const executor of ['auto', 'functions', 'op-by-op', 'replicas']) {
      expect(() => parseRecipe(recipeText(`remat: true, executor: ${executor}`), 'r.yaml')).toThrow(
        `train.remat runs on train.executor xla only (train.executor is ${executor}; it shapes the programs XLA compiles): set train.executor: xla, or train.remat: false`,
      );
    }
    expect(() => parseRecipe(recipeText('remat: true'), 'r.yaml', ['--train.executor=functions'])).toThrow(/train\.remat runs on train\.executor xla only/);
    expect(parseRecipe(recipeText('remat: true, executor: xla'), 'r.yaml').train.remat).toBe(true);
    expect(parseRecipe(recipeText(''), 'r.yaml').train.remat).toBe(false);
    expect(() => parseRecipe(recipeText('remat: yes please, executor: xla'), 'r.yaml')).toThrow(/train\.remat/);
  });

  it('an execution plan: off by default, and refused for an executor other than xla', () => {
    const model = createLanguageModel(tinyGptConfig());
    try {
      expect(resolveExecutionPlan({}, currentDevice(), null, model).remat).toBe(false);
      expect(() => resolveExecutionPlan({ remat: true, executor: 'op-by-op' }, currentDevice(), null, model)).toThrow(
        "train.remat: rematerialisation shapes the xla executor's programs (train.executor: xla, docs/xla.md); this run's train.executor is op-by-op",
      );
    } finally {
      model.dispose();
    }
  });

  it('the program cache key covers it, and leaves the keys of programs without it as they were', () => {
    const spec: ProgramSpec = { graphDef: Uint8Array.of(1, 2), feeds: [], fetches: ['f:0'], inputs: [], outputs: ['x'] };
    expect(programHash({ ...spec, remat: false })).toBe(programHash(spec));
    expect(programHash({ ...spec, remat: true })).not.toBe(programHash(spec));
  });

  it('a compiled folder recorded otherwise is an error naming the folder, both settings and the fix', () => {
    const model = createLanguageModel(tinyGptConfig());
    const folder = mkdtempSync(join(tmpdir(), 'slay-xla-remat-'));
    try {
      const manifest = { format: 1, recipe: 'tiny', tensors: modelTensors(model).map(([n, t]) => [n, t.shape]), programs: [] };
      writeFileSync(join(folder, MANIFEST_FILE), JSON.stringify(manifest));
      // A folder from before train.remat holds plain programs.
      expect(() => new CompiledBook(folder, model, { remat: false })).not.toThrow();
      expect(() => new CompiledBook(folder, model, { remat: true })).toThrow(
        `xla: ${join(folder, MANIFEST_FILE)} was compiled with train.remat false, this run asks true (npm run compile -- <recipe> --train.executor=xla --train.remat=true --out <folder> writes programs for it)`,
      );
      writeFileSync(join(folder, MANIFEST_FILE), JSON.stringify({ ...manifest, remat: true }));
      expect(() => new CompiledBook(folder, model, { remat: true })).not.toThrow();
      expect(() => new CompiledBook(folder, model)).toThrow(/was compiled with train\.remat true, this run asks false/);
    } finally {
      model.dispose();
      rmSync(folder, { recursive: true, force: true });
    }
  });
});
