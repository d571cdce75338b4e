import * as tf from '@tensorflow/tfjs';
import { initBackend } from '../src/backend/start.ts';
await initBackend('tensorflow', { quiet: true });
const shape: [number, number, number] = [32, 256, 32];
const [q, k, v, up] = [0, 1, 2, 3].map(() => tf.randomNormal(shape) as tf.Tensor3D);
const time = (f: () => void, n = 30) => { f(); f(); const t = performance.now(); for (let i = 0; i < n; i++) f(); return (performance.now() - t) / n; };
const [o, p] = tf.engine().runKernel('SlayformerCausalAttention', { q, k, v }) as tf.Tensor[];
for (let r = 0; r < 3; r++) {
  const fwd = time(() => { const [a, b] = tf.engine().runKernel('SlayformerCausalAttention', { q, k, v }) as tf.Tensor[]; a.dataSync(); tf.dispose([a, b]); });
  const bwd = time(() => { const r = tf.engine().runKernel('SlayformerCausalAttentionGrad', { dout: up, q, k, v, probs: p, out: o }) as tf.Tensor[]; r[0].dataSync(); tf.dispose(r); });
  const mm = time(() => { const s = tf.matMul(q, k, false, true); const y = tf.matMul(s, v); y.dataSync(); tf.dispose([s, y]); });
  console.log(`kernel fwd ${fwd.toFixed(2)} ms, bwd ${bwd.toFixed(2)} ms; two full BatchMatMuls ${mm.toFixed(2)} ms`);
}
