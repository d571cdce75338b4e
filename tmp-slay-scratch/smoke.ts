import * as tf from '@tensorflow/tfjs';
import { initBackend } from '../src/backend.ts';
import '../src/model/attention/slay.ts';
import { createAttention } from '../src/model/attention/registry.ts';
await initBackend('cpu');
const q = tf.randomNormal([1,2,10,4]) as tf.Tensor4D, k = tf.randomNormal([1,2,10,4]) as tf.Tensor4D, v = tf.randomNormal([1,2,10,4]) as tf.Tensor4D;
for (const poly of ['anchor','exact','random-maclaurin','tensorsketch','nystrom','laplace-only','hadamard']) {
  const a = createAttention('slay', { numHeads: 2, headDim: 4, causal: true, seed: 3, poly, chunkSize: 4 });
  const y = a.apply(q,k,v);
  console.log(poly, y.shape, (a as any).featureDim, a.buffers.map(b=>b.name+':'+b.shape), y.dataSync().slice(0,3));
  y.dispose(); a.dispose();
}
console.log(tf.memory().numTensors);
