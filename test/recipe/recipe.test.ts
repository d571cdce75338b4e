import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attentionOptionSpecs } from '../../src/model/attention/index.ts';
import { loadRecipe } from '../../src/store/recipes.ts';
import { MODEL_PRESETS, RECIPE_DEFAULTS, RECIPE_SCHEMA, type Recipe } from '../../src/recipe/schema.ts';
import { renderRecipeDocs } from '../../src/recipe/docs.ts';
import { parseAssignment, parseRecipeWith } from '../../src/recipe/load.ts';
import { modelConfigFromRecipe } from '../../src/recipe/model-config.ts';

let dir: string;
/** Writes `yaml` to a recipe file and returns its path. */
function recipeFile(yaml: string, name = 'x.yaml'): string {
  const file = path.join(dir, name);
  fs.writeFileSync(file, yaml);
  return file;
}
const MINIMAL = 'data:\n  dataset: data/sotu\n  tokenizer: data/tok.json\n';

/** The error message of loadRecipe, asserting it throws and every line starts with the file path. */
function errorOf(file: string, overrides: string[] = []): string {
  let message = '';
  try {
    loadRecipe(file, overrides);
  } catch (err) {
    message = (err as Error).message;
  }
  expect(message, 'loadRecipe should have thrown').not.toBe('');
  for (const line of message.split('\n')) expect(line.startsWith(`${file}: `)).toBe(true);
  return message;
}

beforeAll(() => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'recipe-test-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('loadRecipe', () => {
  it('fills in the defaults and derived defaults, and resolves paths against the working directory', () => {
    const r = loadRecipe(recipeFile(MINIMAL, 'tiny-gpt.yaml'));
    expect(r.name).toBe('tiny-gpt');
    expect(r.model.maxSeqLen).toBe(r.data.seqLen);
    expect(r.train.minLr).toBeCloseTo(r.train.lr / 10, 15);
    expect(r.data.dataset).toBe(path.resolve('data/sotu'));
    expect(r.data.tokenizer).toBe(path.resolve('data/tok.json'));
    expect(r.train.runDir).toBe(path.resolve('runs'));
    // Every static default of the schema comes through unchanged.
    for (const [key, spec] of Object.entries(RECIPE_SCHEMA)) {
      const value = key.split('.').reduce<unknown>((node, part) => (node as Record<string, unknown>)[part], r);
      if (typeof spec.default !== 'object' && typeof spec.default !== 'symbol' && key !== 'train.runDir') expect(value, key).toBe(spec.default);
    }
    expect(r.model.attention).toEqual({ name: 'softmax', options: {} });
    expect(RECIPE_DEFAULTS.train?.lr).toBe(r.train.lr);
    expect(RECIPE_DEFAULTS.data?.dataset).toBeUndefined(); // required, so no default
  });

  it('reads values of every type from the file', () => {
    const r = loadRecipe(
      recipeFile(
        `${MINIMAL}name: custom\nbackend: wasm\nmodel:\n  kind: bert\n  dModel: 64\n  numHeads: 2\n  bias: false\n  dropout: 0.1\n  attention:\n    name: yat-spherical\n    options: {epsilon: 0.01}\ntrain:\n  lr: 1e-3\n  maxTokens: 100000\n  schedule: linear\nwandb:\n  enabled: false\n  entity: team\n`,
      ),
    );
    expect(r.name).toBe('custom');
    expect(r.backend).toBe('wasm');
    expect(r.model).toMatchObject({ kind: 'bert', dModel: 64, numHeads: 2, bias: false, dropout: 0.1 });
    expect(r.train.lr).toBe(1e-3); // YAML 1.2: 1e-3 is a number
    expect(r.train.maxTokens).toBe(100000);
    expect(r.wandb).toEqual({ enabled: false, project: 'slayformer', entity: 'team', runName: null });
    // Options hold every option of the mechanism, registry defaults filled in.
    const specs = attentionOptionSpecs('yat-spherical');
    expect(r.model.attention).toEqual({ name: 'yat-spherical', options: { epsilon: 0.01, delta: specs.delta.default } });
  });

  it('rejects unknown keys at the top level and nested, naming the key path and a close match', () => {
    const top = errorOf(recipeFile(`${MINIMAL}trian:\n  lr: 1\n`));
    expect(top).toContain('unknown key trian (did you mean train?)');
    const nested = errorOf(recipeFile(`${MINIMAL}model:\n  atention:\n    name: softmax\n`));
    expect(nested).toContain('unknown key model.atention (did you mean model.attention?)');
    const deep = errorOf(recipeFile(`${MINIMAL}train:\n  learningRate: 1\n`));
    expect(deep).toContain('unknown key train.learningRate');
  });

  it('rejects wrong types, naming the key, the expected type and the value', () => {
    const message = errorOf(
      recipeFile(`${MINIMAL}train:\n  lr: fast\n  batchSize: 2.5\n  maxTokens: many\nmodel:\n  kind: lstm\n  bias: yes please\nwandb:\n  enabled: maybe\n`),
    );
    expect(message).toContain('train.lr must be a number (got "fast")');
    expect(message).toContain('train.batchSize must be an integer (got 2.5)');
    expect(message).toContain('train.maxTokens must be an integer or null (got "many")');
    expect(message).toContain('model.kind must be one of gpt, bert (got "lstm")');
    expect(message).toContain('model.bias must be true or false (got "yes please")');
    expect(message).toContain('wandb.enabled must be one of true, false, auto (got "maybe")');
    expect(errorOf(recipeFile(`${MINIMAL}train:\n  lr: -1\n`))).toContain('train.lr must be a number > 0 (got -1)');
    expect(errorOf(recipeFile(`${MINIMAL}train:\n  maxTokens: 0\n`))).toContain('train.maxTokens must be an integer ≥ 1 or null (got 0)');
    expect(errorOf(recipeFile(`${MINIMAL}model:\n  dropout: 1\n`))).toContain('model.dropout must be a number ≥ 0, < 1 (got 1)');
    expect(errorOf(recipeFile(`${MINIMAL}model: 3\n`))).toContain('model must be a mapping of keys (got 3)');
    expect(errorOf(recipeFile(`${MINIMAL}model:\n  attention:\n    name: nope\n`))).toMatch(
      /model\.attention\.name must be one of softmax, .*slay.* \(got "nope"\)/,
    );
  });

  it('reports missing required keys, bad YAML, a non-mapping file and a missing file', () => {
    expect(errorOf(recipeFile('data:\n  dataset: d\n'))).toContain('missing required key data.tokenizer');
    expect(errorOf(recipeFile('data: [1\n'))).toContain('invalid YAML');
    expect(errorOf(recipeFile('- a\n- b\n'))).toContain('the recipe must be a mapping');
    expect(errorOf(path.join(dir, 'absent.yaml'))).toContain('cannot read the recipe (ENOENT)');
  });

  it('reports an initFrom folder that cannot be read alone, not the keys it was to supply', () => {
    const file = recipeFile(`initFrom: hf:${path.join(dir, 'no-such-gpt2')}\nmodel: { attention: { name: darkformer } }\ndata: { dataset: data/c4 }\n`);
    expect(errorOf(file)).toBe(`${file}: initFrom hf:${path.join(dir, 'no-such-gpt2')}: Hugging Face folder ${path.join(dir, 'no-such-gpt2')} does not exist`);
  });

  it('expands ${NAME} and ${NAME:-default} in paths and initFrom from the environment; an unset one without a default is an error', () => {
    const previous = process.env.SLAYFORMER_TEST_DATA;
    try {
      const file = recipeFile(
        'data:\n  dataset: ${SLAYFORMER_TEST_DATA:-data}/sotu\n  tokenizer: ${SLAYFORMER_TEST_DATA}/tok.json\ntrain: { runDir: "${SLAYFORMER_TEST_UNSET:-runs}/x" }\n',
      );
      process.env.SLAYFORMER_TEST_DATA = '/elsewhere';
      expect(loadRecipe(file)).toMatchObject({
        data: { dataset: '/elsewhere/sotu', tokenizer: '/elsewhere/tok.json' },
        train: { runDir: path.resolve('runs/x') },
      });
      delete process.env.SLAYFORMER_TEST_DATA;
      expect(errorOf(file)).toBe(
        `${file}: data.tokenizer: the environment variable SLAYFORMER_TEST_DATA in "\${SLAYFORMER_TEST_DATA}/tok.json" is not set (or write \${SLAYFORMER_TEST_DATA:-default})`,
      );
      // Other keys are taken as written.
      expect(loadRecipe(file, ['--data.tokenizer=t.json', '--wandb.runName=${X}']).wandb.runName).toBe('${X}');
    } finally {
      if (previous === undefined) delete process.env.SLAYFORMER_TEST_DATA;
      else process.env.SLAYFORMER_TEST_DATA = previous;
    }
  });

  it('checks constraints between keys', () => {
    expect(errorOf(recipeFile(`${MINIMAL}model: {dModel: 30, numHeads: 4}\n`))).toContain('model.dModel (30) must be divisible by model.numHeads (4)');
    expect(errorOf(recipeFile(`${MINIMAL}model: {maxSeqLen: 64}\ndata: {dataset: d, tokenizer: t, seqLen: 128}\n`.replace(MINIMAL, '')))).toContain(
      'model.maxSeqLen (64) must be ≥ data.seqLen (128)',
    );
    expect(errorOf(recipeFile(`${MINIMAL}train: {lr: 1e-3, minLr: 1e-2}\n`))).toContain('train.minLr (0.01) must be ≤ train.lr (0.001)');
    expect(errorOf(recipeFile(`${MINIMAL}train: {warmupSteps: 10, warmupFraction: 0.05}\n`))).toContain(
      'train.warmupFraction and train.warmupSteps are both set; set one of them',
    );
    expect(loadRecipe(recipeFile(`${MINIMAL}train: {warmupFraction: 0.05}\n`)).train.warmupFraction).toBe(0.05);
  });

  it('refuses rotary positions on an odd head size and a causal-only mechanism in a BERT, naming the keys', () => {
    expect(errorOf(recipeFile(`${MINIMAL}model: {dModel: 12, numHeads: 4, positional: rope}\n`))).toMatch(
      /model\.positional 'rope' rotates channel pairs: the head size model\.dModel \/ model\.numHeads \(3\) must be even/,
    );
    expect(loadRecipe(recipeFile(`${MINIMAL}model: {dModel: 16, numHeads: 4, positional: rope, mlp: swiglu, norm: rmsnorm}\n`)).model.positional).toBe('rope');
    expect(errorOf(recipeFile(`${MINIMAL}model: {kind: bert, attention: {name: gla}}\n`))).toContain(
      "model.attention.name 'gla' is causal only: use it with model.kind gpt (got bert)",
    );
  });

  it('gives the line and column of a YAML error', () => {
    expect(errorOf(recipeFile(`${MINIMAL}model:\n  dModel: 16\n  bad: [1, 2\ntrain: {lr: 1}\n`))).toMatch(/invalid YAML at line 7, column 1: Flow sequence/);
    expect(errorOf(recipeFile('train:\n  lr: 1\n  lr: 2\n'))).toMatch(/invalid YAML at line 3, column 3: Map keys must be unique/);
  });

  it('catches sizes that cannot fit, naming the key, before anything is allocated', () => {
    expect(errorOf(recipeFile(`${MINIMAL}model: {dModel: 1e12}\n`))).toMatch(/model\.dModel must be an integer ≥ 1, ≤ 65536 \(got 1000000000000\)/);
    expect(errorOf(recipeFile(`${MINIMAL}model: {numLayers: 100000}\n`))).toMatch(/model\.numLayers must be an integer ≥ 1, ≤ 1024/);
    expect(errorOf(recipeFile(`${MINIMAL}data: {dataset: d, tokenizer: t, seqLen: 1e9}\n`.replace(MINIMAL, '')))).toMatch(
      /data\.seqLen must be an integer ≥ 2, ≤ 1048576/,
    );
    // Each key within its bounds, together too large for one tensor.
    expect(errorOf(recipeFile(`${MINIMAL}model: {dModel: 32768, numHeads: 8}\n`))).toContain(
      'model.dModel × model.mlpRatio·model.dModel (an MLP weight) = 4,294,967,296 elements: more than one TensorFlow.js tensor can hold (2^31 − 1)',
    );
    expect(
      errorOf(
        recipeFile(`${MINIMAL}model: {maxSeqLen: 65536}\ndata: {dataset: d, tokenizer: t, seqLen: 65536}\ntrain: {batchSize: 64}\n`.replace(MINIMAL, '')),
      ),
    ).toContain('train.batchSize × model.numHeads × data.seqLen² (the attention scores of a micro-batch) =');
  });

  it('validates attention options through the registry', () => {
    const zeroNodes = errorOf(recipeFile(`${MINIMAL}model:\n  attention:\n    name: slay\n    options: {quadratureNodes: 0}\n`));
    expect(zeroNodes).toContain('model.attention.options.quadratureNodes');
    expect(zeroNodes).toContain('must be an integer ≥ 1 (got 0)');
    const onSoftmax = errorOf(recipeFile(`${MINIMAL}model:\n  attention:\n    name: softmax\n    options: {prfFeatures: 16}\n`));
    expect(onSoftmax).toContain("unknown key model.attention.options.prfFeatures for attention 'softmax'");
    const typo = errorOf(recipeFile(`${MINIMAL}model:\n  attention:\n    name: yat-spherical\n    options: {epsilonn: 0.1}\n`));
    expect(typo).toContain('did you mean model.attention.options.epsilon?');
    const empty = loadRecipe(recipeFile(`${MINIMAL}model:\n  attention:\n    name: yat-spherical\n    options:\n`));
    expect(empty.model.attention.options).toEqual({ epsilon: 1e-3, delta: 1e-6 });
    const r = loadRecipe(recipeFile(`${MINIMAL}model:\n  attention:\n    name: slay\n    options: {quadratureNodes: 3}\n`));
    expect(r.model.attention.options.quadratureNodes).toBe(3);
    expect(Object.keys(r.model.attention.options).sort()).toEqual(Object.keys(attentionOptionSpecs('slay')).sort());
  });

  it('applies command-line overrides, type-checked like the file', () => {
    const file = recipeFile(`${MINIMAL}model:\n  attention:\n    name: slay\n    options: {quadratureNodes: 3}\n`);
    const r: Recipe = loadRecipe(file, [
      '--train.lr=1e-2',
      '--train.maxTokens=null',
      '--wandb.enabled=true',
      '--data.textColumn=body',
      '--model.attention.options.prfFeatures=32',
      '--name=override',
    ]);
    expect(r.train.lr).toBe(1e-2);
    expect(r.train.minLr).toBeCloseTo(1e-3, 15); // derived from the overridden lr
    expect(r.train.maxTokens).toBeNull();
    expect(r.wandb.enabled).toBe(true);
    expect(r.data.textColumn).toBe('body');
    expect(r.model.attention.options).toMatchObject({ quadratureNodes: 3, prfFeatures: 32 }); // merged with the file's
    expect(r.name).toBe('override');

    const switched = loadRecipe(file, ['--model.attention.name=yat-spherical', '--model.attention.options={epsilon: 0.5}']);
    expect(switched.model.attention).toEqual({ name: 'yat-spherical', options: { epsilon: 0.5, delta: 1e-6 } });
    expect(errorOf(file, ['--model.attention.name=yat-spherical'])).toContain(
      "unknown key model.attention.options.quadratureNodes for attention 'yat-spherical'",
    );
    expect(loadRecipe(file, ['--model.attention.name=softmax', '--model.attention.options={}']).model.attention).toEqual({ name: 'softmax', options: {} });

    expect(errorOf(file, ['--train.lr=fast'])).toContain('override --train.lr=fast: train.lr must be a number (got "fast")');
    expect(errorOf(file, ['--train.bogus=1'])).toContain('override --train.bogus=1: unknown key train.bogus');
    expect(errorOf(file, ['--trian.lr=1'])).toContain('unknown key trian.lr (did you mean --train.lr?)');
    // A key given without its section is found by its last part.
    expect(errorOf(file, ['--lr=1e-3'])).toBe(`${file}: override --lr=1e-3: unknown key lr (did you mean --train.lr?)`);
    expect(errorOf(file, ['--prfFeatures=8'])).toContain('unknown key prfFeatures (did you mean --model.attention.options.prfFeatures?)');
    expect(errorOf(file, ['--minlr=0'])).toContain('(did you mean --train.minLr?)');
    expect(errorOf(file, ['--model.attention.options.quadratureNodes=0'])).toContain('model.attention.options.quadratureNodes');
    expect(errorOf(file, ['--train=3'])).toContain('train is a section');
    expect(errorOf(file, ['train.lr=1'])).toContain('must look like --section.key=value');
  });
});

describe('model.preset', () => {
  const architecture = (r: Recipe) => ({ positional: r.model.positional, mlp: r.model.mlp, norm: r.model.norm, bias: r.model.bias });
  const TRANSFORMER_PP = { positional: 'rope', mlp: 'swiglu', norm: 'rmsnorm', bias: false };

  it('sets rope, swiglu, rmsnorm and no biases in one line for any mechanism and kind, and records itself and the resolved keys', () => {
    for (const [kind, attention] of [
      ['gpt', 'softmax'],
      ['gpt', 'slay'],
      ['gpt', 'gla'],
      ['bert', 'performer'],
    ]) {
      const r = loadRecipe(recipeFile(`${MINIMAL}model: {kind: ${kind}, preset: transformer++, attention: {name: ${attention}}}\n`));
      expect(architecture(r), `${kind} ${attention}`).toEqual(TRANSFORMER_PP);
      expect(r.model.preset).toBe('transformer++');
      // config.json is the resolved recipe as JSON: it holds the preset and every value it set.
      expect(JSON.parse(JSON.stringify(r)).model).toMatchObject({ preset: 'transformer++', ...TRANSFORMER_PP });
    }
    const plain = loadRecipe(recipeFile(MINIMAL));
    expect(plain.model.preset).toBeNull();
    expect(architecture(loadRecipe(recipeFile(`${MINIMAL}model: {preset: gpt2}\n`)))).toEqual(architecture(plain));
  });

  it('builds the same model config as the four explicit keys', () => {
    const preset = loadRecipe(recipeFile(`${MINIMAL}model: {preset: transformer++, attention: {name: slay}}\n`, 'tpp.yaml'));
    const explicit = loadRecipe(
      recipeFile(`${MINIMAL}model: {positional: rope, mlp: swiglu, norm: rmsnorm, bias: false, attention: {name: slay}}\n`, 'tpp.yaml'),
    );
    expect(modelConfigFromRecipe(preset, 100)).toEqual(modelConfigFromRecipe(explicit, 100));
    expect(modelConfigFromRecipe(preset, 100)).not.toEqual(
      modelConfigFromRecipe(loadRecipe(recipeFile(`${MINIMAL}model: {attention: {name: slay}}\n`, 'tpp.yaml')), 100),
    );
    // Apart from the preset's own key, the two resolved recipes are the same.
    expect({ ...preset, model: { ...preset.model, preset: null } }).toEqual(explicit);
  });

  it('gives way to keys the recipe or the command line sets, wherever the preset is given', () => {
    const file = recipeFile(`${MINIMAL}model: {preset: transformer++, bias: true, positional: learned}\n`);
    expect(architecture(loadRecipe(file))).toEqual({ ...TRANSFORMER_PP, bias: true, positional: 'learned' });
    expect(architecture(loadRecipe(file, ['--model.mlp=gelu']))).toEqual({ positional: 'learned', mlp: 'gelu', norm: 'rmsnorm', bias: true });
    // A preset from the command line: the file's own keys still win over it.
    const partial = recipeFile(`${MINIMAL}model: {norm: layernorm}\n`);
    const r = loadRecipe(partial, ['--model.preset=transformer++']);
    expect(architecture(r)).toEqual({ ...TRANSFORMER_PP, norm: 'layernorm' });
    expect(r.name).toBe('x+preset=transformer__');
  });

  it('an unknown preset is an error naming the key and listing the presets; its keys are checked like the recipe’s', () => {
    const message = errorOf(recipeFile(`${MINIMAL}model: {preset: llama}\n`));
    expect(message).toBe(`${path.join(dir, 'x.yaml')}: model.preset must be one of ${Object.keys(MODEL_PRESETS).join(', ')} or null (got "llama")`);
    expect(Object.keys(MODEL_PRESETS)).toEqual(['gpt2', 'transformer++']);
    expect(errorOf(recipeFile(MINIMAL), ['--model.preset=transformer']).split('\n')).toEqual([
      `${path.join(dir, 'x.yaml')}: override --model.preset=transformer: model.preset must be one of gpt2, transformer++ or null (got "transformer")`,
    ]);
    // What the preset sets meets the constraints between keys, and the message says the preset set it.
    expect(errorOf(recipeFile(`${MINIMAL}model: {dModel: 12, numHeads: 4, preset: transformer++}\n`))).toContain(
      "model.positional 'rope' rotates channel pairs: the head size model.dModel / model.numHeads (3) must be even (set by model.preset transformer++)",
    );
  });

  it('contradicting the model an initFrom folder fixes is an error naming both; the folder’s other keys fill in', () => {
    const hooks = {
      initFromSettings: () => ({
        configFile: '/hf/gpt2/config.json',
        settings: [
          { key: 'model.positional', value: 'learned', field: 'n_positions' },
          { key: 'model.dModel', value: 64, field: 'n_embd' },
        ],
        tokenizer: '/hf/gpt2/tokenizer.json',
      }),
    };
    const text = (preset: string) => `initFrom: hf:/hf/gpt2\nmodel: {preset: ${preset}}\ndata: {dataset: data/c4}\n`;
    expect(() => parseRecipeWith(hooks, text('transformer++'), 'ft.yaml')).toThrow(
      'ft.yaml: model.preset transformer++ makes model.positional "rope" but /hf/gpt2/config.json (initFrom) makes it "learned" (from n_positions): leave model.preset out, or set model.positional to that',
    );
    const r = parseRecipeWith(hooks, text('gpt2'), 'ft.yaml');
    expect(r.model.dModel).toBe(64);
    expect(r.model.positional).toBe('learned');
  });
});

describe('parseAssignment: the one key=value parser (recipe overrides after their dashes, a sweep’s --set)', () => {
  it('parses the value as a YAML scalar and says what is wrong with a setting that is not one', () => {
    expect(parseAssignment('train.lr=1e-3')).toEqual({ key: 'train.lr', value: 0.001 });
    expect(parseAssignment('model.attention.options.orthogonal=false')).toEqual({ key: 'model.attention.options.orthogonal', value: false });
    expect(parseAssignment('initFrom=null')).toEqual({ key: 'initFrom', value: null });
    expect(parseAssignment('name=a=b')).toEqual({ key: 'name', value: 'a=b' });
    expect(parseAssignment('data.tokenizer=')).toEqual({ key: 'data.tokenizer', value: '' });
    expect(parseAssignment('train.lr')).toEqual({ problem: 'not key=value' });
    expect(parseAssignment('train.lr=[1')).toMatchObject({ problem: 'not YAML' });
  });
});

describe('run names', () => {
  it('overrides of model keys add themselves to the name, so the run folder says what it trained', () => {
    const file = recipeFile(`${MINIMAL}model:\n  attention:\n    name: softmax\n`, 'gpt-softmax.yaml');
    expect(loadRecipe(file).name).toBe('gpt-softmax');
    expect(loadRecipe(file, ['--train.lr=1e-2', '--train.maxTokens=16384', '--train.seed=2']).name).toBe('gpt-softmax');
    expect(loadRecipe(file, ['--model.attention.name=performer']).name).toBe('gpt-softmax+attention=performer');
    expect(loadRecipe(file, ['--model.attention.name=performer', '--train.lr=1e-2', '--model.attention.options.features=32', '--model.dModel=64']).name).toBe(
      'gpt-softmax+attention=performer+features=32+dModel=64',
    );
    // The same key twice: the value that counts, in the place it was first given.
    expect(loadRecipe(file, ['--model.dropout=0.1', '--model.numLayers=2', '--model.dropout=0.2']).name).toBe('gpt-softmax+dropout=0.2+numLayers=2');
    // Characters a folder name should not hold become _; a long list becomes a digest of it.
    expect(loadRecipe(file, ['--model.attention.name=yat-spherical', '--model.attention.options={epsilon: 0.5}']).name).toBe(
      'gpt-softmax+attention=yat-spherical+options=_epsilon__0.5_',
    );
    const long = loadRecipe(file, [
      '--model.attention.name=performer',
      '--model.attention.options.features=32',
      '--model.attention.options.orthogonal=false',
      '--model.attention.options.redrawInterval=0',
      '--model.dModel=64',
    ]).name;
    expect(long).toMatch(/^gpt-softmax\+model-[0-9a-f]{8}$/);
    // A name given on the command line is taken as it is.
    expect(loadRecipe(file, ['--name=mine', '--model.attention.name=performer']).name).toBe('mine');
  });
});

describe('docs/recipes.md', () => {
  const docsFile = path.resolve('docs/recipes.md');
  const BEGIN = '<!-- BEGIN GENERATED: renderRecipeDocs() in src/recipe/docs.ts -->';
  const END = '<!-- END GENERATED -->';

  it('holds the generated table of every key (regenerate with UPDATE_RECIPE_DOCS=1)', () => {
    const generated = renderRecipeDocs();
    const generatedPart = (text: string) => {
      const start = text.indexOf(BEGIN);
      const end = text.indexOf(END);
      expect(start, `${docsFile} lacks the ${BEGIN} marker`).toBeGreaterThanOrEqual(0);
      expect(end).toBeGreaterThan(start);
      return { start: start + BEGIN.length + 1, end };
    };
    let text = fs.readFileSync(docsFile, 'utf8');
    if (process.env.UPDATE_RECIPE_DOCS === '1') {
      const { start, end } = generatedPart(text);
      text = `${text.slice(0, start)}${generated}${text.slice(end)}`;
      fs.writeFileSync(docsFile, text);
    }
    const { start, end } = generatedPart(text);
    expect(text.slice(start, end)).toBe(generated);
    for (const key of Object.keys(RECIPE_SCHEMA)) expect(text).toContain(`| \`${key}\` |`);
  });
});
