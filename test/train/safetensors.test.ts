import { describe, expect, it } from 'vitest';
import { decodeSafetensors, encodeSafetensors } from '../../src/train/safetensors.ts';
import type { NamedArray } from '../../src/train/safetensors.ts';

describe('safetensors', () => {
  const tensors = new Map<string, NamedArray>([
    ['embed.tokens.weight', { shape: [3, 2], data: Float32Array.from([1, -2, 3.5, 4, 5, 6e-8]) }],
    ['norm.bias', { shape: [5], data: Float32Array.from([0.25, 0, -1, 2, 1e30]) }],
    ['scalar', { shape: [], data: Float32Array.from([7]) }],
  ]);

  it('writes the layout of the spec: u64 LE header length, JSON header padded to 8, raw LE data', () => {
    const bytes = encodeSafetensors(tensors, { format: 'test' });
    const headerLength = Number(bytes.readBigUInt64LE(0));
    expect(headerLength % 8).toBe(0);
    const header = JSON.parse(bytes.subarray(8, 8 + headerLength).toString('utf8'));
    expect(header.__metadata__).toEqual({ format: 'test' });
    expect(header['embed.tokens.weight']).toEqual({ dtype: 'F32', shape: [3, 2], data_offsets: [0, 24] });
    expect(header['norm.bias']).toEqual({ dtype: 'F32', shape: [5], data_offsets: [24, 44] });
    expect(header.scalar).toEqual({ dtype: 'F32', shape: [], data_offsets: [44, 48] });
    expect(bytes.length).toBe(8 + headerLength + 48);
    // The data part is little-endian float32, read independently with DataView.
    const dataStart = 8 + headerLength;
    expect(bytes.readFloatLE(dataStart + 8)).toBe(3.5);
    expect(bytes.readFloatLE(dataStart + 24)).toBe(0.25);
    expect(bytes.readFloatLE(dataStart + 44)).toBe(7);
  });

  it('round-trips names, shapes, values and metadata', () => {
    const { tensors: back, metadata } = decodeSafetensors(encodeSafetensors(tensors, { a: 'b' }));
    expect(metadata).toEqual({ a: 'b' });
    expect([...back.keys()]).toEqual([...tensors.keys()]);
    for (const [name, t] of tensors) {
      expect(back.get(name)!.shape).toEqual(t.shape);
      expect(Array.from(back.get(name)!.data)).toEqual(Array.from(t.data));
    }
  });

  it('rejects wrong sizes, unsupported dtypes and truncated files with a clear error', () => {
    expect(() => encodeSafetensors(new Map([['x', { shape: [2, 2], data: new Float32Array(3) }]]))).toThrow(/'x' has shape \[2, 2\] but 3 values/);
    const good = encodeSafetensors(tensors);
    expect(() => decodeSafetensors(good.subarray(0, good.length - 4), 'm.safetensors')).toThrow(/m.safetensors: tensor 'scalar'/);
    const header = Buffer.from(JSON.stringify({ x: { dtype: 'F16', shape: [1], data_offsets: [0, 2] } }));
    const f16 = Buffer.concat([Buffer.alloc(8), header, Buffer.alloc(2)]);
    f16.writeBigUInt64LE(BigInt(header.length), 0);
    expect(() => decodeSafetensors(f16, 'h.safetensors')).toThrow(/dtype F16; only F32/);
  });
});
