// Wraps a Hugging Face `tokenizer.json` (ours, GPT-2's byte-level BPE, BERT's WordPiece, …) loaded into the
// native `tokenizers` bindings. Encoding runs in Rust on the libuv thread pool (encodeBatch is async), so the
// JS thread only pays for copying ids out.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Tokenizer } from 'tokenizers';
import { BOUNDS, boundProblem } from '../core/bounds.ts';

export interface SpecialIds {
  eos?: number;
  pad?: number;
  mask?: number;
  cls?: number;
  sep?: number;
  unk?: number;
}

// Conventional spellings of each special token across GPT-2 / RoBERTa / BERT / sentencepiece tokenizers,
// in order of preference.
const SPECIAL_NAMES: Record<keyof SpecialIds, string[]> = {
  eos: ['<|endoftext|>', '</s>', '<eos>', '[EOS]'],
  pad: ['<pad>', '[PAD]', '<|pad|>'],
  mask: ['<mask>', '[MASK]', '<|mask|>'],
  cls: ['[CLS]', '<s>', '<cls>'],
  sep: ['[SEP]', '</s>', '<sep>'],
  unk: ['[UNK]', '<unk>', '<|unk|>'],
};

interface TokenizerJson {
  added_tokens?: { id: number; content: string; special?: boolean }[];
  normalizer?: { type?: string; normalizers?: { type?: string }[] } | null;
  pre_tokenizer?: { type?: string; add_prefix_space?: boolean; use_regex?: boolean; pretokenizers?: { type?: string }[] } | null;
  decoder?: { type?: string; decoders?: { type?: string }[] } | null;
  model?: { type?: string; continuing_subword_prefix?: string | null; byte_fallback?: boolean };
}

/**
 * Long documents are tokenized in pieces, so that memory is set by the piece size (the native tokenizer needs ~170
 * bytes per input character) and not by the longest document. A piece ends just before a space that has a
 * non-space character on each side: a pre-tokenizer boundary of byte-level BPE (GPT-2's split regex keeps a space
 * with the word after it and never joins a non-space character to the space after it) and of the whitespace and
 * BERT pre-tokenizers, so the pieces give exactly the ids of the whole. Only a run of more than HARD_PIECE_CHARS
 * characters without such a space is cut anywhere (outside surrogate pairs and special tokens); its ids may then
 * differ at the cut.
 */
const PIECE_CHARS = 16_384;
const HARD_PIECE_CHARS = 4 * PIECE_CHARS;
/** Characters given to one native encodeBatch call (its peak memory is ~170 bytes per character). */
const CALL_CHARS = 1 << 18;
/**
 * Texts given to one native encodeBatch call: each result holds ~1.5 KB (tokens, offsets, masks) until the garbage
 * collector frees it, which it does not hurry to do since the memory is native; a record batch of 2M one-character
 * rows in one call took ~4 GB. `datasets` writes 1,000-row batches, one call each.
 */
const CALL_TEXTS = 1024;
/** Unicode White_Space: JavaScript's \s plus U+0085, which the tokenizers' regex engine also counts. */
const SPACE = /[\s\u0085]/;
/** Normalizers that work character by character (nothing at the edges of the input, such as Strip). */
const LOCAL_NORMALIZERS = new Set(['NFC', 'NFD', 'NFKC', 'NFKD', 'Lowercase', 'BertNormalizer']);
const SPLIT_PRE_TOKENIZERS = new Set(['BertPreTokenizer', 'Whitespace', 'WhitespaceSplit']);

/** Whether cutting at the boundaries above gives the ids of the whole text, from the tokenizer.json. */
function canEncodeInPieces(json: TokenizerJson): boolean {
  const normalizers = json.normalizer ? (json.normalizer.type === 'Sequence' ? (json.normalizer.normalizers ?? []) : [json.normalizer]) : [];
  if (!normalizers.every((n) => LOCAL_NORMALIZERS.has(n.type ?? ''))) return false;
  if ((json.added_tokens ?? []).some((t) => SPACE.test(t.content))) return false;
  const pre = json.pre_tokenizer;
  if (!pre) return false;
  if (pre.type === 'ByteLevel') return pre.add_prefix_space === false && pre.use_regex !== false;
  return SPLIT_PRE_TOKENIZERS.has(pre.type ?? '');
}

/**
 * [start, end) pieces of `text`, each ending before a space with non-space characters on both sides once at least
 * PIECE_CHARS long (see above), or at HARD_PIECE_CHARS when there is none.
 */
export function pieceRanges(text: string, specials: readonly string[]): [number, number][] {
  const out: [number, number][] = [];
  let start = 0;
  while (text.length - start > PIECE_CHARS) {
    let cut = -1;
    for (let i = start + PIECE_CHARS; i < Math.min(text.length - 1, start + HARD_PIECE_CHARS); i++) {
      if (text[i] === ' ' && !SPACE.test(text[i - 1]) && !SPACE.test(text[i + 1])) {
        cut = i;
        break;
      }
    }
    if (cut < 0) {
      if (text.length - start <= HARD_PIECE_CHARS) break;
      cut = hardCut(text, start + HARD_PIECE_CHARS, specials);
    }
    out.push([start, cut]);
    start = cut;
  }
  out.push([start, text.length]);
  return out;
}

/** `at`, moved back out of a surrogate pair and out of any special token that spans it. */
function hardCut(text: string, at: number, specials: readonly string[]): number {
  let cut = at;
  const code = text.charCodeAt(cut);
  if (code >= 0xdc00 && code <= 0xdfff) cut--; // a low surrogate: cut before its pair
  for (const special of specials) {
    const from = text.lastIndexOf(special, cut - 1);
    if (from >= 0 && from < cut && from + special.length > cut) cut = from;
  }
  return cut;
}

type TokenStyle = 'byte-level' | 'wordpiece' | 'metaspace' | 'plain';

/** Token ids of several texts in one buffer: text i's are `ids[starts[i], starts[i + 1])`. */
export interface FlatIds {
  ids: Int32Array;
  starts: Int32Array;
}

export class TextTokenizer {
  readonly vocabSize: number;
  readonly specialIds: SpecialIds;
  /** UTF-8 byte count of every id (index = id). */
  private readonly bytesPerToken: Uint16Array;
  /** Whether long texts may be encoded in pieces (see PIECE_CHARS), and the added tokens a hard cut must avoid. */
  private readonly inPieces: boolean;
  private readonly addedTokens: string[];

  private constructor(
    readonly path: string,
    readonly sha256: string,
    private readonly native: Tokenizer,
    json: TokenizerJson,
  ) {
    this.vocabSize = native.getVocabSize(true);
    const specials = new Set((json.added_tokens ?? []).filter((t) => t.special).map((t) => t.id));
    this.specialIds = {};
    for (const [role, names] of Object.entries(SPECIAL_NAMES) as [keyof SpecialIds, string[]][]) {
      for (const name of names) {
        const id = native.tokenToId(name);
        if (id !== null && id !== undefined) {
          this.specialIds[role] = id;
          specials.add(id);
          break;
        }
      }
    }
    this.bytesPerToken = computeTokenBytes(native, this.vocabSize, specials, tokenStyle(json));
    this.inPieces = canEncodeInPieces(json);
    this.addedTokens = (json.added_tokens ?? []).map((t) => t.content);
  }

  /** Loads any `tokenizer.json`; errors name the file. */
  static async load(path: string): Promise<TextTokenizer> {
    let raw: Buffer;
    try {
      raw = await readFile(path);
    } catch (err) {
      throw new Error(`tokenizer file ${path} cannot be read: ${(err as Error).message}`);
    }
    const text = raw.toString('utf8');
    let json: TokenizerJson;
    try {
      json = JSON.parse(text) as TokenizerJson;
    } catch (err) {
      throw new Error(`tokenizer file ${path} is not valid JSON: ${(err as Error).message}`);
    }
    if (json === null || typeof json !== 'object' || typeof json.model !== 'object' || json.model === null) {
      throw new Error(`tokenizer file ${path} is not a tokenizer.json (no "model" object)`);
    }
    // The model's own vocabulary, counted before the native library builds it: beyond the embedding-rows bound no
    // model here can use the tokenizer, and a few million tokens would take the native load a minute.
    const vocab = (json.model as { vocab?: unknown }).vocab;
    const entries = Array.isArray(vocab) ? vocab.length : vocab !== null && typeof vocab === 'object' ? countKeys(vocab) : 0;
    if (entries > BOUNDS.embeddingRows.max) throw new Error(boundProblem(`the vocabulary of ${path}`, entries, BOUNDS.embeddingRows)!);
    let native: Tokenizer;
    try {
      native = Tokenizer.fromString(text);
    } catch (err) {
      throw new Error(`tokenizer file ${path} does not parse as a Hugging Face tokenizer: ${(err as Error).message}`);
    }
    const sha256 = createHash('sha256').update(raw).digest('hex');
    return new TextTokenizer(path, sha256, native, json);
  }

  /**
   * Token ids of each text, without special tokens or post-processing (no [CLS]/[SEP] added): views of one buffer
   * (encodeFlat).
   */
  async encodeBatch(texts: string[]): Promise<Int32Array[]> {
    const { ids, starts } = await this.encodeFlat(texts);
    return texts.map((_, i) => ids.subarray(starts[i], starts[i + 1]));
  }

  /**
   * Token ids of all texts in one buffer: text i's are ids[starts[i], starts[i + 1]), so a batch of many short texts
   * costs 4 bytes per token and per text, no object per text. Long texts are encoded in pieces with the ids of the
   * whole (see PIECE_CHARS), and the native calls take at most CALL_CHARS characters (or one piece) and CALL_TEXTS
   * texts each, so memory is bounded by those sizes and not by the longest text or the number of texts.
   */
  async encodeFlat(texts: readonly string[]): Promise<FlatIds> {
    const starts = new Int32Array(texts.length + 1);
    let ids = new Int32Array(Math.max(16, texts.length));
    let length = 0;
    // One native call's pieces: their strings and the text each belongs to (pieces come in text order).
    let call: string[] = [];
    let owners: number[] = [];
    let chars = 0;
    /** The last text whose start is set: a text's pieces may span two calls. */
    let started = -1;
    const flush = async () => {
      const encodings = await this.native.encodeBatch(call, { addSpecialTokens: false });
      encodings.forEach((encoding, k) => {
        if (owners[k] !== started) [starts[owners[k]], started] = [length, owners[k]];
        const pieceIds = encoding.getIds();
        if (length + pieceIds.length > ids.length) {
          const grown = new Int32Array(Math.max(2 * ids.length, length + pieceIds.length));
          grown.set(ids.subarray(0, length));
          ids = grown;
        }
        ids.set(pieceIds, length);
        length += pieceIds.length;
      });
      [call, owners, chars] = [[], [], 0];
    };
    for (let i = 0; i < texts.length; i++) {
      const text = texts[i];
      const ranges: [number, number][] = this.inPieces ? pieceRanges(text, this.addedTokens) : [[0, text.length]];
      for (const [start, end] of ranges) {
        if (call.length > 0 && (call.length >= CALL_TEXTS || chars + end - start > CALL_CHARS)) await flush();
        call.push(text.slice(start, end));
        owners.push(i);
        chars += end - start;
      }
    }
    if (call.length > 0) await flush();
    starts[texts.length] = length;
    return { ids: ids.subarray(0, length), starts };
  }

  async decode(ids: ArrayLike<number>, skipSpecial = false): Promise<string> {
    return this.native.decode(Array.from(ids), skipSpecial);
  }

  /** UTF-8 bytes a token stands for: exact for byte-level BPE, 0 for special tokens; for WordPiece a
   *  word-initial piece also counts the space before it (best effort: punctuation has none). */
  tokenBytes(id: number): number {
    return id >= 0 && id < this.bytesPerToken.length ? this.bytesPerToken[id] : 0;
  }
}

/** Own keys of an object, counted without listing them. */
function countKeys(object: object): number {
  let n = 0;
  for (const key in object) if (Object.hasOwn(object, key)) n++;
  return n;
}

function tokenStyle(json: TokenizerJson): TokenStyle {
  const types = (part: { type?: string; pretokenizers?: { type?: string }[]; decoders?: { type?: string }[] } | null | undefined) =>
    part ? [part.type, ...(part.pretokenizers ?? []).map((p) => p.type), ...(part.decoders ?? []).map((d) => d.type)] : [];
  const all = [...types(json.pre_tokenizer), ...types(json.decoder)];
  if (all.includes('ByteLevel')) return 'byte-level';
  if (json.model?.type === 'WordPiece' || all.includes('WordPiece')) return 'wordpiece';
  if (all.includes('Metaspace')) return 'metaspace';
  return 'plain';
}

const utf8 = new TextEncoder();

function computeTokenBytes(native: Tokenizer, vocabSize: number, specials: Set<number>, style: TokenStyle): Uint16Array {
  const out = new Uint16Array(vocabSize);
  const prefix = '##';
  // One getVocab call instead of vocabSize idToToken round trips through N-API.
  for (const [token, id] of Object.entries(native.getVocab(true))) {
    if (id < 0 || id >= vocabSize || specials.has(id)) continue;
    let bytes: number;
    if (style === 'byte-level') {
      // Every character of a byte-level token is one byte (GPT-2's bytes→unicode map).
      bytes = token.length;
    } else if (style === 'wordpiece') {
      bytes = token.startsWith(prefix) ? utf8.encode(token.slice(prefix.length)).length : utf8.encode(token).length + 1;
    } else if (style === 'metaspace') {
      bytes = /^<0x[0-9A-Fa-f]{2}>$/.test(token) ? 1 : utf8.encode(token.replaceAll('\u2581', ' ')).length;
    } else {
      bytes = utf8.encode(token).length;
    }
    out[id] = bytes;
  }
  return out;
}
