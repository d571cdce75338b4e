// Plain-text input: one document per .txt file.
import fs from 'node:fs';
import { InputError, StrictUtf8Stream } from './types.ts';
import type { SourceDocument } from './types.ts';

export function isTextFile(file: string): boolean {
  return /\.txt$/i.test(file);
}

export async function readTextFile(file: string, keepColumns: readonly string[]): Promise<SourceDocument> {
  let bytes: Buffer;
  try {
    bytes = await fs.promises.readFile(file);
  } catch (err) {
    throw new InputError(`${file}: cannot read: ${(err as Error).message}`);
  }
  const text = new StrictUtf8Stream(file).decode(bytes, true);
  // A .txt document has no other fields, so every kept column is null.
  return { text, extra: keepColumns.map(() => null), where: file };
}
