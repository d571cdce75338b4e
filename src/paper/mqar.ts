// mqar: Zoology's multi-query associative recall (Arora, Eyuboglu et al., ICLR 2024, Figure 2; src/paper/mqar-task.ts)
// on every mechanism, with accuracy set against the size of the state each keeps to recall with. One unit = one
// mechanism × sequence length × width × seed: it trains the 2-layer task model once per learning rate of Zoology's
// sweep, each from the same initialisation and on the same batches, and its value is the best rate's accuracy (Zoology
// reports the best rate per mechanism, length and width). Zoology prints its numbers as plots only, so nothing is set
// beside a published value: every mechanism's accuracy minus softmax's is reported as a paired difference (paired by
// length × width × seed), Holm-corrected with the rest (src/paper/results.ts).
import type { FeatureMapCost } from '../model/attention/registry.ts';
import { MqarGenerator } from './mqar-task.ts';
import type { MqarConfig } from './mqar-task.ts';
import { pairedOf } from './paired-claims.ts';
import { claimsOnly } from './protocol.ts';
import type { CellSpec, Difference, Experiment, UnitOutcome, UnitSpec, UnitView } from './protocol.ts';

/** One length of the grid: Zoology's pairings of sequence length and key–value pairs (Figure 2: T/16 pairs). */
interface MqarLength {
  seqLen: number;
  numKvPairs: number;
}

export interface MqarGrid {
  lengths: MqarLength[];
  dModels: number[];
  /** Zoology's sweep: every mechanism, length and width trains at each, the best one counts. */
  lrs: number[];
  mechanisms: string[];
  seeds: number[];
  vocabSize: number;
  /** Optimizer steps per learning rate, each on a fresh batch. */
  steps: number;
  batchSize: number;
  evalSamples: number;
  weightDecay: number;
}

/** Zoology's attention: one head (a kernel mechanism's state then grows with the width, as Based's plots show it). */
const NUM_HEADS = 1;
const NUM_LAYERS = 2;
const LINEAR_MECHANISMS = ['slay', 'performer', 'darkformer', 'schoenbat', 'linear-elu', 'cosformer'];

/** Zoology's Figure 2 (vocabulary 8,192, learning rates 10^-4 … 10^-2 in 4 log steps, 2 layers), at widths 64–256 and lengths 64–512. */
const FULL: MqarGrid = {
  lengths: [
    { seqLen: 64, numKvPairs: 4 },
    { seqLen: 128, numKvPairs: 8 },
    { seqLen: 256, numKvPairs: 16 },
    { seqLen: 512, numKvPairs: 32 },
  ],
  dModels: [64, 128, 256],
  lrs: [1e-4, 10 ** -3.3333333333333335, 10 ** -2.666666666666667, 1e-2],
  mechanisms: ['softmax', 'yat-spherical', ...LINEAR_MECHANISMS],
  seeds: [1],
  vocabSize: 8192,
  steps: 4000,
  batchSize: 64,
  evalSamples: 1024,
  weightDecay: 0.1,
};

/** --quick: the shortest length at a small vocabulary, two widths, two rates, four mechanisms (minutes on 2 cores, native backend). */
const QUICK: MqarGrid = {
  lengths: [{ seqLen: 64, numKvPairs: 4 }],
  dModels: [64, 128],
  lrs: [10 ** -2.666666666666667, 1e-2],
  mechanisms: ['softmax', 'slay', 'performer', 'linear-elu'],
  seeds: [1],
  vocabSize: 256,
  steps: 600,
  batchSize: 32,
  evalSamples: 256,
  weightDecay: 0.1,
};

/**
 * The grid the test suite runs end to end through `npm run paper -- mqar --quick` (its child processes read the same
 * variable): two units of a few steps. Never set it outside the tests; its units land in the quick folder of `--runs`.
 */
export const TEST_GRID_VARIABLE = 'SLAYFORMER_MQAR_TEST_GRID';
const TEST: MqarGrid = {
  lengths: [{ seqLen: 32, numKvPairs: 2 }],
  dModels: [16],
  lrs: [3e-3],
  mechanisms: ['softmax', 'linear-elu'],
  seeds: [1],
  vocabSize: 64,
  steps: 4,
  batchSize: 8,
  evalSamples: 16,
  weightDecay: 0.1,
};

export function mqarGrid(quick: boolean): MqarGrid {
  if (quick && process.env[TEST_GRID_VARIABLE] === '1') return TEST;
  return quick ? QUICK : FULL;
}

/** The mechanisms' options: the task benchmark's (SLAY R = 2, M = 16, P = 32; Performer 64 features; the others their defaults). */
async function attentionOptions(mechanism: string): Promise<Record<string, unknown>> {
  const { TASK_ATTENTION_OPTIONS } = await import('./task-runner.ts');
  return TASK_ATTENTION_OPTIONS[mechanism] ?? {};
}

/**
 * The floats one attention layer keeps to recall from at the end of a sequence of `seqLen` tokens. Softmax (and any
 * quadratic mechanism) keeps its KV cache, every key and value: 2·T·d_model. A kernel mechanism keeps, per head, the
 * running sums S = Σ φ(k)vᵀ (m × d_head) and z = Σ φ(k) (m): heads·m·(d_head + 1), whatever the length (m = its
 * feature count, `featureMap` of the registry). The model has 2 such layers; the count is per layer.
 */
export function stateFloats(featureMap: FeatureMapCost | null, shape: { seqLen: number; dModel: number; numHeads: number }): number {
  const { seqLen, dModel, numHeads } = shape;
  if (!featureMap) return 2 * seqLen * dModel;
  return numHeads * featureMap.features * (dModel / numHeads + 1);
}

const lengthName = ({ seqLen, numKvPairs }: MqarLength) => `T${seqLen}-kv${numKvPairs}`;
const unitName = (mechanism: string, length: MqarLength, dModel: number, seed: number) => `${mechanism}-${lengthName(length)}-d${dModel}-seed${seed}`;
const tableOf = ({ seqLen, numKvPairs }: MqarLength) => `T = ${seqLen}, ${numKvPairs} key–value pairs`;
const columnOf = (dModel: number) => `d_model ${dModel}`;

function units(quick: boolean): UnitSpec[] {
  const grid = mqarGrid(quick);
  const { lengths, dModels, mechanisms, seeds, ...protocol } = grid;
  // Seed, then length first: a stopped run still pairs every mechanism at the lengths done.
  return seeds.flatMap((seed) =>
    lengths.flatMap((length) =>
      dModels.flatMap((dModel) =>
        mechanisms.map(
          (mechanism): UnitSpec => ({ name: unitName(mechanism, length, dModel, seed), settings: { mechanism, ...length, dModel, seed, ...protocol } }),
        ),
      ),
    ),
  );
}

function cells(quick: boolean): CellSpec[] {
  const { lengths, dModels, mechanisms, seeds } = mqarGrid(quick);
  return lengths.flatMap((length) =>
    mechanisms.flatMap((mechanism) =>
      dModels.map(
        (dModel): CellSpec => ({
          table: tableOf(length),
          row: mechanism,
          column: columnOf(dModel),
          published: null,
          units: seeds.map((seed) => unitName(mechanism, length, dModel, seed)),
        }),
      ),
    ),
  );
}

/** Every mechanism's best-rate accuracy minus softmax's, paired over the grid's lengths × widths × seeds. */
function differences(view: UnitView, quick: boolean): Difference[] {
  const { lengths, dModels, mechanisms, seeds } = mqarGrid(quick);
  const configs = seeds.flatMap((seed) => lengths.flatMap((length) => dModels.map((dModel) => ({ seed, length, dModel }))));
  return mechanisms
    .filter((m) => m !== 'softmax')
    .map((mechanism): Difference => {
      const of = (read: (unit: string) => number | null | undefined) =>
        pairedOf(
          configs.map(
            ({ seed, length, dModel }) => [read(unitName(mechanism, length, dModel, seed)), read(unitName('softmax', length, dModel, seed))] as const,
          ),
        );
      const accuracy = of((unit) => view.values(unit)[0]);
      return { table: 'MQAR, every length and width', row: mechanism, baseline: 'softmax', n: accuracy.n, metric: accuracy.result, extra: {} };
    });
}

interface MqarUnitSettings extends MqarLength {
  mechanism: string;
  dModel: number;
  seed: number;
  lrs: number[];
  vocabSize: number;
  steps: number;
  batchSize: number;
  evalSamples: number;
  weightDecay: number;
}

async function runUnit(settings: Record<string, unknown>): Promise<UnitOutcome> {
  const s = settings as unknown as MqarUnitSettings;
  const [{ trainOnTask }, { attentionFeatureMap }] = await Promise.all([import('./task-runner.ts'), import('../model/attention/index.ts')]);
  const options = await attentionOptions(s.mechanism);
  const data: MqarConfig = { vocabSize: s.vocabSize, seqLen: s.seqLen, numKvPairs: s.numKvPairs, randomNonQueries: false };
  const shape = { seqLen: s.seqLen, dModel: s.dModel, numHeads: NUM_HEADS };
  const featureMap = attentionFeatureMap(s.mechanism, { ...options, numHeads: NUM_HEADS, headDim: s.dModel / NUM_HEADS, causal: true });
  const sweep: { lr: number; accuracy: number | null; loss: number | null; trainSeconds: number; lossCurve: number[] }[] = [];
  let params = 0;
  let execution = '';
  for (const lr of s.lrs) {
    // Each rate from the same initialisation, on the same batches: only the rate differs.
    const result = await trainOnTask({
      task: 'mqar',
      attention: s.mechanism,
      seed: s.seed,
      steps: s.steps,
      batchSize: s.batchSize,
      evalSamples: s.evalSamples,
      lr,
      weightDecay: s.weightDecay,
      attentionOptions: options,
      generator: new MqarGenerator(data, s.seed),
      model: { dModel: s.dModel, numHeads: NUM_HEADS, numLayers: NUM_LAYERS },
    });
    sweep.push({ lr, accuracy: result.accuracy, loss: result.loss, trainSeconds: result.trainSeconds, lossCurve: result.lossCurve });
    params = result.params;
    execution = result.execution;
  }
  const scored = sweep.filter((r) => r.accuracy !== null && Number.isFinite(r.accuracy));
  const best = scored.reduce<(typeof sweep)[number] | null>((a, r) => (a === null || r.accuracy! > a.accuracy! ? r : a), null);
  const state = stateFloats(featureMap, shape);
  const trainSeconds = sweep.reduce((sum, r) => sum + r.trainSeconds, 0);
  return {
    values: best ? [best.accuracy!] : [],
    extra: { state_floats: state, best_lr: best?.lr ?? null, loss: best?.loss ?? null, train_s: trainSeconds, params },
    ...(best ? {} : { error: 'no learning rate gave an accuracy' }),
    details: { attentionOptions: options, features: featureMap?.features ?? null, execution, sweep },
    headline: best
      ? `accuracy ${best.accuracy!.toFixed(3)} at lr ${best.lr.toExponential(1)} (${sweep.map((r) => r.accuracy?.toFixed(3) ?? '—').join(' / ')}), state ${state} floats, ${trainSeconds.toFixed(1)} s`
      : 'no learning rate gave an accuracy',
  };
}

const describeRates = (lrs: number[]) => lrs.map((lr) => lr.toExponential(2)).join(', ');
const describeLengths = (lengths: MqarLength[]) => lengths.map((l) => `T = ${l.seqLen} with ${l.numKvPairs} pairs`).join(', ');

export const mqar: Experiment = {
  name: 'mqar',
  version: 1,
  title: 'MQAR: multi-query associative recall against state size',
  source:
    'Zoology (Arora, Eyuboglu et al., ICLR 2024), Figure 2: multi-query associative recall, 2-layer models, the best of a learning-rate sweep per mechanism, length and width; Based (Arora et al., ICML 2024) sets recall against the state a mechanism keeps. Both print plots only, so nothing is set beside a published number',
  measures:
    'accuracy of the value predicted at every query position (the best learning rate’s), against the floats one layer keeps to recall from: softmax’s KV cache at the sequence length, 2·T·d_model, or a kernel mechanism’s running sums, heads·m·(d_head + 1) for m features',
  metric: { name: 'accuracy', digits: 3 },
  agreement: claimsOnly(
    'no published numbers: each mechanism’s accuracy minus softmax’s is reported as a paired difference over the grid’s lengths × widths × seeds, with its 95% Student t interval and Holm-adjusted p',
  ),
  protocol: {
    task: `Zoology’s MQAR generator (src/paper/mqar-task.ts): N key–value pairs (keys distinct in [1, V/2), values distinct in [V/2, V)), then every key queried once in the rest of the row at even offsets with power-law gaps (a = 0.01), target at a query = its value, only the queries scored; other positions 0 (Figure 2’s random_non_queries = False). Lengths: ${describeLengths(FULL.lengths)}; vocabulary ${FULL.vocabSize}`,
    model: `the task model (src/paper/task-model.ts): token + learned position embedding, ${NUM_LAYERS} residual attention-only blocks of ${NUM_HEADS} head (Zoology’s attention: 1 head, no MLP), width ${FULL.dModels.join(', ')}, causal, linear head`,
    mechanisms: `${FULL.mechanisms.join(', ')}; options as the task benchmark’s (SLAY R = 2, M = 16, P = 32; Performer 64 features; the others their defaults)`,
    training: `AdamW, weight decay ${FULL.weightDecay}, constant rate, ${FULL.steps} steps of a fresh batch of ${FULL.batchSize}, at each rate of Zoology’s sweep (${describeRates(FULL.lrs)}) from the same initialisation and batches; the best rate’s accuracy counts`,
    evaluation: `accuracy at the query positions of ${FULL.evalSamples} fresh rows of the evaluation stream`,
    'state size':
      'per layer, in floats: softmax and spherical Yat (quadratic) keep the KV cache of the sequence, 2·T·d_model; a kernel mechanism keeps S = Σ φ(k)vᵀ and z = Σ φ(k) per head, heads·m·(d_head + 1), independent of T',
    seeds: FULL.seeds.join(', '),
    quick: `--quick: ${describeLengths(QUICK.lengths)}, vocabulary ${QUICK.vocabSize}, widths ${QUICK.dModels.join(', ')}, rates ${describeRates(QUICK.lrs)}, ${QUICK.mechanisms.join(', ')}, ${QUICK.steps} steps of batch ${QUICK.batchSize}: a smoke test, not a reproduction`,
  },
  notes: [
    'Differences from Zoology, all deliberate: every batch is freshly drawn (Zoology trains 64 epochs over 100,000 fixed rows, with a cosine schedule and early stopping at 0.99) and far fewer rows are seen; every mechanism has the learned position embedding (Zoology gives it to attention only: its other mixers carry position in convolutions, ours have none); no dropout or LayerNorm (the task model of the SLAY paper’s benchmark).',
    'The paired differences pair each mechanism’s unit with softmax’s at the same length, width and seed (not by seed alone): their pairs, and the “seeds to separate”, count such configurations.',
    'A kernel mechanism’s state does not grow with the length, softmax’s does: at T = 512 and width 256 the KV cache is 262,144 floats per layer. SLAY’s features (R·P·M = 1,024 with these options) make its state, 1,024·(d_model + 1), larger than softmax’s KV cache, 2·T·d_model ≤ 1,024·d_model, at every length and width of the grid: it is not a small-state mechanism at these settings.',
  ],
  shown: [
    { key: 'state_floats', title: 'State size per layer (floats)', digits: 0 },
    { key: 'best_lr', title: 'Best learning rate', digits: 4 },
  ],
  plotAgainst: { key: 'state_floats', title: 'state size per layer (floats)', log: true },
  backend: 'tensorflow',
  spansRanks: true,
  units,
  cells,
  differences,
  runUnit,
};
