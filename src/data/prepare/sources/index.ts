// Input files for `prepare`: resolving paths, folders and globs, and reading documents from them.
import fs from 'node:fs';
import path from 'node:path';
import { expandFileGlob } from '../../dataset.ts';
import { isJsonLinesFile, readJsonLines } from './jsonl.ts';
import { isParquetFile, readParquet } from './parquet.ts';
import { isTextFile, readTextFile } from './text-files.ts';
import { InputError } from './types.ts';
import type { SourceDocument } from './types.ts';

export { InputError } from './types.ts';
export type { SourceDocument } from './types.ts';

export const SUPPORTED_INPUTS = '.jsonl/.json/.ndjson (optionally .gz, JSON Lines), .parquet, .txt (one document per file)';

function isSupported(file: string): boolean {
  return isJsonLinesFile(file) || isParquetFile(file) || isTextFile(file);
}

function walk(folder: string): string[] {
  const out: string[] = [];
  const entries = fs.readdirSync(folder, { withFileTypes: true }).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  for (const entry of entries) {
    if (entry.name.startsWith('.')) continue; // hidden files (.DS_Store, .gitattributes) are not data
    const full = path.join(folder, entry.name);
    if (entry.isDirectory()) out.push(...walk(full));
    else out.push(full);
  }
  return out;
}

/** Expands input arguments (files, folders searched recursively in name order, file-name globs) to input files. */
export function resolveInputs(inputs: readonly string[]): string[] {
  if (inputs.length === 0) throw new InputError(`no inputs given (expected files or folders of ${SUPPORTED_INPUTS})`);
  const files: string[] = [];
  for (const input of inputs) {
    let found: string[];
    if (!fs.existsSync(input) && /[*?[]/.test(path.basename(input))) {
      found = expandFileGlob(input);
      if (found.length === 0) throw new InputError(`${input}: the glob matches no files`);
    } else if (!fs.existsSync(input)) {
      throw new InputError(`${input}: no such file or folder`);
    } else if (fs.statSync(input).isDirectory()) {
      found = walk(input);
      if (found.length === 0) throw new InputError(`${input}: the folder is empty (expected ${SUPPORTED_INPUTS})`);
    } else {
      found = [input];
    }
    const unsupported = found.filter((f) => !isSupported(f));
    if (unsupported.length > 0) {
      const shown = unsupported.slice(0, 5).join(', ') + (unsupported.length > 5 ? `, … (${unsupported.length} in all)` : '');
      throw new InputError(`unsupported input file(s): ${shown}; expected ${SUPPORTED_INPUTS}`);
    }
    files.push(...found);
  }
  return files;
}

/** Documents of one input file, in file order. */
export function readDocuments(file: string, textColumn: string, keepColumns: readonly string[]): AsyncGenerator<SourceDocument> {
  if (isParquetFile(file)) return readParquet(file, textColumn, keepColumns);
  if (isJsonLinesFile(file)) return readJsonLines(file, textColumn, keepColumns);
  return (async function* () {
    yield await readTextFile(file, keepColumns);
  })();
}
