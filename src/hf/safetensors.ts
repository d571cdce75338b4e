// The safetensors file format (https://huggingface.co/docs/safetensors), the one codec of the project:
//
//   8 bytes   little-endian unsigned 64-bit length N of the header (at most 100 MB, the format's limit)
//   N bytes   UTF-8 JSON {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {string: string}}, padded with spaces to a multiple of 8 bytes
//   rest      the tensors' raw little-endian bytes; data_offsets are relative to the start of this part
//
// Two ways in, one header check: this project's own files (model folders, checkpoints: float32 only) are encoded and
// decoded whole in memory; Hugging Face checkpoints, which can be several GB and also carry tensors this project
// skips (int64 position ids, causal-mask buffers) and half-precision weights, are read from the file tensor by tensor
// (readSafetensorsHeader, then readTensor for the ranges wanted). Either way the header is untrusted: it must be a
// JSON object of entries {dtype, shape: [non-negative integers], data_offsets: [begin, end]} that tile the data part
// exactly (no gap, no overlap, as the format requires), metadata a map of strings, and every value read finite (a NaN
// or ±Inf weight is refused, naming the tensor). Nothing is allocated from what the header says before it is checked
// against the file's size. Errors name the file and the tensor.
//
// Written by hand: the format is a few lines, and npm has no maintained Node implementation (the `safetensors`
// package is a 0.0.1 placeholder; Hugging Face publishes no JS package for it).
import { closeSync, fstatSync, openSync, readSync } from 'node:fs';
import { open, readFile } from 'node:fs/promises';
import { showValue } from '../core/bounds.ts';
import { isRecord } from '../core/json.ts';

export interface NamedArray {
  shape: number[];
  data: Float32Array;
}

/** Bytes per element of the safetensors dtypes. */
const DTYPE_BYTES: Record<string, number> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  I32: 4,
  I16: 2,
  I8: 1,
  U64: 8,
  U32: 4,
  U16: 2,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
};
/** dtypes read as weights (converted to float32). */
export const FLOAT_DTYPES = ['F32', 'F16', 'BF16', 'F64'] as const;
/** This project writes float32 only, and reads its own files as such. */
const OWN_DTYPES = ['F32'] as const;
/** The safetensors format's own limit on the header (100 MB). */
const MAX_HEADER_BYTES = 100_000_000;
const HEADER_ALIGN = 8;

type Fail = (problem: string) => never;
const failer =
  (source: string): Fail =>
  (problem) => {
    throw new Error(`${source}: ${problem}`);
  };

/** Serialises float32 tensors (in the given order) and string metadata into one safetensors buffer. */
export function encodeSafetensors(tensors: Map<string, NamedArray>, metadata: Record<string, string> = {}): Buffer {
  const header: Record<string, unknown> = {};
  if (Object.keys(metadata).length > 0) header.__metadata__ = metadata;
  let offset = 0;
  for (const [name, { shape, data }] of tensors) {
    if (name === '__metadata__') throw new Error(`safetensors: '__metadata__' is reserved and cannot name a tensor`);
    const elements = shape.reduce((a, b) => a * b, 1);
    if (elements !== data.length) {
      throw new Error(`safetensors: tensor '${name}' has shape [${shape.join(', ')}] but ${data.length} values`);
    }
    header[name] = { dtype: 'F32', shape, data_offsets: [offset, offset + data.byteLength] };
    offset += data.byteLength;
  }
  let json = JSON.stringify(header);
  const unpadded = Buffer.byteLength(json, 'utf8');
  json += ' '.repeat((HEADER_ALIGN - (unpadded % HEADER_ALIGN)) % HEADER_ALIGN);
  const headerBytes = Buffer.from(json, 'utf8');
  const out = Buffer.alloc(8 + headerBytes.length + offset);
  out.writeBigUInt64LE(BigInt(headerBytes.length), 0);
  headerBytes.copy(out, 8);
  let at = 8 + headerBytes.length;
  for (const { data } of tensors.values()) {
    // Float32Array is in host byte order; every platform Node runs on here is little-endian.
    Buffer.from(data.buffer, data.byteOffset, data.byteLength).copy(out, at);
    at += data.byteLength;
  }
  return out;
}

/**
 * Parses a safetensors buffer of this project's (F32 tensors, read whole); `source` names the file in every error.
 * See the top of this file for what is checked.
 */
export function decodeSafetensors(bytes: Uint8Array, source = 'safetensors buffer'): { tensors: Map<string, NamedArray>; metadata: Record<string, string> } {
  const fail = failer(source);
  const headerLength = checkHeaderLength(bytes.subarray(0, 8), bytes.length, fail);
  const dataStart = 8 + headerLength;
  const { spans, metadata } = parseHeader(bytes.subarray(8, dataStart), bytes.length - dataStart, OWN_DTYPES, fail);
  const tensors = new Map<string, NamedArray>();
  for (const { name, begin, end, shape } of spans) {
    const data = toFloat32(Buffer.from(bytes.buffer, bytes.byteOffset + dataStart + begin, end - begin), 'F32');
    tensors.set(name, { shape, data: checkFinite(data, name, fail) });
  }
  return { tensors, metadata };
}

export async function readSafetensors(path: string): Promise<{ tensors: Map<string, NamedArray>; metadata: Record<string, string> }> {
  return decodeSafetensors(await readFile(path), path);
}

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
 * The tensors a safetensors file describes, any dtype (header only; synchronous, so that recipes can check a
 * Hugging Face folder while they are validated).
 */
export function readSafetensorsHeader(file: string): { entries: Map<string, TensorEntry>; metadata: Record<string, string> } {
  const fail = failer(file);
  const fd = openSync(file, 'r');
  try {
    const { size } = fstatSync(fd);
    const prefix = Buffer.alloc(Math.min(8, size));
    readSync(fd, prefix, 0, prefix.length, 0);
    const headerLength = checkHeaderLength(prefix, size, fail);
    const headerBytes = Buffer.alloc(headerLength);
    readSync(fd, headerBytes, 0, headerLength, 8);
    const dataStart = 8 + headerLength;
    const { spans, metadata } = parseHeader(headerBytes, size - dataStart, Object.keys(DTYPE_BYTES), fail);
    const entries = new Map(spans.map((s): [string, TensorEntry] => [s.name, { file, ...s, begin: dataStart + s.begin, end: dataStart + s.end }]));
    return { entries, metadata };
  } finally {
    closeSync(fd);
  }
}

/** The tensor's values as float32 (F32 as stored; F16, BF16 and F64 converted); a NaN or infinite value is refused. */
export async function readTensor(entry: TensorEntry): Promise<Float32Array> {
  const fail = failer(entry.file);
  if (!(FLOAT_DTYPES as readonly string[]).includes(entry.dtype))
    fail(`tensor '${entry.name}' has dtype ${entry.dtype}; weights must be ${FLOAT_DTYPES.join(', ')}`);
  const bytes = Buffer.alloc(entry.end - entry.begin);
  const handle = await open(entry.file, 'r');
  try {
    await handle.read(bytes, 0, bytes.length, entry.begin);
  } finally {
    await handle.close();
  }
  return checkFinite(toFloat32(bytes, entry.dtype), entry.name, fail);
}

/** Little-endian raw values → float32 (hosts Node runs on here are little-endian, as the format). */
export function toFloat32(bytes: Buffer, dtype: string): Float32Array {
  const n = bytes.length / DTYPE_BYTES[dtype];
  const out = new Float32Array(n);
  // F32 is copied: the file's data part need not be 4-byte aligned in memory.
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

function checkFinite(values: Float32Array, name: string, fail: Fail): Float32Array {
  const bad = values.findIndex((x) => !Number.isFinite(x));
  if (bad >= 0) fail(`tensor '${name}' holds a non-finite value (${values[bad]} at index ${bad}); refusing to load it`);
  return values;
}

/** The header length the first 8 bytes declare, checked against the file's `size` and the format's limit. */
function checkHeaderLength(prefix: Uint8Array, size: number, fail: Fail): number {
  if (size < 8) fail(`too short for a safetensors header (${size} bytes)`);
  const declared = new DataView(prefix.buffer, prefix.byteOffset, 8).getBigUint64(0, true);
  if (declared > BigInt(size - 8)) fail(`the header length ${declared} runs past the end of the file (${size} bytes)`);
  if (declared > BigInt(MAX_HEADER_BYTES)) fail(`the header length ${declared} is over the format's limit of ${MAX_HEADER_BYTES} bytes`);
  return Number(declared);
}

interface Span {
  name: string;
  dtype: string;
  shape: number[];
  /** Byte range in the data part. */
  begin: number;
  end: number;
}

/** The header's entries in their order, each checked (dtype one of `dtypes`) and together tiling the `dataLength` bytes of data. */
function parseHeader(headerBytes: Uint8Array, dataLength: number, dtypes: readonly string[], fail: Fail): { spans: Span[]; metadata: Record<string, string> } {
  let header: unknown;
  try {
    header = JSON.parse(Buffer.from(headerBytes.buffer, headerBytes.byteOffset, headerBytes.byteLength).toString('utf8'));
  } catch (err) {
    fail(`header is not valid JSON (${(err as Error).message})`);
  }
  if (!isRecord(header)) fail(`header must be a JSON object of tensor entries (got ${showValue(header)})`);
  const { __metadata__: metadata = {}, ...entries } = header as Record<string, unknown>;
  if (!isRecord(metadata) || Object.values(metadata).some((v) => typeof v !== 'string')) {
    fail(`__metadata__ must be a map of strings (got ${showValue(metadata)})`);
  }
  // A whole header whose tensors end past the data present: the file was cut short (a copy or a write that stopped).
  let last: [string, number] = ['', 0];
  for (const [name, entry] of Object.entries(entries)) {
    const end = isRecord(entry) && Array.isArray(entry.data_offsets) ? entry.data_offsets[1] : 0;
    if (Number.isSafeInteger(end) && end > last[1]) last = [name, end];
  }
  if (last[1] > dataLength) fail(`cut short: tensor '${last[0]}' ends at byte ${last[1]} of the data part, but the file holds ${dataLength} bytes of it`);
  const spans = Object.entries(entries).map(([name, entry]) => checkEntry(name, entry, dataLength, dtypes, fail));
  // The format requires the entries to cover the data part exactly, in some order.
  let covered = 0;
  for (const span of [...spans].sort((a, b) => a.begin - b.begin)) {
    if (span.begin !== covered) fail(`tensor '${span.name}' starts at byte ${span.begin} of the data but the previous one ends at ${covered} (gap or overlap)`);
    covered = span.end;
  }
  if (covered !== dataLength) fail(`the tensors cover ${covered} of the ${dataLength} data bytes`);
  return { spans, metadata: metadata as Record<string, string> };
}

/** One header entry, checked: a dtype of `dtypes`, a shape of non-negative integers, offsets inside the data whose length fits the shape. */
function checkEntry(name: string, entry: unknown, dataLength: number, dtypes: readonly string[], fail: Fail): Span {
  const what = `tensor '${name}'`;
  if (!isRecord(entry)) return fail(`${what}: entry must be an object {dtype, shape, data_offsets} (got ${showValue(entry)})`);
  const { dtype, shape, data_offsets: offsets } = entry;
  if (typeof dtype !== 'string' || !dtypes.includes(dtype)) {
    fail(`${what} has dtype ${typeof dtype === 'string' ? dtype : showValue(dtype)}; only ${dtypes.join(', ')} ${dtypes.length > 1 ? 'are' : 'is'} supported`);
  }
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    fail(`${what}: shape must be a list of non-negative integers (got ${showValue(shape)})`);
  }
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
    fail(`${what}: data_offsets must be [begin, end] byte offsets (got ${showValue(offsets)})`);
  }
  const [begin, end] = offsets as [number, number];
  // Multiplied step by step, capped, so that a huge shape cannot overflow before it is compared with the data.
  let bytes = DTYPE_BYTES[dtype as string];
  for (const d of shape as number[]) bytes = Math.min(bytes * d, dataLength + 1);
  if (!(begin <= end && end <= dataLength && end - begin === bytes)) {
    fail(`${what} has data_offsets [${begin}, ${end}] that do not fit shape [${(shape as number[]).join(', ')}] of ${dtype} in ${dataLength} data bytes`);
  }
  return { name, dtype: dtype as string, shape: shape as number[], begin, end };
}
