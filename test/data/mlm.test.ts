import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { IGNORE_LABEL, mlmBatch, mlmSpecials, ordinaryTokenIds } from '../../src/data/mlm.ts';
import type { MlmOptions } from '../../src/data/mlm.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { Rng } from '../../src/core/rng.ts';

const VOCAB = 300;
const specials = { cls: 0, sep: 1, pad: 2, mask: 3 };
const pool = ordinaryTokenIds(VOCAB, [0, 1, 2, 3, 4]);

/** |observed − expected| in binomial standard errors. */
const zScore = (hits: number, n: number, p: number) => Math.abs(hits / n - p) / Math.sqrt((p * (1 - p)) / n);

describe('masked-LM batches', () => {
  it('choose ≈15% of real tokens, split 80/10/10, never CLS/SEP/pad, labels only on chosen tokens (4 standard errors)', () => {
    const seqLen = 64;
    const opts: MlmOptions = { seqLen, specials, randomPool: pool, probability: 0.15, tokenBytes: () => 1 };
    const dataRng = new Rng(1);
    const maskRng = new Rng(2);
    let real = 0;
    let chosen = 0;
    let masked = 0;
    let replaced = 0;
    let kept = 0;
    // Per-position checks collect failures instead of calling expect 100k times (slow).
    const violations: string[] = [];
    const check = (ok: boolean, what: string) => {
      if (!ok && violations.length < 5) violations.push(what);
    };
    for (let b = 0; b < 200; b++) {
      const chunks = Array.from({ length: 10 }, () => {
        const len = 1 + dataRng.int(seqLen - 2);
        return Int32Array.from({ length: len }, () => pool[dataRng.int(pool.length)]);
      });
      const batch = mlmBatch(chunks, opts, maskRng);
      expect(batch.kind).toBe('bert');
      let labelled = 0;
      for (let r = 0; r < chunks.length; r++) {
        const chunk = chunks[r];
        for (let t = 0; t < seqLen; t++) {
          const at = r * seqLen + t;
          const input = batch.inputIds[at];
          const label = batch.labels[at];
          const isReal = t >= 1 && t <= chunk.length;
          check(batch.attentionMask![at] === (t <= chunk.length + 1 ? 1 : 0), `attention mask at ${b}/${at}`);
          if (!isReal) {
            // [CLS] at 0, [SEP] right after the chunk, pad after it: never chosen, never changed.
            check(label === IGNORE_LABEL, `label on a special at ${b}/${at}`);
            check(input === (t === 0 ? specials.cls : t === chunk.length + 1 ? specials.sep : specials.pad), `special at ${b}/${at}`);
            continue;
          }
          real++;
          const original = chunk[t - 1];
          if (label === IGNORE_LABEL) {
            check(input === original, `unchosen token changed at ${b}/${at}`);
            continue;
          }
          check(label === original, `label is not the original token at ${b}/${at}`);
          chosen++;
          labelled++;
          if (input === specials.mask) masked++;
          else if (input === original) kept++;
          else {
            check(pool.includes(input), `replacement ${input} is not an ordinary token`);
            replaced++;
          }
        }
      }
      expect(batch.tokens).toBe(labelled);
      expect(batch.bytes).toBe(labelled);
    }
    expect(violations).toEqual([]);
    expect(real).toBeGreaterThan(50_000);
    expect(zScore(chosen, real, 0.15)).toBeLessThan(4);
    // A random replacement equals the original with probability 1/|pool|, and then reads as kept.
    const pSame = 1 / pool.length;
    expect(zScore(masked, chosen, 0.8)).toBeLessThan(4);
    expect(zScore(replaced, chosen, 0.1 * (1 - pSame))).toBeLessThan(4);
    expect(zScore(kept, chosen, 0.1 + 0.1 * pSame)).toBeLessThan(4);
  });

  it('honours another masking probability and is reproducible from the RNG state', () => {
    const seqLen = 34;
    const opts: MlmOptions = { seqLen, specials, randomPool: pool, probability: 0.4, tokenBytes: () => 2 };
    const chunks = Array.from({ length: 300 }, (_, i) => Int32Array.from({ length: 32 }, (_, t) => pool[(i * 31 + t) % pool.length]));
    const rng = new Rng(9);
    const state = rng.state();
    const a = mlmBatch(chunks, opts, rng);
    expect(zScore(a.tokens, 300 * 32, 0.4)).toBeLessThan(4);
    expect(a.bytes).toBe(2 * a.tokens);
    const b = mlmBatch(chunks, opts, new Rng(state));
    expect(Array.from(b.inputIds)).toEqual(Array.from(a.inputIds));
    expect(Array.from(b.labels)).toEqual(Array.from(a.labels));
    expect(() => mlmBatch(chunks, { ...opts, probability: 1.5 }, rng)).toThrow(/mlmProbability must be in \(0, 1\), got 1.5/);
    expect(() => mlmBatch([new Int32Array(33)], opts, rng)).toThrow(/more than seqLen − 2 = 32/);
  });

  it('a tokenizer without a mask token cannot make BERT batches (error names the file and what is missing)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'mlm-test-'));
    try {
      const vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', 'hello'];
      const file = join(dir, 'no-mask.json');
      await writeFile(
        file,
        JSON.stringify({
          version: '1.0',
          added_tokens: vocab
            .slice(0, 4)
            .map((content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
          pre_tokenizer: { type: 'BertPreTokenizer' },
          model: {
            type: 'WordPiece',
            unk_token: '[UNK]',
            continuing_subword_prefix: '##',
            max_input_chars_per_word: 100,
            vocab: Object.fromEntries(vocab.map((t, i) => [t, i])),
          },
        }),
      );
      const tokenizer = await TextTokenizer.load(file);
      expect(() => mlmSpecials(tokenizer)).toThrow(`tokenizer ${file} cannot make BERT batches: it lacks a mask token (<mask> or [MASK])`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
