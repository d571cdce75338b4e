// Reading Hugging Face safetensors files tensor by tensor: the header first (checked against the file
// size before anything is allocated from it, its entries tiling the data part exactly as the format
// requires), then only the byte ranges of the tensors wanted, converted to float32 and refused if any
// value is NaN or infinite (as src/train/safetensors.ts refuses them in this project's own files).
// Written here rather than with src/train/safetensors.ts's reader, which reads whole files and only
// F32: Hugging Face checkpoints also carry tensors this project skips (int64 position ids, causal-mask
// buffers) and half-precision weights, and can be several GB.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { showValue } from '../core/bounds.ts';

/** Bytes per element of the safetensors dtypes. */
const DTYPE_BYTES: Record<string, number> = {
  F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U64: 8, U32: 4, U16: 2, U8: 1, BOOL: 1, F8_E4M3: 1, F8_E5M2: 1,
};
/** dtypes read as weights (converted to float32). */
export const FLOAT_DTYPES = ['F32', 'F16', 'BF16', 'F64'] as const;
/** The safetensors format's own limit on the header (100 MB). */
const MAX_HEADER_BYTES = 100_000_000;

export interface TensorEntry {
  file: string;
  name: string;
  dtype: string;
  shape: number[];
  /** Absolute byte range in the file. */
  begin: number;
  end: number;
}

/**
 * The tensors a safetensors file describes (header only; synchronous, so that recipes can check a
 * folder while they are validated); errors name the file and the tensor.
 */
export function readSafetensorsHeader(file: string): { entries: Map<string, TensorEntry>; metadata: Record<string, string> } {
  const fd = openSync(file, 'r');
  try {
    const { size } = fstatSync(fd);
    if (size < 8) throw new Error(`${file}: too short for a safetensors file (${size} bytes)`);
    const prefix = Buffer.alloc(8);
    readSync(fd, prefix, 0, 8, 0);
    const declared = prefix.readBigUInt64LE(0);
    if (declared > BigInt(Math.min(size - 8, MAX_HEADER_BYTES))) {
      throw new Error(`${file}: the header length ${declared} runs past the end of the file (${size} bytes) or the format's 100 MB limit: not a safetensors file`);
    }
    const headerLength = Number(declared);
    const headerBytes = Buffer.alloc(headerLength);
    readSync(fd, headerBytes, 0, headerLength, 8);
    let header: unknown;
    try {
      header = JSON.parse(headerBytes.toString('utf8'));
    } catch (err) {
      throw new Error(`${file}: the header is not valid JSON (${(err as Error).message})`);
    }
    if (typeof header !== 'object' || header === null || Array.isArray(header)) throw new Error(`${file}: the header is not a JSON object`);
    const { __metadata__: metadata = {}, ...tensors } = header as Record<string, unknown>;
    if (typeof metadata !== 'object' || metadata === null || Array.isArray(metadata) || Object.values(metadata).some((v) => typeof v !== 'string')) {
      throw new Error(`${file}: __metadata__ must be a map of strings (got ${showValue(metadata)})`);
    }
    const dataStart = 8 + headerLength;
    const entries = new Map<string, TensorEntry>();
    for (const [name, raw] of Object.entries(tensors)) entries.set(name, checkEntry(file, name, raw, dataStart, size));
    checkTiling(file, [...entries.values()], dataStart, size);
    return { entries, metadata: metadata as Record<string, string> };
  } finally {
    closeSync(fd);
  }
}

function checkEntry(file: string, name: string, raw: unknown, dataStart: number, size: number): TensorEntry {
  const { dtype, shape, data_offsets: offsets } = (raw ?? {}) as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
  const bad = (what: string) => new Error(`${file}: tensor '${name}' ${what}`);
  if (typeof dtype !== 'string' || !(dtype in DTYPE_BYTES)) throw bad(`has an unknown dtype ${JSON.stringify(dtype)}`);
  if (!Array.isArray(shape) || !shape.every((n) => Number.isSafeInteger(n) && n >= 0)) throw bad(`has an invalid shape ${showValue(shape)}`);
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((n) => Number.isSafeInteger(n) && n >= 0)) {
    throw bad(`has invalid data_offsets ${showValue(offsets)}`);
  }
  const dataBytes = size - dataStart;
  // Multiplied step by step, capped, so that a huge shape cannot lose precision before it is compared with the data.
  let bytes = DTYPE_BYTES[dtype];
  for (const n of shape as number[]) bytes = Math.min(bytes * n, dataBytes + 1);
  const [begin, end] = offsets as [number, number];
  if (!(begin <= end && end - begin === bytes && end <= dataBytes)) {
    throw bad(`has data_offsets [${begin}, ${end}] that do not hold ${dtype} [${(shape as number[]).join(', ')}] inside the file (${dataBytes} data bytes)`);
  }
  return { file, name, dtype, shape: shape as number[], begin: dataStart + begin, end: dataStart + end };
}

/** The entries must cover the data part exactly, in some order (the format's rule: no gap, no overlap). */
function checkTiling(file: string, entries: TensorEntry[], dataStart: number, size: number): void {
  let covered = dataStart;
  for (const entry of [...entries].sort((a, b) => a.begin - b.begin)) {
    if (entry.begin !== covered) {
      throw new Error(`${file}: tensor '${entry.name}' starts at byte ${entry.begin - dataStart} of the data but the previous one ends at ${covered - dataStart} (gap or overlap)`);
    }
    covered = entry.end;
  }
  if (covered !== size) throw new Error(`${file}: the tensors cover ${covered - dataStart} of the ${size - dataStart} data bytes`);
}

/** The tensor's values as float32 (F32 as stored; F16, BF16 and F64 converted); a NaN or infinite value is refused. */
export async function readTensor(entry: TensorEntry): Promise<Float32Array> {
  if (!(FLOAT_DTYPES as readonly string[]).includes(entry.dtype)) {
    throw new Error(`${entry.file}: tensor '${entry.name}' has dtype ${entry.dtype}; weights must be ${FLOAT_DTYPES.join(', ')}`);
  }
  const bytes = Buffer.alloc(entry.end - entry.begin);
  const handle = await open(entry.file, 'r');
  try {
    await handle.read(bytes, 0, bytes.length, entry.begin);
  } finally {
    await handle.close();
  }
  const values = toFloat32(bytes, entry.dtype);
  const bad = values.findIndex((x) => !Number.isFinite(x));
  if (bad >= 0) throw new Error(`${entry.file}: tensor '${entry.name}' holds a non-finite value (${values[bad]} at index ${bad}); refusing to load it`);
  return values;
}

/** Little-endian raw values → float32 (hosts Node runs on here are little-endian, as the format). */
export function toFloat32(bytes: Buffer, dtype: string): Float32Array {
  const n = bytes.length / DTYPE_BYTES[dtype];
  const out = new Float32Array(n);
  if (dtype === 'F32') new Uint8Array(out.buffer).set(bytes);
  else if (dtype === 'F64') for (let i = 0; i < n; i++) out[i] = bytes.readDoubleLE(8 * i);
  else if (dtype === 'BF16') {
    // bfloat16 is the top half of a float32.
    const bits = new Uint32Array(out.buffer);
    for (let i = 0; i < n; i++) bits[i] = bytes.readUInt16LE(2 * i) << 16;
  } else for (let i = 0; i < n; i++) out[i] = halfToFloat(bytes.readUInt16LE(2 * i));
  return out;
}

/** IEEE 754 binary16 → number (sign, 5-bit exponent with bias 15, 10-bit fraction; subnormals, ±∞, NaN). */
function halfToFloat(h: number): number {
  const sign = h & 0x8000 ? -1 : 1;
  const exponent = (h >> 10) & 0x1f;
  const fraction = h & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}
