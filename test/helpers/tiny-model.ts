// The smallest GPT config the tests build directly (one layer, two heads of 8), with what a test changes given.
import type { LanguageModelConfig } from '../../src/model/lm.ts';

export function tinyGptConfig(overrides: Partial<LanguageModelConfig> = {}): LanguageModelConfig {
  return {
    kind: 'gpt',
    vocabSize: 61,
    maxSeqLen: 16,
    dModel: 16,
    numLayers: 1,
    numHeads: 2,
    mlpRatio: 2,
    dropout: 0,
    bias: true,
    attention: { name: 'softmax', options: {} },
    seed: 4,
    ...overrides,
  };
}
