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

/** Parses a safetensors buffer (F32 tensors); `source` names the file in errors. */
export function decodeSafetensors(
  bytes: Uint8Array,
  source = 'safetensors buffer',
): { tensors: Map<string, NamedArray>; metadata: Record<string, string> } {
  if (bytes.length < 8) throw new Error(`${source}: too short for a safetensors header (${bytes.length} bytes)`);
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const headerLength = Number(view.getBigUint64(0, true));
  if (8 + headerLength > bytes.length) {
    throw new Error(`${source}: header length ${headerLength} runs past the end of the file (${bytes.length} bytes)`);
  }
  let header: Record<string, unknown>;
  try {
    header = JSON.parse(Buffer.from(bytes.buffer, bytes.byteOffset + 8, headerLength).toString('utf8'));
  } catch (err) {
    throw new Error(`${source}: header is not valid JSON (${(err as Error).message})`);
  }
  const dataStart = 8 + headerLength;
  const dataLength = bytes.length - dataStart;
  const tensors = new Map<string, NamedArray>();
  const metadata = (header.__metadata__ ?? {}) as Record<string, string>;
  for (const [name, entry] of Object.entries(header)) {
    if (name === '__metadata__') continue;
    const { dtype, shape, data_offsets: offsets } = entry as { dtype: string; shape: number[]; data_offsets: [number, number] };
    if (dtype !== 'F32') throw new Error(`${source}: tensor '${name}' has dtype ${dtype}; only F32 is supported`);
    const [begin, end] = offsets;
    const elements = shape.reduce((a, b) => a * b, 1);
    if (!(begin >= 0 && end <= dataLength && end - begin === elements * 4)) {
      throw new Error(`${source}: tensor '${name}' has data_offsets [${begin}, ${end}] that do not fit shape [${shape.join(', ')}] in ${dataLength} data bytes`);
    }
    // Copy: the file's data part need not be 4-byte aligned in memory.
    const data = new Float32Array(elements);
    new Uint8Array(data.buffer).set(bytes.subarray(dataStart + begin, dataStart + end));
    tensors.set(name, { shape, data });
  }
  return { tensors, metadata };
}

export async function readSafetensors(path: string): Promise<{ tensors: Map<string, NamedArray>; metadata: Record<string, string> }> {
  return decodeSafetensors(await readFile(path), path);
}
