// Kernel patches for tfjs-backend-wasm 4.22, registered when the wasm backend is selected.
import * as tf from '@tensorflow/tfjs';

/** Registers the missing and replaced wasm kernels (idempotent). */
export function patchWasmKernels(): void {
  registerWasmUnsortedSegmentSum();
  registerWasmHeapKernels();
}

let segmentSumRegistered = false;

/**
 * The wasm backend has no UnsortedSegmentSum kernel, which tf.gather's gradient (the embedding
 * backward pass) needs (tensorflow/tfjs#8082). Written by hand because no package provides it:
 * a plain scatter-add over the heap views, registered once for 'wasm'.
 */
function registerWasmUnsortedSegmentSum(): void {
  if (segmentSumRegistered || tf.getKernel('UnsortedSegmentSum', 'wasm')) return;
  segmentSumRegistered = true;
  tf.registerKernel({
    kernelName: 'UnsortedSegmentSum',
    backendName: 'wasm',
    kernelFunc: ({ inputs, backend, attrs }) => {
      const { x, segmentIds } = inputs as { x: tf.TensorInfo; segmentIds: tf.TensorInfo };
      const numSegments = (attrs as { numSegments: number }).numSegments;
      // The wasm backend's public surface is untyped here; these three methods are what a JS kernel needs.
      const be = backend as unknown as {
        readSync(id: object): ArrayLike<number>;
        makeOutput(shape: number[], dtype: string): tf.TensorInfo;
        typedArrayFromHeap(t: tf.TensorInfo): Float32Array | Int32Array;
      };
      const values = be.readSync(x.dataId);
      const ids = be.readSync(segmentIds.dataId);
      const inner = x.shape.slice(1).reduce((a, b) => a * b, 1);
      const out = be.makeOutput([numSegments, ...x.shape.slice(1)], x.dtype);
      const outValues = be.typedArrayFromHeap(out);
      outValues.fill(0);
      for (let i = 0; i < ids.length; i++) {
        const s = ids[i];
        if (s < 0 || s >= numSegments) continue;
        const o = s * inner;
        const xi = i * inner;
        for (let j = 0; j < inner; j++) outValues[o + j] += values[xi + j];
      }
      return out;
    },
  });
}

// The wasm backend's public surface is untyped here; these are the methods the JS kernels below use.
interface WasmBackendView {
  makeOutput(shape: number[], dtype: string): tf.TensorInfo;
  typedArrayFromHeap(t: tf.TensorInfo): Float32Array | Int32Array | Uint8Array;
  incRef(dataId: object): void;
}

/**
 * One slice read straight from the wasm heap. tfjs-backend-wasm 4.22's Slice first copies its whole
 * input out of the heap (readSync), so taking one [1, m, k] piece of an [N, m, k] tensor costs
 * O(N·m·k) — 6 ms for a 256 KB piece of a 32 MB tensor — and SplitV, which slices once per piece,
 * is quadratic in the number of pieces. Here a contiguous slice is one copy of just the piece, and a
 * strided one copies its innermost runs; nothing else is read.
 */
function heapSlice(be: WasmBackendView, x: tf.TensorInfo, start: number[], extent: number[]): tf.TensorInfo {
  const out = be.makeOutput(extent, x.dtype);
  const size = tf.util.sizeFromShape(extent);
  if (size === 0) return out;
  const strides = tf.util.computeStrides(x.shape);
  // Views are taken after makeOutput, which may grow (and so move) the heap.
  const source = be.typedArrayFromHeap(x);
  const target = be.typedArrayFromHeap(out);
  if (tf.slice_util.isSliceContinous(x.shape, start, extent)) {
    const offset = tf.slice_util.computeFlatOffset(start, strides);
    target.set(source.subarray(offset, offset + size));
    return out;
  }
  // Strided: walk the outer index tuples like an odometer and copy each innermost run.
  const rank = x.shape.length;
  const run = extent[rank - 1];
  const index = new Array<number>(rank - 1).fill(0);
  for (let written = 0; written < size; written += run) {
    let offset = start[rank - 1];
    for (let d = 0; d < rank - 1; d++) offset += (start[d] + index[d]) * strides[d];
    target.set(source.subarray(offset, offset + run), written);
    for (let d = rank - 2; d >= 0 && ++index[d] === extent[d]; d--) index[d] = 0;
  }
  return out;
}

let heapKernelsRegistered = false;

/**
 * Replaces three tfjs-backend-wasm 4.22 kernels that copy more than they need to:
 *   Slice     reads its whole input (see heapSlice);
 *   SplitV    slices once per piece through that same Slice (concat's gradient is a SplitV, so the
 *             2-D split products of ops.batchMatMul paid for it in backward);
 *   Identity  copies its input, where the cpu backend (and wasm's own Reshape) share the buffer and
 *             count a reference; outputs are never written in place, so sharing is safe.
 * String tensors keep the original kernels.
 */
function registerWasmHeapKernels(): void {
  if (heapKernelsRegistered) return;
  heapKernelsRegistered = true;
  const replace = (
    kernelName: string,
    kernelFunc: (
      args: { inputs: tf.NamedTensorInfoMap; attrs?: tf.NamedAttrMap; backend: unknown },
      original: tf.KernelFunc,
    ) => tf.TensorInfo | tf.TensorInfo[],
  ) => {
    const original = tf.getKernel(kernelName, 'wasm');
    if (!original) return;
    tf.unregisterKernel(kernelName, 'wasm');
    tf.registerKernel({
      kernelName,
      backendName: 'wasm',
      kernelFunc: (args) => {
        const x = args.inputs.x as tf.TensorInfo;
        return x.dtype === 'string' ? original.kernelFunc(args) : kernelFunc(args, original.kernelFunc);
      },
    });
  };
  replace('Slice', ({ inputs, attrs, backend }) => {
    const x = inputs.x as tf.TensorInfo;
    const { begin, size } = attrs as unknown as { begin: number | number[]; size: number | number[] };
    const [start, extent] = tf.slice_util.parseSliceParams(x as tf.Tensor, begin, size);
    return heapSlice(backend as WasmBackendView, x, start, extent);
  });
  replace('SplitV', ({ inputs, attrs, backend }) => {
    const x = inputs.x as tf.TensorInfo;
    const { numOrSizeSplits, axis } = attrs as unknown as { numOrSizeSplits: number | number[]; axis: number };
    const dim = tf.util.parseAxisParam(axis, x.shape)[0];
    const sizes = tf.backend_util.prepareSplitSize(x as tf.Tensor, numOrSizeSplits, dim);
    const start = new Array<number>(x.shape.length).fill(0);
    return sizes.map((s) => {
      const extent = [...x.shape];
      extent[dim] = s;
      const piece = heapSlice(backend as WasmBackendView, x, [...start], extent);
      start[dim] += s;
      return piece;
    });
  });
  replace('Identity', ({ inputs, backend }) => {
    const x = inputs.x as tf.TensorInfo;
    (backend as WasmBackendView).incRef(x.dataId);
    return { dataId: x.dataId, shape: x.shape, dtype: x.dtype };
  });
}
