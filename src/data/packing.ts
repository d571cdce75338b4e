// GPT packing: documents joined with an end-of-text token, cut into windows of seqLen + 1 tokens that
// overlap by one token (stride seqLen), so every token after the first is a target exactly once:
// inputIds = window[0..seqLen), labels = window[1..seqLen]. The tail shorter than a window is dropped.
import { seqLenProblem } from './batch.ts';
import type { Batch } from './batch.ts';

/** Builds windows incrementally from documents fed in pieces, so a window can span documents and
 *  record batches. Between windows it holds only the one overlap token (`carry`). */
export class WindowPacker {
  private readonly window: Int32Array;
  private filled: number;

  constructor(
    readonly seqLen: number,
    carry: readonly number[] = [],
  ) {
    const problem = seqLenProblem(seqLen, 'gpt');
    if (problem !== null) throw new Error(`WindowPacker: seqLen must be ${problem} (got ${seqLen})`);
    if (carry.length > seqLen) throw new Error(`packer carry of ${carry.length} tokens exceeds seqLen ${seqLen}`);
    this.window = new Int32Array(seqLen + 1);
    this.window.set(carry);
    this.filled = carry.length;
  }

  get full(): boolean {
    return this.filled === this.window.length;
  }

  /** Copies tokens from doc[offset..] until the window is full or the document ends; returns the new offset. */
  fill(doc: Int32Array, offset: number): number {
    const n = Math.min(this.window.length - this.filled, doc.length - offset);
    this.window.set(doc.subarray(offset, offset + n), this.filled);
    this.filled += n;
    return offset + n;
  }

  /** Returns the full window and starts the next one with its last token. */
  take(): Int32Array {
    if (!this.full) throw new Error('WindowPacker.take() called before the window is full');
    const out = this.window.slice();
    this.window[0] = out[out.length - 1];
    this.filled = 1;
    return out;
  }

  /** Tokens of the window under construction (for the data cursor). */
  carry(): number[] {
    return Array.from(this.window.subarray(0, this.filled));
  }
}

/** Number of windows a token stream of `streamTokens` tokens (eos included) yields. */
export function windowCount(streamTokens: number, seqLen: number): number {
  return streamTokens <= 0 ? 0 : Math.floor((streamTokens - 1) / seqLen);
}

/**
 * Stacks windows of seqLen + 1 into a causal-LM batch. With `documentEos` (data.documentMask) it also records each input
 * position's document in its row: the end-of-text token closes its document, the next token starts the next one.
 */
export function gptBatch(windows: Int32Array[], seqLen: number, tokenBytes: (id: number) => number, documentEos?: number): Batch {
  const rows = windows.length;
  const inputIds = new Int32Array(rows * seqLen);
  const labels = new Int32Array(rows * seqLen);
  const documentIds = documentEos === undefined ? undefined : new Int32Array(rows * seqLen);
  let bytes = 0;
  for (let r = 0; r < rows; r++) {
    const w = windows[r];
    if (w.length !== seqLen + 1) throw new Error(`window ${r} has ${w.length} tokens, expected seqLen + 1 = ${seqLen + 1}`);
    inputIds.set(w.subarray(0, seqLen), r * seqLen);
    labels.set(w.subarray(1), r * seqLen);
    for (let t = 1; t <= seqLen; t++) bytes += tokenBytes(w[t]);
    if (documentIds) for (let t = 1, document = 0; t < seqLen; t++) documentIds[r * seqLen + t] = w[t - 1] === documentEos ? ++document : document;
  }
  return { kind: 'gpt', batchSize: rows, seqLen, inputIds, labels, ...(documentIds ? { documentIds } : {}), tokens: rows * seqLen, bytes };
}
