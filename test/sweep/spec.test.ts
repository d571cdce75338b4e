// Sweep files: expansion into runs, names, merging into recipes, validation messages, run selection, and the
// shipped sweeps. No training here.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loadSweep, selectRuns, SweepError } from '../../src/sweep/spec.ts';

const dir = mkdtempSync(join(tmpdir(), 'sweep-spec-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const base = join(dir, 'base.yaml');
writeFileSync(
  base,
  `model: { kind: gpt, dModel: 32, numHeads: 2, attention: { name: slay, options: { chunkSize: 32, prfFeatures: 8 } } }
data: { dataset: data/x, tokenizer: data/t.json, seqLen: 16 }
train: { lr: 1.0e-3, seed: 7, runDir: ${join(dir, 'runs')} }
`,
);
const bertBase = join(dir, 'bert.yaml');
writeFileSync(bertBase, `model: { kind: bert, dModel: 32, numHeads: 2 }\ndata: { dataset: data/x, tokenizer: data/t.json }\ntrain: { lr: 5.0e-4 }\n`);

let count = 0;
function sweepFile(text: string): string {
  const file = join(dir, `sweep-${count++}.yaml`);
  writeFileSync(file, text);
  return file;
}

function problems(text: string): string {
  const file = sweepFile(text);
  try {
    loadSweep(file);
  } catch (err) {
    expect(err).toBeInstanceOf(SweepError);
    expect((err as Error).message.split('\n').every((line) => line.startsWith(`${file}: `))).toBe(true);
    return (err as Error).message;
  }
  throw new Error('expected the sweep file to be rejected');
}

describe('sweep expansion', () => {
  it('crosses cases with the grid, first axis slowest, and names runs by what varies', () => {
    const sweep = loadSweep(
      sweepFile(`name: cmp
recipe: ${base}
cases:
  - { label: gpt }
  - { label: bert, recipe: ${bertBase} }
grid:
  model.attention: [softmax, { name: slay, options: { prfFeatures: 16 } }]
  train.seed: [1, 2]
`),
    );
    expect(sweep.name).toBe('cmp');
    expect(sweep.runs.map((r) => r.name)).toEqual([
      'gpt-softmax-seed1',
      'gpt-softmax-seed2',
      'gpt-slay-seed1',
      'gpt-slay-seed2',
      'bert-softmax-seed1',
      'bert-softmax-seed2',
      'bert-slay-seed1',
      'bert-slay-seed2',
    ]);
    expect(sweep.runs.map((r) => r.index)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(sweep.runs[3].group).toBe('gpt-slay');
    // A run is compared with the baseline run of its own case and seed: the pairing ignores only attention and seed.
    expect(sweep.runs.map((r) => r.pairing)).toEqual(['gpt', 'gpt', 'gpt', 'gpt', 'bert', 'bert', 'bert', 'bert']);
    expect(sweep.varying).toEqual(['recipe', 'model.attention', 'train.seed']);
    // Default run folder: <base recipe's train.runDir>/<sweep name>; each recipe is named and placed by the sweep.
    expect(sweep.runDir).toBe(join(dir, 'runs', 'cmp'));
    for (const run of sweep.runs) {
      expect(run.recipe.name).toBe(run.name);
      expect(run.recipe.train.runDir).toBe(sweep.runDir);
    }
    const bertSlay = sweep.runs[7].recipe;
    expect(bertSlay.model.kind).toBe('bert');
    expect(bertSlay.train.lr).toBe(5e-4);
    expect(bertSlay.train.seed).toBe(2);
  });

  it("replaces the base recipe's attention entry whole: options do not leak from one mechanism to another", () => {
    const sweep = loadSweep(sweepFile(`recipe: ${base}\ngrid:\n  model.attention: [softmax, performer, { name: slay, options: { prfFeatures: 16 } }]\n`));
    const [softmax, performer, slay] = sweep.runs.map((r) => r.recipe.model.attention);
    expect(softmax).toEqual({ name: 'softmax', options: {} });
    expect(performer.name).toBe('performer');
    expect(performer.options.chunkSize).toBe(64); // the registry's default, not the base recipe's 32
    expect(slay.options.prfFeatures).toBe(16);
    expect(slay.options.chunkSize).toBe(64);
    // The seed did not vary: names are the attention alone, and the base recipe's seed stays.
    expect(sweep.runs.map((r) => r.name)).toEqual(['softmax', 'performer', 'slay']);
    expect(sweep.runs.every((r) => r.recipe.train.seed === 7)).toBe(true);
  });

  it('merges set, cases and axes in that order, dotted or nested, and tells apart entries of one mechanism by their options', () => {
    const sweep = loadSweep(
      sweepFile(`recipe: ${base}
set: { train: { lr: 2.0e-3, warmupSteps: 3 }, model.numLayers: 2 }
cases:
  - { train.lr: 4.0e-3 }
  - { model: { dModel: 64 } }
grid:
  model.attention.options.prfFeatures: [4, 8]
  model.attention:
    - { name: slay, options: { prfFeatures: 4 } }
    - { name: slay, options: { prfFeatures: 32, anchors: 4 } }
`),
    );
    expect(sweep.runs.map((r) => r.name)).toEqual([
      'lr0.004-prfFeatures4-slay-prfFeatures4',
      'lr0.004-prfFeatures4-slay-prfFeatures32-anchors4',
      'lr0.004-prfFeatures8-slay-prfFeatures4',
      'lr0.004-prfFeatures8-slay-prfFeatures32-anchors4',
      // A case's part holds the varying keys it sets itself.
      'dModel64-prfFeatures4-slay-prfFeatures4',
      'dModel64-prfFeatures4-slay-prfFeatures32-anchors4',
      'dModel64-prfFeatures8-slay-prfFeatures4',
      'dModel64-prfFeatures8-slay-prfFeatures32-anchors4',
    ]);
    const first = sweep.runs[0].recipe;
    expect(first.train.lr).toBe(4e-3); // the case wins over set
    expect(first.train.warmupSteps).toBe(3);
    expect(first.model.numLayers).toBe(2);
    expect(sweep.runs[4].recipe.train.lr).toBe(2e-3);
    expect(sweep.runs[4].recipe.model.dModel).toBe(64);
    // The later axis (a whole entry) replaces what the earlier axis wrote into the options.
    expect(sweep.runs[2].recipe.model.attention.options.prfFeatures).toBe(4);
  });

  it('takes --set key=value from the command line on top of the file’s set, and refuses a key the grid or a case sets', () => {
    const text = `recipe: ${base}\nset: { train.lr: 2.0e-3 }\ncases: [{ label: a, train.batchSize: 2 }, { label: b }]\ngrid:\n  model.attention: [softmax, slay]\n  train.seed: [1, 2]\n`;
    const file = sweepFile(text);
    const sweep = loadSweep(file, ['train.lr=3e-3', 'backend=cpu', 'data.seqLen=8']);
    expect(sweep.runs.map((r) => r.name)).toEqual(loadSweep(file).runs.map((r) => r.name)); // names unchanged
    for (const r of sweep.runs) expect(r.recipe).toMatchObject({ backend: 'cpu', data: { seqLen: 8 }, train: { lr: 3e-3 } });
    expect(sweep.overrides).toEqual(['train.lr=3e-3', 'backend=cpu', 'data.seqLen=8']);
    const refused = (overrides: string[]) => {
      try {
        loadSweep(file, overrides);
      } catch (err) {
        expect(err).toBeInstanceOf(SweepError);
        return (err as Error).message;
      }
      throw new Error('expected --set to be refused');
    };
    expect(refused(['train.seed=5'])).toBe(
      `${file}: --set train.seed: the sweep's grid varies train.seed, which would override it; change the grid in the file instead`,
    );
    expect(refused(['model.attention.options.prfFeatures=4'])).toMatch(
      /--set model\.attention\.options\.prfFeatures: the sweep's grid varies model\.attention/,
    );
    expect(refused(['train.batchSize=4'])).toBe(
      `${file}: --set train.batchSize: cases[0] sets train.batchSize, which would override it; change the case in the file instead`,
    );
    expect(refused(['train.lr'])).toBe(`${file}: --set train.lr: expected key=value (e.g. --set train.lr=1e-3)`);
    expect(refused(['train.lrr=1'])).toMatch(/unknown key train\.lrr \(did you mean train\.lr\?\)/);
  });

  it('selects runs by name, glob or index and keeps their indices', () => {
    const sweep = loadSweep(sweepFile(`recipe: ${base}\ngrid:\n  model.attention: [softmax, slay]\n  train.seed: [1, 2, 3]\n`));
    expect(selectRuns(sweep, 'slay-*').runs.map((r) => [r.index, r.name])).toEqual([
      [3, 'slay-seed1'],
      [4, 'slay-seed2'],
      [5, 'slay-seed3'],
    ]);
    expect(selectRuns(sweep, '0, softmax-seed3').runs.map((r) => r.index)).toEqual([0, 2]);
    expect(selectRuns(sweep, undefined)).toBe(sweep);
    expect(() => selectRuns(sweep, 'performer-*')).toThrow(/no run .* matches/);
  });
});

describe('sweep validation', () => {
  it('names the file and the recipe key, with the recipe loader’s suggestion', () => {
    const text = problems(`recipe: ${base}\ngrid:\n  train.lrr: [1.0e-3, 2.0e-3]\n`);
    expect(text).toMatch(/unknown key train\.lrr \(did you mean train\.lr\?\)/);
    expect(text).toMatch(/\(2 runs\)/); // one message for the runs that share the problem
  });

  it('checks every run as a recipe (attention options against the mechanism, types, ranges)', () => {
    expect(problems(`recipe: ${base}\ngrid:\n  model.attention: [softmax, { name: slay, options: { prfFeaturs: 8 } }]\n`)).toMatch(
      /run slay .*unknown key model\.attention\.options\.prfFeaturs for attention 'slay' \(did you mean model\.attention\.options\.prfFeatures\?\)/,
    );
    expect(problems(`recipe: ${base}\ncases:\n  - { train.lr: -1 }\n  - { train.lr: 1 }\n`)).toMatch(/train\.lr must be a number > 0 \(got -1\)/);
    expect(problems(`recipe: ${base}\ngrid:\n  model.attention: [softmax, nope]\n`)).toMatch(/model\.attention\.name must be one of softmax/);
  });

  it('rejects malformed sweep files with a message naming the key', () => {
    expect(problems(`recipe: ${base}\ngird: {}\n`)).toMatch(/unknown key gird; a sweep file has name, recipe, set, grid, cases/);
    expect(problems(`recipe: ${base}\ngrid:\n  train.seed: 3\n`)).toMatch(/grid\.train\.seed must be a non-empty list of values \(got 3\)/);
    expect(problems(`recipe: ${base}\ngrid:\n  train.seed: []\n`)).toMatch(/grid\.train\.seed must be a non-empty list/);
    expect(problems(`recipe: ${base}\ncases: []\n`)).toMatch(/cases must be a non-empty list/);
    expect(problems(`recipe: ${base}\ngrid:\n  model.attention: [{ options: {} }]\n`)).toMatch(
      /grid\.model\.attention\[0\] must be an attention name or a mapping \{ name, options \}/,
    );
    expect(problems(`recipe: ${base}\nset: { train.runDir: x }\n`)).toMatch(/set\.train\.runDir: the sweep sets train\.runDir itself/);
    expect(problems(`grid:\n  train.seed: [1]\n`)).toMatch(/recipe \(the base recipe file\) is required/);
    expect(problems(`recipe: ${join(dir, 'missing.yaml')}\n`)).toMatch(/recipe .*missing\.yaml: cannot be read \(ENOENT\)/);
    expect(problems(`recipe: ${base}\ncases:\n  - { train.lr: 1.0e-3 }\n  - { train.lr: 0.001 }\n`)).toMatch(
      /two runs get the name sweep-\d+ \(cases\[0\] and cases\[1\]\); give the cases a label/,
    );
    expect(problems(`recipe: ${base}\nslurm: { gpus: [1], tme: 1 }\n`)).toMatch(/slurm\.gpus must be a GPU count[\s\S]*unknown key slurm\.tme/);
    expect(problems(`recipe: ${base}\nreport: { baseline: softmax, metric: loss }\n`)).toMatch(/report\.metric must be one of finalValLoss/);
    expect(problems(`recipe: ${base}\nreport: { baseline: softmax }\n`)).toMatch(/report\.baseline: no run uses attention 'softmax'/);
    expect(problems(`recipe: ${base}\n  bad: [\n`)).toMatch(/sweep-\d+\.yaml: invalid YAML at line 1, column 9: /);
    const brokenRecipe = join(dir, 'broken.yaml');
    writeFileSync(brokenRecipe, 'model:\n  dModel: [32\n');
    expect(problems(`recipe: ${brokenRecipe}\n`)).toMatch(/recipe .*broken\.yaml: invalid YAML at line 3, column \d+: /);
    expect(problems(`name: a b\nrecipe: ${base}\n`)).toMatch(/name "a b" may only hold/);
  });
});

describe('sweep size', () => {
  const values = (n: number) => `[${Array.from({ length: n }, (_, i) => i + 1).join(', ')}]`;

  it('a grid of more than 10,000 runs is refused, naming its axes and the bound, before any run is expanded', () => {
    const message = problems(`recipe: ${base}\ngrid:\n  train.seed: ${values(101)}\n  train.logInterval: ${values(100)}\n`);
    expect(message).toMatch(
      /sweep-\d+\.yaml: grid\.train\.seed \(101\) × grid\.train\.logInterval \(100\) make 10,100 runs; a sweep has at most 10,000 \(.*Slurm.*\): split it into several sweep files$/,
    );
    // The issue's 8 axes × 20 values (2.56·10¹⁰ runs): refused as fast, the message a line however many axes.
    const axes = [
      'train.seed',
      'train.logInterval',
      'train.evalTokens',
      'train.warmupSteps',
      'train.keepCheckpoints',
      'train.nanSkipLimit',
      'train.checkpointInterval',
      'train.evalInterval',
    ];
    const huge = problems(`recipe: ${base}\ngrid:\n${axes.map((key) => `  ${key}: ${values(20)}\n`).join('')}`);
    expect(huge).toMatch(/grid\.train\.seed \(20\) × .* × … \(8 in all\) make 25,600,000,000 runs; a sweep has at most 10,000/);
    expect(huge.split('\n')).toHaveLength(1);
    // Cases count too.
    expect(problems(`recipe: ${base}\ncases:\n  - { label: a }\n  - { label: b }\ngrid:\n  train.seed: ${values(5001)}\n`)).toMatch(
      /2 cases × grid\.train\.seed \(5001\) make 10,002 runs/,
    );
  });
});

describe('shipped sweeps', () => {
  it("demo-lm: the eight mechanisms × 3 seeds as GPT and as BERT, on the demo recipes' settings", () => {
    const sweep = loadSweep('sweeps/demo-lm.yaml');
    expect(sweep.runs).toHaveLength(48);
    expect(sweep.runDir).toBe(resolve('runs/demo-lm'));
    const mechanisms = ['softmax', 'yat-spherical', 'slay', 'performer', 'darkformer', 'schoenbat', 'linear-elu', 'cosformer'];
    for (const kind of ['gpt', 'bert'] as const) {
      const runs = sweep.runs.filter((r) => r.recipe.model.kind === kind);
      expect(runs).toHaveLength(24);
      expect(new Set(runs.map((r) => r.recipe.model.attention.name))).toEqual(new Set(mechanisms));
      expect(new Set(runs.map((r) => r.recipe.train.seed))).toEqual(new Set([1, 2, 3]));
      expect(runs.every((r) => r.recipe.train.maxTokens === 256000 && r.name.startsWith(`${kind}-seed`))).toBe(true);
    }
    expect(sweep.runs.find((r) => r.name === 'gpt-seed2-slay')!.recipe.model.attention.options).toMatchObject({
      quadratureNodes: 2,
      prfFeatures: 16,
      anchors: 8,
      epsilon: 1e-3,
      chunkSize: 32,
    });
    expect(sweep.report).toEqual({ baseline: 'softmax', metric: 'finalValLoss' });
  });

  it('tiny: 2 mechanisms × 2 seeds of a very small GPT', () => {
    const sweep = loadSweep('sweeps/tiny.yaml');
    expect(sweep.runs.map((r) => r.name)).toEqual(['softmax-seed1', 'softmax-seed2', 'slay-seed1', 'slay-seed2']);
    expect(sweep.runs[0].recipe.model.dModel).toBe(16);
    expect(sweep.runs[0].recipe.train.dataParallel).toBe(1);
  });
});
