// The sizes an Arrow IPC record batch declares, checked against the bytes it holds before anything is decoded or
// allocated from them (docs/bounds.md, Data files). A header is a few hundred bytes that say how many rows follow
// and where each buffer lies; apache-arrow trusts them, so a 312-byte shard declaring 2³¹ − 1 rows over 3 offsets
// made the reader allocate per declared row until the process died. Here the rows are tied to the text column's
// bytes: n rows need n + 1 offsets (or n dictionary indices), and every buffer must lie inside the batch's body.
// The functions return the problem in words (null when there is none); arrow.ts names the file and the batch.
import { Type } from 'apache-arrow';
import type { DataType, Schema } from 'apache-arrow';

/** A record batch header as apache-arrow decodes it (`Message.header()`; 64-bit fields as numbers). */
export interface BatchHeader {
  length: number;
  nodes: readonly { length: number; nullCount: number }[];
  buffers: readonly { offset: number; length: number }[];
  compression: unknown;
}

/** Where a record batch holds the text column, from the schema: field nodes and buffers are laid out depth-first. */
export interface TextColumnLayout {
  column: string;
  /** The text column's field node and its first buffer (validity). */
  node: number;
  buffer: number;
  /** Dictionary-encoded: the second buffer holds indices, else offsets. */
  dictionary: boolean;
  /** Bytes per offset (Utf8 4, LargeUtf8 8) or per dictionary index. */
  width: number;
  /** The top-level columns up to the text column and their field nodes: each holds the batch's rows. */
  columns: readonly { name: string; node: number }[];
  /** Field nodes and buffers a batch needs up to and including the text column. */
  nodesNeeded: number;
  buffersNeeded: number;
}

/** Field nodes a column of `type` occupies in a record batch (itself and its children, depth-first); null: not laid out here. */
function nodeCount(type: DataType): number | null {
  if (type.typeId === Type.Union || type.typeId === Type.Utf8View || type.typeId === Type.BinaryView) return null;
  let total = 1;
  for (const child of type.children ?? []) {
    const n = nodeCount(child.type);
    if (n === null) return null;
    total += n;
  }
  return total;
}

/** Number of IPC buffers a field occupies in a record batch body (depth-first), or null when unsupported. */
function bufferCount(type: DataType): number | null {
  switch (type.typeId) {
    case Type.Null:
      return 0;
    case Type.Utf8:
    case Type.LargeUtf8:
    case Type.Binary:
    case Type.LargeBinary:
      return 3;
    case Type.Bool:
    case Type.Int:
    case Type.Float:
    case Type.Decimal:
    case Type.Date:
    case Type.Time:
    case Type.Timestamp:
    case Type.Interval:
    case Type.Duration:
    case Type.FixedSizeBinary:
    case Type.Dictionary:
      return 2;
    case Type.List:
    case Type.LargeList:
    case Type.Map: {
      const child = bufferCount(type.children[0].type);
      return child === null ? null : 2 + child;
    }
    case Type.FixedSizeList:
    case Type.Struct: {
      let total = 1;
      for (const c of type.children) {
        const n = bufferCount(c.type);
        if (n === null) return null;
        total += n;
      }
      return total;
    }
    default:
      return null; // unions, view types: not written by `datasets`
  }
}

/** Bytes per offset or dictionary index of a string column type (Utf8, LargeUtf8, or a dictionary of them). */
function textWidth(type: DataType): { dictionary: boolean; width: number } {
  if (type.typeId === Type.Dictionary) return { dictionary: true, width: (type as unknown as { indices: { bitWidth: number } }).indices.bitWidth / 8 };
  return { dictionary: false, width: type.typeId === Type.LargeUtf8 ? 8 : 4 };
}

/**
 * Where `column` (a string column, already checked) lies in the schema's record batches, or the problem when a
 * column before it has a layout this reader does not know (unions, view types): its sizes could not be checked.
 */
export function textColumnLayout(schema: Schema, column: string): TextColumnLayout | string {
  let node = 0;
  let buffer = 0;
  const columns: { name: string; node: number }[] = [];
  for (const field of schema.fields) {
    columns.push({ name: field.name, node });
    if (field.name === column) {
      return {
        column,
        node,
        buffer,
        ...textWidth(field.type),
        columns,
        nodesNeeded: node + 1,
        buffersNeeded: buffer + 2 + (field.type.typeId === Type.Dictionary ? 0 : 1),
      };
    }
    const nodes = nodeCount(field.type);
    const buffers = bufferCount(field.type);
    if (nodes === null || buffers === null) {
      return `column "${field.name}" comes before "${column}" and has type ${String(field.type)}, whose layout this reader does not check (a shard of string columns, as \`datasets\` writes, is read)`;
    }
    node += nodes;
    buffer += buffers;
  }
  throw new Error(`column "${column}" is not in the schema`); // checkTextColumn ran first
}

/** The layout of a dictionary batch of `valueType`: one column, its values. */
export function dictionaryLayout(valueType: DataType): TextColumnLayout {
  return {
    column: '(dictionary)',
    node: 0,
    buffer: 0,
    ...textWidth(valueType),
    columns: [{ name: '(dictionary)', node: 0 }],
    nodesNeeded: 1,
    buffersNeeded: 3,
  };
}

const count = (n: number) => n.toLocaleString('en-US');

/** What is wrong with a record batch header whose body holds `bodyLength` bytes, or null: checked before decoding it. */
export function recordBatchProblem(header: BatchHeader, bodyLength: number, layout: TextColumnLayout): string | null {
  const rows = header.length;
  if (!Number.isSafeInteger(rows) || rows < 0) return `the record batch declares ${rows} rows`;
  if (header.compression)
    return 'the record batch is compressed (LZ4 or ZSTD buffers), which this reader does not decode: write the shard uncompressed, as `datasets` does';
  for (const [i, { offset, length }] of header.buffers.entries()) {
    if (!(Number.isSafeInteger(offset) && Number.isSafeInteger(length) && offset >= 0 && length >= 0 && offset + length <= bodyLength)) {
      return `buffer ${i} (bytes ${count(offset)} to ${count(offset + length)}) lies outside the record batch's body of ${count(bodyLength)} bytes`;
    }
  }
  if (header.nodes.length < layout.nodesNeeded || header.buffers.length < layout.buffersNeeded) {
    return `the record batch has ${header.nodes.length} field nodes and ${header.buffers.length} buffers; its schema needs at least ${layout.nodesNeeded} and ${layout.buffersNeeded}`;
  }
  for (const { name, node } of layout.columns) {
    const held = header.nodes[node].length;
    if (held !== rows) return `the record batch declares ${count(rows)} rows, but column "${name}" holds ${count(held)}`;
  }
  const { column } = layout;
  const nulls = header.nodes[layout.node].nullCount;
  if (!(Number.isSafeInteger(nulls) && nulls >= 0 && nulls <= rows)) return `column "${column}" declares ${nulls} nulls in ${count(rows)} rows`;
  const validity = header.buffers[layout.buffer].length;
  if (nulls > 0 && validity * 8 < rows) {
    return `the record batch declares ${count(rows)} rows, but the validity bitmap of column "${column}" holds ${count(validity)} bytes (${count(validity * 8)} rows)`;
  }
  const second = header.buffers[layout.buffer + 1].length;
  if (layout.dictionary) {
    if (second < rows * layout.width) {
      return `the record batch declares ${count(rows)} rows, but the dictionary indices of column "${column}" hold ${count(second)} bytes (${count(Math.floor(second / layout.width))} rows)`;
    }
  } else if (rows > 0 && second < (rows + 1) * layout.width) {
    const held = Math.max(0, Math.floor(second / layout.width) - 1);
    return `the record batch declares ${count(rows)} rows, but the offsets of column "${column}" hold ${count(second)} bytes (${count(held)} rows)`;
  }
  return null;
}

/** The text bytes a batch's first and last offset span, or the problem when they lie outside its `dataBytes` of text. */
export function offsetSpanProblem(first: number, last: number, dataBytes: number): string | null {
  if (first >= 0 && first <= last && last <= dataBytes) return null;
  return `its offsets run from byte ${first} to byte ${last}, outside the ${count(dataBytes)} bytes of text`;
}

/**
 * The first row whose offsets (`rows` + 1 of them from `start`) are negative, decreasing or past the `dataBytes` of
 * text, in words, or null: such offsets would read other rows' text, padding or nothing instead of failing.
 */
export function offsetsProblem(offsets: Int32Array | BigInt64Array, start: number, rows: number, dataBytes: number): string | null {
  let previous = Number(offsets[start]);
  if (previous < 0) return `row 0 starts at byte ${previous}`;
  for (let row = 0; row < rows; row++) {
    const end = Number(offsets[start + row + 1]);
    if (end < previous) return `row ${row} ends at byte ${end}, before it starts (byte ${previous})`;
    if (end > dataBytes) return `row ${row} ends at byte ${end}, past the ${count(dataBytes)} bytes of text`;
    previous = end;
  }
  return null;
}
