// The input formats `npm run prepare` reads, found by file name ending, and the expansion of its input arguments to
// files. A new format is one file implementing DocumentSource (src/data/prepare/document-source.ts) plus one line in
// DOCUMENT_SOURCES, as the shard formats (src/data/shard-registry.ts).
import fs from 'node:fs';
import path from 'node:path';
import { expandFileGlob } from '../dataset.ts';
import { InputError } from './document-source.ts';
import type { DocumentSource, SourceDocument } from './document-source.ts';
import { jsonLinesSource } from './sources/jsonl.ts';
import { parquetSource } from './sources/parquet.ts';
import { textFileSource } from './sources/text-files.ts';

const DOCUMENT_SOURCES: DocumentSource[] = [jsonLinesSource, parquetSource, textFileSource];

/**
 * Adds a source at run time (a plugin, a test). An ending another source claims, or one that ends with it or that it
 * ends with (".gz" against ".json.gz"), is an error naming both: then no file is claimed twice.
 */
export function registerDocumentSource(source: DocumentSource): void {
  for (const extension of source.extensions.map((e) => e.toLowerCase())) {
    for (const owner of DOCUMENT_SOURCES) {
      const claimed = owner.extensions.find((e) => extension.endsWith(e.toLowerCase()) || e.toLowerCase().endsWith(extension));
      if (claimed !== undefined) {
        const how = claimed.toLowerCase() === extension ? `is already read by ${owner.name}` : `overlaps ${claimed}, read by ${owner.name}`;
        throw new Error(`document source ${source.name}: the ending ${extension} ${how}`);
      }
    }
  }
  DOCUMENT_SOURCES.push(source);
}

function claiming(file: string): DocumentSource | undefined {
  const name = path.basename(file).toLowerCase();
  return DOCUMENT_SOURCES.find((source) => source.extensions.some((extension) => name.endsWith(extension.toLowerCase())));
}

/** The inputs the registered sources read, for messages: ".jsonl/.json/.ndjson (optionally .gz, JSON Lines), .parquet, …". */
export function supportedInputs(): string {
  return DOCUMENT_SOURCES.map((source) => source.description).join(', ');
}

/** The lines under "Inputs" in `npm run prepare -- --help`, one per source. */
export function inputsHelp(): string[] {
  return DOCUMENT_SOURCES.map((source) => source.help);
}

/** The source that reads `file`; an InputError naming the file and the inputs read when none does. */
function documentSourceOf(file: string): DocumentSource {
  const source = claiming(file);
  if (!source) throw new InputError(`${file}: unsupported input file; expected ${supportedInputs()}`);
  return source;
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
  if (inputs.length === 0) throw new InputError(`no inputs given (expected files or folders of ${supportedInputs()})`);
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
      if (found.length === 0) throw new InputError(`${input}: the folder is empty (expected ${supportedInputs()})`);
    } else {
      found = [input];
    }
    const unsupported = found.filter((f) => claiming(f) === undefined);
    if (unsupported.length > 0) {
      const shown = unsupported.slice(0, 5).join(', ') + (unsupported.length > 5 ? `, … (${unsupported.length} in all)` : '');
      throw new InputError(`unsupported input file(s): ${shown}; expected ${supportedInputs()}`);
    }
    files.push(...found);
  }
  return files;
}

/** Documents of one input file, in file order. */
export function readDocuments(file: string, textColumn: string, keepColumns: readonly string[]): AsyncGenerator<SourceDocument> {
  return documentSourceOf(file).read(file, textColumn, keepColumns);
}

/** The inputs' text, estimated from their sizes by their sources (compressed ones at 5×: text compresses 3–4×). */
export function estimatedTextBytes(files: readonly string[]): number {
  return files.reduce((sum, file) => {
    const fileBytes = fs.statSync(file).size;
    return sum + (documentSourceOf(file).estimatedTextBytes?.(file, fileBytes) ?? fileBytes);
  }, 0);
}
