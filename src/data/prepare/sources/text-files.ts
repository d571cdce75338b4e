// Plain-text input: one document per .txt file.
import fs from 'node:fs';
import { InputError } from '../document-source.ts';
import type { DocumentSource, SourceDocument } from '../document-source.ts';
import { StrictUtf8Stream } from './values.ts';

export const textFileSource: DocumentSource = {
  name: 'text files',
  extensions: ['.txt'],
  description: '.txt (one document per file)',
  help: '*.txt  (one document per file)',
  async *read(file, _textColumn, keepColumns) {
    yield await readTextFile(file, keepColumns);
  },
};

async function readTextFile(file: string, keepColumns: readonly string[]): Promise<SourceDocument> {
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
