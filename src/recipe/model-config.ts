// The model a recipe builds: the mapping from its model section (and data.seqLen, train.seed) to the model config,
// and the sizes that cannot fit in one TensorFlow.js tensor.
import { BOUNDS, MAX_TENSOR_ELEMENTS, boundProblem } from '../core/bounds.ts';
import { attentionIsQuadratic } from '../model/attention/index.ts';
import type { LanguageModelConfig } from '../model/lm.ts';
import type { ModelSection, RunSections } from './schema.ts';

/**
 * Sizes that cannot fit: the model's largest tensors and one micro-batch's largest activations, each against the
 * most one TensorFlow.js tensor can hold, named by the keys that set them (the vocabulary once it is known).
 */
export function tensorSizeProblems(
  m: Pick<ModelSection, 'dModel' | 'mlpRatio' | 'maxSeqLen' | 'numHeads' | 'attention'> & Partial<Pick<ModelSection, 'positional'>>,
  batch?: { batchSize: number; seqLen: number },
  vocabSize?: number,
): string[] {
  const d = m.dModel;
  const hidden = Math.round(m.mlpRatio * d);
  const sizes: [string, number][] = [['model.dModel × model.mlpRatio·model.dModel (an MLP weight)', d * hidden]];
  if (m.positional !== 'rope') sizes.push(['model.maxSeqLen × model.dModel (the position table)', m.maxSeqLen * d]);
  if (vocabSize !== undefined) sizes.push([`the vocabulary (${vocabSize}) × model.dModel (the token embedding)`, vocabSize * d]);
  if (batch) {
    const { batchSize: b, seqLen: l } = batch;
    sizes.push(['train.batchSize × data.seqLen × model.mlpRatio·model.dModel (the MLP activations of a micro-batch)', b * l * hidden]);
    if (attentionIsQuadratic(m.attention.name))
      sizes.push(['train.batchSize × model.numHeads × data.seqLen² (the attention scores of a micro-batch)', b * m.numHeads * l * l]);
    if (vocabSize !== undefined) sizes.push([`train.batchSize × data.seqLen × the vocabulary (${vocabSize}) (the logits of a micro-batch)`, b * l * vocabSize]);
  }
  return sizes
    .filter(([, elements]) => elements > MAX_TENSOR_ELEMENTS)
    .map(
      ([what, elements]) => `${what} = ${elements.toLocaleString('en-US')} elements: more than one TensorFlow.js tensor can hold (2^31 − 1); lower those keys`,
    );
}

/** The model config a recipe builds for a vocabulary of `vocabSize`; sizes that cannot fit are an error naming the keys. */
export function modelConfigFromRecipe(recipe: RunSections, vocabSize: number): LanguageModelConfig {
  const m = recipe.model;
  const vocabulary = boundProblem('the vocabulary', vocabSize, BOUNDS.embeddingRows);
  if (vocabulary) throw new Error(vocabulary);
  if (m.maxSeqLen < recipe.data.seqLen) {
    throw new Error(`model.maxSeqLen (${m.maxSeqLen}) must be ≥ data.seqLen (${recipe.data.seqLen})`);
  }
  const tooLarge = tensorSizeProblems(m, { batchSize: recipe.train.batchSize, seqLen: recipe.data.seqLen }, vocabSize);
  if (tooLarge.length > 0) throw new Error(tooLarge.join('; '));
  return {
    kind: m.kind,
    vocabSize,
    maxSeqLen: m.maxSeqLen,
    dModel: m.dModel,
    numLayers: m.numLayers,
    numHeads: m.numHeads,
    mlpRatio: m.mlpRatio,
    dropout: m.dropout,
    bias: m.bias,
    normPosition: m.normPosition,
    embeddingNorm: m.embeddingNorm,
    typeVocabSize: m.typeVocabSize,
    activation: m.activation,
    layerNormEps: m.layerNormEps,
    positional: m.positional,
    ropeTheta: m.ropeTheta,
    mlp: m.mlp,
    norm: m.norm,
    attention: m.attention,
    seed: recipe.train.seed,
    // Absent unless set: a saved model config stays as it was before the key existed.
    ...(m.featureSeed === null ? {} : { featureSeed: m.featureSeed }),
  };
}
