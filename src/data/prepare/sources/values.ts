// What the input formats share: kept column values as strings, and the strict UTF-8 decoding of .txt and .jsonl text.
import { InputError } from '../document-source.ts';

/** Kept extra column values are stored as strings: strings as-is, other JSON values as their JSON text. */
export function extraValue(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string') return value;
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Date) return value.toISOString();
  return JSON.stringify(value);
}

export function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (value instanceof Uint8Array) return 'binary bytes';
  return `a ${typeof value}`;
}

const isContinuationByte = (byte: number) => (byte & 0xc0) === 0x80;
/** Whether `bytes` decode as UTF-8; `stream`: an incomplete sequence at the end is allowed. */
function decodes(bytes: Uint8Array, stream: boolean): boolean {
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(bytes, { stream });
    return true;
  } catch {
    return false;
  }
}

/**
 * The offset of the first byte of the first malformed UTF-8 sequence in `bytes` (the error path of the readers:
 * the platform's strict decoder says whether, bisection on prefixes says where), or -1 when there is none.
 */
function invalidUtf8Offset(bytes: Uint8Array): number {
  if (decodes(bytes, false)) return -1;
  // The shortest prefix that fails even as a stream (an invalid byte inside it), else the whole (cut short at the end).
  let [valid, failing] = [0, bytes.length + 1];
  while (failing - valid > 1) {
    const middle = (valid + failing) >>> 1;
    if (decodes(bytes.subarray(0, middle), true)) valid = middle;
    else failing = middle;
  }
  const before = bytes.subarray(0, failing - 1);
  if (decodes(before, false)) return failing - 1; // that byte starts nothing valid
  // It interrupted a sequence begun in the (at most 3) bytes before it: name that sequence's first byte.
  let lead = before.length - 1;
  while (isContinuationByte(before[lead])) lead--;
  return lead;
}

/**
 * A strict streaming UTF-8 decoder for readers that go chunk by chunk: `decode` throws an InputError naming the file
 * and the byte offset of the first malformed sequence (a .txt document and a .jsonl line are held to the same rule).
 */
export class StrictUtf8Stream {
  private readonly decoder = new TextDecoder('utf-8', { fatal: true });
  /** The last (up to 3) bytes decoded and their offset: a sequence cut by a chunk boundary starts in them. */
  private tail = new Uint8Array(0);
  private offset = 0;

  constructor(private readonly file: string) {}

  decode(chunk: Uint8Array, final = false): string {
    let text: string;
    try {
      text = this.decoder.decode(chunk, { stream: !final });
    } catch {
      // The window starts at a character boundary: the tail less the continuation bytes of an already ended sequence.
      let start = 0;
      while (start < this.tail.length && isContinuationByte(this.tail[start])) start++;
      const window = Buffer.concat([this.tail.subarray(start), chunk]);
      throw new InputError(`${this.file}: not valid UTF-8 (a malformed sequence at byte ${this.offset + start + invalidUtf8Offset(window)})`);
    }
    const [kept, keptOffset] = chunk.length >= 3 ? [chunk, this.offset + this.tail.length] : [Buffer.concat([this.tail, chunk]), this.offset];
    this.tail = Uint8Array.from(kept.subarray(Math.max(0, kept.length - 3))); // a copy: the chunk is not kept alive
    this.offset = keptOffset + kept.length - this.tail.length;
    return text;
  }
}
