// JSON Lines input, plain or gzipped: C4's original c4-train.00000-of-01024.json.gz files hold one
// {"text", "timestamp", "url"} object per line.
import fs from 'node:fs';
import zlib from 'node:zlib';
import { InputError, StrictUtf8Stream, describeType, extraValue } from './types.ts';
import type { SourceDocument } from './types.ts';

export function isJsonLinesFile(file: string): boolean {
  return /\.(jsonl|json|ndjson)(\.gz)?$/i.test(file);
}

/**
 * Lines of a text file (gunzipped when the name ends in .gz), split by hand so stream errors surface here; invalid
 * UTF-8 is refused naming the byte offset (in the gunzipped text), as in a .txt document.
 */
async function* lines(file: string): AsyncGenerator<string> {
  const raw = fs.createReadStream(file);
  const stream = file.toLowerCase().endsWith('.gz') ? raw.pipe(zlib.createGunzip()) : raw;
  raw.on('error', (err) => stream.destroy(err));
  const decoder = new StrictUtf8Stream(file);
  let rest = '';
  for await (const chunk of stream) {
    rest += decoder.decode(chunk as Buffer);
    let start = 0;
    let nl: number;
    while ((nl = rest.indexOf('\n', start)) !== -1) {
      yield rest.slice(start, nl);
      start = nl + 1;
    }
    rest = rest.slice(start);
  }
  rest += decoder.decode(new Uint8Array(0), true);
  if (rest.length > 0) yield rest;
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
        throw new InputError(`${where}: no "${textColumn}" field; fields present: ${Object.keys(fields).map((k) => `"${k}"`).join(', ') || '(none)'}`);
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
