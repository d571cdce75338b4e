import * as tf from '@tensorflow/tfjs';
import { initBackend } from '../src/backend/start.ts';
import { Rng } from '../src/core/rng.ts';
import { createLanguageModel } from '../src/model/lm.ts';
import { AdamW } from '../src/train/optimizer.ts';
import { accumulateGradients, applyGradients, trainStep } from '../src/train/step.ts';
import { randomBatch } from '../src/train/throughput.ts';
await initBackend('tensorflow', { quiet: true });
const model = createLanguageModel({ kind: 'gpt', vocabSize: 4096, maxSeqLen: 256, dModel: 128, numLayers: 4, numHeads: 4, mlpRatio: 4, dropout: 0, bias: true, attention: { name: process.argv[2] ?? 'softmax', options: {} }, seed: 1 });
const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
const rng = new Rng(7);
const batch = randomBatch(rng, 'gpt', 8, 256, 4096);
const vars = [...model.parameters().values()];
for (let i = 0; i < 4; i++) await trainStep(model, optimizer, [batch], { lr: 3e-4, clip: 1, dropoutSeed: null, graph: true });
for (let r = 0; r < 4; r++) {
  let tg = 0, to = 0, tw = 0;
  for (let i = 0; i < 10; i++) {
    const t0 = performance.now();
    const { grads, loss } = accumulateGradients(model, [batch], [null], 2048, vars, true, false);
    await loss.data();
    const t1 = performance.now();
    await applyGradients(optimizer, grads, loss, 2048, { lr: 3e-4, clip: 1 });
    const t2 = performance.now();
    tg += t1 - t0; to += t2 - t1;
    const t3 = performance.now();
    await trainStep(model, optimizer, [batch], { lr: 3e-4, clip: 1, dropoutSeed: null, graph: true });
    tw += performance.now() - t3;
  }
  console.log(`grads ${(tg / 10).toFixed(1)} ms, optimizer ${(to / 10).toFixed(1)} ms; trainStep ${(tw / 10).toFixed(1)} ms`);
}
