// The tied LM head and its cross-entropy as one function with one hand-written gradient, for training
// (issue 35; docs/benchmarks.md, "Fewer ops"). Composed, the head's backward runs a chain of
// element-wise ops over the [N, V] logits (max, exp, sum, scale, the target correction) before its two
// products; here the forward keeps the probabilities P = softmax(h·Eᵀ + b) from TensorFlow's one
// Softmax op, and the backward is the two products plus corrections on [N, d]:
//   with s = weight·dy per row,  ∂/∂h = s ⊙ (P·E − E[target]),
//   ∂/∂E = Pᵀ·(s ⊙ h) − Σ_{rows with target v} (s ⊙ h)  (a segment sum),  ∂/∂b = sᵀ·P − Σ_{target v} s.
// No [N, V] tensor is made in the backward but the products' own operand P.
import * as tf from '@tensorflow/tfjs';
import { matMulTransposeB, weightGradient } from './ops.ts';

/**
 * The smallest normal float32. −log p is taken of max(p, FLT_MIN): where a target's probability
 * underflows to 0 (a logit gap above ~87) the composed form's log-sum-exp stays finite, and so must
 * this one, or the non-finite rule would drop a step the reference takes. The loss of such a row is
 * then capped at −log(FLT_MIN) ≈ 87.3 nats; its gradient is exact.
 */
const FLT_MIN = 1.1754943508222875e-38;

/** The loss and what the backward keeps: the probabilities, and the inputs it multiplies them with. */
function forward(
  h: tf.Tensor2D,
  embedding: tf.Tensor2D,
  targets: tf.Tensor1D,
  weights: tf.Tensor1D,
  bias: tf.Tensor1D | null,
  save: tf.GradSaveFunc,
): tf.Scalar {
  const logits = matMulTransposeB(h, embedding);
  const probs = tf.softmax(bias ? tf.add(logits, bias) : logits) as tf.Tensor2D;
  const at = tf.stack([tf.range(0, h.shape[0], 1, 'int32'), targets], 1) as tf.Tensor2D;
  const losses = tf.neg(tf.log(tf.maximum(tf.gatherND(probs, at), FLT_MIN)));
  save([h, embedding, probs, targets, weights]);
  return tf.sum(tf.mul(losses, weights));
}

/** ∂/∂h, ∂/∂E and (withBias) ∂/∂b, then zeros for the targets and weights. */
function backward(dy: tf.Tensor, saved: tf.Tensor[], withBias: boolean): tf.Tensor[] {
  const [h, embedding, probs, targets, weights] = saved as [tf.Tensor2D, tf.Tensor2D, tf.Tensor2D, tf.Tensor1D, tf.Tensor1D];
  const vocab = embedding.shape[0];
  const scale = tf.mul(weights, dy) as tf.Tensor1D; // [N]
  const column = tf.reshape(scale, [-1, 1]);
  const dh = tf.mul(tf.sub(tf.matMul(probs, embedding), tf.gather(embedding, targets)), column);
  const scaledH = tf.mul(h, column) as tf.Tensor2D;
  const dEmbedding = tf.sub(weightGradient(probs, scaledH), tf.unsortedSegmentSum(scaledH, targets, vocab));
  const dBias = withBias ? [tf.sub(tf.reshape(tf.matMul(tf.reshape(scale, [1, -1]), probs), [-1]), tf.unsortedSegmentSum(scale, targets, vocab))] : [];
  return [dh, dEmbedding, ...dBias, tf.zerosLike(targets), tf.zerosLike(weights)];
}

// Two customGrads because tf.customGrad takes tensors only: BERT's head has an output bias, GPT's none.
const headLoss = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [h, embedding, targets, weights, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.Tensor1D, tf.Tensor1D, tf.GradSaveFunc];
  return { value: forward(h, embedding, targets, weights, null, save), gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => backward(dy, saved, false) };
}) as (h: tf.Tensor2D, embedding: tf.Tensor2D, targets: tf.Tensor1D, weights: tf.Tensor1D) => tf.Scalar;

const headLossWithBias = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
  const [h, embedding, bias, targets, weights, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.Tensor1D, tf.Tensor1D, tf.Tensor1D, tf.GradSaveFunc];
  return { value: forward(h, embedding, targets, weights, bias, save), gradFunc: (dy: tf.Tensor, saved: tf.Tensor[]) => backward(dy, saved, true) };
}) as (h: tf.Tensor2D, embedding: tf.Tensor2D, bias: tf.Tensor1D, targets: tf.Tensor1D, weights: tf.Tensor1D) => tf.Scalar;

/**
 * Σ_rows weight·(−log softmax(h·Eᵀ + b)[target]) for hidden rows h [N, d], the tied embedding E [V, d]
 * and an optional output bias b [V]; weight 0 marks padding rows (LanguageModel.lossInputs' buckets).
 * Equal to crossEntropySum of the head's logits to float rounding (test/model/tied-head-loss.test.ts).
 */
export function tiedHeadCrossEntropySum(h: tf.Tensor2D, embedding: tf.Tensor2D, targets: tf.Tensor1D, weights?: tf.Tensor1D, bias?: tf.Tensor1D): tf.Scalar {
  const w = weights ?? tf.ones([h.shape[0]]);
  return bias ? headLossWithBias(h, embedding, bias, targets, w) : headLoss(h, embedding, targets, w);
}
