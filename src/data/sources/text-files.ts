// Plain-text input: one document per .txt file.
import fs from 'node:fs';
import { InputError } from './types.ts';
import type { SourceDocument } from './types.ts';

export function isTextFile(file: string): boolean {
  return /\.txt$/i.test(file);
}

const strictUtf8 = new TextDecoder('utf-8', { fatal: true });

export async function readTextFile(file: string, keepColumns: readonly string[]): Promise<SourceDocument> {
  let bytes: Buffer;
  try {
    bytes = await fs.promises.readFile(file);
  } catch (err) {
    throw new InputError(`${file}: cannot read: ${(err as Error).message}`);
  }
  let text: string;
  try {
    text = strictUtf8.decode(bytes);
  } catch {
    throw new InputError(`${file}: not valid UTF-8 text (expected one UTF-8 document per .txt file)`);
  }
  // A .txt document has no other fields, so every kept column is null.
  return { text, extra: keepColumns.map(() => null), where: file };
}
