// The fused CPU kernels' table, the one list of them (docs/backends.md, "Fused CPU kernels"): the TypeScript side
// registers a tfjs kernel for each (src/backend/tensorflow.ts, through fused-kernels.ts), and the C++ side registers
// each op with TensorFlow from it (kernels/register.cc reads kernelTableSource(), which the set-up writes beside the
// kernels' files as kernel_table.inc). Each op's functions live in its kernel's file (`file`, in kernels/), added there
// by SLAYFORMER_KERNEL; loading the addon refuses a table entry no file implements and a kernel the table lacks.
// No imports: the set-up and the table's test read it without tfjs. Inside src/backend/native, so that the build's
// source hash covers it (native-build.ts).

/**
 * GELU, LayerNorm, linear attention's normalisation, attention's softmax backward, causal softmax attention whole
 * (products over the visible key tiles only), the whole causal block of tensor-product features (SLAY's, also over the
 * visible tiles only) and SLAY's feature factors, each forward and backward as one op. Inputs and outputs in the op's
 * order, all float32; `floatAttrs` are passed from the tfjs kernel's attrs.
 */
export const FUSED_CPU_KERNELS = [
  { name: 'SlayformerGeluTanh', file: 'gelu.cc', inputs: ['x'], outputs: ['y'], floatAttrs: [] },
  { name: 'SlayformerGeluTanhGrad', file: 'gelu.cc', inputs: ['dy', 'x'], outputs: ['dx'], floatAttrs: [] },
  { name: 'SlayformerGeluErf', file: 'gelu.cc', inputs: ['x'], outputs: ['y'], floatAttrs: [] },
  { name: 'SlayformerGeluErfGrad', file: 'gelu.cc', inputs: ['dy', 'x'], outputs: ['dx'], floatAttrs: [] },
  { name: 'SlayformerLayerNorm', file: 'layer_norm.cc', inputs: ['x', 'gain', 'shift'], outputs: ['y', 'xhat', 'rstd'], floatAttrs: ['eps'] },
  {
    name: 'SlayformerLayerNormGrad',
    file: 'layer_norm.cc',
    inputs: ['dy', 'xhat', 'rstd', 'gain'],
    outputs: ['dx', 'dgain', 'dshift'],
    floatAttrs: [],
  },
  { name: 'SlayformerLinearNormalize', file: 'linear_normalize.cc', inputs: ['raw'], outputs: ['out'], floatAttrs: ['delta'] },
  { name: 'SlayformerLinearNormalizeGrad', file: 'linear_normalize.cc', inputs: ['dy', 'raw'], outputs: ['draw'], floatAttrs: ['delta'] },
  {
    name: 'SlayformerAttentionSoftmaxGrad',
    file: 'attention_softmax_grad.cc',
    inputs: ['probs', 'dprobs', 'dout', 'out'],
    outputs: ['dscores'],
    floatAttrs: [],
  },
  { name: 'SlayformerCausalAttention', file: 'causal_attention.cc', inputs: ['q', 'k', 'v'], outputs: ['out', 'probs'], floatAttrs: [] },
  {
    name: 'SlayformerCausalAttentionGrad',
    file: 'causal_attention.cc',
    inputs: ['dout', 'q', 'k', 'v', 'probs', 'out'],
    outputs: ['dq', 'dk', 'dv'],
    floatAttrs: [],
  },
  {
    name: 'SlayformerCausalFactorAttention',
    file: 'causal_factor_attention.cc',
    inputs: ['aq', 'ak', 'bq', 'bk', 'values'],
    outputs: ['out', 'xa', 'xb'],
    floatAttrs: [],
  },
  {
    name: 'SlayformerCausalFactorAttentionGrad',
    file: 'causal_factor_attention.cc',
    inputs: ['dout', 'aq', 'ak', 'bq', 'bk', 'values', 'xa', 'xb'],
    outputs: ['daq', 'dak', 'dbq', 'dbk', 'dvalues'],
    floatAttrs: [],
  },
  { name: 'SlayformerSlayFactors', file: 'slay_factors.cc', inputs: ['x', 'anchors', 'omegas', 'nodes'], outputs: ['a', 'b'], floatAttrs: [] },
  {
    name: 'SlayformerSlayFactorsGrad',
    file: 'slay_factors.cc',
    inputs: ['da', 'db', 'x', 'anchors', 'omegas', 'nodes'],
    outputs: ['dx'],
    floatAttrs: [],
  },
] as const;

export type FusedCpuKernel = (typeof FUSED_CPU_KERNELS)[number]['name'];

/** The table as C++ initialisers, one `{name, inputs, outputs, attrs}` per op in TensorFlow's "name: type" form. */
export function kernelTableSource(): string {
  const list = (names: readonly string[], type: string) => `{${names.map((n) => `"${n}: ${type}"`).join(', ')}}`;
  const rows = FUSED_CPU_KERNELS.map((k) => `{"${k.name}", ${list(k.inputs, 'float')}, ${list(k.outputs, 'float')}, ${list(k.floatAttrs, 'float')}},`);
  return `// Written by the set-up from src/backend/native/kernels.ts (kernelTableSource); not edited by hand.\n${rows.join('\n')}\n`;
}
