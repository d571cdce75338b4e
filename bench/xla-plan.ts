// What the offline GPU archive measures (docs/xla.md, "Offline GPU node"): the models `npm run bench:xla` knows and the
// benchmark rows `npm run xla:archive` compiles, in the order bench/xla-run.py runs them within its time budget.
import { ATTENTION_KERNELS, type AttentionKernel } from '../src/backend/attention-boundary.ts';
import type { LanguageModelConfig } from '../src/model/lm.ts';

/** The demo GPT (recipes/demo/gpt-slay.yaml): the long-context rows keep its width. */
const DEMO_GPT: LanguageModelConfig = {
  kind: 'gpt',
  vocabSize: 4096,
  maxSeqLen: 128,
  dModel: 128,
  numLayers: 4,
  numHeads: 4,
  mlpRatio: 4,
  dropout: 0,
  bias: true,
  seed: 1,
  attention: { name: 'slay', options: { chunkSize: 32, quadratureNodes: 2, prfFeatures: 16, anchors: 8, epsilon: 1e-3 } },
};

/**
 * The models the GPU archive carries: the demo GPT (recipes/demo/gpt-slay.yaml), GPT-2 small and, for the long-context
 * rows, the demo's width with softmax (`--attention` swaps the mechanism, with its default options).
 */
export const XLA_BENCH_MODELS: Record<string, { config: LanguageModelConfig; batch: number; seq: number }> = {
  demo: { config: DEMO_GPT, batch: 8, seq: 128 },
  'gpt2-small': {
    config: {
      kind: 'gpt',
      vocabSize: 50257,
      maxSeqLen: 1024,
      dModel: 768,
      numLayers: 12,
      numHeads: 12,
      mlpRatio: 4,
      dropout: 0,
      bias: true,
      seed: 1,
      attention: { name: 'softmax', options: {} },
    },
    batch: 4,
    seq: 256,
  },
  long: { config: { ...DEMO_GPT, maxSeqLen: 1024, attention: { name: 'softmax', options: {} } }, batch: 1, seq: 1024 },
};

export type XlaBenchModel = keyof typeof XLA_BENCH_MODELS;
export type RowPrecision = 'fp32' | 'bf16';

/**
 * One benchmark row: a step of `gradAccum` micro-batches of `batch` × `seq` of `model` with `attention`, in `precision`,
 * softmax recorded as `attentionKernel` (train.attentionKernel; fused: the boundary the runner fills with cuDNN's attention).
 */
export interface ArchiveRow {
  id: string;
  model: string;
  attention: string;
  precision: RowPrecision;
  attentionKernel: AttentionKernel;
  batch: number;
  seq: number;
  gradAccum: number;
  /** Rows of one group share a recording (the same model, mechanism, kernel and shape; one program folder per precision). */
  group: string;
}

/** The mechanisms of the mission the rows compare: softmax and the three positive-feature kernel attentions. */
export const ROW_MECHANISMS = ['softmax', 'slay', 'performer', 'darkformer'] as const;
/** Lengths of the long-context rows (batch 1, the demo's width). */
export const LONG_LENGTHS = [1024, 4096, 16384] as const;
/**
 * GPT-2 small's 16 × 1024 tokens per step, as 16 micro-batches of 1 × 1024 (the program's shape) summed before the
 * update: recording a program executes its step eagerly here (twice), and one of 16 × 1024 needs more memory than this
 * machine has (docs/xla.md, "The archive's rows").
 */
export const GPT2_ROW_SHAPE = { batch: 1, seq: 1024, gradAccum: 16 } as const;

/** A mechanism's name in ids and groups: `softmax-fused` for softmax with the fused kernel, so its programs are a group of their own. */
const mechanismTag = (attention: string, kernel: AttentionKernel) => (kernel === 'fused' ? `${attention}-fused` : attention);

function row(
  model: string,
  attention: string,
  precision: RowPrecision,
  batch: number,
  seq: number,
  gradAccum: number,
  attentionKernel: AttentionKernel,
  id?: string,
): ArchiveRow {
  const shape = `${gradAccum > 1 ? `${gradAccum}x` : ''}${batch}x${seq}`;
  const tag = mechanismTag(attention, attentionKernel);
  return {
    id: id ?? `${model}-${tag}-${precision}-${shape}`,
    model,
    attention,
    precision,
    attentionKernel,
    batch,
    seq,
    gradAccum,
    group: `${model}-${tag}-${shape}`,
  };
}

/**
 * Each mechanism with the kernels its rows use: softmax composed and then fused (cuDNN's attention on the GPU, bf16
 * only: in fp32 the runner fills the boundary with XLA's composed form, docs/xla.md "Attention on the GPU").
 */
const mechanismKernels = (precision: RowPrecision): Array<[string, AttentionKernel]> =>
  ROW_MECHANISMS.flatMap(
    (m): Array<[string, AttentionKernel]> =>
      m === 'softmax' && precision === 'bf16'
        ? [
            [m, 'composed'],
            [m, 'fused'],
          ]
        : [[m, 'composed']],
  );
const gpt2Rows = (precision: RowPrecision) =>
  mechanismKernels(precision).map(([m, kernel]) =>
    row('gpt2-small', m, precision, GPT2_ROW_SHAPE.batch, GPT2_ROW_SHAPE.seq, GPT2_ROW_SHAPE.gradAccum, kernel, `gpt2-${mechanismTag(m, kernel)}-${precision}`),
  );
/**
 * Softmax stops at 4K, composed or fused: the composed program carries the causal mask as an L × L float32 constant
 * (1 GiB at 16K), and recording executes the step eagerly here in the composed form (the fused kernel's values too),
 * whose 16K × 16K scores per head and layer this machine cannot hold (the fused recording peaked at 1.2 GB resident at
 * 1K and 8.4 GB at 4K, growing with L²; docs/xla.md, "The archive's rows").
 */
export const SOFTMAX_LONGEST = 4096;
const longRows = LONG_LENGTHS.flatMap((seq) =>
  mechanismKernels('bf16')
    .filter(([m]) => m !== 'softmax' || seq <= SOFTMAX_LONGEST)
    .map(([m, kernel]) => row('long', m, 'bf16', 1, seq, 1, kernel, `long-${mechanismTag(m, kernel)}-${seq / 1024}k`)),
);

/** Every row, in the order xla-run.py runs them: GPT-2 small in bf16, the long-context rows by length, GPT-2 small in fp32. */
export const ARCHIVE_ROWS: readonly ArchiveRow[] = [...gpt2Rows('bf16'), ...longRows, ...gpt2Rows('fp32')];
const ROW_SETS: Record<string, readonly ArchiveRow[]> = {
  all: ARCHIVE_ROWS,
  gpt2: ARCHIVE_ROWS.filter((r) => r.model === 'gpt2-small'),
  long: longRows,
  fused: ARCHIVE_ROWS.filter((r) => r.attentionKernel === 'fused'),
  none: [],
};

/**
 * The rows `--rows` names: comma-separated sets (all, gpt2, long, fused, none), row ids of ARCHIVE_ROWS, or rows of
 * their own as MODEL:MECHANISM:PRECISION:[Ax]BxS[:KERNEL] (e.g. demo:performer:bf16:1x64, the tests' tiny shapes;
 * KERNEL composed, the default, or fused, softmax only). Throws naming the item it cannot read.
 */
export function parseRows(text: string, mechanisms: readonly string[]): ArchiveRow[] {
  const rows: ArchiveRow[] = [];
  for (const item of text.split(',').filter(Boolean)) {
    const set = ROW_SETS[item];
    const known = ARCHIVE_ROWS.find((r) => r.id === item);
    if (set) rows.push(...set);
    else if (known) rows.push(known);
    else {
      const match = /^([\w-]+):([\w-]+):(fp32|bf16):(?:(\d+)x)?(\d+)x(\d+)(?::(\w+))?$/.exec(item);
      if (!match)
        throw new Error(`--rows: '${item}' is neither a set (${Object.keys(ROW_SETS).join(', ')}), a row id nor MODEL:MECHANISM:fp32|bf16:[Ax]BxS[:KERNEL]`);
      const [, model, attention, precision, accum, batch, seq, kernel = 'composed'] = match;
      if (!(model in XLA_BENCH_MODELS)) throw new Error(`--rows: '${item}': unknown model '${model}' (${Object.keys(XLA_BENCH_MODELS).join(', ')})`);
      if (!mechanisms.includes(attention)) throw new Error(`--rows: '${item}': unknown mechanism '${attention}'`);
      if (!(ATTENTION_KERNELS as readonly string[]).includes(kernel))
        throw new Error(`--rows: '${item}': unknown attention kernel '${kernel}' (${ATTENTION_KERNELS.join(', ')})`);
      if (kernel === 'fused' && attention !== 'softmax') throw new Error(`--rows: '${item}': the fused kernel is softmax attention's (train.attentionKernel)`);
      const [a, b, l] = [Number(accum ?? 1), Number(batch), Number(seq)];
      if (a < 1 || b < 1 || l < 2) throw new Error(`--rows: '${item}': micro-batches, batch and length must be ≥ 1, 1 and 2`);
      rows.push(row(model, attention, precision as RowPrecision, b, l, a, kernel as AttentionKernel));
    }
  }
  const ids = new Set<string>();
  return rows.filter((r) => !ids.has(r.id) && ids.add(r.id));
}
