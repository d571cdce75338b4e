// Wraps a Hugging Face `tokenizer.json` (ours, GPT-2's byte-level BPE, BERT's WordPiece, …) loaded into the
// native `tokenizers` bindings. Encoding runs in Rust on the libuv thread pool (encodeBatch is async), so the
// JS thread only pays for copying ids out.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { Tokenizer } from 'tokenizers';

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
  pre_tokenizer?: { type?: string; pretokenizers?: { type?: string }[] } | null;
  decoder?: { type?: string; decoders?: { type?: string }[] } | null;
  model?: { type?: string; continuing_subword_prefix?: string | null; byte_fallback?: boolean };
}

type TokenStyle = 'byte-level' | 'wordpiece' | 'metaspace' | 'plain';

export class TextTokenizer {
  readonly vocabSize: number;
  readonly specialIds: SpecialIds;
  /** UTF-8 byte count of every id (index = id). */
  private readonly bytesPerToken: Uint16Array;

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
    let native: Tokenizer;
    try {
      native = Tokenizer.fromString(text);
    } catch (err) {
      throw new Error(`tokenizer file ${path} does not parse as a Hugging Face tokenizer: ${(err as Error).message}`);
    }
    const sha256 = createHash('sha256').update(raw).digest('hex');
    return new TextTokenizer(path, sha256, native, json);
  }

  /** Token ids of each text, without special tokens or post-processing (no [CLS]/[SEP] added). */
  async encodeBatch(texts: string[]): Promise<Int32Array[]> {
    if (texts.length === 0) return [];
    const encodings = await this.native.encodeBatch(texts, { addSpecialTokens: false });
    return encodings.map((e) => Int32Array.from(e.getIds()));
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
