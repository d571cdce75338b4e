// The attention boundary of the XLA route (`train.attentionKernel: fused`; docs/xla.md, "Attention on the GPU"):
// while a program is recorded for XLA with it, softmax attention's forward and backward each enter the program as
// one TensorFlow XlaCallModule op whose module is a single custom call, `slayformer.attention` or
// `slayformer.attention_grad`. TensorFlow's export (src/backend/xla/export.py) inlines those modules and keeps the
// custom calls; the jax runner (src/backend/xla/attention.py) puts jax.nn.dot_product_attention and its vjp in
// their place: cuDNN's fused attention on NVIDIA GPUs, XLA's composed form elsewhere. Eagerly (the recording runs
// the step) the composed form computes the values.
import type * as tf from '@tensorflow/tfjs';
import { recordedAsOneOp } from './tf-graph.ts';
import { Scope } from '../core/scope.ts';

/** train.attentionKernel: softmax attention as tfjs records it (composed), or as the boundary jax fills in (fused). */
export type AttentionKernel = 'composed' | 'fused';
export const ATTENTION_KERNELS: readonly AttentionKernel[] = ['composed', 'fused'];

/** The custom calls' targets, the names attention.py replaces. */
export const ATTENTION_TARGETS = { forward: 'slayformer.attention', gradient: 'slayformer.attention_grad' } as const;

const boundary = new Scope();

/** Runs `fn` (a recording for the XLA route) with softmax attention recorded as the boundary where it can be. */
export function withAttentionBoundary<T>(fn: () => T): T {
  return boundary.within(fn);
}

/** Whether softmax attention is recorded as the boundary now. */
export function attentionBoundaryEnabled(): boolean {
  return boundary.active;
}

/**
 * The StableHLO module of one boundary op: `main` applies the custom call `target` to its arguments, all float32
 * of `shape` ([B·H, L, D]), giving `outputs` results of the same shape. backend_config says whether it is causal.
 */
export function boundaryModule(target: string, shape: readonly number[], inputs: number, outputs: number, causal: boolean): string {
  const type = `tensor<${shape.join('x')}xf32>`;
  const args = Array.from({ length: inputs }, (_, i) => `%arg${i}`);
  const resultTypes = Array(outputs).fill(type).join(', ');
  const results = outputs === 1 ? '%0' : Array.from({ length: outputs }, (_, i) => `%0#${i}`).join(', ');
  const config = JSON.stringify({ causal }).replaceAll('"', '\\"');
  return [
    'module @slayformer_attention {',
    `  func.func public @main(${args.map((a) => `${a}: ${type}`).join(', ')}) -> (${resultTypes}) {`,
    `    %0${outputs === 1 ? '' : `:${outputs}`} = stablehlo.custom_call @${target}(${args.join(', ')}) {backend_config = "${config}"} : (${Array(inputs).fill(type).join(', ')}) -> (${resultTypes})`,
    `    return ${results} : ${resultTypes}`,
    '  }',
    '}',
  ].join('\n');
}

/**
 * compute() (the composed form: its values, eagerly), recorded as one XlaCallModule of the custom call of `kind`:
 * forward q, k, v → out; gradient q, k, v, dOut → dq, dk, dv. Every tensor is float32 [B·H, L, D].
 */
export function attentionBoundary(kind: keyof typeof ATTENTION_TARGETS, inputs: tf.Tensor[], causal: boolean, compute: () => tf.Tensor[]): tf.Tensor[] {
  const shape = inputs[0].shape;
  const outputs = kind === 'forward' ? 1 : 3;
  return recordedAsOneOp(
    'XlaCallModule',
    [
      // Version 9: the module's main takes exactly the op's inputs (no platform index for one platform).
      { name: 'version', kind: 'int', value: 9 },
      { name: 'module', kind: 'string', value: boundaryModule(ATTENTION_TARGETS[kind], shape, inputs.length, outputs, causal) },
      { name: 'Tin', kind: 'type', value: inputs.map(() => 'float32' as const) },
      { name: 'Tout', kind: 'type', value: Array(outputs).fill('float32') },
      { name: 'Sout', kind: 'shapes', value: Array(outputs).fill(shape) },
      // TensorFlow exports the program on its CPU; the runner's platform is another's to choose.
      { name: 'platforms', kind: 'string', value: ['CPU'] },
      { name: 'disabled_checks', kind: 'string', value: ['platform'] },
    ],
    inputs,
    compute,
  );
}
