// Memory-bounded linear attention: the sequence runs in segments of S positions, each starting from
// the carry (running sums) of the ones before it, so the per-position features — SLAY's R·P·M per
// head, the largest tensors of the layer — exist for one segment at a time. Under autodiff a custom
// gradient saves only the inputs and the carry entering each segment, and its backward pass
// recomputes one segment at a time and differentiates it (gradient checkpointing, as
// flash-linear-attention's chunk kernels keep chunk states and recompute the rest): the memory of
// a layer's forward + backward grows with L only through its inputs and outputs, at the price of one
// more forward pass of the attention.
import * as tf from '@tensorflow/tfjs';
import { vjp } from '../ops.ts';
import type { Carry } from './chunked.ts';

/** The contraction of the positions start … start+S−1, from q, k, v sliced to them ([B, H, S, ·]). */
export interface SegmentFunctions {
  /** Causal, from the carry of earlier positions (null = none); with wantCarry also the carry after them. */
  causal(q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D, carry: Carry | null, start: number, wantCarry: boolean): { out: tf.Tensor4D; carry?: Carry };
  /** Bidirectional, pass 1: the carry plus these keys. */
  accumulate(k: tf.Tensor4D, v: tf.Tensor4D, carry: Carry | null, start: number): Carry;
  /** Bidirectional, pass 2: these queries against the sums of every key. */
  read(q: tf.Tensor4D, carry: Carry, start: number): tf.Tensor4D;
}

const positions = (x: tf.Tensor, start: number, length: number) => {
  const [b, h, l, d] = x.shape as number[];
  return (length === l ? x : tf.slice(x, [0, 0, start, 0], [b, h, length, d])) as tf.Tensor4D;
};

/** tf.tidy for results that hold tensors in plain objects (tidy keeps every tensor it finds in the result). */
const tidy = <T>(fn: () => T): T => tf.tidy(fn as unknown as () => tf.TensorContainer) as unknown as T;

/** [start, length] of each segment of a sequence of l positions. */
function segments(l: number, segment: number): Array<[number, number]> {
  return Array.from({ length: Math.ceil(l / segment) }, (_, i) => [i * segment, Math.min(segment, l - i * segment)]);
}

/** Concatenates along the position axis and frees the pieces (they would otherwise live as long as the caller's scope). */
function joinPositions(pieces: tf.Tensor[]): tf.Tensor4D {
  if (pieces.length === 1) return pieces[0] as tf.Tensor4D;
  const joined = tf.concat(pieces, 2) as tf.Tensor4D;
  tf.dispose(pieces);
  return joined;
}

const carryTensors = (carry: Carry) => (carry.shift ? [carry.sums, carry.shift] : [carry.sums]);

/**
 * Causal, segment after segment from `carry` (positions from `start`), with no gradient bookkeeping:
 * decoding several positions, and the forward pass of causalRecomputed. Returns the outputs, the
 * carry after the last position (when wantCarry) and the carry entering each segment.
 */
export function causalSegments(
  fns: SegmentFunctions,
  [q, k, v]: tf.Tensor4D[],
  carry: Carry | null,
  start: number,
  segment: number,
  wantCarry: boolean,
): { out: tf.Tensor4D; carry?: Carry; entering: Array<Carry | null> } {
  const parts = segments(q.shape[2], segment);
  const outs: tf.Tensor[] = [];
  const entering: Array<Carry | null> = [];
  let current = carry;
  parts.forEach(([offset, length], i) => {
    entering.push(current);
    const wantNext = wantCarry || i < parts.length - 1;
    const result = tidy(() =>
      fns.causal(positions(q, offset, length), positions(k, offset, length), positions(v, offset, length), current, start + offset, wantNext),
    );
    outs.push(result.out);
    current = result.carry ?? null;
  });
  return { out: joinPositions(outs), carry: current ?? undefined, entering };
}

/** Causal attention (q, k, v [B, H, L, ·] → [B, H, L, D]) in segments, with the recomputing gradient. */
export function causalRecomputed(fns: SegmentFunctions, segment: number): (q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D) => tf.Tensor4D {
  return tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const [q, k, v, save] = args as [tf.Tensor4D, tf.Tensor4D, tf.Tensor4D, tf.GradSaveFunc];
    const { out, entering } = causalSegments(fns, [q, k, v], null, 0, segment, false);
    const shifted = entering.length > 1 && entering[1]!.shift !== undefined;
    save([q, k, v, ...entering.slice(1).flatMap((c) => carryTensors(c!))]);
    return {
      value: out,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sq, sk, sv, ...flat] = saved as tf.Tensor4D[];
        const width = shifted ? 2 : 1;
        const carries: Array<Carry | null> = [
          null,
          ...Array.from({ length: flat.length / width }, (_, i) => ({ sums: flat[i * width], shift: shifted ? flat[i * width + 1] : undefined })),
        ];
        const grads: tf.Tensor[][] = [[], [], []];
        let dCarry: tf.Tensor | null = null; // ∂loss/∂(carry leaving this segment), from the segments after it
        const parts = segments(sq.shape[2], segment);
        for (let i = parts.length - 1; i >= 0; i--) {
          const [offset, length] = parts[i];
          const carry = carries[i];
          const outgoing: tf.Tensor | null = dCarry;
          const segmentGrads: tf.Tensor[] = tf.tidy(() => {
            const inputs = [sq, sk, sv].map((x) => positions(x, offset, length));
            const dyHere = positions(dy, offset, length);
            return vjp(
              (qs, ks, vs, sums) => {
                const result = fns.causal(
                  qs as tf.Tensor4D,
                  ks as tf.Tensor4D,
                  vs as tf.Tensor4D,
                  carry && { sums: sums as tf.Tensor4D, shift: carry.shift },
                  offset,
                  outgoing !== null,
                );
                const loss = tf.sum(tf.mul(result.out, dyHere));
                return (outgoing ? tf.add(loss, tf.sum(tf.mul(result.carry!.sums, outgoing))) : loss) as tf.Scalar;
              },
              carry ? [...inputs, carry.sums] : inputs,
            );
          });
          outgoing?.dispose();
          segmentGrads.slice(0, 3).forEach((g, n) => grads[n].unshift(g));
          dCarry = segmentGrads[3] ?? null;
        }
        return grads.map(joinPositions);
      },
    };
  }) as (q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D) => tf.Tensor4D;
}

/** Bidirectional attention in segments (two passes: keys, then queries), with the recomputing gradient. */
export function bidirectionalRecomputed(fns: SegmentFunctions, segment: number): (q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D) => tf.Tensor4D {
  return tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const [q, k, v, save] = args as [tf.Tensor4D, tf.Tensor4D, tf.Tensor4D, tf.GradSaveFunc];
    const parts = segments(q.shape[2], segment);
    let carry: Carry | null = null;
    for (const [offset, length] of parts) {
      const previous: Carry | null = carry;
      carry = tidy(() => fns.accumulate(positions(k, offset, length), positions(v, offset, length), previous, offset));
      if (previous) tf.dispose(carryTensors(previous));
    }
    const all = carry!;
    const out = joinPositions(parts.map(([offset, length]) => tf.tidy(() => fns.read(positions(q, offset, length), all, offset))));
    save([q, k, v, ...carryTensors(all)]);
    return {
      value: out,
      gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => {
        const [sq, sk, sv, sums, shift] = saved as tf.Tensor4D[];
        // Queries first: their gradients and ∂loss/∂sums; then each segment's keys and values through the sums.
        let dSums: tf.Tensor = tf.zerosLike(sums);
        const dq = parts.map(([offset, length]) => {
          const [g, gSums] = tf.tidy(() => {
            const dyHere = positions(dy, offset, length);
            return vjp(
              (qs, s) => tf.sum(tf.mul(fns.read(qs as tf.Tensor4D, { sums: s as tf.Tensor4D, shift }, offset), dyHere)) as tf.Scalar,
              [positions(sq, offset, length), sums],
            );
          });
          const total = tf.add(dSums, gSums);
          tf.dispose([dSums, gSums]);
          dSums = total;
          return g;
        });
        // Each segment's share of the sums, on the final scale (an empty carry at the final shift).
        const atFinalScale = () => (shift ? { sums: tf.zerosLike(sums), shift } : null);
        const dkv = parts.map(([offset, length]) =>
          tf.tidy(() =>
            vjp(
              (ks, vs) => tf.sum(tf.mul(fns.accumulate(ks as tf.Tensor4D, vs as tf.Tensor4D, atFinalScale(), offset).sums, dSums)) as tf.Scalar,
              [positions(sk, offset, length), positions(sv, offset, length)],
            ),
          ),
        );
        dSums.dispose();
        return [joinPositions(dq), joinPositions(dkv.map((g) => g[0])), joinPositions(dkv.map((g) => g[1]))];
      },
    };
  }) as (q: tf.Tensor4D, k: tf.Tensor4D, v: tf.Tensor4D) => tf.Tensor4D;
}
