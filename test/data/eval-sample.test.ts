// The evaluation sample (docs/training.md, "Validation"): `spread` draws its tokens from documents across the whole
// validation split, the same tokens on every call, holding no more than the sample; `head` reads the split's start.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Rng } from '../../src/core/rng.ts';
import { SmallestKeys } from '../../src/data/smallest-keys.ts';
import { spreadSample } from '../../src/data/eval-sample.ts';
import type { StreamOptions } from '../../src/data/stream-options.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { collectEvalBatches } from '../../src/train/evaluate.ts';
import { writeDataset } from './stream-fixtures.ts';

// The validation split's documents in four quarters, each of one letter: a token tells which quarter it came from.
const QUARTERS = ['q', 'w', 'z', 'k'];
const DOCS_PER_QUARTER = 40;
let dir: string;
let tokenizer: TextTokenizer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'slay-eval-sample-'));
  const validation = QUARTERS.flatMap((word) => Array.from({ length: DOCS_PER_QUARTER }, () => Array(30).fill(word.repeat(3)).join(' ')));
  await writeDataset(join(dir, 'data'), { train: [validation.slice(0, 10)], validation: [validation.slice(0, 80), validation.slice(80)] }, 16);
  await trainByteLevelBpeFromTexts(validation, 264, join(dir, 'tokenizer.json'));
  tokenizer = await TextTokenizer.load(join(dir, 'tokenizer.json'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function options(kind: 'gpt' | 'bert'): Omit<StreamOptions, 'split' | 'cursor' | 'shuffleBuffer'> {
  return { dataset: join(dir, 'data'), textColumn: 'text', tokenizer, kind, seqLen: 16, batchSize: 4, seed: 1, readAhead: 2 };
}

/** The quarters whose words the labelled tokens of the batches spell. */
async function quartersOf(batches: { labels: Int32Array }[]): Promise<Set<string>> {
  const seen = new Set<string>();
  for (const batch of batches) {
    for (const id of batch.labels) {
      if (id < 0) continue;
      const text = await tokenizer.decode([id]);
      for (const letter of QUARTERS) if (text.includes(letter)) seen.add(letter);
    }
  }
  return seen;
}

describe('the evaluation sample', () => {
  it.each(['gpt', 'bert'] as const)(
    '%s: spread draws from documents across the whole split, the same tokens every time; head only from its start',
    async (kind) => {
      // About 20 GPT windows or 50 BERT chunks of the split's ≈ 300 or ≈ 500 (BERT: 15% of a chunk's tokens labelled).
      const evalTokens = kind === 'gpt' ? 320 : 96;
      const spread = await collectEvalBatches(options(kind), evalTokens, 'spread');
      const again = await spreadSample(options(kind), evalTokens);
      expect(again.batches).toEqual(spread.batches);
      expect(again.documents).toBe(spread.documents);
      const labelled = spread.batches.reduce((sum, b) => sum + b.tokens, 0);
      expect(labelled).toBeGreaterThanOrEqual(evalTokens);
      expect(await quartersOf(spread.batches)).toEqual(new Set(QUARTERS));
      expect(spread.batches.every((b) => b.batchSize <= 4)).toBe(true);

      const head = await collectEvalBatches(options(kind), evalTokens, 'head');
      expect(await quartersOf(head.batches)).toEqual(new Set(['q']));
      expect(spread.documents).toBeGreaterThan(head.documents);
      expect(head.documents).toBeLessThan(DOCS_PER_QUARTER);
    },
  );
});

describe('SmallestKeys', () => {
  it('keeps the smallest-key prefix whose weights reach the target, holding less than the target plus one item’s weight', () => {
    const rng = new Rng(5);
    const offers = Array.from({ length: 5000 }, (_, i) => ({ key: rng.uniform(), weight: 1 + rng.int(20), i }));
    const kept = new SmallestKeys<number>(300);
    let largest = 0;
    for (const { key, weight, i } of offers) {
      kept.offer(key, weight, i);
      largest = Math.max(largest, kept.weight);
    }
    // Reference: sort every offer by key and take the shortest prefix reaching the target.
    const sorted = [...offers].sort((a, b) => a.key - b.key);
    const prefix: number[] = [];
    let total = 0;
    for (const o of sorted) {
      if (total >= 300) break;
      prefix.push(o.i);
      total += o.weight;
    }
    expect(kept.items().sort((a, b) => a - b)).toEqual(prefix.sort((a, b) => a - b));
    expect(largest).toBeLessThan(300 + 20); // the target plus the heaviest item's weight
    expect(prefix.length).toBeLessThan(60);
  });

  it('keeps everything while the total stays below the target', () => {
    const kept = new SmallestKeys<string>(100);
    kept.offer(0.9, 10, 'a');
    kept.offer(0.1, 10, 'b');
    expect(kept.items().sort()).toEqual(['a', 'b']);
  });
});
