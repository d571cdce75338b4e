// The DARKFormer finetuning experiment without training: its spike rule on made-up loss curves, its claims' verdicts
// on made-up unit values (paired t intervals computed by hand), and every unit's recipe (what it swaps, freezes and
// starts from) as the trainer would get it.
import { describe, expect, it } from 'vitest';
import { claims, countSpikes, darkformerFinetune, unitRecipeOf, units } from '../../src/paper/darkformer-finetune.ts';
import type { UnitView } from '../../src/paper/protocol.ts';

describe('countSpikes', () => {
  const flat = Array.from({ length: 30 }, () => 5);
  it('counts a loss more than 0.5 nats above the median of the previous 10, and nothing else', () => {
    expect(countSpikes(flat)).toBe(0);
    expect(countSpikes(flat.map((l, i) => (i === 20 ? l + 0.51 : l)))).toBe(1);
    expect(countSpikes(flat.map((l, i) => (i === 20 ? l + 0.49 : l)))).toBe(0);
    // The first 10 losses have no window: a high start is not a spike.
    expect(countSpikes(flat.map((l, i) => (i < 10 ? l + 3 : l)))).toBe(0);
    // A median, not a mean: one earlier spike in the window does not hide the next one.
    expect(countSpikes(flat.map((l, i) => (i === 15 || i === 16 ? l + 1 : l)))).toBe(2);
    // A non-finite loss is a spike.
    expect(countSpikes(flat.map((l, i) => (i === 12 ? Number.NaN : l)))).toBe(1);
  });
  it('follows a falling curve: a steady decrease has no spike', () => {
    expect(countSpikes(Array.from({ length: 50 }, (_, i) => 8 - 0.1 * i))).toBe(0);
  });
});

/** A view of made-up accuracies by unit name, and spikes by unit name. */
function view(acc: Record<string, number>, spikes: Record<string, number> = {}): UnitView {
  return { values: (name) => (name in acc ? [acc[name]] : []), extra: (name, key) => (key === 'spikes' && name in spikes ? spikes[name] : null) };
}

describe('claims', () => {
  const accuracies = (gapAll: number[], gapQkv: number[], which = 'darkformer-identity') => {
    const acc: Record<string, number> = {};
    [1, 2, 3].forEach((seed, i) => {
      acc[`performer-all-seed${seed}`] = 0.3;
      acc[`performer-qkv-seed${seed}`] = 0.2;
      acc[`${which}-all-seed${seed}`] = 0.3 + gapAll[i];
      acc[`${which}-qkv-seed${seed}`] = 0.2 + gapQkv[i];
    });
    return acc;
  };

  it('holds, not separated or contradicted by where the 95% paired t interval lies', () => {
    // Differences 0.01, 0.02, 0.03: mean 0.02, sd 0.01, half-width t(0.975, 2)·0.01/√3 = 4.303·0.00577 = 0.0248 → crosses 0.
    // Differences 0.05, 0.06, 0.07: the same half-width around 0.06 → above 0. Qkv − all gaps: 0.04 each seed → above 0 (sd 0).
    const list = claims(view(accuracies([0.01, 0.02, 0.03], [0.05, 0.06, 0.07])), false);
    const identity = list.filter((c) => c.statement.includes('darkformer-identity'));
    expect(identity.map((c) => c.verdict)).toEqual(['not separated', 'holds', 'holds']);
    expect(identity[0].evidence).toMatch(/mean difference \+0\.0200 over 3 pairs \(95% interval −0\.0048 … \+0\.0448/);
    // Whitening and the spike claim have no units done.
    expect(list.filter((c) => c.statement.includes('whitening')).map((c) => c.verdict)).toEqual(['not run', 'not run', 'not run']);
    expect(list.at(-1)!.verdict).toBe('not run');
  });

  it('is contradicted when DARKFormer is clearly below Performer', () => {
    const list = claims(view(accuracies([-0.05, -0.06, -0.07], [-0.05, -0.06, -0.07])), false);
    expect(list.slice(0, 2).map((c) => c.verdict)).toEqual(['contradicted', 'contradicted']);
  });

  it('judges the spike claim over the learning rates (fewer spikes is the claimed side)', () => {
    const rates = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2];
    const spikes: Record<string, number> = {};
    rates.forEach((lr, i) => {
      spikes[`lr${lr}-performer`] = 2 + i;
      spikes[`lr${lr}-darkformer-identity`] = i;
    });
    const last = claims(view({}, spikes), false).at(-1)!;
    expect(last.verdict).toBe('holds');
    expect(last.evidence).toMatch(/^10 spikes against 20 over 5 rates/);
    // No spike anywhere: nothing to separate, and the evidence says why.
    for (const key of Object.keys(spikes)) spikes[key] = 0;
    const none = claims(view({}, spikes), false).at(-1)!;
    expect(none.verdict).toBe('not separated');
    expect(none.evidence).toBe('no run spiked at any of the 5 rates: this scale cannot show the claim');
  });
});

describe('units and their recipes', () => {
  const dir = '/tmp/unit';
  it('pretrains one softmax model per seed first, then finetunes every mechanism both ways, then sweeps the rate', () => {
    const all = units(false);
    expect(all.slice(0, 3).map((u) => u.name)).toEqual(['pretrain-softmax-seed1', 'pretrain-softmax-seed2', 'pretrain-softmax-seed3']);
    expect(all).toHaveLength(3 + 5 * 2 * 3 + 2 * 5);
    // Every cell names units that exist.
    const names = new Set(all.map((u) => u.name));
    for (const cell of darkformerFinetune.cells(false)) for (const unit of cell.units) expect(names.has(unit)).toBe(true);
  });

  it('swaps the attention, freezes and starts from the pretrained model as the unit says', () => {
    const pretrained = '/tmp/pretrained/final';
    const recipeOf = (name: string) => unitRecipeOf(units(false).find((u) => u.name === name)!.settings, dir, pretrained);
    const whitening = recipeOf('darkformer-whitening-qkv-seed2');
    expect(whitening.model.attention.name).toBe('darkformer');
    expect(whitening.model.attention.options.init).toBe('whitening');
    expect(whitening.train.freeze).toBe('all-but-qkv');
    expect(whitening.train.seed).toBe(2);
    expect(whitening.initFrom).toBe(pretrained);
    expect(whitening.train.runDir).toBe(dir);
    const control = recipeOf('softmax-all-seed1');
    expect(control.model.attention.name).toBe('softmax');
    expect(control.train.freeze).toBe('none');
    expect(recipeOf('lr0.003-performer').train.lr).toBe(0.003);
    const pretrain = unitRecipeOf(units(false)[0].settings, dir, null);
    expect(pretrain.model.attention.name).toBe('softmax');
    expect(pretrain.train.maxTokens).toBeNull();
    expect(() => unitRecipeOf(units(false)[3].settings, dir, null)).toThrow(/needs its pretrained model/);
  });
});
