// Attention scaling benchmark: one attention layer (q/k/v/out projections + mechanism) at the
// SLAY paper's shape (embedding 256, 8 heads, batch 1, causal), forward and forward+backward, over
// sequence lengths 128, 256, … up to a cap or until a length runs out of memory or time.
//
//   npm run bench:attention -- [--backend wasm] [--max-length 4096] [--lengths 1024,4096]
//                              [--mechanisms softmax,slay] [--repeats 5] [--budget-ms 20000]
//                              [--out reports/bench-attention.json]
import * as tf from '@tensorflow/tfjs';
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { initBackend } from '../src/backend.ts';
import { attentionNames, createAttention } from '../src/model/attention/index.ts';
import { dense } from '../src/model/ops.ts';
import { Rng } from '../src/model/rng.ts';

const { values: args } = parseArgs({
  options: {
    backend: { type: 'string', default: 'wasm' },
    'max-length': { type: 'string', default: '4096' },
    lengths: { type: 'string' },
    mechanisms: { type: 'string' },
    repeats: { type: 'string', default: '5' },
    'budget-ms': { type: 'string', default: '20000' },
    embed: { type: 'string', default: '256' },
    heads: { type: 'string', default: '8' },
    out: { type: 'string', default: 'reports/bench-attention.json' },
  },
});

const backend = await initBackend(args.backend);
const embed = Number(args.embed);
const heads = Number(args.heads);
const headDim = embed / heads;
const repeats = Number(args.repeats);
const budgetMs = Number(args['budget-ms']);
const lengths = args.lengths
  ? args.lengths.split(',').map(Number)
  : Array.from({ length: 20 }, (_, i) => 128 * 2 ** i).filter((l) => l <= Number(args['max-length']));
const mechanisms = args.mechanisms ? args.mechanisms.split(',') : attentionNames();

interface Row {
  mechanism: string;
  length: number;
  forwardMs: number | null;
  trainMs: number | null;
  tokensPerS: number | null;
  peakMB: number | null;
  status: 'ok' | 'OOM' | 'timeout' | 'error';
  error?: string;
}

const rng = new Rng(0);
const weight = () => tf.variable(tf.tensor2d(Float32Array.from(rng.normalArray(embed * embed), (x) => x * 0.05), [embed, embed]));
const [wq, wk, wv, wo] = [weight(), weight(), weight(), weight()];

function layer(attn: ReturnType<typeof createAttention>, x: tf.Tensor3D): tf.Tensor {
  const l = x.shape[1];
  const split = (t: tf.Tensor) => tf.transpose(tf.reshape(t, [1, l, heads, headDim]), [0, 2, 1, 3]) as tf.Tensor4D;
  const out = attn.apply(split(dense(x, wq)), split(dense(x, wk)), split(dense(x, wv)));
  return dense(tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [1, l, embed]), wo);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

async function time(fn: () => tf.Tensor | tf.Tensor[]): Promise<number> {
  const t0 = performance.now();
  const out = fn();
  const list = Array.isArray(out) ? out : [out];
  await Promise.all(list.map((t) => t.data()));
  tf.dispose(list);
  return performance.now() - t0;
}

const rows: Row[] = [];
for (const mechanism of mechanisms) {
  const attn = createAttention(mechanism, { numHeads: heads, headDim, causal: true, seed: 1 });
  const params = [wq, wk, wv, wo, ...attn.trainableVariables];
  for (const length of lengths) {
    const x = tf.tensor3d(Float32Array.from(rng.normalArray(length * embed)), [1, length, embed]);
    const forward = () => tf.tidy(() => layer(attn, x));
    const train = () =>
      tf.tidy(() => {
        const { value, grads } = tf.variableGrads(() => tf.mean(tf.square(layer(attn, x))) as tf.Scalar, params);
        return [value, ...Object.values(grads)];
      });
    const row: Row = { mechanism, length, forwardMs: null, trainMs: null, tokensPerS: null, peakMB: null, status: 'ok' };
    try {
      const first = await time(train); // warm-up (and the budget probe)
      if (first > budgetMs) {
        row.status = 'timeout';
      } else {
        await time(forward);
        const n = first * repeats > budgetMs * 3 ? 1 : repeats;
        const fwd: number[] = [];
        const fb: number[] = [];
        for (let r = 0; r < n; r++) fwd.push(await time(forward));
        for (let r = 0; r < n; r++) fb.push(await time(train));
        row.forwardMs = median(fwd);
        row.trainMs = median(fb);
        row.tokensPerS = (length / row.trainMs) * 1000;
        const profile = await tf.profile(() => {
          const outs = train();
          tf.dispose(outs);
        });
        row.peakMB = profile.peakBytes / 2 ** 20;
      }
    } catch (err) {
      const message = (err as Error).message ?? String(err);
      row.status = /memory|allocation|RangeError|OOM/i.test(message) ? 'OOM' : 'error';
      row.error = message.split('\n')[0];
    }
    x.dispose();
    rows.push(row);
    const fmt = (v: number | null, digits = 1) => (v === null ? row.status : v.toFixed(digits));
    console.log(
      `${mechanism.padEnd(14)} L=${String(length).padStart(6)}  fwd ${fmt(row.forwardMs).padStart(9)} ms  fwd+bwd ${fmt(row.trainMs).padStart(9)} ms  ${fmt(row.tokensPerS, 0).padStart(8)} tok/s  peak ${fmt(row.peakMB).padStart(8)} MB`,
    );
    if (row.status !== 'ok') break;
  }
  attn.dispose();
}

fs.mkdirSync(path.dirname(args.out), { recursive: true });
fs.writeFileSync(args.out, JSON.stringify({ backend, embed, heads, batch: 1, causal: true, repeats, rows }, null, 2));
console.log(`\nbackend ${backend}; wrote ${args.out}`);
