// Small random batches for the trainer tests (gradient accumulation, data parallelism).
import type { ModelBatch } from '../../src/model/lm.ts';
import type { Rng } from '../../src/core/rng.ts';

export const VOCAB = 19;
export const SEQ = 6;

export function makeBatch(kind: 'gpt' | 'bert', rows: number, rng: Rng): ModelBatch {
  const inputIds = Int32Array.from({ length: rows * SEQ }, () => rng.int(VOCAB));
  const labels = Int32Array.from({ length: rows * SEQ }, () => rng.int(VOCAB));
  if (kind === 'gpt') return { batchSize: rows, seqLen: SEQ, inputIds, labels };
  // BERT: a varying number of labelled positions per row, and padding.
  const attentionMask = new Float32Array(rows * SEQ);
  for (let r = 0; r < rows; r++) {
    const real = 3 + rng.int(SEQ - 2);
    for (let t = 0; t < SEQ; t++) {
      const i = r * SEQ + t;
      attentionMask[i] = t < real ? 1 : 0;
      if (t >= real || rng.uniform() < 0.5) labels[i] = -100;
    }
    labels[r * SEQ] = rng.int(VOCAB); // at least one label per row
  }
  return { batchSize: rows, seqLen: SEQ, inputIds, labels, attentionMask };
}

/** Concatenates micro-batches row-wise into one batch. */
export function concat(batches: ModelBatch[]): ModelBatch {
  const cat = <T extends Int32Array | Float32Array>(parts: T[], make: (n: number) => T): T => {
    const out = make(parts.reduce((n, p) => n + p.length, 0));
    let at = 0;
    for (const p of parts) {
      out.set(p, at);
      at += p.length;
    }
    return out;
  };
  return {
    batchSize: batches.reduce((n, b) => n + b.batchSize, 0),
    seqLen: SEQ,
    inputIds: cat(
      batches.map((b) => b.inputIds),
      (n) => new Int32Array(n),
    ),
    labels: cat(
      batches.map((b) => b.labels),
      (n) => new Int32Array(n),
    ),
    attentionMask: batches[0].attentionMask
      ? cat(
          batches.map((b) => b.attentionMask!),
          (n) => new Float32Array(n),
        )
      : undefined,
  };
}
