// The language-model comparison without training: its units (seed first, every cell's units exist), each unit's
// recipe as the trainer gets it, the differences and claims' verdicts on made-up losses, and the seeds a difference
// would need.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { CONTEXT, ensureCorpus, LM_CORPUS, lmCompare, MATCH_MARGIN, PASSKEY_LENGTHS_IN_CONTEXT, unitRecipeOf } from '../../src/paper/lm-compare.ts';
import { lmEvalPython } from '../../src/report/lm-eval-results.ts';
import { describeSeedsNeeded, seedsToSeparate } from '../../src/paper/paired-claims.ts';
import type { UnitView } from '../../src/paper/protocol.ts';
import { pairedT, tQuantileOf } from '../../src/report/paired.ts';

describe('lm-compare units', () => {
  it('runs every mechanism’s seed 1, GPT and BERT, before any seed 2, the 48 training units first (their indices as before the evaluations), then the evaluations; every cell names units that exist', () => {
    const units = lmCompare.units(false);
    const training = units.filter((u) => u.settings.evaluates === undefined);
    expect(training).toHaveLength(48);
    expect(units.slice(0, 48)).toEqual(training);
    expect(training.slice(0, 16).every((u) => u.settings.seed === 1)).toBe(true);
    expect(new Set(training.slice(0, 16).map((u) => u.settings.kind))).toEqual(new Set(['gpt', 'bert']));
    // Every training unit's evaluation, and a GPT's harness where it is set up, each named for the unit it evaluates.
    const harness = lmEvalPython() !== null;
    expect(units).toHaveLength(48 + 48 + (harness ? 24 : 0));
    expect(units.slice(48, 64).every((u) => u.settings.seed === 1 && u.settings.step === 'eval')).toBe(true);
    for (const unit of units.filter((u) => u.settings.evaluates !== undefined)) {
      expect(unit.name).toBe(`${unit.settings.evaluates}.${unit.settings.step}`);
      expect(training.some((t) => t.name === unit.settings.evaluates)).toBe(true);
    }
    expect(units.filter((u) => u.settings.step === 'lm-eval').map((u) => u.settings.kind)).toEqual(harness ? Array(24).fill('gpt') : []);
    const names = new Set(units.map((u) => u.name));
    for (const cell of lmCompare.cells(false)) for (const unit of cell.units) expect(names.has(unit)).toBe(true);
    for (const table of lmCompare.measureTables!({ values: () => [], extra: () => null }, false))
      for (const row of table.rows) for (const unit of row.units) expect(names.has(unit) || (!harness && unit.endsWith('.lm-eval'))).toBe(true);
  });

  it('evaluates each model at the context it was trained on: its loss by position buckets and passkey lengths', () => {
    const recipe = unitRecipeOf(lmCompare.units(false)[0].settings, '/tmp/unit');
    expect([recipe.data.seqLen, recipe.model.maxSeqLen]).toEqual([CONTEXT, CONTEXT]);
    expect(Math.max(...PASSKEY_LENGTHS_IN_CONTEXT)).toBe(CONTEXT);
  });

  it('trains the demo shape on the English corpus for one whole epoch, with the unit’s mechanism and seed', () => {
    const of = (name: string) => unitRecipeOf(lmCompare.units(false).find((u) => u.name === name)!.settings, '/tmp/unit');
    const slay = of('gpt-slay-seed2');
    expect(slay.model).toMatchObject({ kind: 'gpt', dModel: 128, numLayers: 4, numHeads: 4 });
    expect(slay.model.attention).toMatchObject({ name: 'slay', options: { quadratureNodes: 2, prfFeatures: 16, anchors: 8, chunkSize: 32 } });
    expect(slay.data.dataset).toBe(path.resolve('data/english'));
    expect(slay.data.tokenizer).toBe(path.resolve('data/tokenizers/english-bpe-4096.json'));
    expect(slay.train).toMatchObject({ seed: 2, batchSize: 32, maxTokens: null, lr: 2e-3, runDir: '/tmp/unit' });
    const bert = of('bert-cosformer-seed3');
    expect(bert.model.kind).toBe('bert');
    expect(bert.model.attention.name).toBe('cosformer');
    expect(bert.train).toMatchObject({ seed: 3, lr: 1e-3, evalTokens: 16_384, maxTokens: null });
    // The published results were measured on the validation split's head (a random sample: the corpus is shuffled).
    expect([slay.train.evalSample, bert.train.evalSample]).toEqual(['head', 'head']);
    expect(unitRecipeOf(lmCompare.units(true)[0].settings, '/tmp/unit').train.maxTokens).toBe(16_384);
  });
});

describe('lm-compare claims and differences', () => {
  /** GPT losses by unit: softmax 5.0 for every seed; `gaps` added per mechanism and seed (BERT: none done). */
  function view(gaps: Record<string, number[]>): UnitView {
    return {
      values: (name) => {
        const [, kind, mechanism, seed] = /^(gpt|bert)-(.+)-seed(\d)$/.exec(name)!;
        if (kind !== 'gpt') return [];
        if (mechanism === 'softmax') return [5];
        return mechanism in gaps ? [5 + gaps[mechanism][Number(seed) - 1]] : [];
      },
      extra: () => null,
    };
  }
  const claimOf = (all: ReturnType<NonNullable<typeof lmCompare.claims>>, statement: string) => {
    const found = all.filter((c) => c.statement.startsWith(statement));
    expect(found).toHaveLength(1);
    return found[0];
  };

  it('reports each mechanism against softmax as a paired difference over the seeds done, its interval the t interval', () => {
    const all = lmCompare.differences!(view({ performer: [0.1, 0.12, 0.11], slay: [-0.05, -0.06, -0.04], cosformer: [0.05, -0.04, 0.01] }), false);
    const of = (row: string) => all.find((d) => d.table.startsWith('GPT') && d.row === row)!;
    expect(all.filter((d) => d.table.startsWith('GPT')).map((d) => d.row)).toEqual([
      'yat-spherical',
      'slay',
      'performer',
      'darkformer',
      'schoenbat',
      'linear-elu',
      'cosformer',
    ]);
    expect(of('performer').metric!.ci![0]).toBeGreaterThan(0);
    expect(of('slay').metric!.ci![1]).toBeLessThan(0);
    const cosformer = of('cosformer').metric!;
    const reference = pairedT([5.05, 4.96, 5.01], [5, 5, 5]);
    expect(cosformer.mean).toBeCloseTo(reference.mean, 12);
    expect(cosformer.ci).toEqual(reference.ci);
    expect(of('darkformer')).toMatchObject({ n: 0, metric: null });
    expect(all.find((d) => d.table.startsWith('BERT') && d.row === 'slay')).toMatchObject({ n: 0, metric: null });
  });

  it('judges the papers’ claims: SLAY below Performer and ELU+1, SLAY within the margin of spherical Yat, DARKFormer below Performer', () => {
    const all = lmCompare.claims!(
      view({
        slay: [0.02, 0.025, 0.03],
        'yat-spherical': [0.03, 0.035, 0.025],
        performer: [0.06, 0.07, 0.065],
        'linear-elu': [0.0, 0.03, -0.02],
        darkformer: [0.09, 0.1, 0.085],
      }),
      false,
    );
    expect(claimOf(all, "GPT: SLAY's final validation loss is below Performer's").verdict).toBe('holds');
    const elu = claimOf(all, "GPT: SLAY's final validation loss is below ELU+1");
    expect(elu.verdict).toBe('not separated');
    const d = pairedT([0.02, 0.025, 0.03], [0.0, 0.03, -0.02]);
    expect(elu.evidence).toContain(`≈ ${seedsToSeparate(d.mean, d.sd!)} seed pairs to separate`);
    expect(claimOf(all, "GPT: DARKFormer's final validation loss is below Performer's").verdict).toBe('contradicted');
    expect(claimOf(all, 'BERT: SLAY (anchor features, P = 8, M = 16, R = 2) matches').verdict).toBe('not run');
    expect(all.filter((c) => c.statement.startsWith('BERT: DARKFormer'))).toHaveLength(0);
  });

  it('holds "matches" when the interval’s upper end is below the margin, contradicts it when its lower end is above', () => {
    const matches = (gaps: number[]) =>
      claimOf(lmCompare.claims!(view({ slay: gaps, 'yat-spherical': [0, 0, 0] }), false), 'GPT: SLAY (anchor features, P = 8, M = 16, R = 2) matches').verdict;
    expect(matches([0.004, 0.005, 0.006])).toBe('holds'); // worse than Yat, but surely by less than the margin
    expect(matches([-0.03, -0.02, -0.025])).toBe('holds'); // better than Yat
    expect(matches([0.02, 0.021, 0.022])).toBe('contradicted');
    expect(matches([0.0, 0.01, 0.02])).toBe('not separated');
    expect(MATCH_MARGIN).toBe(0.01);
  });

  it('counts the seeds as the t interval does: the least n with t(0.975, n−1)·sd/√n below the distance to the threshold', () => {
    // n = 2 needs |mean| > 12.706·sd/√2 ≈ 8.98·sd; n = 3 needs > 4.303·sd/√3 ≈ 2.48·sd.
    expect(seedsToSeparate(9, 1)).toBe(2);
    expect(seedsToSeparate(3, 1)).toBe(3);
    expect(seedsToSeparate(3.01, 1, 0.01)).toBe(3);
    const n = seedsToSeparate(0.01, 0.05)!;
    expect((tQuantileOf(0.975, n - 1) * 0.05) / Math.sqrt(n)).toBeLessThan(0.01);
    expect((tQuantileOf(0.975, n - 2) * 0.05) / Math.sqrt(n - 1)).toBeGreaterThanOrEqual(0.01);
    expect(seedsToSeparate(0, 1)).toBeNull();
    expect(seedsToSeparate(0.5, 1, 0.5)).toBeNull();
    expect([3, 100, 101].map(describeSeedsNeeded)).toEqual(['≈ 3', '≈ 100', 'more than 100']);
  });
});

describe('ensureCorpus', () => {
  it('refuses a corpus folder prepared otherwise (e.g. in corpus order), naming the command, and leaves it alone', async () => {
    const root = fs.mkdtempSync(path.join(os.tmpdir(), 'lm-corpus-'));
    const cwd = process.cwd();
    try {
      process.chdir(root);
      const info = path.join(LM_CORPUS.dataset, 'train', 'dataset_info.json');
      fs.mkdirSync(path.dirname(info), { recursive: true });
      fs.writeFileSync(info, JSON.stringify({ description: 'the corpora one after the other' }));
      await expect(ensureCorpus()).rejects.toThrow(
        /data\/english was not prepared as this experiment needs .* npm run prepare -- --corpus sotu,kjv,moby-dick --out data\/english/,
      );
      expect(JSON.parse(fs.readFileSync(info, 'utf8')).description).toBe('the corpora one after the other');
      expect(fs.existsSync(LM_CORPUS.tokenizer)).toBe(false);
    } finally {
      process.chdir(cwd);
      fs.rmSync(root, { recursive: true, force: true });
    }
  });
});
