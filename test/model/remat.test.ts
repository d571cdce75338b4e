// Rematerialised transformer blocks (train.remat, docs/xla.md "Rematerialisation") on the cpu backend: the gradient
// with every block recomputed from its input equals the plain one (the same ops in the same order: to the bit), for
// GPT with dropout and a mechanism with trained parameters, BERT's post-LN blocks and Llama's; the recomputation does
// run (more kernels), and nothing leaks. The recorded programs with their barrier: test/train/xla-remat.test.ts.
import * as tf from '@tensorflow/tfjs';
import { beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { Rng } from '../../src/core/rng.ts';
import { createLanguageModel, type LanguageModelConfig } from '../../src/model/lm.ts';
import { withRematerialisedBlocks } from '../../src/model/transformer.ts';
import { ROW_BUCKET } from '../../src/train/compiled-step.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { tinyGptConfig } from '../helpers/tiny-model.ts';

beforeAll(async () => {
  await initBackend('cpu', { quiet: true });
});

/** The loss and gradients of one batch, plain and rematerialised, and the kernels each ran. */
async function bothWays(config: LanguageModelConfig, dropoutSeed: number | null) {
  const model = createLanguageModel(config);
  try {
    const batch = randomBatch(new Rng(3), config.kind, 2, config.maxSeqLen, config.vocabSize);
    const variables = [...model.parameters().values()];
    const inputs = model.lossInputs(batch, ROW_BUCKET)!;
    const gradient = async () => {
      let result: { loss: number; grads: Record<string, Float32Array> } | undefined;
      const { kernels } = await tf.profile(() => {
        const { value, grads } = tf.variableGrads(() => model.lossOf(inputs, dropoutSeed), variables);
        result = { loss: value.dataSync()[0], grads: Object.fromEntries(Object.entries(grads).map(([n, g]) => [n, g.dataSync() as Float32Array])) };
        tf.dispose([value, ...Object.values(grads)]);
      });
      return { ...result!, kernels: kernels.length };
    };
    // Once each first: constant caches fill on first use.
    await gradient();
    await withRematerialisedBlocks(gradient);
    const before = tf.memory().numTensors;
    const plain = await gradient();
    const remat = await withRematerialisedBlocks(gradient);
    const leaked = tf.memory().numTensors - before;
    tf.dispose(Object.values(inputs).filter((t): t is tf.Tensor => t instanceof tf.Tensor));
    return { plain, remat, leaked };
  } finally {
    model.dispose();
  }
}

describe('rematerialised blocks', () => {
  const cases: Array<[string, LanguageModelConfig, number | null]> = [
    [
      'GPT, dropout, DARKFormer (trained covariance)',
      tinyGptConfig({ numLayers: 2, dropout: 0.1, attention: { name: 'darkformer', options: { features: 8 } } }),
      7,
    ],
    ['BERT (post-LN)', tinyGptConfig({ kind: 'bert', numLayers: 2, normPosition: 'post', embeddingNorm: true }), null],
    ['Llama-style (RoPE, SwiGLU, RMSNorm, no biases)', tinyGptConfig({ numLayers: 2, positional: 'rope', mlp: 'swiglu', norm: 'rmsnorm', bias: false }), null],
  ];
  it.each(cases)('%s: the same loss and gradients, every parameter; the forward runs again', async (_, config, seed) => {
    const { plain, remat, leaked } = await bothWays(config, seed);
    expect(leaked).toBe(0);
    expect(remat.kernels).toBeGreaterThan(plain.kernels);
    expect(remat.loss).toBe(plain.loss);
    expect(Object.keys(remat.grads).sort()).toEqual(Object.keys(plain.grads).sort());
    for (const [name, g] of Object.entries(plain.grads)) expect(remat.grads[name], name).toEqual(g);
  });
});
