// Model FLOPs per trained token (docs/training.md, "Model FLOPs and MFU"): what the model's mathematics costs, not what
// an implementation spends (recomputation, the chunked form's intra-chunk scores and padding are not counted), so
// that MFU compares implementations and devices on one scale. PaLM's (Chowdhery et al. 2022, appendix B) and
// nanoGPT's convention: a multiply-add is 2 FLOPs, and the backward pass costs twice the forward, so training costs
// 3× the forward:
//   6 · (every matrix weight the token passes through, the tied output head included; embedding lookups are free)
//   + 3 · Σ_layers the attention's own forward FLOPs per token
// (BERT's head — its transform and the tied decoder — runs on the masked positions only: its share is scaled by the
// fraction of positions labelled, data.mlmProbability)
// where softmax (and exact Yat) attend to the whole length T (4·T·d per layer: the scores q·k and the sum of v; the
// causal half is not taken off, as PaLM and nanoGPT count it) and a linear mechanism with m features per head costs
// per head φ(q) and φ(k) (its declared feature map) plus 4·m·(d_h + 1) for the state update φ(k)ᵀ[v, 1] and the
// read-out φ(q)ᵀS with its denominator.
import { attentionFeatureMap } from './attention/index.ts';
import { attentionSeed, featureSeedOf } from './transformer.ts';
import { languageModelParameterSpecs, type LanguageModelConfig } from './lm.ts';

export interface ModelFlops {
  /** Training FLOPs per token: forward and backward. */
  perToken: number;
  /** Of which the matrix weights' 6·N. */
  dense: number;
  /** Of which the attention's 3 · Σ_layers (its forward per token). */
  attention: number;
  /** The matrix weights N counted in `dense` (the tied head once, BERT's head times its fraction). */
  matrixWeights: number;
}

/** BERT's head transform (src/model/lm.ts headParameterSpecs). */
const HEAD_PREFIX = 'mlm.';

/**
 * Training FLOPs per token of `config` on sequences of `seqLen` tokens; `headFraction`: the fraction of positions the
 * output head runs on (1 for GPT; BERT's masked fraction).
 */
export function modelFlops(config: LanguageModelConfig, seqLen: number, headFraction = 1): ModelFlops {
  const matrices = languageModelParameterSpecs(config).filter((s) => s.shape.length === 2 && !s.name.startsWith('embed.'));
  const size = (names: typeof matrices) => names.reduce((sum, s) => sum + s.shape[0] * s.shape[1], 0);
  const body = size(matrices.filter((s) => !s.name.startsWith(HEAD_PREFIX)));
  // The output head multiplies by the token embedding (tied): a V × d product per labelled position.
  const head = size(matrices.filter((s) => s.name.startsWith(HEAD_PREFIX))) + config.vocabSize * config.dModel;
  const matrixWeights = body + headFraction * head;
  const headDim = config.dModel / config.numHeads;
  let attentionForward = 0;
  for (let layer = 0; layer < config.numLayers; layer++) {
    const map = attentionFeatureMap(config.attention.name, {
      numHeads: config.numHeads,
      headDim,
      causal: config.kind === 'gpt',
      seed: attentionSeed(featureSeedOf(config), layer),
      ...config.attention.options,
    });
    attentionForward += map === null ? 4 * seqLen * config.dModel : config.numHeads * (2 * map.flopsPerSide + 4 * map.features * (headDim + 1));
  }
  const dense = 6 * matrixWeights;
  const attention = 3 * attentionForward;
  return { perToken: dense + attention, dense, attention, matrixWeights };
}
