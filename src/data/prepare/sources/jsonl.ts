// JSON Lines input, plain or gzipped: C4's original c4-train.00000-of-01024.json.gz files hold one
// {"text", "timestamp", "url"} object per line.
import fs from 'node:fs';
import zlib from 'node:zlib';
import { InputError } from '../document-source.ts';
import type { DocumentSource, SourceDocument } from '../document-source.ts';
import { StrictUtf8Stream, describeType, extraValue } from './values.ts';

export const jsonLinesSource: DocumentSource = {
  name: 'JSON Lines',
  extensions: ['.jsonl', '.json', '.ndjson', '.jsonl.gz', '.json.gz', '.ndjson.gz'],
  description: '.jsonl/.json/.ndjson (optionally .gz, JSON Lines)',
  help: "*.jsonl, *.json, *.ndjson, optionally gzipped (*.json.gz: C4's original files), one JSON object per line",
  read: (file, textColumn, keepColumns) => readJsonLines(file, textColumn, keepColumns),
  // Text compresses 3–4×: a gzipped file is counted at 5× its size.
  estimatedTextBytes: (file, fileBytes) => (file.toLowerCase().endsWith('.gz') ? 5 * fileBytes : fileBytes),
};

/**
 * Lines of a text file (gunzipped when the name ends in .gz), split by hand so stream errors surface here; invalid
 * UTF-8 is refused naming the byte offset (in the gunzipped text), as in a .txt document. Each chunk is searched for
 * newlines once and a line's pieces are joined once, so splitting is linear in the file (appending chunks to one
 * string and searching it again from its start was quadratic in the length of a line: 120 s for a 150 MB line).
 */
async function* lines(file: string): AsyncGenerator<string> {
  const raw = fs.createReadStream(file);
  const stream = file.toLowerCase().endsWith('.gz') ? raw.pipe(zlib.createGunzip()) : raw;
  raw.on('error', (err) => stream.destroy(err));
  const decoder = new StrictUtf8Stream(file);
  /** The current line's text from earlier chunks. */
  let pieces: string[] = [];
  for await (const chunk of stream) {
    const text = decoder.decode(chunk as Buffer);
    let start = 0;
    for (let nl = text.indexOf('\n'); nl !== -1; nl = text.indexOf('\n', start)) {
      pieces.push(text.slice(start, nl));
      yield pieces.join('');
      pieces = [];
      start = nl + 1;
    }
    if (start < text.length) pieces.push(text.slice(start));
  }
  pieces.push(decoder.decode(new Uint8Array(0), true));
  const last = pieces.join('');
  if (last.length > 0) yield last;
}

export async function* readJsonLines(file: string, textColumn: string, keepColumns: readonly string[]): AsyncGenerator<SourceDocument> {
  let lineNumber = 0;
  try {
    for await (const line of lines(file)) {
      lineNumber++;
      if (line.trim() === '') continue; // blank lines separate nothing in JSON Lines
      const where = `${file}:${lineNumber}`;
      let record: unknown;
      try {
        record = JSON.parse(line);
      } catch (err) {
        const hint = lineNumber === 1 && line.trimStart().startsWith('[') ? ' (a JSON array file? expected JSON Lines: one object per line)' : '';
        throw new InputError(`${where}: malformed JSON line${hint}: ${(err as Error).message}`);
      }
      if (record === null || typeof record !== 'object' || Array.isArray(record)) {
        throw new InputError(`${where}: expected a JSON object with a "${textColumn}" field, got ${describeType(record)}`);
      }
      const fields = record as Record<string, unknown>;
      if (!(textColumn in fields)) {
        throw new InputError(
          `${where}: no "${textColumn}" field; fields present: ${
            Object.keys(fields)
              .map((k) => `"${k}"`)
              .join(', ') || '(none)'
          }`,
        );
      }
      const text = fields[textColumn];
      if (text !== null && typeof text !== 'string') {
        throw new InputError(`${where}: field "${textColumn}" is ${describeType(text)}; expected a string`);
      }
      yield { text, extra: keepColumns.map((c) => extraValue(fields[c])), where };
    }
  } catch (err) {
    if (err instanceof InputError) throw err;
    throw new InputError(`${file}:${lineNumber + 1}: cannot read${file.endsWith('.gz') ? ' (corrupt or truncated gzip?)' : ''}: ${(err as Error).message}`);
  }
}
