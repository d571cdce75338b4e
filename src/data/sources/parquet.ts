// Parquet input through hyparquet, one row group at a time (never the whole file).
import zlib from 'node:zlib';
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects } from 'hyparquet';
import type { Compressors } from 'hyparquet/src/types.js';
import { InputError, describeType, extraValue } from './types.ts';
import type { SourceDocument } from './types.ts';

export function isParquetFile(file: string): boolean {
  return /\.parquet$/i.test(file);
}

// hyparquet decodes SNAPPY and UNCOMPRESSED itself; node:zlib adds GZIP and BROTLI (and ZSTD on
// Node versions that have it) without another dependency.
const zstd = (zlib as unknown as { zstdDecompressSync?: (b: Uint8Array) => Buffer }).zstdDecompressSync;
const compressors: Compressors = {
  GZIP: (input) => new Uint8Array(zlib.gunzipSync(input)),
  BROTLI: (input) => new Uint8Array(zlib.brotliDecompressSync(input)),
  ...(zstd ? { ZSTD: (input: Uint8Array) => new Uint8Array(zstd(input)) } : {}),
};

export async function* readParquet(file: string, textColumn: string, keepColumns: readonly string[]): AsyncGenerator<SourceDocument> {
  let buffer;
  let metadata;
  try {
    buffer = await asyncBufferFromFile(file);
    metadata = await parquetMetadataAsync(buffer);
  } catch (err) {
    throw new InputError(`${file}: not a readable parquet file: ${(err as Error).message}`);
  }
  // Top-level columns are the direct children of the schema root.
  const columns = new Set<string>();
  for (let i = 1, skip = 0; i < metadata.schema.length; i++) {
    const element = metadata.schema[i];
    if (skip > 0) {
      skip += (element.num_children ?? 0) - 1;
      continue;
    }
    columns.add(element.name);
    skip = element.num_children ?? 0;
  }
  if (!columns.has(textColumn)) {
    throw new InputError(`${file}: no "${textColumn}" column; columns present: ${[...columns].map((c) => `"${c}"`).join(', ')}`);
  }
  const wanted = [textColumn, ...keepColumns.filter((c) => columns.has(c) && c !== textColumn)];
  let rowStart = 0;
  for (let group = 0; group < metadata.row_groups.length; group++) {
    const rowEnd = rowStart + Number(metadata.row_groups[group].num_rows);
    let rows: Record<string, unknown>[];
    try {
      rows = await parquetReadObjects({ file: buffer, metadata, columns: wanted, rowStart, rowEnd, compressors });
    } catch (err) {
      throw new InputError(
        `${file} (row group ${group}): cannot decode: ${(err as Error).message} (readable codecs: UNCOMPRESSED, SNAPPY, GZIP, BROTLI${zstd ? ', ZSTD' : ''})`,
      );
    }
    for (let r = 0; r < rows.length; r++) {
      const text = rows[r][textColumn];
      const where = `${file} (row group ${group}, row ${rowStart + r})`;
      if (text !== null && text !== undefined && typeof text !== 'string') {
        throw new InputError(`${where}: column "${textColumn}" is ${describeType(text)}; expected a string (UTF-8) column`);
      }
      yield { text: (text as string | null | undefined) ?? null, extra: keepColumns.map((c) => extraValue(rows[r][c])), where };
    }
    rowStart = rowEnd;
  }
}
