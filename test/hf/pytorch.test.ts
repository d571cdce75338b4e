// Exports of models transformers has no class for (every attention mechanism but softmax, and softmax
// models without biases or with a pre-LN BERT) run in PyTorch through the implementation they carry
// (src/hf/python/, loaded with trust_remote_code=True): every tensor loads, the logits are ours within
// float32 rounding, GPT greedy generate() gives our tokens and text — decoding from its cache (keys and
// values for the quadratic mechanisms, running sums of constant size for the kernel ones) with the tokens and
// logits of generate(use_cache=False) —, and transformers' own GPT-2 / BERT classes refuse the folders
// instead of computing softmax attention.
// Needs a Python with torch and transformers (`npm run setup:transformers`); without it the suite is
// skipped with one line saying so. Independent of the shared fixtures: the tokenizer is trained here.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { exportHf } from '../../src/store/hf-export.ts';
import { attentionIsCausalOnly, attentionIsQuadratic, attentionNames } from '../../src/model/attention/index.ts';
import { generateTokens } from '../../src/model/decode.ts';
import { loadModel } from '../../src/store/load-model.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { syntheticDocuments } from '../data/stream-fixtures.ts';
import { testBackend } from '../helpers/backend.ts';
import { findTransformersPython, runTransformersCheck, TRANSFORMERS_SETUP } from '../helpers/python.ts';
import { maxAbsDiff, savedRun } from './fixtures.ts';

const python = findTransformersPython();
if (!python)
  console.warn(`skipped: the PyTorch tests of exported attention mechanisms need a Python with torch and transformers (set up with: ${TRANSFORMERS_SETUP})`);

/** Transformers' BERT architecture: post-LN blocks, LayerNorm on the embeddings, token types, exact GELU, ε 1e-12. */
const HF_BERT = 'normPosition: post, embeddingNorm: true, typeVocabSize: 2, activation: gelu-erf, layerNormEps: 1e-12';
const PRE_LN_BERT = 'bias: false';
/** Llama's choices (docs/recipes.md): rotary positions (θ not the default, so that it is read), SwiGLU, RMSNorm, no biases. */
const TRANSFORMER_PP = 'positional: rope, ropeTheta: 500, mlp: swiglu, norm: rmsnorm, bias: false, layerNormEps: 1e-6';

interface Case {
  name: string;
  kind: 'gpt' | 'bert';
  /** Recipe `model:` keys besides kind and size. */
  model: string;
}

/** Every mechanism as a GPT and as a BERT, options and architecture options varied across them, and every SLAY polynomial variant. */
const CASES: Case[] = [
  { name: 'gpt softmax, no biases, exact GELU', kind: 'gpt', model: 'bias: false, activation: gelu-erf, attention: { name: softmax }' },
  { name: 'gpt yat-spherical', kind: 'gpt', model: 'attention: { name: yat-spherical, options: { epsilon: 0.01 } }' },
  { name: 'gpt slay (anchor), embedding LayerNorm', kind: 'gpt', model: 'embeddingNorm: true, attention: { name: slay }' },
  { name: 'gpt slay exact', kind: 'gpt', model: 'attention: { name: slay, options: { poly: exact } }' },
  { name: 'gpt slay tensorsketch', kind: 'gpt', model: 'attention: { name: slay, options: { poly: tensorsketch, anchors: 6 } }' },
  { name: 'gpt slay hadamard', kind: 'gpt', model: 'attention: { name: slay, options: { poly: hadamard, quadratureNodes: 3 } }' },
  { name: 'gpt performer (iid)', kind: 'gpt', model: 'attention: { name: performer, options: { features: 16, orthogonal: false } }' },
  { name: 'gpt darkformer (rank 8), token types', kind: 'gpt', model: 'typeVocabSize: 2, attention: { name: darkformer, options: { features: 16, rank: 8 } }' },
  { name: 'gpt schoenbat', kind: 'gpt', model: 'attention: { name: schoenbat, options: { features: 32 } }' },
  { name: 'gpt linear-elu', kind: 'gpt', model: 'attention: { name: linear-elu }' },
  { name: 'gpt cosformer', kind: 'gpt', model: 'attention: { name: cosformer }' },
  { name: 'gpt cosformer (reweightLength 16)', kind: 'gpt', model: 'attention: { name: cosformer, options: { reweightLength: 16 } }' },
  { name: 'bert softmax, pre-LN, no biases', kind: 'bert', model: `${PRE_LN_BERT}, attention: { name: softmax }` },
  { name: 'bert yat-spherical', kind: 'bert', model: `${HF_BERT}, attention: { name: yat-spherical }` },
  { name: 'bert slay random-maclaurin', kind: 'bert', model: `${HF_BERT}, attention: { name: slay, options: { poly: random-maclaurin } }` },
  { name: 'bert slay nystrom, pre-LN', kind: 'bert', model: `${PRE_LN_BERT}, attention: { name: slay, options: { poly: nystrom } }` },
  { name: 'bert slay laplace-only', kind: 'bert', model: `${HF_BERT}, attention: { name: slay, options: { poly: laplace-only } }` },
  { name: 'bert performer, pre-LN', kind: 'bert', model: `${PRE_LN_BERT}, attention: { name: performer, options: { features: 16 } }` },
  { name: 'bert darkformer', kind: 'bert', model: `${HF_BERT}, attention: { name: darkformer, options: { features: 16 } }` },
  {
    name: 'bert schoenbat (inverse kernel, reference clamp), pre-LN',
    kind: 'bert',
    model: `${PRE_LN_BERT}, attention: { name: schoenbat, options: { kernel: inverse, denominatorClamp: reference, features: 24 } }`,
  },
  { name: 'bert linear-elu', kind: 'bert', model: `${HF_BERT}, attention: { name: linear-elu }` },
  { name: 'bert cosformer, pre-LN', kind: 'bert', model: `${PRE_LN_BERT}, attention: { name: cosformer }` },
  // Last, so that the cases before keep their seeds (index + 11): a seed decides whether greedy text varies.
  {
    name: 'gpt darkformer, dataInit variance-optimal',
    kind: 'gpt',
    model: 'attention: { name: darkformer, options: { features: 16, dataInit: variance-optimal } }',
  },
  // Transformer++: rotary positions on q and k (before a kernel mechanism's feature map), SwiGLU, RMSNorm, no biases.
  { name: 'gpt softmax, Transformer++', kind: 'gpt', model: `${TRANSFORMER_PP}, mlpRatio: 2.6667, attention: { name: softmax }` },
  { name: 'gpt performer, Transformer++', kind: 'gpt', model: `${TRANSFORMER_PP}, attention: { name: performer, options: { features: 16 } }` },
  { name: 'bert linear-elu, Transformer++', kind: 'bert', model: `${TRANSFORMER_PP}, attention: { name: linear-elu }` },
  // Gated linear attention (causal only: no BERT), and with the Transformer++ body fla's baselines use.
  { name: 'gpt gla', kind: 'gpt', model: 'attention: { name: gla, options: { gateRank: 4, chunkSize: 3 } }' },
  { name: 'gpt gla, Transformer++', kind: 'gpt', model: `${TRANSFORMER_PP}, attention: { name: gla }` },
];

/** Beam search reorders the cache: tried on a key/value cache, running sums with a key scale, and plain running sums. */
const BEAM_CASES = ['gpt softmax, no biases, exact GELU', 'gpt performer (iid)', 'gpt slay (anchor), embedding LayerNorm', 'gpt softmax, Transformer++'];

const IDS = [
  [3, 40, 77, 120, 9, 250, 18, 4],
  [3, 5, 6, 7, 8, 9, 10, 4],
];
/** BERT's second row is padded at the end: padded keys get no attention. */
const BERT_MASK = [
  [1, 1, 1, 1, 1, 1, 1, 1],
  [1, 1, 1, 1, 1, 0, 0, 0],
];
const PROMPT = [3, 40, 77, 120];
const TEXTS = ['The state of the Union is strong.', 'Congress shall make no law, 1789.'];
const NEW_TOKENS = 10;
const TOLERANCE = 1e-4;
/** Folders per Python run. */
const PYTHON_BATCH = 12;

interface PythonResult {
  error?: string;
  plain_error?: string | null;
  class?: string;
  loading?: Record<string, string[]>;
  logits?: number[][][];
  generated?: number[];
  generated_text?: string;
  token_ids?: number[][];
  /** Token counts given to each forward call of generate(), and the cache state's elements after the prompt and at the end. */
  forward_lengths?: number[];
  cache_elements?: [number, number];
  uncached?: { generated: number[]; forward_lengths: number[]; logits_diff: number };
  beams_agree?: boolean;
}

interface Ours {
  out: string;
  logits: number[][][];
  generated?: number[];
  text?: string;
}

let dir: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = mkdtempSync(path.join(tmpdir(), 'slay-hf-pytorch-'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!python)(`exported attention mechanisms in PyTorch, trust_remote_code=True (needs: ${TRANSFORMERS_SETUP})`, () => {
  const ours = new Map<string, Ours>();
  const theirs = new Map<string, PythonResult>();
  let refusal: PythonResult;
  let tokenIds: number[][];

  beforeAll(async () => {
    const tokenizerFile = path.join(dir, 'tokenizer.json');
    await trainByteLevelBpeFromTexts(syntheticDocuments(200, 7), 300, tokenizerFile);
    const tokenizer = await TextTokenizer.load(tokenizerFile);
    const eos = tokenizer.specialIds.eos!;
    tokenIds = (await tokenizer.encodeBatch(TEXTS)).map((a) => Array.from(a));
    for (const [index, c] of CASES.entries()) {
      const recipe = parseRecipe(
        `model: { kind: ${c.kind}, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: 16, ${c.model} }\n` +
          `data: { dataset: d, tokenizer: ${tokenizerFile}, seqLen: 16 }\ntrain: { seed: ${index + 11} }`,
        path.join(dir, `case${index}.yaml`),
      );
      // Weights moved well away from the init (N(0, 0.3²)), so that greedy decoding does not repeat one token.
      const run = await savedRun(recipe, path.join(dir, `run${index}`), index + 1, 0.3);
      const { out } = await exportHf(run, { out: path.join(dir, `hf${index}`) });
      const { model } = await loadModel(run);
      try {
        const mask = c.kind === 'bert' ? BERT_MASK : IDS.map((row) => row.map(() => 1));
        const logits = tf.tidy(() => model.logits(tf.tensor2d(IDS, undefined, 'int32'), tf.tensor2d(mask)).arraySync() as number[][][]);
        const result: Ours = { out, logits };
        if (c.kind === 'gpt') {
          result.generated = generateTokens(model, PROMPT, { temperature: 0, topK: 0, maxNewTokens: NEW_TOKENS, seed: 0, stopToken: eos }).tokens;
          result.text = await tokenizer.decode(result.generated);
        }
        ours.set(c.name, result);
      } finally {
        model.dispose();
      }
    }
    const requests = CASES.map((c) => ({
      folder: ours.get(c.name)!.out,
      kind: c.kind,
      trust_remote_code: true,
      input_ids: IDS,
      texts: TEXTS,
      ...(c.kind === 'bert' ? { attention_mask: BERT_MASK } : { generate: { prompt: PROMPT, max_new_tokens: NEW_TOKENS, beams: BEAM_CASES.includes(c.name) } }),
      plain: c.kind === 'gpt' ? 'GPT2LMHeadModel' : 'BertForMaskedLM',
    }));
    // The DARKFormer GPT once more without trust_remote_code: AutoModel must refuse it.
    const dark = ours.get('gpt darkformer (rank 8), token types')!;
    // In batches, so that each Python run stays within the helper's timeout on a busy machine.
    const all = [...requests, { folder: dark.out, kind: 'gpt', input_ids: IDS }];
    const results: PythonResult[] = [];
    for (let i = 0; i < all.length; i += PYTHON_BATCH) results.push(...runTransformersCheck<PythonResult>(python!, dir, all.slice(i, i + PYTHON_BATCH)));
    CASES.forEach((c, i) => theirs.set(c.name, results[i]));
    refusal = results[CASES.length];
  });

  it('the cases cover every registered mechanism as a GPT and as a BERT (the causal-only ones as a GPT)', () => {
    for (const kind of ['gpt', 'bert']) {
      const covered = new Set(CASES.filter((c) => c.kind === kind).map((c) => /name: ([\w-]+)/.exec(c.model)![1]));
      const expected = attentionNames().filter((name) => kind === 'gpt' || !attentionIsCausalOnly(name));
      expect([...covered].sort()).toEqual(expected.sort());
    }
  });

  it.each(CASES.map((c) => [c.name, c] as const))('%s: loads every tensor (and AutoTokenizer the tokenizer), gives our logits and greedy text', (_, c) => {
    const result = theirs.get(c.name)!;
    expect(result.error).toBeUndefined();
    expect(result.class).toBe(c.kind === 'gpt' ? 'SlayformerForCausalLM' : 'SlayformerForMaskedLM');
    expect(result.loading).toEqual({ missing_keys: [], unexpected_keys: [], mismatched_keys: [], error_msgs: [] });
    expect(result.token_ids).toEqual(tokenIds);
    const own = ours.get(c.name)!;
    expect(maxAbsDiff(own.logits, result.logits!)).toBeLessThan(TOLERANCE);
    if (c.kind === 'gpt') {
      expect(result.generated).toEqual(own.generated);
      expect(result.generated_text).toBe(own.text);
      // The weights make decoding pick different tokens, not one repeated.
      expect(new Set(own.generated).size).toBeGreaterThan(1);
    }
  });

  const GPT_CASES = CASES.filter((c) => c.kind === 'gpt');
  it.each(GPT_CASES.map((c) => [c.name, c] as const))(
    '%s: generate() decodes from its cache, one token per step, with the tokens and logits of use_cache=False',
    (_, c) => {
      const result = theirs.get(c.name)!;
      const steps = result.generated!.length;
      expect(result.uncached!.generated).toEqual(result.generated);
      expect(result.uncached!.logits_diff).toBeLessThan(TOLERANCE);
      // The prompt once, then each new token alone (the last token generated is never fed); without the cache, the whole sequence every time.
      expect(result.forward_lengths).toEqual([PROMPT.length, ...Array(steps - 1).fill(1)]);
      expect(result.uncached!.forward_lengths).toEqual(Array.from({ length: steps }, (_, i) => PROMPT.length + i));
      const [afterPrompt, atEnd] = result.cache_elements!;
      const name = /name: ([\w-]+)/.exec(c.model)![1];
      // Keys and values grow with the positions; the kernel mechanisms' running sums do not.
      if (attentionIsQuadratic(name)) expect(atEnd * PROMPT.length).toBe(afterPrompt * (PROMPT.length + steps - 1));
      else expect(atEnd).toBe(afterPrompt);
      // Beam search reorders the cache with its beams.
      if (BEAM_CASES.includes(c.name)) expect(result.beams_agree).toBe(true);
    },
  );

  it("transformers' own GPT2LMHeadModel / BertForMaskedLM refuse every folder, naming the attention; AutoModel refuses without trust_remote_code", () => {
    for (const c of CASES) {
      const name = /name: ([\w-]+)/.exec(c.model)![1];
      expect(theirs.get(c.name)!.plain_error, c.name).toMatch(
        new RegExp(
          `layer_types.*slayformer ${name} attention \\(load with ${c.kind === 'gpt' ? 'AutoModelForCausalLM' : 'AutoModelForMaskedLM'}\\.from_pretrained\\(folder, trust_remote_code=True\\)\\)`,
          's',
        ),
      );
    }
    expect(refusal.error).toMatch(/trust_remote_code=True/);
  });
});
