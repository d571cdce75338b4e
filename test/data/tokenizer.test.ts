import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { byteLevelAlphabet, Tokenizer } from 'tokenizers';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pieceRanges, TextTokenizer } from '../../src/data/tokenizer.ts';
import { BYTE_LEVEL_SPECIALS, finalizeByteLevelBpe, trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import type { TokenizerJsonDoc } from '../../src/data/train-tokenizer.ts';
import { syntheticDocuments } from './stream-fixtures.ts';
import { hasHfFixtures, HF_FIXTURES } from '../helpers/shared.ts';

const VOCAB = 400;
let dir: string;
let path: string;
let tokenizer: TextTokenizer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'tok-test-'));
  path = join(dir, 'tokenizer.json');
  // ASCII-only training text: every non-ASCII byte below is unseen in training.
  const summary = await trainByteLevelBpeFromTexts(['', ...syntheticDocuments(600, 1), null], VOCAB, path);
  expect(summary.skippedEmpty).toBe(2);
  expect(summary.documents).toBe(600);
  tokenizer = await TextTokenizer.load(path);
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const utf8Length = (s: string) => new TextEncoder().encode(s).length;

describe('trained byte-level BPE', () => {
  it('has exactly the vocabulary size asked for, the specials first and all 256 byte symbols', async () => {
    expect(tokenizer.vocabSize).toBe(VOCAB);
    expect(tokenizer.specialIds).toMatchObject({ eos: 0, pad: 1, mask: 2 });
    const json = JSON.parse(await readFile(path, 'utf8')) as TokenizerJsonDoc;
    const ids = Object.values(json.model.vocab).sort((a, b) => a - b);
    expect(ids).toEqual(Array.from({ length: VOCAB }, (_, i) => i));
    for (const symbol of byteLevelAlphabet()) expect(json.model.vocab[symbol]).toBeTypeOf('number');
    BYTE_LEVEL_SPECIALS.forEach((s, i) => expect(json.model.vocab[s]).toBe(i));
    expect(json.model.merges.length).toBe(VOCAB - 259);
  });

  it('round-trips text with unicode, emoji, control bytes and specials it never saw', async () => {
    const samples = [
      'The quick brown fox.',
      'ünïcödé — ΑΒΓ δ 中文字符 😀👍🏽 \u0000\u0007\u001b[0m\ttab\r\n',
      'two docs<|endoftext|>joined',
      '  leading and trailing spaces  ',
      '',
    ];
    const encoded = await tokenizer.encodeBatch(samples);
    for (let i = 0; i < samples.length; i++) {
      expect(await tokenizer.decode(encoded[i])).toBe(samples[i]);
    }
    // Specials are matched atomically and can be skipped when decoding.
    expect(Array.from(encoded[2])).toContain(tokenizer.specialIds.eos);
    expect(await tokenizer.decode(encoded[2], true)).toBe('two docsjoined');
  });

  it('adds no special tokens when encoding plain text', async () => {
    const [ids] = await tokenizer.encodeBatch(['hello world']);
    expect(Array.from(ids).some((id) => id < BYTE_LEVEL_SPECIALS.length)).toBe(false);
  });

  it('tokenBytes sums to the UTF-8 length of the text, specials count 0', async () => {
    const text = 'ünïcödé 😀 plain words 中文 \u0001';
    const [ids] = await tokenizer.encodeBatch([text]);
    const sum = Array.from(ids).reduce((n, id) => n + tokenizer.tokenBytes(id), 0);
    expect(sum).toBe(utf8Length(text));
    expect(tokenizer.tokenBytes(tokenizer.specialIds.eos!)).toBe(0);
  });

  it('gives a different identity hash for a different file', async () => {
    expect(tokenizer.sha256).toMatch(/^[0-9a-f]{64}$/);
    const other = join(dir, 'other.json');
    await trainByteLevelBpeFromTexts(syntheticDocuments(600, 1), VOCAB - 20, other);
    const t2 = await TextTokenizer.load(other);
    expect(t2.vocabSize).toBe(VOCAB - 20);
    expect(t2.sha256).not.toBe(tokenizer.sha256);
  });

  it('refuses a vocabulary too small for specials + bytes, or too large for the corpus', async () => {
    const raw = JSON.parse(await readFile(path, 'utf8')) as TokenizerJsonDoc;
    expect(() => finalizeByteLevelBpe(raw, 200)).toThrow(/≥ 259/);
    expect(() => finalizeByteLevelBpe(raw, VOCAB + 50)).toThrow(/yields only 400 tokens/);
  });
});

describe('long documents', () => {
  /** ~`chars` characters of documents joined by varied whitespace, with unicode, digits and end-of-text tokens. */
  function longText(chars: number, seed: number): string {
    const docs = syntheticDocuments(400, seed);
    const separators = [' ', '\n', '  ', '\t', ' \n ', '\u00a0', ' <|endoftext|> ', '<|endoftext|>', ' naïve 中文 😀 ', '\r\n'];
    let text = '';
    for (let i = 0; text.length < chars; i++) text += docs[i % docs.length] + separators[i % separators.length];
    return text;
  }

  for (const [name, file] of [
    ['our byte-level BPE', () => path],
    ['GPT-2 (shared/fixtures/hf/gpt2-tiny)', () => join(HF_FIXTURES, 'gpt2-tiny', 'tokenizer.json')],
  ] as const) {
    it.skipIf(name.startsWith('GPT-2') && !hasHfFixtures)(`are encoded in pieces with exactly the ids of the whole document: ${name}`, async () => {
      const t = await TextTokenizer.load(file());
      const text = longText(300_000, 4);
      const ranges = pieceRanges(text, ['<|endoftext|>']);
      expect(ranges.length).toBeGreaterThan(10);
      for (const [start] of ranges.slice(1)) expect([text[start - 1] !== ' ', text[start], text[start + 1] !== ' ']).toEqual([true, ' ', true]);
      // The reference: the native tokenizer on the whole text, without our wrapper.
      const whole = (await Tokenizer.fromFile(file()).encode(text, undefined, { addSpecialTokens: false })).getIds();
      const [pieces] = await t.encodeBatch([text]);
      expect(pieces.length).toBe(whole.length);
      expect(Array.from(pieces).findIndex((id, i) => id !== whole[i])).toBe(-1);
    });
  }

  it('a run without spaces longer than the hard limit is cut outside surrogate pairs and special tokens', () => {
    const run = 'x'.repeat(70_000) + '😀'.repeat(10) + '<|endoftext|>' + 'y'.repeat(70_000);
    for (const [start, end] of pieceRanges(run, ['<|endoftext|>'])) {
      expect(end - start).toBeLessThanOrEqual(65_536);
      expect(run.charCodeAt(start) >= 0xdc00 && run.charCodeAt(start) <= 0xdfff).toBe(false);
      const inside = run.indexOf('<|endoftext|>');
      expect(start > inside && start < inside + 13).toBe(false);
    }
  });

  it('streams a 4 MB document with a bounded peak memory (a child process; the whole document at once needs ~700 MB more)', async () => {
    const work = join(dir, 'long');
    const script = join(import.meta.dirname, 'scripts', 'long-document.mts');
    const root = join(import.meta.dirname, '..', '..');
    const r = spawnSync(process.execPath, ['--import', 'tsx', script, root, work, path, '4'], { encoding: 'utf8', timeout: 240_000 });
    expect(r.status, r.stderr).toBe(0);
    const { batches, maxRssMiB, beforeMiB } = JSON.parse(r.stdout.trim().split('\n').at(-1)!);
    console.log(`long document: ${batches} batches, peak RSS ${maxRssMiB.toFixed(0)} MiB (${beforeMiB.toFixed(0)} before the stream)`);
    expect(batches).toBeGreaterThan(2000);
    expect(maxRssMiB - beforeMiB).toBeLessThan(300);
  }, 240_000);
});

describe('loading tokenizer files', () => {
  it('errors name the file for non-JSON, non-tokenizer JSON and invalid models', async () => {
    const bad = join(dir, 'bad.json');
    await writeFile(bad, 'this is { not json');
    await expect(TextTokenizer.load(bad)).rejects.toThrow(`tokenizer file ${bad} is not valid JSON`);
    const notTokenizer = join(dir, 'not-tokenizer.json');
    await writeFile(notTokenizer, '{"hello": 1}');
    await expect(TextTokenizer.load(notTokenizer)).rejects.toThrow(`tokenizer file ${notTokenizer} is not a tokenizer.json`);
    const badModel = join(dir, 'bad-model.json');
    await writeFile(badModel, JSON.stringify({ model: { type: 'NoSuchModel' } }));
    await expect(TextTokenizer.load(badModel)).rejects.toThrow(`tokenizer file ${badModel}`);
    const missing = join(dir, 'missing.json');
    await expect(TextTokenizer.load(missing)).rejects.toThrow(`tokenizer file ${missing} cannot be read`);
  });

  it('loads a WordPiece (BERT-style) tokenizer.json and finds its specials', async () => {
    const vocab = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'hello', 'world', 'wor', '##ld', ','];
    const json = {
      version: '1.0',
      truncation: null,
      padding: null,
      added_tokens: vocab
        .slice(0, 5)
        .map((content, id) => ({ id, content, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true })),
      normalizer: { type: 'BertNormalizer', clean_text: true, handle_chinese_chars: true, strip_accents: null, lowercase: true },
      pre_tokenizer: { type: 'BertPreTokenizer' },
      post_processor: null,
      decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
      model: {
        type: 'WordPiece',
        unk_token: '[UNK]',
        continuing_subword_prefix: '##',
        max_input_chars_per_word: 100,
        vocab: Object.fromEntries(vocab.map((t, i) => [t, i])),
      },
    };
    const wp = join(dir, 'wordpiece.json');
    await writeFile(wp, JSON.stringify(json));
    const t = await TextTokenizer.load(wp);
    expect(t.vocabSize).toBe(vocab.length);
    expect(t.specialIds).toMatchObject({ pad: 0, unk: 1, cls: 2, sep: 3, mask: 4 });
    expect(t.specialIds.eos).toBeUndefined();
    const [ids] = await t.encodeBatch(['Hello WORLD, xyz']);
    expect(Array.from(ids)).toEqual([5, 6, 9, 1]);
    // 'hello' + space before it, 'world' + space, ',' counted with a space (best effort), [UNK] special → 0.
    expect(Array.from(ids).map((id) => t.tokenBytes(id))).toEqual([6, 6, 2, 0]);
    expect(t.tokenBytes(8)).toBe(2); // ##ld
  });
});
