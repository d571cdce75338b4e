// slay-tasks: the SLAY paper's synthetic-task tables (Tables 3–9), 22 tasks × the paper's five mechanisms × seeds
// 42–44, plus DARKFormer, SchoenbAt and cosFormer as extra columns, on the task model and generators of
// src/paper/synthetic-tasks.ts and task-runner.ts. One unit = one task × mechanism × seed (one trained model).
import { TASK_NAMES, taskSpec } from './synthetic-tasks.ts';
import type { CellSpec, Experiment, Explanation, PublishedValue, UnitOutcome, UnitSpec } from './protocol.ts';
import { sdRule } from './protocol.ts';

/** The paper's columns, in its order: Standard, Spherical-YAT, Performer, Linear, SLAY. */
export const PAPER_MECHANISMS = ['softmax', 'yat-spherical', 'performer', 'linear-elu', 'slay'] as const;
const EXTRA_MECHANISMS = ['darkformer', 'schoenbat', 'cosformer'] as const;
const SEEDS = [42, 43, 44];

/**
 * The protocol of the run behind the paper's tables. The reference's benchmark script defaults to batch 32, but the
 * tables come from its run on an Apple GPU, where the script lowers the batch to 16 (its task_results.json records
 * batch_size 16; re-run here at batch 32, several cells land well above the paper, at batch 16 they agree). Final
 * accuracy on 4 × batch fresh samples, as the script.
 */
const PROTOCOL = { steps: 200, batchSize: 16, evalSamples: 64, lr: 1e-3, weightDecay: 0.01 };
/** --quick: the script's own quick mode (50 steps, batch 16, one seed) on three short tasks and three mechanisms. */
const QUICK = { tasks: ['copy', 'pattern', 'majority'], mechanisms: ['softmax', 'linear-elu', 'slay'], seeds: [42], steps: 50 };

/**
 * Tables 3–9 as printed: per table its tasks (columns) and per mechanism one "mean±sd" per task ('–' = no number).
 * test/paper/published.test.ts checks this transcription against the paper's text.
 */
const TABLES: { table: string; title: string; tasks: string[]; rows: Record<(typeof PAPER_MECHANISMS)[number], string> }[] = [
  {
    table: 'Table 3',
    title: 'Basic',
    tasks: ['copy', 'sort', 'reverse'],
    rows: {
      softmax: '1.00±0.00 0.28±0.02 0.51±0.00',
      'yat-spherical': '1.00±0.00 0.24±0.01 0.33±0.02',
      performer: '1.00±0.00 0.27±0.02 0.09±0.01',
      'linear-elu': '1.00±0.00 0.26±0.02 0.05±0.01',
      slay: '1.00±0.00 0.29±0.01 0.42±0.04',
    },
  },
  {
    table: 'Table 4',
    title: 'Arithmetic',
    tasks: ['counting', 'parity', 'addition', 'modular'],
    rows: {
      softmax: '0.72±0.01 0.49±0.03 0.78±0.03 0.15±0.03',
      'yat-spherical': '0.78±0.04 0.49±0.03 0.68±0.16 0.16±0.01',
      performer: '0.81±0.06 0.49±0.03 0.84±0.02 0.15±0.02',
      'linear-elu': '0.83±0.05 0.49±0.03 0.91±0.04 0.15±0.03',
      slay: '0.74±0.13 0.49±0.03 0.86±0.05 0.20±0.03',
    },
  },
  {
    table: 'Table 5',
    title: 'Long-Range',
    tasks: ['long_copy', 'distant_match', 'multihop'],
    rows: {
      softmax: '1.00±0.00 1.00±0.00 0.04±0.01',
      'yat-spherical': '1.00±0.00 1.00±0.00 0.04±0.01',
      performer: '1.00±0.00 1.00±0.00 0.03±0.02',
      'linear-elu': '1.00±0.00 0.99±0.02 0.03±0.00',
      slay: '1.00±0.00 1.00±0.00 0.04±0.01',
    },
  },
  {
    table: 'Table 6',
    title: 'Memory',
    tasks: ['retrieval', 'kv_recall', 'first_token', 'selective_copy'],
    rows: {
      softmax: '1.00±0.00 0.02±0.02 1.00±0.00 0.88±0.00',
      'yat-spherical': '1.00±0.00 0.02±0.03 1.00±0.00 0.88±0.00',
      performer: '1.00±0.00 0.03±0.00 1.00±0.00 0.88±0.00',
      'linear-elu': '1.00±0.00 0.02±0.02 0.97±0.02 0.88±0.00',
      slay: '1.00±0.00 0.02±0.01 1.00±0.00 0.88±0.00',
    },
  },
  {
    table: 'Table 7',
    title: 'Patterns',
    tasks: ['bigram', 'majority', 'histogram'],
    rows: {
      softmax: '– 0.78±0.07 0.87±0.00',
      'yat-spherical': '– 0.75±0.06 0.87±0.00',
      performer: '– 0.82±0.02 0.87±0.00',
      'linear-elu': '– 0.82±0.06 0.87±0.00',
      slay: '– 0.84±0.03 0.87±0.00',
    },
  },
  {
    table: 'Table 8',
    title: 'Reasoning',
    tasks: ['stack', 'induction', 'pattern'],
    rows: {
      softmax: '0.75±0.01 0.02±0.02 0.91±0.00',
      'yat-spherical': '0.75±0.01 0.02±0.02 0.91±0.00',
      performer: '0.76±0.01 0.02±0.01 0.91±0.00',
      'linear-elu': '0.75±0.01 0.01±0.01 0.91±0.00',
      slay: '0.76±0.01 0.03±0.01 0.91±0.00',
    },
  },
  {
    table: 'Table 9',
    title: 'Robustness',
    tasks: ['noisy_copy', 'compression'],
    rows: {
      softmax: '1.00±0.00 0.59±0.00',
      'yat-spherical': '1.00±0.00 0.59±0.00',
      performer: '1.00±0.00 0.59±0.01',
      'linear-elu': '1.00±0.00 0.59±0.01',
      slay: '1.00±0.00 0.59±0.01',
    },
  },
];

/** The published accuracy of a task × mechanism (null where the paper prints '–' or has no column). */
export function publishedAccuracy(task: string, mechanism: string): PublishedValue | null {
  const table = TABLES.find((t) => t.tasks.includes(task));
  const row = table?.rows[mechanism as (typeof PAPER_MECHANISMS)[number]];
  if (!table || row === undefined) return null;
  const text = row.split(' ')[table.tasks.indexOf(task)];
  if (text === '–') return null;
  const [mean, sd] = text.split('±').map(Number);
  return { mean, sd, source: table.table };
}

/** The paper's table of each task (every task is in one). */
export function paperTableOf(task: string): { table: string; title: string } {
  const table = TABLES.find((t) => t.tasks.includes(task));
  if (!table) throw new Error(`slay-tasks: task ${task} is in none of Tables 3–9`);
  return { table: table.table, title: table.title };
}

/**
 * What is known to make a cell differ (applies only where it disagrees). A task's own difference comes first: where every
 * mechanism sits off the paper alike (selective_copy), a mechanism's cell at the tolerance's edge is that offset, not
 * its feature map.
 */
export function explanation(task: string, mechanism: string): Explanation | undefined {
  switch (task) {
    case 'long_copy':
      return { kind: 'protocol-gap', text: 'the run behind the tables capped long_copy at length 128; ours is length 256 (the script’s default)' };
    case 'selective_copy':
      return {
        kind: 'deliberate',
        text:
          'our target is the token after each marker in the final input (the reference read it before later markers were written); ' +
          'under both rules the score sits at the level of a constant prediction (≈ 0.88–0.91), so neither measures copying. ' +
          'Every mechanism, softmax included, sits ≈ +0.03 above the paper here; a cell that misses the tolerance (Performer’s, by 0.0002) ' +
          'shows that shared offset, not a difference of its feature map',
      };
    case 'distant_match':
      return {
        kind: 'deliberate',
        text: 'we score the position the generator marks; the reference inferred it as target ≠ 0 and so dropped samples whose answer is token 0',
      };
  }
  if (mechanism === 'performer') {
    return {
      kind: 'protocol-gap',
      text:
        "the paper's Performer column is the reference code's ReLU random-feature attention, not FAVOR+; ours is FAVOR+ " +
        '(positive random features, 64 of them), which solves more of the position-dependent tasks (e.g. reverse)',
    };
  }
  return undefined;
}

const QUICK_DIFFERENCE: Explanation = {
  kind: 'deliberate',
  text: `--quick trains ${QUICK.steps} steps and one seed instead of the protocol's ${PROTOCOL.steps} steps and three`,
};

const unitName = (task: string, mechanism: string, seed: number) => `${task}-${mechanism}-seed${seed}`;

function grid(quick: boolean) {
  return quick
    ? { tasks: QUICK.tasks, mechanisms: QUICK.mechanisms, seeds: QUICK.seeds, steps: QUICK.steps }
    : { tasks: [...TASK_NAMES], mechanisms: [...PAPER_MECHANISMS, ...EXTRA_MECHANISMS] as string[], seeds: SEEDS, steps: PROTOCOL.steps };
}

export const slayTasks: Experiment = {
  name: 'slay-tasks',
  version: 1,
  title: 'SLAY synthetic tasks',
  source: 'SLAY: Spherical Linearized Attention with Yat-Kernel (ICML 2026), Tables 3–9',
  measures: 'final accuracy of the 2-layer attention-only task model on fresh samples, over the positions each task scores',
  metric: { name: 'accuracy', digits: 2 },
  agreement: sdRule(2, 0.02, '|ours − paper| ≤ 2·√(sd_paper² + sd_ours²) + 0.02 (sd over the 3 seeds; the paper’s as printed, to 2 decimals)'),
  protocol: {
    model: 'token + learned position embedding, 2 residual attention-only blocks (width 64, 4 heads, causal), linear head; PyTorch default init',
    training: `AdamW lr ${PROTOCOL.lr}, weight decay ${PROTOCOL.weightDecay} (embeddings included), β (0.9, 0.999), ε 1e-8; ${PROTOCOL.steps} steps, each on a fresh batch of ${PROTOCOL.batchSize}`,
    evaluation: `accuracy on ${PROTOCOL.evalSamples} fresh samples (4 × batch) at the positions the task scores (every position, the last one, or the marked ones)`,
    mechanisms: `${PAPER_MECHANISMS.join(', ')} (the paper's columns: Standard, Spherical-YAT, Performer, Linear, SLAY); extra columns ${EXTRA_MECHANISMS.join(', ')}`,
    'mechanism options':
      'SLAY anchor features R = 2, M = 16, P = 32, ε = 1e-6; spherical Yat ε = 1e-6; Performer 64 features; the others their defaults (src/paper/task-runner.ts)',
    seeds: SEEDS.join(', '),
    batch: `${PROTOCOL.batchSize}: the batch of the reference run behind the tables (its script defaults to 32; \`npm run tasks\` keeps that default)`,
    quick: `--quick: ${QUICK.tasks.join(', ')} × ${QUICK.mechanisms.join(', ')}, seed ${QUICK.seeds.join(', ')}, ${QUICK.steps} steps (the script's quick mode): a smoke test, not a reproduction`,
  },
  notes: [
    'bigram has no published numbers: the reference generator crashed on GPU (it reset the global seed and built its table on the CPU), so every paper column is "–"; ours draws the table from the run seed.',
    'kv_recall and induction stay at chance level (≈ 0.02) for every mechanism after 200 steps, in the paper and here: those cells carry no signal about the mechanisms. sort and reverse are bounded by causality (a causal model cannot see the later tokens it must output early).',
  ],
  shown: [{ key: 'train_s', title: 'Training seconds per run (mean over seeds; this machine, not compared)', digits: 1 }],
  backend: 'wasm',
  spansRanks: true,

  units(quick) {
    const { tasks, mechanisms, seeds, steps } = grid(quick);
    const units: UnitSpec[] = [];
    for (const task of tasks) {
      for (const mechanism of mechanisms) {
        for (const seed of seeds) units.push({ name: unitName(task, mechanism, seed), settings: { task, mechanism, seed, ...PROTOCOL, steps } });
      }
    }
    return units;
  },

  cells(quick) {
    const { tasks, mechanisms, seeds } = grid(quick);
    const ordered = [...tasks].sort((a, b) => TABLES.findIndex((t) => t.tasks.includes(a)) - TABLES.findIndex((t) => t.tasks.includes(b)));
    return ordered.flatMap((task) => {
      const { table, title } = paperTableOf(task);
      return mechanisms.map(
        (mechanism): CellSpec => ({
          table: `${table} (${title})`,
          row: task,
          column: mechanism,
          published: publishedAccuracy(task, mechanism),
          explanation: quick ? QUICK_DIFFERENCE : explanation(task, mechanism),
          units: seeds.map((seed) => unitName(task, mechanism, seed)),
        }),
      );
    });
  },

  async runUnit(settings): Promise<UnitOutcome> {
    const { trainOnTask, TASK_ATTENTION_OPTIONS } = await import('./task-runner.ts');
    const s = settings as { task: string; mechanism: string; seed: number } & typeof PROTOCOL;
    taskSpec(s.task);
    const result = await trainOnTask({
      task: s.task,
      attention: s.mechanism,
      seed: s.seed,
      steps: s.steps,
      batchSize: s.batchSize,
      evalSamples: s.evalSamples,
      lr: s.lr,
      weightDecay: s.weightDecay,
    });
    return {
      values: result.accuracy === null ? [] : [result.accuracy],
      extra: { loss: result.loss, train_s: result.trainSeconds, params: result.params },
      details: { attentionOptions: TASK_ATTENTION_OPTIONS[s.mechanism] ?? {}, execution: result.execution, lossCurve: result.lossCurve },
      headline: `accuracy ${result.accuracy?.toFixed(3)}, loss ${result.loss?.toFixed(3)}, ${result.trainSeconds.toFixed(1)} s (${result.execution})`,
    };
  },
};
