// Parquet input through hyparquet, one row group at a time (never the whole file), each held to the bound on the
// bytes a row group may decompress to (docs/bounds.md): a 584 KB gzip file can hold a 600 MB row group.
import zlib from 'node:zlib';
import { asyncBufferFromFile, parquetMetadataAsync, parquetReadObjects, snappyUncompress } from 'hyparquet';
import type { Compressors } from 'hyparquet/src/types.js';
import { BOUNDS } from '../../../core/bounds.ts';
import { InputError } from '../document-source.ts';
import type { DocumentSource, SourceDocument } from '../document-source.ts';
import { describeType, extraValue } from './values.ts';

export const parquetSource: DocumentSource = {
  name: 'Parquet',
  extensions: ['.parquet'],
  description: '.parquet',
  help: '*.parquet',
  read: (file, textColumn, keepColumns) => readParquet(file, textColumn, keepColumns),
  // Compressed columns: counted at 5× the file's size, as gzipped JSON Lines.
  estimatedTextBytes: (_file, fileBytes) => 5 * fileBytes,
};

// hyparquet decodes SNAPPY and UNCOMPRESSED itself; node:zlib adds GZIP and BROTLI (and ZSTD on
// Node versions that have it) without another dependency.
const zstd = (zlib as unknown as { zstdDecompressSync?: (b: Uint8Array, options: zlib.ZlibOptions) => Buffer }).zstdDecompressSync;
const count = (n: number) => n.toLocaleString('en-US');

/**
 * Decompressors for one row group that take each page's declared size from `budget.left` before allocating it, and
 * never produce more than that size (a page whose stream inflates beyond its header is stopped there): hyparquet
 * allocates a SNAPPY page from its header, and zlib would inflate a gzip bomb whole.
 */
export function parquetDecompressors(budget: { left: number }): Compressors {
  const take = (declared: number) => {
    if (declared > budget.left)
      throw new Error(`a page decompresses to ${count(declared)} bytes, more than the ${count(budget.left)} bytes left of the bound on a row group`);
    budget.left -= declared;
  };
  const inflate = (run: (input: Uint8Array, options: zlib.ZlibOptions) => Buffer) => (input: Uint8Array, declared: number) => {
    take(declared);
    try {
      return new Uint8Array(run(input, { maxOutputLength: Math.max(1, declared) }));
    } catch (err) {
      if ((err as { code?: string }).code === 'ERR_BUFFER_TOO_LARGE')
        throw new Error(`a page decompresses to more than the ${declared} bytes its header declares`);
      throw err;
    }
  };
  return {
    SNAPPY: (input, declared) => {
      take(declared);
      const page = new Uint8Array(declared);
      snappyUncompress(input, page);
      return page;
    },
    GZIP: inflate(zlib.gunzipSync),
    BROTLI: inflate(zlib.brotliDecompressSync),
    ...(zstd ? { ZSTD: inflate(zstd) } : {}),
  };
}

/** Documents of a Parquet file, row group by row group; `maxRowGroupBytes`: the bound (smaller in tests). */
export async function* readParquet(
  file: string,
  textColumn: string,
  keepColumns: readonly string[],
  maxRowGroupBytes: number = BOUNDS.parquetRowGroupBytes.max,
): AsyncGenerator<SourceDocument> {
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
    const rowGroup = metadata.row_groups[group];
    const rowEnd = rowStart + Number(rowGroup.num_rows);
    // What the footer declares first; the decompressors then hold the pages to it whatever the footer said.
    const declared = rowGroup.columns
      .filter((chunk) => wanted.includes(chunk.meta_data?.path_in_schema[0] ?? ''))
      .reduce((sum, chunk) => sum + Number(chunk.meta_data?.total_uncompressed_size ?? 0), 0);
    if (declared > maxRowGroupBytes) {
      throw new InputError(
        `${file} (row group ${group}): columns ${wanted.map((c) => `"${c}"`).join(', ')} decompress to ${count(declared)} bytes, more than the ` +
          `${count(maxRowGroupBytes)} bytes a row group may hold (the bound: ${BOUNDS.parquetRowGroupBytes.why}); ` +
          'rewrite the file with smaller row groups (pyarrow: pq.write_table(table, path, row_group_size=...))',
      );
    }
    let rows: Record<string, unknown>[];
    try {
      rows = await parquetReadObjects({
        file: buffer,
        metadata,
        columns: wanted,
        rowStart,
        rowEnd,
        compressors: parquetDecompressors({ left: maxRowGroupBytes }),
      });
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
