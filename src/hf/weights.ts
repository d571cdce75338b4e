// Tensor names and layouts: this project's parameters ⇄ transformers' GPT2LMHeadModel / BertForMaskedLM.
//
//   GPT-2   Conv1D weights are [in, out], as ours; q, k, v are one fused c_attn [d, 3d] (+ bias [3d]),
//           split by columns in that order. The LM head is tied to wte (lm_head.weight is not stored).
//   BERT    nn.Linear weights are [out, in]: transposed. The MLM decoder is tied to the word embeddings
//           and its bias is cls.predictions.bias.
//
// A tensor with no place in the layout (an attention mechanism's parameters and random projections,
// or an architecture option the layout lacks, in this project's `slayformer-*` exports) is stored as
// `slayformer.<our name>`.
import type { HfLayout } from './config.ts';

export type Codec = 'same' | 'transpose' | 'fused';

/** One Hugging Face tensor and the parameter(s) of ours it holds (three for a fused c_attn). */
export interface TensorRule {
  hf: string;
  ours: string[];
  codec: Codec;
}

const CUSTOM_TENSOR_PREFIX = 'slayformer.';
const LM_PREFIX: Record<HfLayout, string> = { gpt2: 'transformer.', bert: 'bert.' };
/** Top-level names of the heads (not under the base model's prefix). */
const HEAD_PREFIXES: Record<HfLayout, string[]> = { gpt2: ['lm_head.'], bert: ['cls.'] };

type Rename = [RegExp, string, Codec];
const GPT2_NAMES: Rename[] = [
  [/^embed\.tokens\.weight$/, 'transformer.wte.weight', 'same'],
  [/^embed\.positions\.weight$/, 'transformer.wpe.weight', 'same'],
  [/^norm\.(weight|bias)$/, 'transformer.ln_f.$1', 'same'],
  [/^blocks\.(\d+)\.ln1\.(weight|bias)$/, 'transformer.h.$1.ln_1.$2', 'same'],
  [/^blocks\.(\d+)\.ln2\.(weight|bias)$/, 'transformer.h.$1.ln_2.$2', 'same'],
  [/^blocks\.(\d+)\.attn\.[qkv]\.(weight|bias)$/, 'transformer.h.$1.attn.c_attn.$2', 'fused'],
  [/^blocks\.(\d+)\.attn\.out\.(weight|bias)$/, 'transformer.h.$1.attn.c_proj.$2', 'same'],
  [/^blocks\.(\d+)\.mlp\.fc\.(weight|bias)$/, 'transformer.h.$1.mlp.c_fc.$2', 'same'],
  [/^blocks\.(\d+)\.mlp\.proj\.(weight|bias)$/, 'transformer.h.$1.mlp.c_proj.$2', 'same'],
  // SwiGLU's gate (model.mlp swiglu; slayformer-gpt2 exports only): beside c_fc, which is its up projection.
  [/^blocks\.(\d+)\.mlp\.gate\.(weight|bias)$/, 'transformer.h.$1.mlp.c_gate.$2', 'same'],
];
const linear = (from: string, to: string): Rename[] => [
  [new RegExp(`^${from}\\.weight$`), `${to}.weight`, 'transpose'],
  [new RegExp(`^${from}\\.bias$`), `${to}.bias`, 'same'],
];
const BERT_LAYER = 'bert.encoder.layer.$1';
const BERT_NAMES: Rename[] = [
  [/^embed\.tokens\.weight$/, 'bert.embeddings.word_embeddings.weight', 'same'],
  [/^embed\.positions\.weight$/, 'bert.embeddings.position_embeddings.weight', 'same'],
  [/^embed\.types\.weight$/, 'bert.embeddings.token_type_embeddings.weight', 'same'],
  [/^embed\.norm\.(weight|bias)$/, 'bert.embeddings.LayerNorm.$1', 'same'],
  ...linear('blocks\\.(\\d+)\\.attn\\.q', `${BERT_LAYER}.attention.self.query`),
  ...linear('blocks\\.(\\d+)\\.attn\\.k', `${BERT_LAYER}.attention.self.key`),
  ...linear('blocks\\.(\\d+)\\.attn\\.v', `${BERT_LAYER}.attention.self.value`),
  ...linear('blocks\\.(\\d+)\\.attn\\.out', `${BERT_LAYER}.attention.output.dense`),
  [/^blocks\.(\d+)\.ln1\.(weight|bias)$/, `${BERT_LAYER}.attention.output.LayerNorm.$2`, 'same'],
  ...linear('blocks\\.(\\d+)\\.mlp\\.fc', `${BERT_LAYER}.intermediate.dense`),
  ...linear('blocks\\.(\\d+)\\.mlp\\.gate', `${BERT_LAYER}.intermediate.gate`),
  ...linear('blocks\\.(\\d+)\\.mlp\\.proj', `${BERT_LAYER}.output.dense`),
  [/^blocks\.(\d+)\.ln2\.(weight|bias)$/, `${BERT_LAYER}.output.LayerNorm.$2`, 'same'],
  ...linear('mlm\\.dense', 'cls.predictions.transform.dense'),
  [/^mlm\.norm\.(weight|bias)$/, 'cls.predictions.transform.LayerNorm.$1', 'same'],
  [/^mlm\.decoder\.bias$/, 'cls.predictions.bias', 'same'],
];
const NAMES: Record<HfLayout, Rename[]> = { gpt2: GPT2_NAMES, bert: BERT_NAMES };

/** The Hugging Face tensors holding `ours` (our parameter names, in any order): fused q/k/v grouped q, k, v. */
export function tensorRules(layout: HfLayout, ours: Iterable<string>): TensorRule[] {
  const byHf = new Map<string, TensorRule>();
  for (const name of ours) {
    const rename = NAMES[layout].find(([re]) => re.test(name));
    const hf = rename ? name.replace(rename[0], rename[1]) : CUSTOM_TENSOR_PREFIX + name;
    const rule = byHf.get(hf) ?? { hf, ours: [], codec: rename?.[2] ?? 'same' };
    rule.ours.push(name);
    byHf.set(hf, rule);
  }
  for (const rule of byHf.values()) {
    if (rule.codec === 'fused') rule.ours.sort((a, b) => qkvIndex(a) - qkvIndex(b));
  }
  return [...byHf.values()];
}

const qkvIndex = (name: string) => 'qkv'.indexOf(/\.attn\.([qkv])\./.exec(name)![1]);

/**
 * A checkpoint's tensor name as the full LM model names it: the base model's prefix added to the
 * tensors of a bare GPT2Model/BertModel (and to original GPT-2 checkpoints, which have none), and
 * TF-era LayerNorm names (gamma, beta) as transformers renames them.
 */
export function canonicalName(layout: HfLayout, name: string): string {
  const prefixed = [LM_PREFIX[layout], CUSTOM_TENSOR_PREFIX, ...HEAD_PREFIXES[layout]].some((p) => name.startsWith(p)) ? name : LM_PREFIX[layout] + name;
  return prefixed.replace(/(LayerNorm|ln_\w+)\.gamma$/, '$1.weight').replace(/(LayerNorm|ln_\w+)\.beta$/, '$1.bias');
}

/** Whether the checkpoint holds the LM head's own tensors (BERT's MLM transform; GPT-2's head is tied). */
export function isHeadTensor(layout: HfLayout, hfName: string): boolean {
  return HEAD_PREFIXES[layout].some((p) => hfName.startsWith(p));
}

/**
 * Tensors of transformers checkpoints that the model does not use, with why; tied copies are checked
 * against the tensor they repeat (see `TIED`).
 */
export const IGNORED: Record<HfLayout, [RegExp, string][]> = {
  gpt2: [[/^transformer\.h\.\d+\.attn\.(bias|masked_bias)$/, 'causal-mask buffers of older transformers']],
  bert: [
    [/^bert\.embeddings\.(position_ids|token_type_ids)$/, 'index buffers'],
    [/^bert\.pooler\./, "BertModel's pooler (not used by the MLM model)"],
    [/^cls\.seq_relationship\./, 'the next-sentence head of BertForPreTraining'],
  ],
};

/** Tied tensors some checkpoints store anyway: they must equal the tensor they are tied to. */
export const TIED: Record<HfLayout, Record<string, string>> = {
  gpt2: { 'lm_head.weight': 'transformer.wte.weight' },
  bert: {
    'cls.predictions.decoder.weight': 'bert.embeddings.word_embeddings.weight',
    'cls.predictions.decoder.bias': 'cls.predictions.bias',
  },
};

/** The Hugging Face shape of a rule's tensor, from our parameters' shape (the same for the fused three). */
export function hfShape(rule: TensorRule, shape: number[]): number[] {
  if (rule.codec === 'transpose') return [...shape].reverse();
  if (rule.codec === 'fused') return shape.length === 2 ? [shape[0], 3 * shape[1]] : [3 * shape[0]];
  return shape;
}

/** Our parameters' values from the Hugging Face tensor (`shape` is ours, the same for the fused three). */
export function decodeTensor(rule: TensorRule, hf: Float32Array, shape: number[]): Float32Array[] {
  if (rule.codec === 'same') return [hf];
  if (rule.codec === 'transpose') return [transpose(hf, shape[1], shape[0])];
  if (shape.length === 1) return [0, 1, 2].map((j) => hf.slice(j * shape[0], (j + 1) * shape[0]));
  const [rows, cols] = shape;
  return [0, 1, 2].map((j) => {
    const out = new Float32Array(rows * cols);
    for (let r = 0; r < rows; r++) out.set(hf.subarray(r * 3 * cols + j * cols, r * 3 * cols + (j + 1) * cols), r * cols);
    return out;
  });
}

/** The Hugging Face tensor from our parameters' values (inverse of decodeTensor). */
export function encodeTensor(rule: TensorRule, ours: Float32Array[], shape: number[]): Float32Array {
  if (rule.codec === 'same') return ours[0];
  if (rule.codec === 'transpose') return transpose(ours[0], shape[0], shape[1]);
  if (shape.length === 1) {
    const out = new Float32Array(3 * shape[0]);
    ours.forEach((part, j) => out.set(part, j * shape[0]));
    return out;
  }
  const [rows, cols] = shape;
  const out = new Float32Array(rows * 3 * cols);
  for (let r = 0; r < rows; r++) ours.forEach((part, j) => out.set(part.subarray(r * cols, (r + 1) * cols), r * 3 * cols + j * cols));
  return out;
}

/** [rows, cols] row-major → [cols, rows]. */
function transpose(a: Float32Array, rows: number, cols: number): Float32Array {
  const out = new Float32Array(a.length);
  for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = a[r * cols + c];
  return out;
}
