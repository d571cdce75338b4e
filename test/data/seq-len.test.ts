// One seqLen rule (src/data/batch.ts): the recipe, the batch stream and the GPT packer give the same verdict, with
// the same words, on the same value.
import path from 'node:path';
import os from 'node:os';
import { describe, expect, it } from 'vitest';
import { DatasetPathError } from '../../src/data/dataset.ts';
import { WindowPacker } from '../../src/data/packing.ts';
import { openBatchStream } from '../../src/data/stream.ts';
import type { TextTokenizer } from '../../src/data/tokenizer.ts';
import { parseRecipe } from '../../src/store/recipes.ts';

type Verdict = 'accepted' | { rejected: string };

/** What `message` says seqLen must be, when `pattern` (capturing it) matches; otherwise the error is not about seqLen. */
function verdictOf(err: unknown, pattern: RegExp): Verdict {
  const match = pattern.exec((err as Error).message);
  if (!match) throw err;
  return { rejected: match[1] };
}

function recipeVerdict(kind: 'gpt' | 'bert', seqLen: number): Verdict {
  // A linear attention and a narrow model: the longest valid seqLen fits one tensor, so only the rule can object.
  const yaml = `model: { kind: ${kind}, dModel: 8, numHeads: 1, mlpRatio: 1, attention: { name: linear-elu } }\ndata: { dataset: d, tokenizer: t, seqLen: ${seqLen} }\ntrain: { batchSize: 1 }\n`;
  const file = path.join(os.tmpdir(), 'seq-len.yaml');
  try {
    parseRecipe(yaml, file);
    return 'accepted';
  } catch (err) {
    return verdictOf(err, new RegExp(`^${file.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}: data\\.seqLen must be (.*) \\(got [^)]*\\)$`));
  }
}

async function streamVerdict(kind: 'gpt' | 'bert', seqLen: number): Promise<Verdict> {
  // The options are checked before the dataset is listed: a valid seqLen gets as far as the missing dataset.
  const tokenizer = { path: 'tokenizer.json', specialIds: { eos: 0 } } as unknown as TextTokenizer;
  const opts = {
    dataset: path.join(os.tmpdir(), 'no-such-dataset-for-seq-len'),
    split: 'train',
    textColumn: 'text',
    tokenizer,
    kind,
    seqLen,
    batchSize: 1,
    seed: 0,
    shuffleBuffer: 0,
    readAhead: 1,
  } as const;
  try {
    await openBatchStream(opts);
    throw new Error('the stream opened a dataset that does not exist');
  } catch (err) {
    if (err instanceof DatasetPathError) return 'accepted';
    return verdictOf(err, /^stream option seqLen must be (.*), got \S+$/);
  }
}

function packerVerdict(seqLen: number): Verdict {
  try {
    new WindowPacker(seqLen);
    return 'accepted';
  } catch (err) {
    return verdictOf(err, /^WindowPacker: seqLen must be (.*) \(got \S+\)$/);
  }
}

const MAX = 2 ** 20;
const GPT_RULE = { rejected: `an integer ≥ 2, ≤ ${MAX}` };
const BERT_RULE = { rejected: `an integer ≥ 3, ≤ ${MAX} for BERT ([CLS], a token, [SEP])` };

describe('seqLen', () => {
  it.each([
    [0, GPT_RULE, BERT_RULE],
    [1, GPT_RULE, BERT_RULE],
    [2, 'accepted', BERT_RULE],
    [3, 'accepted', 'accepted'],
    [2.5, GPT_RULE, BERT_RULE],
    [MAX, 'accepted', 'accepted'],
    [MAX + 1, GPT_RULE, BERT_RULE],
  ] as [number, Verdict, Verdict][])('%s: the recipe, the stream and the packer agree', async (seqLen, gpt, bert) => {
    expect({ recipe: recipeVerdict('gpt', seqLen), stream: await streamVerdict('gpt', seqLen), packer: packerVerdict(seqLen) }).toEqual({
      recipe: gpt,
      stream: gpt,
      packer: gpt,
    });
    expect({ recipe: recipeVerdict('bert', seqLen), stream: await streamVerdict('bert', seqLen) }).toEqual({ recipe: bert, stream: bert });
  });
});
