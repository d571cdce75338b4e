// BERT masked-LM batches: [CLS] chunk [SEP] sequences padded to seqLen, each real token chosen with
// probability p (independently, as in BERT and HF's DataCollatorForLanguageModeling), a chosen token
// becomes <mask> 80% of the time, a random ordinary token 10%, and stays itself 10%. Loss only on chosen
// positions (labels = original id there, -100 elsewhere).
import type { Rng } from '../core/rng.ts';
import type { Batch } from './batch.ts';
import type { TextTokenizer } from './tokenizer.ts';

export const IGNORE_LABEL = -100;

export interface MlmSpecials {
  cls: number;
  sep: number;
  pad: number;
  mask: number;
}

/** [CLS]/[SEP]/[PAD]/[MASK] of a tokenizer. Byte-level BPE tokenizers without CLS/SEP use the
 *  end-of-text token for both (and their <pad>/<mask> specials). */
export function mlmSpecials(tokenizer: TextTokenizer): MlmSpecials {
  const s = tokenizer.specialIds;
  const cls = s.cls ?? s.eos;
  const sep = s.sep ?? s.eos;
  const missing = [
    cls === undefined && '[CLS] (or an end-of-text token)',
    sep === undefined && '[SEP] (or an end-of-text token)',
    s.pad === undefined && 'a pad token (<pad> or [PAD])',
    s.mask === undefined && 'a mask token (<mask> or [MASK])',
  ].filter(Boolean);
  if (missing.length > 0) {
    throw new Error(`tokenizer ${tokenizer.path} cannot make BERT batches: it lacks ${missing.join(', ')}`);
  }
  return { cls: cls!, sep: sep!, pad: s.pad!, mask: s.mask! };
}

/** Ordinary (non-special) token ids, the pool for the 10% random replacements. */
export function ordinaryTokenIds(vocabSize: number, specialIds: Iterable<number>): Int32Array {
  const special = new Set(specialIds);
  const ids: number[] = [];
  for (let id = 0; id < vocabSize; id++) if (!special.has(id)) ids.push(id);
  return Int32Array.from(ids);
}

export interface MlmOptions {
  seqLen: number;
  specials: MlmSpecials;
  randomPool: Int32Array;
  probability: number;
  tokenBytes: (id: number) => number;
}

/** Masks and pads chunks of at most seqLen − 2 tokens into one batch, drawing from `rng`. */
export function mlmBatch(chunks: Int32Array[], opts: MlmOptions, rng: Rng): Batch {
  const { seqLen, specials, randomPool, probability, tokenBytes } = opts;
  if (!(probability > 0 && probability < 1)) throw new Error(`mlmProbability must be in (0, 1), got ${probability}`);
  const rows = chunks.length;
  const inputIds = new Int32Array(rows * seqLen).fill(specials.pad);
  const labels = new Int32Array(rows * seqLen).fill(IGNORE_LABEL);
  const attentionMask = new Float32Array(rows * seqLen);
  let tokens = 0;
  let bytes = 0;
  for (let r = 0; r < rows; r++) {
    const chunk = chunks[r];
    if (chunk.length > seqLen - 2) throw new Error(`chunk ${r} has ${chunk.length} tokens, more than seqLen − 2 = ${seqLen - 2}`);
    const base = r * seqLen;
    inputIds[base] = specials.cls;
    inputIds[base + chunk.length + 1] = specials.sep;
    attentionMask.fill(1, base, base + chunk.length + 2);
    for (let i = 0; i < chunk.length; i++) {
      const at = base + 1 + i;
      const original = chunk[i];
      inputIds[at] = original;
      if (rng.uniform() >= probability) continue;
      labels[at] = original;
      tokens++;
      bytes += tokenBytes(original);
      const action = rng.uniform();
      if (action < 0.8) inputIds[at] = specials.mask;
      else if (action < 0.9) inputIds[at] = randomPool[rng.int(randomPool.length)];
    }
  }
  return { kind: 'bert', batchSize: rows, seqLen, inputIds, labels, attentionMask, tokens, bytes };
}
