import { describe, expect, it } from 'vitest';
import { decodeSafetensors, encodeSafetensors } from '../../src/hf/safetensors.ts';
import type { NamedArray } from '../../src/hf/safetensors.ts';

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
    // A file cut short says so, with how much of its data is missing.
    const dataBytes = good.length - 8 - Number(good.readBigUInt64LE(0));
    expect(() => decodeSafetensors(good.subarray(0, good.length - 4), 'm.safetensors')).toThrow(
      `m.safetensors: cut short: tensor '${[...tensors.keys()].at(-1)}' ends at byte ${dataBytes} of the data part, but the file holds ${dataBytes - 4} bytes of it`,
    );
    const header = Buffer.from(JSON.stringify({ x: { dtype: 'F16', shape: [1], data_offsets: [0, 2] } }));
    const f16 = Buffer.concat([Buffer.alloc(8), header, Buffer.alloc(2)]);
    f16.writeBigUInt64LE(BigInt(header.length), 0);
    expect(() => decodeSafetensors(f16, 'h.safetensors')).toThrow(/dtype F16; only F32/);
  });

  describe('untrusted headers: a clear error naming the file, fast and without allocating from the header', () => {
    /** A file with the given header (any JSON value or raw text), its declared length and data part. */
    const craft = (header: unknown, data = Buffer.alloc(0), declared?: bigint) => {
      const text = Buffer.from(typeof header === 'string' ? header : JSON.stringify(header));
      const out = Buffer.concat([Buffer.alloc(8), text, data]);
      out.writeBigUInt64LE(declared ?? BigInt(text.length), 0);
      return out;
    };
    const f32 = (...values: number[]) => Buffer.from(Float32Array.from(values).buffer);
    const entry = (over: Record<string, unknown> = {}) => ({ dtype: 'F32', shape: [2], data_offsets: [0, 8], ...over });
    const cases: [string, Buffer, RegExp][] = [
      ['null header', craft(null), /header must be a JSON object of tensor entries \(got null\)/],
      ['list header', craft([1, 2]), /header must be a JSON object/],
      ['null entry', craft({ w: null }, f32(1, 2)), /tensor 'w': entry must be an object \{dtype, shape, data_offsets\} \(got null\)/],
      ['shape not a list', craft({ w: entry({ shape: '2' }) }, f32(1, 2)), /tensor 'w': shape must be a list of non-negative integers \(got "2"\)/],
      ['shape with a fraction', craft({ w: entry({ shape: [0.5, 4] }) }, f32(1, 2)), /tensor 'w': shape must be a list of non-negative integers/],
      [
        'missing offsets',
        craft({ w: entry({ data_offsets: undefined }) }, f32(1, 2)),
        /tensor 'w': data_offsets must be \[begin, end\] byte offsets \(got undefined\)/,
      ],
      ['null offsets', craft({ w: entry({ data_offsets: null }) }, f32(1, 2)), /tensor 'w': data_offsets must be/],
      ['reversed offsets', craft({ w: entry({ data_offsets: [8, 0] }) }, f32(1, 2)), /tensor 'w' has data_offsets \[8, 0\] that do not fit/],
      [
        'huge shape, small data',
        craft({ w: entry({ shape: [65536, 65536, 65536, 512] }) }, f32(1, 2)),
        /tensor 'w' has data_offsets \[0, 8\] that do not fit shape \[65536, 65536, 65536, 512\]/,
      ],
      ['null dtype', craft({ w: entry({ dtype: null }) }, f32(1, 2)), /tensor 'w' has dtype null; only F32/],
      ['metadata not strings', craft({ __metadata__: { step: 3 } }), /__metadata__ must be a map of strings/],
      ['header length of 2^63', craft({}, Buffer.alloc(0), 2n ** 63n), /the header length 9223372036854775808 runs past the end of the file/],
      [
        'overlapping tensors',
        craft({ a: entry(), b: entry() }, f32(1, 2)),
        /tensor '(a|b)' starts at byte 0 of the data but the previous one ends at 8 \(gap or overlap\)/,
      ],
      ['bytes no tensor covers', craft({ a: entry() }, f32(1, 2, 3)), /the tensors cover 8 of the 12 data bytes/],
      ['NaN weight', craft({ w: entry() }, f32(1, NaN)), /tensor 'w' holds a non-finite value \(NaN at index 1\)/],
      ['infinite weight', craft({ w: entry() }, f32(-Infinity, 2)), /tensor 'w' holds a non-finite value \(-Infinity at index 0\)/],
    ];
    for (const [what, bytes, message] of cases) {
      it(what, () => {
        const before = process.memoryUsage();
        const t0 = performance.now();
        expect(() => decodeSafetensors(bytes, '/x/crafted.safetensors')).toThrow(new RegExp(`^/x/crafted\\.safetensors: ${message.source}`));
        const ms = performance.now() - t0;
        const after = process.memoryUsage();
        expect(ms).toBeLessThan(250);
        expect(after.arrayBuffers - before.arrayBuffers).toBeLessThan(1 << 20);
        expect(after.heapUsed - before.heapUsed).toBeLessThan(16 << 20);
      });
    }
  });
});
