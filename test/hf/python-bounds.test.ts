// The exported PyTorch code (src/hf/python/) holds config.json to the same bounds as this project's loader:
// its tables equal src/core/bounds.ts and the mechanisms' option specs, and a config.json edited apart from
// the .py files (SLAY `quadratureNodes: 20000`, `n_layer: 100000`, …) makes from_pretrained raise parseHfConfig's
// own message, naming the file, before any tensor is allocated. Needs a Python with torch and transformers
// (`npm run setup:transformers`); without it the suite is skipped with one line saying so.
import { spawnSync } from 'node:child_process';
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { BOUNDS } from '../../src/core/bounds.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { parseHfConfig } from '../../src/hf/config.ts';
import { attentionNames, attentionOptionSpecs } from '../../src/model/attention/index.ts';
import { exportHf } from '../../src/store/hf-export.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { syntheticDocuments } from '../data/stream-fixtures.ts';
import { testBackend } from '../helpers/backend.ts';
import { findTransformersPython, TRANSFORMERS_SETUP } from '../helpers/python.ts';
import { savedRun } from './fixtures.ts';

const python = findTransformersPython();
if (!python) console.warn(`skipped: the bounds of the exported PyTorch code need a Python with torch and transformers (set up with: ${TRANSFORMERS_SETUP})`);

/** A config.json, edited freely. */
type Json = Record<string, any>;

function runCheck(args: string[], dir: string): unknown {
  const run = spawnSync(python!, ['test/hf/bounds_check.py', ...args], {
    encoding: 'utf8',
    timeout: 240_000,
    env: { ...process.env, HF_MODULES_CACHE: path.join(dir, 'hf-modules'), HF_HUB_OFFLINE: '1' },
  });
  if (run.status !== 0) throw new Error(`bounds_check.py exited with ${run.status}:\n${run.stderr}`);
  return JSON.parse(run.stdout);
}

interface Edit {
  name: string;
  export: 'slay' | 'bert' | 'schoenbat';
  edit: (config: Json) => void;
}

/** Edits of config.json; each breaks one or more bounds. */
const EDITS: Edit[] = [
  { name: 'SLAY quadratureNodes 20000', export: 'slay', edit: (c) => (c.slayformer.attention.options.quadratureNodes = 20000) },
  { name: 'n_layer 100000', export: 'slay', edit: (c) => (c.n_layer = 100000) },
  {
    name: 'n_positions 2.5, n_embd 33 (not divisible by n_head), typeVocabSize -1',
    export: 'slay',
    edit: (c) => Object.assign(c, { n_positions: 2.5, n_embd: 33, n_inner: null }, { slayformer: { ...c.slayformer, typeVocabSize: -1 } }),
  },
  { name: 'prfFeatures 1e6, n_inner 100 × n_embd', export: 'slay', edit: (c) => ((c.n_inner = 3200), (c.slayformer.attention.options.prfFeatures = 1e6)) },
  { name: 'an unknown option', export: 'slay', edit: (c) => (c.slayformer.attention.options.nodes = 3) },
  {
    name: 'a number option below its minimum (written as JavaScript writes -1e-7)',
    export: 'slay',
    edit: (c) => (c.slayformer.attention.options.delta = -1e-7),
  },
  { name: 'an option of the wrong type', export: 'slay', edit: (c) => (c.slayformer.attention.options.poly = ['anchor']) },
  {
    name: 'BERT vocab_size 2^21, num_attention_heads 5000, intermediate_size 10^7',
    export: 'bert',
    edit: (c) => Object.assign(c, { vocab_size: 2 ** 21, num_attention_heads: 5000, intermediate_size: 1e7 }),
  },
  {
    name: 'BERT Performer features 2^20, max_position_embeddings 2^30',
    export: 'bert',
    edit: (c) => ((c.max_position_embeddings = 2 ** 30), (c.slayformer.attention.options.features = 2 ** 20)),
  },
  { name: 'an unknown mechanism', export: 'bert', edit: (c) => (c.slayformer.attention.name = 'flash') },
];

let dir: string;
const exports = new Map<string, string>();
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = mkdtempSync(path.join(tmpdir(), 'slay-hf-bounds-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!python)(`the exported PyTorch code's bounds (needs: ${TRANSFORMERS_SETUP})`, () => {
  beforeAll(async () => {
    const tokenizer = path.join(dir, 'tokenizer.json');
    await trainByteLevelBpeFromTexts(syntheticDocuments(100, 3), 300, tokenizer);
    const models = {
      slay: 'kind: gpt, attention: { name: slay }',
      bert: 'kind: bert, attention: { name: performer, options: { features: 16 } }',
      schoenbat: 'kind: gpt, attention: { name: schoenbat, options: { features: 16 } }',
    };
    for (const [name, model] of Object.entries(models)) {
      const recipe = parseRecipe(
        `model: { dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16, ${model} }\ndata: { dataset: d, tokenizer: ${tokenizer}, seqLen: 16 }`,
        path.join(dir, `${name}.yaml`),
      );
      const run = await savedRun(recipe, path.join(dir, `run-${name}`), 1);
      exports.set(name, (await exportHf(run, { out: path.join(dir, `hf-${name}`) })).out);
    }
  });

  it("its tables are src/core/bounds.ts and every mechanism's option specs", () => {
    const tables = runCheck(['tables'], dir) as { bounds: Json; options: Json };
    expect(tables.bounds).toEqual(BOUNDS);
    const specs = Object.fromEntries(
      attentionNames().map((name) => [
        name,
        Object.fromEntries(Object.entries(attentionOptionSpecs(name)).map(([key, { doc: _doc, ...spec }]) => [key, spec])),
      ]),
    );
    expect(tables.options).toEqual(specs);
    // In the same order: the first bad option is the one both name.
    for (const name of attentionNames()) expect(Object.keys(tables.options[name])).toEqual(Object.keys(specs[name]));
    expect(Object.keys(tables.options)).toEqual(attentionNames());
  });

  it("an edited config.json fails from_pretrained with parseHfConfig's message, naming the file, before allocating", () => {
    const requests = EDITS.map((e, i) => {
      const folder = path.join(dir, `edited-${i}`);
      cpSync(exports.get(e.export)!, folder, { recursive: true });
      const file = path.join(folder, 'config.json');
      const config = JSON.parse(readFileSync(file, 'utf8')) as Json;
      e.edit(config);
      writeFileSync(file, JSON.stringify(config));
      let expected = '';
      try {
        parseHfConfig(config, file);
      } catch (err) {
        expected = (err as Error).message;
      }
      return { folder, kind: e.export === 'bert' ? 'bert' : 'gpt', expected };
    });
    const results = runCheck(['load', writeRequests(requests)], dir) as { error: string | null; peak_growth_mb: number }[];
    EDITS.forEach((e, i) => {
      expect(requests[i].expected, e.name).toMatch(new RegExp(`^${requests[i].folder.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}/config\\.json: `));
      expect(results[i].error, e.name).toBe(requests[i].expected);
      expect(results[i].peak_growth_mb, e.name).toBeLessThan(200);
    });
    expect(results[0].error).toContain("slayformer.attention.options: attention 'slay': option 'quadratureNodes' must be an integer ≤ 64 (got 20000)");
    expect(results[1].error).toContain("n_layer must be an integer ≥ 1, ≤ 1024 (got 100000; the bound: over 10× GPT-3's 96 layers)");
  });

  it('SchoenbAt degrees that config.json records are checked too (the PyTorch code reads them; the project redraws them)', () => {
    const folder = path.join(dir, 'edited-degrees');
    cpSync(exports.get('schoenbat')!, folder, { recursive: true });
    const file = path.join(folder, 'config.json');
    const config = JSON.parse(readFileSync(file, 'utf8')) as Json;
    config.slayformer.layers[1].maclaurinDegrees = [1e9, ...config.slayformer.layers[1].maclaurinDegrees.slice(1)];
    writeFileSync(file, JSON.stringify(config));
    const [result] = runCheck(['load', writeRequests([{ folder, kind: 'gpt' }])], dir) as { error: string }[];
    expect(result.error).toBe(
      `${file}: slayformer.layers[1].maclaurinDegrees must be 15 integers from 20 down to 1, highest first (got ${JSON.stringify(config.slayformer.layers[1].maclaurinDegrees).slice(0, 120)})`,
    );
  });

  it('an unedited export loads; a configuration changed after loading is checked again when the model is built', () => {
    const requests = [
      { folder: exports.get('slay')!, kind: 'gpt' },
      { folder: exports.get('bert')!, kind: 'bert' },
      { folder: exports.get('slay')!, kind: 'gpt', set: { n_layer: 100000 } },
    ];
    const [slay, bert, changed] = runCheck(['load', writeRequests(requests)], dir) as { error: string | null; peak_growth_mb: number }[];
    expect([slay.error, bert.error]).toEqual([null, null]);
    expect(changed.error).toBe("config.json: n_layer must be an integer ≥ 1, ≤ 1024 (got 100000; the bound: over 10× GPT-3's 96 layers)");
    expect(changed.peak_growth_mb).toBeLessThan(200);
  });
});

let requestCount = 0;
function writeRequests(requests: unknown[]): string {
  const file = path.join(dir, `bounds-request-${requestCount++}.json`);
  writeFileSync(file, JSON.stringify(requests));
  return file;
}
