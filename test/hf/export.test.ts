// npm run export: export → import is the identity (every parameter and buffer bit for bit, the same
// model config) for imported and native models, standard and custom; the exported GPT-2/BERT
// tensors are byte-identical to what transformers wrote; existing folders are never clobbered.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import YAML from 'yaml';
import { initBackend } from '../../src/backend/start.ts';
import { testBackend } from '../helpers/backend.ts';
import { exportHf } from '../../src/store/hf-export.ts';
import { architectureOf } from '../../src/model/transformer.ts';
import type { LanguageModelConfig } from '../../src/model/lm.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { markRunFolder } from '../../src/store/run-folder.ts';
import { escapeMarkdown } from '../../src/core/markdown.ts';
import { BERT_DIR, GPT2_DIR, readRaw, sameBytes, savedRun, valuesOf } from './fixtures.ts';

let dir: string;
let count = 0;
const fresh = () => path.join(dir, `x${count++}`);
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = mkdtempSync(path.join(tmpdir(), 'slay-hf-export-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const TOKENIZER = path.join(GPT2_DIR, 'tokenizer.json');
const PYTHON_FILES = ['configuration_slayformer.py', 'modeling_slayformer.py'];
const nativeRecipe = (model: string) =>
  parseRecipe(`model: ${model}\ndata: { dataset: d, tokenizer: ${TOKENIZER}, seqLen: 16 }\ntrain: { seed: 4 }`, path.join(dir, 'native.yaml'));

/** What defines the function of a model (dropout and seed do not). */
const definition = (c: LanguageModelConfig) => ({
  kind: c.kind,
  vocabSize: c.vocabSize,
  maxSeqLen: c.maxSeqLen,
  dModel: c.dModel,
  numLayers: c.numLayers,
  numHeads: c.numHeads,
  mlpRatio: c.mlpRatio,
  bias: c.bias,
  attention: c.attention,
  ...architectureOf(c),
});

/** Exports `checkpoint`, imports the export, and checks every tensor and the config; returns the export folder. */
async function roundTrip(checkpoint: string, modelType: string): Promise<string> {
  const out = fresh();
  const result = await exportHf(checkpoint, { out });
  expect(result.modelType).toBe(modelType);
  // Custom exports carry their PyTorch implementation, a copy of src/hf/python/.
  const python = modelType.startsWith('slayformer-') ? PYTHON_FILES : [];
  expect(readdirSync(out).sort()).toEqual(['README.md', 'config.json', 'model.safetensors', 'tokenizer.json', 'tokenizer_config.json', ...python].sort());
  for (const file of python) expect(readFileSync(path.join(out, file)).equals(readFileSync(path.join('src/hf/python', file))), file).toBe(true);
  const before = await snapshot(checkpoint);
  const after = await snapshot(out);
  expect(after.config).toEqual(before.config);
  expect([...after.values.keys()].sort()).toEqual([...before.values.keys()].sort());
  for (const [name, values] of before.values) expect(sameBytes(after.values.get(name)!, values), name).toBe(true);
  return out;
}

/** The loaded model's definition and tensors (models are loaded one at a time: tfjs variable names are global). */
async function snapshot(folder: string) {
  const { model } = await loadModel(folder);
  try {
    return { config: definition(model.config), values: valuesOf(model) };
  } finally {
    model.dispose();
  }
}

describe('export → import is the identity', () => {
  for (const [name, fixture, modelType] of [
    ['GPT2LMHeadModel', GPT2_DIR, 'gpt2'],
    ['BertForMaskedLM', BERT_DIR, 'bert'],
  ] as const) {
    it(`the ${name} fixture, whose exported tensors are byte for byte the ones transformers wrote`, async () => {
      const out = await roundTrip(`hf:${fixture}`, modelType);
      const original = readRaw(path.join(fixture, 'model.safetensors'));
      const exported = readRaw(path.join(out, 'model.safetensors'));
      expect([...exported.keys()].sort()).toEqual([...original.keys()].sort());
      for (const [tensor, raw] of original) {
        expect(exported.get(tensor)!.shape, tensor).toEqual(raw.shape);
        expect(exported.get(tensor)!.bytes.equals(raw.bytes), tensor).toBe(true);
      }
      expect(readFileSync(path.join(out, 'tokenizer.json')).equals(readFileSync(path.join(fixture, 'tokenizer.json')))).toBe(true);
    });
  }

  it('a native GPT with the exact GELU and ε 1e-6 is a standard GPT-2 (activation_function "gelu")', async () => {
    const run = await savedRun(
      nativeRecipe('{ kind: gpt, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16, activation: gelu-erf, layerNormEps: 1e-6 }'),
      fresh(),
      1,
    );
    const out = await roundTrip(run, 'gpt2');
    const config = JSON.parse(readFileSync(path.join(out, 'config.json'), 'utf8')) as Record<string, unknown>;
    expect(config).toMatchObject({ activation_function: 'gelu', layer_norm_epsilon: 1e-6, n_inner: 128, eos_token_id: 0, pad_token_id: 1 });
    expect(JSON.parse(readFileSync(path.join(out, 'tokenizer_config.json'), 'utf8'))).toMatchObject({
      tokenizer_class: 'PreTrainedTokenizerFast',
      eos_token: '<|endoftext|>',
      pad_token: '[PAD]',
      model_max_length: 16,
    });
  });

  it('a DARKFormer GPT is a slayformer-gpt2 folder: M and the random projection travel as slayformer.* tensors', async () => {
    const run = await savedRun(
      nativeRecipe('{ kind: gpt, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16, attention: { name: darkformer, options: { features: 8, rank: 4 } } }'),
      fresh(),
      2,
    );
    const out = await roundTrip(run, 'slayformer-gpt2');
    const tensors = [...readRaw(path.join(out, 'model.safetensors')).keys()];
    expect(tensors.filter((t) => t.startsWith('slayformer.')).sort()).toEqual(
      [0, 1].flatMap((i) => [`slayformer.blocks.${i}.attn.covarianceFactor`, `slayformer.blocks.${i}.attn.projection`]),
    );
    expect(readFileSync(path.join(out, 'README.md'), 'utf8')).toContain('transformers has no class for it (attention darkformer)');
    const config = JSON.parse(readFileSync(path.join(out, 'config.json'), 'utf8')) as Record<string, unknown>;
    expect(config).toMatchObject({
      architectures: ['SlayformerForCausalLM'],
      auto_map: { AutoConfig: 'configuration_slayformer.SlayformerGPT2Config', AutoModelForCausalLM: 'modeling_slayformer.SlayformerForCausalLM' },
      layer_types: Array(2).fill('slayformer darkformer attention (load with AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True))'),
      // Every option written out, the defaults included.
      slayformer: {
        attention: {
          name: 'darkformer',
          options: {
            features: 8,
            rank: 4,
            orthogonal: true,
            redrawInterval: 0,
            delta: 1e-6,
            init: 'identity',
            dataInit: 'none',
            chunkSize: 64,
            segmentLength: 0,
          },
        },
      },
    });
  });

  it('a SchoenbAt GPT records the degrees of its Maclaurin features per layer (the buffers do not show them)', async () => {
    const recipe = nativeRecipe(
      '{ kind: gpt, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16, attention: { name: schoenbat, options: { features: 12 } } }',
    );
    const out = await roundTrip(await savedRun(recipe, fresh(), 5), 'slayformer-gpt2');
    const { model } = await loadModel(out);
    const degrees = model.body.attention.map((a) => a.drawLayout!.maclaurinDegrees);
    model.dispose();
    const config = JSON.parse(readFileSync(path.join(out, 'config.json'), 'utf8')) as { slayformer: { layers: { maclaurinDegrees: number[] }[] } };
    expect(config.slayformer.layers.map((l) => l.maclaurinDegrees)).toEqual(degrees);
    expect(degrees.every((d) => d.length === 11)).toBe(true);
  });

  it('a native pre-LN BERT without biases or token types, with SLAY attention, is a slayformer-bert folder', async () => {
    const run = await savedRun(
      nativeRecipe('{ kind: bert, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16, bias: false, attention: { name: slay } }'),
      fresh(),
      3,
    );
    const out = await roundTrip(run, 'slayformer-bert');
    const config = JSON.parse(readFileSync(path.join(out, 'config.json'), 'utf8')) as { slayformer: Record<string, unknown> };
    expect(config.slayformer).toMatchObject({ bias: false, normPosition: 'pre', embeddingNorm: false, typeVocabSize: 0 });
    expect(readRaw(path.join(out, 'model.safetensors')).has('slayformer.norm.weight')).toBe(true); // the final LayerNorm BERT lacks
  });

  it.each([
    ['gpt', 'gla', 'slayformer-gpt2', ['transformer.h.0.mlp.c_gate.weight', 'slayformer.blocks.0.attn.gateDown']],
    ['bert', 'linear-elu', 'slayformer-bert', ['bert.encoder.layer.0.intermediate.gate.weight']],
  ])('a Transformer++ %s with %s (rotary positions, SwiGLU, RMSNorm, no biases) round-trips as a %s folder', async (kind, attention, modelType, expected) => {
    const run = await savedRun(
      nativeRecipe(
        `{ kind: ${kind}, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16, positional: rope, ropeTheta: 500, mlp: swiglu, norm: rmsnorm, bias: false, attention: { name: ${attention} } }`,
      ),
      fresh(),
      5,
    );
    const out = await roundTrip(run, modelType);
    const config = JSON.parse(readFileSync(path.join(out, 'config.json'), 'utf8')) as { slayformer: Record<string, unknown> };
    expect(config.slayformer).toMatchObject({ positional: 'rope', ropeTheta: 500, mlp: 'swiglu', norm: 'rmsnorm', bias: false });
    const names = [...readRaw(path.join(out, 'model.safetensors')).keys()];
    for (const name of expected) expect(names).toContain(name);
    // No position table, and RMSNorms without a bias.
    expect(names.filter((n) => /wpe|position_embeddings|\.bias$/.test(n))).toEqual(
      kind === 'bert' ? ['cls.predictions.bias', 'cls.predictions.transform.dense.bias', 'cls.predictions.transform.LayerNorm.bias'].sort() : [],
    );
  });
});

describe('the output folder', () => {
  it('is never replaced unless it is an earlier export and --overwrite is given; files of others are never touched', async () => {
    const foreign = fresh();
    mkdirSync(foreign);
    writeFileSync(path.join(foreign, 'notes.txt'), 'mine');
    await expect(exportHf(`hf:${GPT2_DIR}`, { out: foreign })).rejects.toThrow(`${foreign} already exists; pass --overwrite to replace an earlier export`);
    await expect(exportHf(`hf:${GPT2_DIR}`, { out: foreign, overwrite: true })).rejects.toThrow(
      `${foreign} was not written by npm run export (its config.json has no "slayformer" section); not replacing it`,
    );
    expect(readdirSync(foreign)).toEqual(['notes.txt']);
    const out = fresh();
    await exportHf(`hf:${GPT2_DIR}`, { out });
    await exportHf(`hf:${BERT_DIR}`, { out, overwrite: true });
    expect((JSON.parse(readFileSync(path.join(out, 'config.json'), 'utf8')) as { model_type: string }).model_type).toBe('bert');
    writeFileSync(path.join(out, 'notes.txt'), 'mine');
    await expect(exportHf(`hf:${GPT2_DIR}`, { out, overwrite: true })).rejects.toThrow(
      `${out} was not written by npm run export (it holds notes.txt, which export does not write); not replacing it`,
    );
    expect(readdirSync(dir).filter((e) => e.includes('.partial-') || e.includes('.old-'))).toEqual([]);
  });

  it('removes the partial folders of exports that died (dead pid, nothing but export files), and only those', async () => {
    const out = fresh();
    const partial = (pid: number, files: Record<string, string>) => {
      const folder = `${out}.partial-${pid}`;
      mkdirSync(folder);
      for (const [name, text] of Object.entries(files)) writeFileSync(path.join(folder, name), text);
      return folder;
    };
    const dead = 2 ** 22 + 12345;
    const killed = partial(dead, { 'config.json': '{}', 'model.safetensors': 'cut short' });
    const foreign = partial(dead + 1, { 'config.json': '{}', 'notes.txt': 'mine' });
    const running = partial(process.ppid, { 'config.json': '{}' }); // a live process's export, still being written
    const result = await exportHf(`hf:${GPT2_DIR}`, { out });
    expect(result.removedPartials).toEqual([killed]);
    expect(existsSync(killed)).toBe(false);
    expect(readdirSync(foreign).sort()).toEqual(['config.json', 'notes.txt']);
    expect(readdirSync(running)).toEqual(['config.json']);
  });

  it('npm run export: the command line writes the folder; an unknown --format is an error', () => {
    const cli = (...args: string[]) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/export.ts', ...args, '--backend', 'cpu'], { encoding: 'utf8', timeout: 120_000 });
    const out = fresh();
    const ok = cli(GPT2_DIR, '--format', 'hf', '--out', out);
    expect(ok.stdout).toContain(`wrote ${out}: model_type gpt2, 28 tensors`);
    expect(ok.status).toBe(0);
    expect(existsSync(path.join(out, 'model.safetensors'))).toBe(true);
    const badFormat = cli(GPT2_DIR, '--format', 'onnx', '--out', fresh());
    expect(badFormat.status).toBe(2);
    expect(badFormat.stderr.split('\n')[0]).toBe("export: option --format: 'onnx' is not one of hf");
    const noOut = cli(GPT2_DIR);
    expect(noOut.status).toBe(2);
    expect(noOut.stderr.split('\n')[0]).toBe('export: --out DIR is required');
  });
});

describe('the model card (README.md) and config.json of an export', () => {
  /** A finished run folder as the trainer leaves it: marker, config.json, env.json, summary.json and final/. */
  async function finishedRun(initFrom?: string): Promise<{ runDir: string; out: string }> {
    const runDir = path.join(fresh(), 'gpt-dark-20260101-000000');
    mkdirSync(runDir, { recursive: true });
    markRunFolder(runDir);
    const recipe = parseRecipe(
      'name: gpt-dark\n' +
        'model: { kind: gpt, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16, attention: { name: darkformer, options: { features: 8, rank: 4 } } }\n' +
        `data: { dataset: ${path.join(dir, 'data', 'sotu')}, tokenizer: ${TOKENIZER}, seqLen: 16 }\n` +
        'train: { seed: 4, batchSize: 8, maxTokens: 384, lr: 1e-3, evalTokens: 256 }' +
        (initFrom === undefined ? '' : `\ninitFrom: ${initFrom}`),
      path.join(dir, 'gpt-dark.yaml'),
    );
    await savedRun(recipe, runDir, 2);
    writeFileSync(path.join(runDir, 'config.json'), JSON.stringify(recipe));
    writeFileSync(path.join(runDir, 'env.json'), JSON.stringify({ git: { commit: '0123456789abcdef0123456789abcdef01234567', dirty: false } }));
    writeFileSync(
      path.join(runDir, 'summary.json'),
      JSON.stringify({ steps: 3, tokens: 384, val_loss: 5.12341, val_ppl: 167.88, val_bpb: 1.9876, val_acc: 0.2345, parameters: 43210, final: 'final' }),
    );
    const out = path.join(fresh(), 'demo-dark');
    await exportHf(path.join(runDir, 'final'), { out });
    return { runDir, out };
  }

  it("follows Hugging Face's model card: metadata, then the model, its data, its training, its results, its use, its limits", async () => {
    const { out } = await finishedRun();
    const card = readFileSync(path.join(out, 'README.md'), 'utf8');
    const parts = /^---\n([\s\S]*?)\n---\n\n([\s\S]*)$/.exec(card);
    expect(parts, card).not.toBeNull();
    expect(YAML.parse(parts![1])).toEqual({
      library_name: 'transformers',
      pipeline_tag: 'text-generation',
      tags: ['slayformer', 'gpt2', 'causal-lm', 'darkformer', 'custom_code'],
    });
    const body = parts![2];
    expect(body.split('\n')[0]).toBe('# gpt-dark');
    const headings = body.split('\n').filter((line) => line.startsWith('## '));
    expect(headings).toEqual([
      '## Model description',
      '## Training data and tokenizer',
      '## Training procedure',
      '## Evaluation results',
      '## How to use',
      '## Limitations',
    ]);
    expect(body).toContain('darkformer attention');
    expect(body).toContain('"features":8');
    expect(body).toContain('**Dataset:** sotu');
    expect(body).toContain('3 optimizer steps, 384 tokens');
    expect(body).toMatch(/\| loss \(nats\/token\) \| 5\.1234 \|/);
    expect(body).toMatch(/\| perplexity \| 167\.88 \|/);
    expect(body).toMatch(/\| bits per byte \| 1\.9876 \|/);
    expect(body).toMatch(/\| next-token accuracy \| 0\.2345 \|/);
    expect(body).toContain('slayformer commit 0123456789ab');
    expect(body).toContain('from_pretrained(folder, trust_remote_code=True)');
  });

  it('records where the model came from by its run, never by an absolute local path', async () => {
    const source = await finishedRun();
    const { out } = await finishedRun(path.join(source.runDir, 'final')); // a finetune of the first run
    const config = readFileSync(path.join(out, 'config.json'), 'utf8');
    const card = readFileSync(path.join(out, 'README.md'), 'utf8');
    expect(JSON.parse(config).slayformer.source).toBe('gpt-dark-20260101-000000/final');
    expect(card).toContain('**Finetuned from:** gpt-dark-20260101-000000/final');
    for (const text of [config, card]) {
      expect(text).not.toContain(dir);
      expect(text).not.toContain(path.dirname(TOKENIZER));
      expect(text).not.toContain(process.cwd());
    }
    // A Hugging Face folder as the source: named by its folder, and the card says what is not known.
    const hfOut = fresh();
    await exportHf(`hf:${GPT2_DIR}`, { out: hfOut });
    const hfConfig = readFileSync(path.join(hfOut, 'config.json'), 'utf8');
    const hfCard = readFileSync(path.join(hfOut, 'README.md'), 'utf8');
    expect(JSON.parse(hfConfig).slayformer.source).toBe(`hf:${path.basename(GPT2_DIR)}`);
    expect(hfCard).toContain('No evaluation was recorded with this model');
    for (const text of [hfConfig, hfCard]) expect(text).not.toContain(path.dirname(GPT2_DIR));
  });

  it('shows hostile names and recipe fields as text: no injected heading, link, HTML or code span, and the example still runs', async () => {
    // No '/': some are folder names.
    const hostile = (what: string) => `${what} \`<script>alert(1)\` a|b\n# Injected [x](javascript:alert(2)) <img src=x onerror=alert(3)>`;
    const runDir = path.join(fresh(), `${hostile('run')}-20260101-000000`);
    mkdirSync(runDir, { recursive: true });
    markRunFolder(runDir);
    const recipe = parseRecipe(
      `name: ${JSON.stringify(hostile('recipe'))}\n` +
        'model: { kind: gpt, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16 }\n' +
        `data: { dataset: ${JSON.stringify(path.join(dir, hostile('data')))}, textColumn: ${JSON.stringify(hostile('column'))}, tokenizer: ${TOKENIZER}, seqLen: 16 }\n` +
        'train: { seed: 4 }',
      path.join(dir, 'hostile.yaml'),
    );
    await savedRun(recipe, runDir, 2);
    writeFileSync(path.join(runDir, 'env.json'), JSON.stringify({ git: { commit: '`<b>x</b>`](javascript:alert(4))', dirty: false } }));
    const out = path.join(fresh(), hostile('out').replace(/\n/g, ' '));
    await exportHf(path.join(runDir, 'final'), { out });
    const card = readFileSync(path.join(out, 'README.md'), 'utf8');
    const code = /```python\n([\s\S]*?)\n```/.exec(card)!;
    const text = card.replace(code[0], '');
    // Every line that starts a block is the card's own: the title and its six sections.
    expect(text.split('\n').filter((line) => line.startsWith('#'))).toEqual([
      `# ${escapeMarkdown(hostile('recipe'))}`,
      '## Model description',
      '## Training data and tokenizer',
      '## Training procedure',
      '## Evaluation results',
      '## How to use',
      '## Limitations',
    ]);
    expect(text).not.toMatch(/(^|[^\\])<(script|img|b)/m); // no HTML tag
    expect(text).not.toMatch(/(^|[^\\])\]\(/m); // no link
    // None of it inside a code span (where escapes would show): the code spans left are the card's own.
    const codeSpans = text.split('\n').flatMap((line) =>
      line
        .replace(/\\`/g, '')
        .split('`')
        .filter((_, i) => i % 2 === 1),
    );
    expect(codeSpans.filter((span) => /script|alert|Injected|<b/.test(span))).toEqual([]);
    for (const what of ['recipe', 'run', 'data', 'column']) expect(text, what).toContain(escapeMarkdown(hostile(what)));
    expect(text).toContain(`slayformer commit ${escapeMarkdown('`<b>x</b>`](')}`);
    // The example's folder is a Python string literal that holds the export's name.
    const folder = /^folder = (.*) {2}# this folder$/m.exec(code[1])!;
    expect(JSON.parse(folder[1])).toBe(path.basename(out));
  });
});
