import * as tf from '@tensorflow/tfjs';
import { initBackend } from '../src/backend/start.ts';
import { createLanguageModel } from '../src/model/lm.ts';
import { AdamW } from '../src/train/optimizer.ts';
await initBackend('tensorflow', { quiet: true });
const model = createLanguageModel({ kind: 'gpt', vocabSize: 4096, maxSeqLen: 256, dModel: 128, numLayers: 4, numHeads: 4, mlpRatio: 4, dropout: 0, bias: true, attention: { name: 'softmax', options: {} }, seed: 1 });
const params = model.parameters();
const optimizer = new AdamW(params, { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
const grads = new Map([...params].map(([n, p]) => [n, tf.randomNormal(p.shape, 0, 0.01)] as const));
const once = () => { const u = optimizer.prepare(grads, 3e-4, 1); u.norm.dataSync(); u.commit(); };
for (let i = 0; i < 5; i++) once();
for (let r = 0; r < 5; r++) { const t = performance.now(); for (let i = 0; i < 20; i++) once(); console.log(`optimizer step ${((performance.now() - t) / 20).toFixed(2)} ms (${optimizer.graphStatus()})`); }
