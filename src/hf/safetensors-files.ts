// Reading Hugging Face safetensors files tensor by tensor: the header first (checked against the file
// size before anything is allocated from it), then only the byte ranges of the tensors wanted,
// converted to float32. Written here rather than with src/train/safetensors.ts's reader, which reads
// whole files and only F32: Hugging Face checkpoints also carry tensors this project skips (int64
// position ids, causal-mask buffers) and half-precision weights, and can be several GB.
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { open } from 'node:fs/promises';

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
    const headerLength = Number(prefix.readBigUInt64LE(0));
    if (headerLength > Math.min(size - 8, MAX_HEADER_BYTES)) {
      throw new Error(`${file}: the header length ${headerLength} runs past the end of the file (${size} bytes) or the format's 100 MB limit: not a safetensors file`);
    }
    const headerBytes = Buffer.alloc(headerLength);
    readSync(fd, headerBytes, 0, headerLength, 8);
    let header: unknown;
    try {
      header = JSON.parse(headerBytes.toString('utf8'));
    } catch (err) {
      throw new Error(`${file}: the header is not valid JSON (${(err as Error).message})`);
    }
    if (typeof header !== 'object' || header === null || Array.isArray(header)) throw new Error(`${file}: the header is not a JSON object`);
    const dataStart = 8 + headerLength;
    const entries = new Map<string, TensorEntry>();
    let metadata: Record<string, string> = {};
    for (const [name, raw] of Object.entries(header as Record<string, unknown>)) {
      if (name === '__metadata__') metadata = (raw ?? {}) as Record<string, string>;
      else entries.set(name, checkEntry(file, name, raw, dataStart, size));
    }
    return { entries, metadata };
  } finally {
    closeSync(fd);
  }
}

function checkEntry(file: string, name: string, raw: unknown, dataStart: number, size: number): TensorEntry {
  const { dtype, shape, data_offsets: offsets } = (raw ?? {}) as { dtype?: unknown; shape?: unknown; data_offsets?: unknown };
  const bad = (what: string) => new Error(`${file}: tensor '${name}' ${what}`);
  if (typeof dtype !== 'string' || !(dtype in DTYPE_BYTES)) throw bad(`has an unknown dtype ${JSON.stringify(dtype)}`);
  if (!Array.isArray(shape) || !shape.every((n) => Number.isInteger(n) && n >= 0)) throw bad(`has an invalid shape ${JSON.stringify(shape)}`);
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((n) => Number.isInteger(n) && n >= 0)) {
    throw bad(`has invalid data_offsets ${JSON.stringify(offsets)}`);
  }
  const elements = (shape as number[]).reduce((a, b) => a * b, 1);
  const [begin, end] = offsets as [number, number];
  if (end - begin !== elements * DTYPE_BYTES[dtype] || dataStart + end > size) {
    throw bad(`has data_offsets [${begin}, ${end}] that do not hold ${dtype} [${(shape as number[]).join(', ')}] inside the file (${size - dataStart} data bytes)`);
  }
  return { file, name, dtype, shape: shape as number[], begin: dataStart + begin, end: dataStart + end };
}

/** The tensor's values as float32 (F32 as stored; F16, BF16 and F64 converted). */
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
  return toFloat32(bytes, entry.dtype);
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
