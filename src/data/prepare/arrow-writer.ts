// Writes Arrow IPC shards exactly as HuggingFace `datasets` does (IPC *stream* format, 1,000-row record batches,
// `huggingface` schema metadata holding the features JSON), for `npm run prepare` (src/data/prepare/split-writer.ts)
// and the synthetic benchmark shard. The reader is src/data/arrow.ts.
import fs from 'node:fs';
import { errorNaming, openOwnFileForWriting } from '../../core/own-file.ts';
import { once } from 'node:events';
import { Field, RecordBatch, RecordBatchStreamWriter, Schema, Struct, Utf8, makeData, vectorFromArray } from 'apache-arrow';
import { ROWS_PER_BATCH } from '../arrow.ts';

/** `datasets` features JSON for string columns: {"text": {"dtype": "string", "_type": "Value"}, …}. */
export function stringFeatures(columns: readonly string[]): Record<string, { dtype: string; _type: string }> {
  const features: Record<string, { dtype: string; _type: string }> = {};
  for (const name of columns) features[name] = { dtype: 'string', _type: 'Value' };
  return features;
}

/** Python's json.dumps default separators (", " and ": "), for byte-identical metadata. */
export function pythonJson(value: unknown): string {
  if (value === null || typeof value !== 'object') return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(pythonJson).join(', ')}]`;
  const entries = Object.entries(value as Record<string, unknown>).map(([k, v]) => `${JSON.stringify(k)}: ${pythonJson(v)}`);
  return `{${entries.join(', ')}}`;
}

/** Writes one shard of nullable string columns as an Arrow IPC stream, the way `datasets` does. */
export class ArrowShardWriter {
  readonly schema: Schema;
  private readonly writer: RecordBatchStreamWriter;
  private readonly sink: fs.WriteStream;
  private pending: (string | null)[][];
  rows = 0;
  /** UTF-8 bytes of the text column written so far. */
  textBytes = 0;
  /** Arrow buffer bytes (data + offsets + validity) of all columns, what `datasets` reports as num_bytes. */
  arrowBytes = 0;

  constructor(
    readonly file: string,
    readonly columns: readonly string[],
    readonly textColumn: string,
  ) {
    const metadata = new Map([['huggingface', pythonJson({ info: { features: stringFeatures(columns) } })]]);
    this.schema = new Schema(
      columns.map((name) => new Field(name, new Utf8(), true)),
      metadata,
    );
    this.pending = columns.map(() => []);
    // Not through a symbolic link planted at its name (src/core/own-file.ts), as every file prepare writes.
    this.sink = fs.createWriteStream(file, { fd: openOwnFileForWriting(file) });
    this.writer = new RecordBatchStreamWriter();
    this.writer.toNodeStream().pipe(this.sink);
    this.writer.reset(undefined, this.schema); // writes the schema message even for an empty shard
  }

  /** Adds one row (values in `columns` order); flushes a record batch every 1,000 rows. */
  async append(values: readonly (string | null)[]): Promise<void> {
    for (let c = 0; c < this.columns.length; c++) this.pending[c].push(values[c] ?? null);
    this.rows++;
    if (this.pending[0].length >= ROWS_PER_BATCH) await this.flush();
  }

  private async flush(): Promise<void> {
    const count = this.pending[0].length;
    if (count === 0) return;
    const children = this.pending.map((values) => vectorFromArray(values, new Utf8()).data[0]);
    children.forEach((data, c) => {
      const offsets = data.valueOffsets as Int32Array;
      const bytes = offsets[count] - offsets[0];
      if (this.columns[c] === this.textColumn) this.textBytes += bytes;
      this.arrowBytes += bytes + 4 * (count + 1) + (data.nullCount > 0 ? Math.ceil(count / 8) : 0);
    });
    const structData = makeData({ type: new Struct(this.schema.fields), length: count, nullCount: 0, children });
    this.writer.write(new RecordBatch(this.schema, structData));
    this.pending = this.columns.map(() => []);
    // Backpressure: do not let encoded batches pile up in memory faster than the disk takes them.
    if (this.sink.writableLength > 16 * 1024 * 1024) await this.sinkEvent('drain');
  }

  /** Flushes the last partial batch, writes the end-of-stream marker and closes the file. */
  async close(): Promise<void> {
    await this.flush();
    const finished = this.sinkEvent('finish');
    this.writer.finish();
    await finished;
  }

  /** The sink's `event`; its error (ENOSPC on a full disk) names the shard, which Node's write errors do not. */
  private async sinkEvent(event: 'drain' | 'finish'): Promise<void> {
    try {
      await once(this.sink, event);
    } catch (err) {
      throw errorNaming(err, this.file);
    }
  }
}
