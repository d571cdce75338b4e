// The DARKFormer paper's central experiment at this project's scale (Figures 2–5): pretrain softmax GPTs, swap
// their attention to Performer or DARKFormer (M from the identity or whitened on calibration batches), finetune all
// weights or only Q/K/V (+ M), and sweep the learning rate. Every unit is one training run through the ordinary
// trainer (runTraining) inside the unit's own folder; a finetuning unit starts from its seed's pretrained model,
// which the protocol's order runs first. The paper prints no tables, so its claims are tested by paired differences
// over seeds (claims below), not by numbers.
import path from 'node:path';
import type { Recipe } from '../recipe/schema.ts';
import { pairedClaim } from './paired-claims.ts';
import { claimsOnly } from './protocol.ts';
import type { CellSpec, Claim, Experiment, UnitContext, UnitOutcome, UnitSpec, UnitView } from './protocol.ts';
import { trainUnit, unitRecipe } from './unit-training.ts';

const SEEDS = [1, 2, 3];
const FINETUNES = ['softmax', 'performer', 'darkformer-identity', 'darkformer-whitening'] as const;
const TRAINED = ['all', 'qkv'] as const;
const RATES = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2];
/** The demo recipes behind the units (their shape, data, optimiser settings). */
const PRETRAIN_RECIPE = 'recipes/demo/gpt-softmax.yaml';
const FINETUNE_RECIPE = 'recipes/demo/finetune-darkformer.yaml';
/** Finetuning budget: the demo finetune's 250 steps of 8 × 128 tokens (≈ 11% of the corpus' epoch). */
const FINETUNE_TOKENS = 256_000;
const QUICK = { seeds: [1], finetunes: ['performer', 'darkformer-identity'], pretrainTokens: 32_768, finetuneTokens: 16_384 };
/** A spike: a logged training loss this many nats above the median of the previous SPIKE_WINDOW logged losses. */
const SPIKE_NATS = 0.5;
const SPIKE_WINDOW = 10;

const pretrainName = (seed: number) => `pretrain-softmax-seed${seed}`;
const finetuneName = (finetune: string, trained: string, seed: number) => `${finetune}-${trained}-seed${seed}`;
const rateName = (finetune: string, lr: number) => `lr${lr}-${finetune}`;

/** The number of spikes in a run's logged training losses (the rule above). */
export function countSpikes(losses: readonly number[]): number {
  let spikes = 0;
  for (let i = SPIKE_WINDOW; i < losses.length; i++) {
    // A non-finite loss is a spike itself, and left out of the windows after it.
    const window = losses.slice(i - SPIKE_WINDOW, i).filter(Number.isFinite).sort((a, b) => a - b);
    if (window.length === 0) continue;
    const median = (window[(window.length - 1) >> 1] + window[window.length >> 1]) / 2;
    if (!(losses[i] <= median + SPIKE_NATS)) spikes++;
  }
  return spikes;
}

async function train(recipe: Recipe, context: UnitContext): Promise<UnitOutcome> {
  const { steps, finalDir, curves, first, last } = await trainUnit(recipe, context);
  const spikes = countSpikes(curves.train.map((r) => r.loss));
  return {
    values: last.acc === null ? [] : [last.acc],
    extra: { loss: last.loss, acc_start: first.step === 0 ? first.acc : null, loss_start: first.step === 0 ? first.loss : null, spikes, steps },
    details: { finalDir, curves },
    headline: `step ${steps}: val loss ${last.loss.toFixed(4)}, acc ${last.acc?.toFixed(4) ?? '—'}, ${spikes} spike${spikes === 1 ? '' : 's'}`,
  };
}

/** The attention section of a finetuning unit: softmax as the control, Performer, DARKFormer with either init. */
function attentionOf(finetune: string): Record<string, unknown> {
  if (finetune === 'softmax') return { 'model.attention.name': 'softmax', 'model.attention.options': {} };
  if (finetune === 'performer') return { 'model.attention.name': 'performer', 'model.attention.options': { chunkSize: 32 } };
  const init = finetune === 'darkformer-whitening' ? 'whitening' : 'identity';
  return { 'model.attention.name': 'darkformer', 'model.attention.options': { chunkSize: 32, init } };
}

function pretrainedModel(context: UnitContext, seed: number): string {
  const name = pretrainName(seed);
  const done = context.doneUnit(name);
  if (!done) throw new Error(`unit ${name} is not done: the finetuning units start from it (run the experiment again once it is)`);
  const finalDir = done.outcome.details?.finalDir;
  if (typeof finalDir !== 'string') throw new Error(`unit ${name}: its result names no final model folder`);
  return path.resolve(done.dir, finalDir);
}

/** A unit's recipe: pretraining, or finetuning from `pretrained` (its seed's pretrained model folder). */
export function unitRecipeOf(settings: Record<string, unknown>, dir: string, pretrained: string | null): Recipe {
  const seed = settings.seed as number;
  if (settings.kind === 'pretrain') {
    return unitRecipe(PRETRAIN_RECIPE, { 'train.seed': seed, 'train.maxTokens': settings.tokens, 'train.evalInterval': 250, 'train.checkpointInterval': 0 }, dir);
  }
  if (pretrained === null) throw new Error('a finetuning unit needs its pretrained model');
  return unitRecipe(
    FINETUNE_RECIPE,
    {
      initFrom: pretrained,
      ...attentionOf(settings.finetune as string),
      'train.freeze': settings.trained === 'qkv' ? 'all-but-qkv' : 'none',
      'train.lr': settings.lr,
      'train.seed': seed,
      'train.maxTokens': settings.tokens,
      'train.logInterval': 5,
      'train.evalInterval': 25,
      'train.checkpointInterval': 0,
    },
    dir,
  );
}

async function runUnit(settings: Record<string, unknown>, context: UnitContext): Promise<UnitOutcome> {
  const pretrained = settings.kind === 'pretrain' ? null : pretrainedModel(context, settings.seed as number);
  return train(unitRecipeOf(settings, context.dir, pretrained), context);
}

export function units(quick: boolean): UnitSpec[] {
  const seeds = quick ? QUICK.seeds : SEEDS;
  const finetunes = quick ? QUICK.finetunes : FINETUNES;
  const pretrainTokens = quick ? QUICK.pretrainTokens : null;
  const tokens = quick ? QUICK.finetuneTokens : FINETUNE_TOKENS;
  return [
    ...seeds.map((seed): UnitSpec => ({ name: pretrainName(seed), settings: { kind: 'pretrain', seed, tokens: pretrainTokens } })),
    ...finetunes.flatMap((finetune) =>
      TRAINED.flatMap((trained) => seeds.map((seed): UnitSpec => ({ name: finetuneName(finetune, trained, seed), settings: { kind: 'finetune', finetune, trained, seed, lr: 1e-3, tokens } }))),
    ),
    ...(quick ? [] : ['performer', 'darkformer-identity'].flatMap((finetune) => RATES.map((lr): UnitSpec => ({ name: rateName(finetune, lr), settings: { kind: 'finetune', finetune, trained: 'all', seed: 1, lr, tokens } })))),
  ];
}

const TRAINED_TITLES: Record<string, string> = { all: 'all weights (Figures 2–3)', qkv: 'only Q/K/V (+ M) (Figure 4)' };

function cells(quick: boolean): CellSpec[] {
  const seeds = quick ? QUICK.seeds : SEEDS;
  const finetunes = quick ? QUICK.finetunes : FINETUNES;
  return [
    ...finetunes.flatMap((finetune) =>
      TRAINED.map((trained): CellSpec => ({ table: 'Finetuned from softmax', row: finetune, column: TRAINED_TITLES[trained], published: null, units: seeds.map((s) => finetuneName(finetune, trained, s)) })),
    ),
    ...(quick ? [] : ['performer', 'darkformer-identity'].flatMap((finetune) =>
      RATES.map((lr): CellSpec => ({ table: 'Learning-rate sweep, all weights, seed 1 (Figure 5)', row: finetune, column: `lr ${lr}`, published: null, units: [rateName(finetune, lr)] })),
    )),
  ];
}

/** The paper's three claims, each as a paired difference over the seeds (or the rates), from the units that ran. */
export function claims(view: UnitView, quick: boolean): Claim[] {
  const seeds = quick ? QUICK.seeds : SEEDS;
  const acc = (name: string) => view.values(name)[0];
  const out: Claim[] = [];
  const darkformers = quick ? ['darkformer-identity'] : ['darkformer-identity', 'darkformer-whitening'];
  for (const darkformer of darkformers) {
    for (const trained of TRAINED) {
      out.push(pairedClaim(
        `(1) ${darkformer}'s final accuracy is above Performer's, ${trained === 'all' ? 'all weights trained' : 'only Q/K/V (+ M) trained'} (Figure ${trained === 'all' ? 2 : 4})`,
        seeds.map((s) => [acc(finetuneName(darkformer, trained, s)), acc(finetuneName('performer', trained, s))]),
        { claimedSign: 1, digits: 4 },
      ));
    }
    const lead = (trained: string, s: number) => acc(finetuneName(darkformer, trained, s)) - acc(finetuneName('performer', trained, s));
    out.push(pairedClaim(
      `(2) ${darkformer}'s lead over Performer is larger when only Q/K/V (+ M) train than when all weights train (Figure 4 against Figure 3)`,
      seeds.map((s) => [lead('qkv', s), lead('all', s)]),
      { claimedSign: 1, digits: 4, pairName: 'seed' },
    ));
  }
  if (!quick) {
    const spikes = (name: string) => view.extra(name, 'spikes');
    const pairs = RATES.map((lr) => [spikes(rateName('darkformer-identity', lr)), spikes(rateName('performer', lr))] as const).filter(([a, b]) => a !== null && b !== null) as [number, number][];
    const total = (i: number) => pairs.reduce((s, p) => s + p[i], 0);
    const statement = '(3) DARKFormer has fewer loss spikes than Performer across learning rates (Figure 5)';
    out.push(
      pairs.length >= 2 && total(0) + total(1) === 0
        ? { statement, verdict: 'not separated', evidence: `no run spiked at any of the ${pairs.length} rates: this scale cannot show the claim` }
        : pairedClaim(statement, pairs, { claimedSign: -1, digits: 2, pairName: 'rate', prefix: `${total(0)} spikes against ${total(1)} over ${pairs.length} rates; ` }),
    );
  }
  return out;
}

export const darkformerFinetune: Experiment = {
  name: 'darkformer-finetune',
  version: 2,
  title: 'DARKFormer finetuning of a softmax-pretrained GPT',
  source: 'DARKFormer: Data-Aware Random Feature Kernel for Transformers, Figures 2–5 (finetuning Gemma-2B; the figures have no tables, so the claims are tested, not numbers)',
  measures: 'next-token validation accuracy after swapping the attention of a softmax-pretrained GPT and finetuning; loss spikes per run in a learning-rate sweep',
  metric: { name: 'final validation top-1 accuracy', digits: 4 },
  agreement: claimsOnly('no published numbers: each claim holds when its paired difference has a 95% Student t interval on the claimed side of 0, is "not separated" when the interval crosses 0 and "contradicted" when it lies on the other side'),
  protocol: {
    pretraining: `one softmax GPT per seed, ${PRETRAIN_RECIPE} (width 128, 4 layers × 4 heads, context 128) for a whole epoch of the demo corpus (≈ 2.3M tokens)`,
    finetuning: `${FINETUNES.join(', ')} (softmax is the control; DARKFormer’s M from the identity or whitened on 2 calibration batches), each training all weights or only Q/K/V (+ M) (train.freeze: all-but-qkv); ${FINETUNE_RECIPE}'s settings (lr 1e-3 cosine to 1e-4, 20 warm-up steps, no weight decay, chunk 32), ${FINETUNE_TOKENS.toLocaleString('en-US')} tokens (250 steps); seeds ${SEEDS.join(', ')}, each from its own seed's pretrained model`,
    'learning-rate sweep': `Performer and DARKFormer (identity), all weights, seed 1, at lr ${RATES.join(', ')} (Figure 5)`,
    'loss spike': `a logged training loss (every 5 steps) more than ${SPIKE_NATS} nats above the median of the previous ${SPIKE_WINDOW} logged losses (counted per run)`,
    claims: '(1) DARKFormer’s accuracy is above Performer’s (Figure 2, bottom); (2) the gap is larger when only Q/K/V (+ M) train (Figure 4 against Figure 3); (3) DARKFormer has fewer loss spikes across learning rates (Figure 5)',
    quick: `--quick: seed 1, Performer and DARKFormer (identity), pretraining ${QUICK.pretrainTokens.toLocaleString('en-US')} tokens and finetuning ${QUICK.finetuneTokens.toLocaleString('en-US')}: a smoke test, not a reproduction`,
  },
  notes: [
    'Scale: the paper finetunes Gemma-2B; here the pretrained model has ≈ 1.3M parameters (0.5M of them in the embeddings) and sees one epoch of 2.3M tokens, so its queries and keys are far less anisotropic than a large model’s, which is what DARKFormer’s data-aware M is for. A claim that is "not separated" here says that this scale does not show it, not that the paper is wrong.',
    'Each cell’s accuracy is measured on the same 8,192 validation tokens (the start of the validation split) as every other cell; the extra numbers (loss, accuracy right after the swap, spikes) are in the JSON file.',
  ],
  shown: [
    { key: 'acc_start', title: 'Validation accuracy right after the swap, before finetuning (step 0)', digits: 4 },
    { key: 'loss', title: 'Final validation loss (nats/token)', digits: 4 },
    { key: 'spikes', title: 'Loss spikes per run', digits: 1 },
  ],
  backend: 'tensorflow',
  units,
  cells,
  claims,
  runUnit,
};
