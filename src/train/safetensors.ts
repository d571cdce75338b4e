// The safetensors file format (https://huggingface.co/docs/safetensors), float32 tensors only:
//
//   8 bytes   little-endian unsigned 64-bit length N of the header
//   N bytes   UTF-8 JSON {"<name>": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//             "__metadata__": {string: string}}, padded with spaces to a multiple of 8 bytes
//   rest      the tensors' raw little-endian bytes; data_offsets are relative to the start of this part
//
// Written by hand: the format is a few lines, and npm has no maintained Node writer (the `safetensors`
// package is a 0.0.1 placeholder; Hugging Face publishes no JS package for it).
import { readFile } from 'node:fs/promises';
import { showValue } from '../core/bounds.ts';

export interface NamedArray {
  shape: number[];
  data: Float32Array;
}

const HEADER_ALIGN = 8;

/** Serialises tensors (in the given order) and string metadata into one safetensors buffer. */
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

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * Parses a safetensors buffer (F32 tensors); `source` names the file in every error. The file is untrusted: the
 * header must be a JSON object of entries {dtype, shape: [non-negative integers], data_offsets: [begin, end]} that
 * tile the data part exactly (no gap, no overlap, as the format requires), metadata a map of strings, and every
 * value finite (a NaN or ±Inf weight is refused, naming the tensor). Nothing is allocated from what the header says
 * before it is checked against the file's size.
 */
export function decodeSafetensors(
  bytes: Uint8Array,
  source = 'safetensors buffer',
): { tensors: Map<string, NamedArray>; metadata: Record<string, string> } {
  const fail = (problem: string): never => {
    throw new Error(`${source}: ${problem}`);
  };
  if (bytes.length < 8) fail(`too short for a safetensors header (${bytes.length} bytes)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const declared = view.getBigUint64(0, true);
  if (declared > BigInt(bytes.length - 8)) fail(`header length ${declared} runs past the end of the file (${bytes.length} bytes)`);
  const headerLength = Number(declared);
  let header: unknown;
  try {
    header = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset + 8, headerLength).toString('utf8'));
  } catch (err) {
    fail(`header is not valid JSON (${(err as Error).message})`);
  }
  if (!isObject(header)) fail(`header must be a JSON object of tensor entries (got ${showValue(header)})`);
  const entries = header as Record<string, unknown>;
  const metadata = entries.__metadata__ ?? {};
  if (!isObject(metadata) || Object.values(metadata).some((v) => typeof v !== 'string')) {
    fail(`__metadata__ must be a map of strings (got ${showValue(metadata)})`);
  }
  const dataStart = 8 + headerLength;
  const dataLength = bytes.length - dataStart;
  const spans = Object.entries(entries)
    .filter(([name]) => name !== '__metadata__')
    .map(([name, entry], order) => ({ name, order, ...checkEntry(name, entry, dataLength, fail) }));
  // The format requires the entries to cover the data part exactly, in some order.
  spans.sort((a, b) => a.begin - b.begin);
  let covered = 0;
  for (const span of spans) {
    if (span.begin !== covered) fail(`tensor '${span.name}' starts at byte ${span.begin} of the data but the previous one ends at ${covered} (gap or overlap)`);
    covered = span.end;
  }
  if (covered !== dataLength) fail(`the tensors cover ${covered} of the ${dataLength} data bytes`);
  const tensors = new Map<string, NamedArray>();
  for (const { name, begin, end, shape } of [...spans].sort((a, b) => a.order - b.order)) {
    // Copy: the file's data part need not be 4-byte aligned in memory.
    const data = new Float32Array((end - begin) / 4);
    new Uint8Array(data.buffer).set(bytes.subarray(dataStart + begin, dataStart + end));
    const bad = data.findIndex((x) => !Number.isFinite(x));
    if (bad >= 0) fail(`tensor '${name}' holds a non-finite value (${data[bad]} at index ${bad}); refusing to load it`);
    tensors.set(name, { shape, data });
  }
  return { tensors, metadata: metadata as Record<string, string> };
}

/** One header entry, checked: F32, a shape of non-negative integers, offsets inside the data whose length fits the shape. */
function checkEntry(name: string, entry: unknown, dataLength: number, fail: (problem: string) => never): { begin: number; end: number; shape: number[] } {
  const what = `tensor '${name}'`;
  if (!isObject(entry)) return fail(`${what}: entry must be an object {dtype, shape, data_offsets} (got ${showValue(entry)})`);
  const { dtype, shape, data_offsets: offsets } = entry;
  if (dtype !== 'F32') fail(`${what} has dtype ${typeof dtype === 'string' ? dtype : showValue(dtype)}; only F32 is supported`);
  if (!Array.isArray(shape) || !shape.every((d) => Number.isSafeInteger(d) && d >= 0)) {
    fail(`${what}: shape must be a list of non-negative integers (got ${showValue(shape)})`);
  }
  if (!Array.isArray(offsets) || offsets.length !== 2 || !offsets.every((o) => Number.isSafeInteger(o) && o >= 0)) {
    fail(`${what}: data_offsets must be [begin, end] byte offsets (got ${showValue(offsets)})`);
  }
  const [begin, end] = offsets as [number, number];
  // Multiplied step by step so that a huge shape cannot overflow before it is compared with the data.
  let bytes = 4;
  for (const d of shape as number[]) bytes = Math.min(bytes * d, dataLength + 1);
  if (!(begin <= end && end <= dataLength && end - begin === bytes)) {
    fail(`${what} has data_offsets [${begin}, ${end}] that do not fit shape [${(shape as number[]).join(', ')}] in ${dataLength} data bytes`);
  }
  return { begin, end, shape: shape as number[] };
}

export async function readSafetensors(path: string): Promise<{ tensors: Map<string, NamedArray>; metadata: Record<string, string> }> {
  return decodeSafetensors(await readFile(path), path);
}
