// The counts inside an Arrow IPC message's metadata (a flatbuffer), checked against its bytes before apache-arrow
// decodes it (docs/bounds.md, Data files). The flatbuffer says how many field nodes, buffers, schema fields or file
// blocks follow, and apache-arrow's decoder creates one object per declared entry; reads past the metadata return
// zeros instead of failing, so a few hundred bytes declaring 2³⁰ field nodes exhausted the heap. Hand-written
// because the flatbuffers runtime has no verifier for JavaScript: this walks only the vectors apache-arrow decodes.

/** A table's vector fields by slot: elements of a fixed byte size (structs, scalars), or offsets to tables. */
interface TableShape {
  readonly [slot: number]: { bytes: number } | { tables: TableShape } | { table: TableShape } | { union: number; shapes: Record<number, TableShape> };
}

const KEY_VALUE: TableShape = {};
const FIELD: TableShape = {};
Object.assign(FIELD, { 5: { tables: FIELD }, 6: { tables: KEY_VALUE } });
const SCHEMA: TableShape = { 1: { tables: FIELD }, 2: { tables: KEY_VALUE }, 3: { bytes: 8 } };
const RECORD_BATCH: TableShape = { 1: { bytes: 16 }, 2: { bytes: 16 }, 4: { bytes: 8 } };
const DICTIONARY_BATCH: TableShape = { 1: { table: RECORD_BATCH } };
/** Message: header_type (slot 1) picks the header (slot 2): 1 Schema, 2 DictionaryBatch, 3 RecordBatch. */
const MESSAGE: TableShape = { 2: { union: 1, shapes: { 1: SCHEMA, 2: DICTIONARY_BATCH, 3: RECORD_BATCH } }, 4: { tables: KEY_VALUE } };
/** Footer: the schema, the dictionary and record batch blocks (24-byte structs), custom metadata. */
const FOOTER: TableShape = { 1: { table: SCHEMA }, 2: { bytes: 24 }, 3: { bytes: 24 }, 4: { tables: KEY_VALUE } };

/** Nested tables walked at most (a legitimate schema nests a few levels). */
const MAX_DEPTH = 64;

class Corrupt extends Error {}

function walk(bytes: Uint8Array, what: TableShape, root: number): void {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const inside = (at: number, size: number) => {
    if (!(at >= 0 && at + size <= bytes.length)) throw new Corrupt(`an offset points outside its ${bytes.length} bytes`);
    return at;
  };
  const int32 = (at: number) => view.getInt32(inside(at, 4), true);
  const uint16 = (at: number) => view.getUint16(inside(at, 2), true);
  // Tables visited in all: each takes at least 4 bytes, so more visits than that means tables shared or cycled.
  let budget = Math.floor(bytes.length / 4);
  const table = (at: number, shape: TableShape, depth: number): void => {
    if (depth > MAX_DEPTH) throw new Corrupt(`tables nested over ${MAX_DEPTH} deep`);
    if (--budget < 0) throw new Corrupt('more tables than its bytes can hold');
    const vtable = at - int32(at);
    const vtableBytes = uint16(vtable);
    /** Where the table holds field `slot`, or 0 when absent. */
    const field = (slot: number) => {
      const entry = 4 + 2 * slot;
      if (entry + 2 > vtableBytes) return 0;
      const offset = uint16(vtable + entry);
      return offset === 0 ? 0 : at + offset;
    };
    for (const [key, spec] of Object.entries(shape)) {
      const position = field(Number(key));
      if (position === 0) continue;
      const target = position + int32(position);
      if ('union' in spec) {
        const typeAt = field(spec.union);
        const inner = typeAt === 0 ? undefined : spec.shapes[view.getUint8(inside(typeAt, 1))];
        if (inner) table(target, inner, depth + 1);
      } else if ('table' in spec) {
        table(target, spec.table, depth + 1);
      } else {
        const length = int32(target) >>> 0;
        const elementBytes = 'bytes' in spec ? spec.bytes : 4;
        if (target + 4 + length * elementBytes > bytes.length) {
          throw new Corrupt(`a vector declares ${length.toLocaleString('en-US')} entries, more than its ${bytes.length} bytes hold`);
        }
        if ('tables' in spec) for (let i = 0; i < length; i++) table(target + 4 + 4 * i + int32(target + 4 + 4 * i), spec.tables, depth + 1);
      }
    }
  };
  table(root + int32(root), what, 0);
}

/**
 * What is wrong with the counts of an IPC message's metadata (`kind` 'message') or a file footer ('footer'), or
 * null: every vector apache-arrow decodes fits in the bytes, and no table is nested or shared beyond them.
 */
export function metadataProblem(bytes: Uint8Array, kind: 'message' | 'footer'): string | null {
  try {
    walk(bytes, kind === 'message' ? MESSAGE : FOOTER, 0);
    return null;
  } catch (err) {
    if (err instanceof Corrupt) return `the ${kind === 'message' ? 'message header' : 'footer'}: ${err.message}`;
    throw err;
  }
}

/** Offsets of the dictionary batch messages a file footer lists (its vectors already checked by metadataProblem). */
export function footerDictionaryOffsets(footer: Uint8Array): number[] {
  const view = new DataView(footer.buffer, footer.byteOffset, footer.byteLength);
  const root = view.getInt32(0, true);
  const vtable = root - view.getInt32(root, true);
  const slot = 4 + 2 * 2;
  if (slot + 2 > view.getUint16(vtable, true)) return [];
  const offset = view.getUint16(vtable + slot, true);
  if (offset === 0) return [];
  const vector = root + offset + view.getInt32(root + offset, true);
  const length = view.getUint32(vector, true);
  return Array.from({ length }, (_, i) => Number(view.getBigInt64(vector + 4 + 24 * i, true)));
}
