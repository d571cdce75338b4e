// Attention scaling benchmark: one attention layer (q/k/v/out projections + mechanism) at the
// SLAY paper's shape (embedding 256, 8 heads, batch 1, causal), forward and forward+backward, over
// sequence lengths 128, 256, … up to a cap, until a length runs out of memory or time.
//
//   npm run bench:attention -- [--backend wasm] [--max-length 16384] [--lengths 1024,4096]
//                              [--mechanisms softmax,slay] [--repeats 5] [--timeout-s 120]
//                              [--out reports/bench-attention.json]
//
// Each (mechanism, length) runs in its own child process: an allocation failure leaves the wasm
// heap unusable ("memory access out of bounds" on every later op), so one OOM must not poison
// the next measurement. Timings are medians after a warm-up; peak memory is tf.profile's
// peakBytes (the backend's own accounting of live tensor bytes).
import * as tf from '@tensorflow/tfjs';
import fs from 'node:fs';
import path from 'node:path';
import { initBackend } from '../src/backend.ts';
import { backendOption } from '../src/cli/backend-option.ts';
import { parseOrExit } from '../src/cli/command.ts';
import { emitRow, runIsolated } from '../src/experiments/isolated.ts';
import { lineChartSvg } from '../src/experiments/plot.ts';
import { attentionNames, createAttention } from '../src/model/attention/index.ts';
import { dense } from '../src/model/ops.ts';
import { Rng } from '../src/model/rng.ts';

const { values: args } = parseOrExit({
  name: 'bench:attention',
  usage: '[options]',
  description: `Times one attention layer (q/k/v/out projections + mechanism) at the SLAY paper's shape, forward and
forward + backward, for L = 128, 256, … until a length runs out of memory or time; each measurement
runs in its own process. Prints the table and the scaling summary; writes JSON and a log-log SVG.`,
  options: {
    backend: backendOption('wasm'),
    'max-length': { type: 'string', value: 'L', number: { integer: true, min: 1 }, default: '16384', help: 'longest sequence length' },
    lengths: { type: 'string', value: 'L,…', help: 'exactly these lengths instead of 128, 256, … up to --max-length' },
    mechanisms: { type: 'string', value: 'a,b', help: 'attention mechanisms (default all registered)' },
    repeats: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '5', help: 'timed repetitions (the median is reported)' },
    'timeout-s': { type: 'string', value: 'S', number: { integer: true, min: 1 }, default: '120', help: 'time limit of one measurement' },
    embed: { type: 'string', value: 'E', number: { integer: true, min: 1 }, default: '256', help: 'embedding width' },
    heads: { type: 'string', value: 'H', number: { integer: true, min: 1 }, default: '8', help: 'attention heads' },
    out: { type: 'string', value: 'FILE', default: 'reports/bench-attention.json', help: 'JSON output (the SVG goes next to it)' },
    child: { type: 'string', hidden: true, help: 'internal: one mechanism:length measurement' },
  },
});

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

const embed = Number(args.embed);
const heads = Number(args.heads);
const headDim = embed / heads;

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

/** One measurement, in this process (child mode). */
async function measure(mechanism: string, length: number): Promise<Row> {
  await initBackend(args.backend, { quiet: true });
  const rng = new Rng(0);
  const weight = () => tf.variable(tf.tensor2d(Float32Array.from(rng.normalArray(embed * embed), (x) => x * 0.05), [embed, embed]));
  const [wq, wk, wv, wo] = [weight(), weight(), weight(), weight()];
  const attn = createAttention(mechanism, { numHeads: heads, headDim, causal: true, seed: 1 });
  const params = [wq, wk, wv, wo, ...attn.trainableVariables];
  const x = tf.tensor3d(Float32Array.from(rng.normalArray(length * embed)), [1, length, embed]);
  const split = (t: tf.Tensor) => tf.transpose(tf.reshape(t, [1, length, heads, headDim]), [0, 2, 1, 3]) as tf.Tensor4D;
  const layer = () => {
    const out = attn.apply(split(dense(x, wq)), split(dense(x, wk)), split(dense(x, wv)));
    return dense(tf.reshape(tf.transpose(out, [0, 2, 1, 3]), [1, length, embed]), wo);
  };
  const forward = () => tf.tidy(layer);
  const train = () =>
    tf.tidy(() => {
      const { value, grads } = tf.variableGrads(() => tf.mean(tf.square(layer())) as tf.Scalar, params);
      return [value, ...Object.values(grads)];
    });
  const repeats = Number(args.repeats);
  await time(train); // warm-up
  await time(forward);
  const fwd: number[] = [];
  const fb: number[] = [];
  for (let r = 0; r < repeats; r++) fwd.push(await time(forward));
  for (let r = 0; r < repeats; r++) fb.push(await time(train));
  const profile = await tf.profile(() => {
    tf.dispose(train());
  });
  const trainMs = median(fb);
  return {
    mechanism,
    length,
    forwardMs: median(fwd),
    trainMs,
    tokensPerS: (length / trainMs) * 1000,
    peakMB: profile.peakBytes / 2 ** 20,
    status: 'ok',
  };
}

/** Runs one measurement in a child process, classifying crashes and time-outs. */
async function measureInChild(mechanism: string, length: number): Promise<Row> {
  const empty = { mechanism, length, forwardMs: null, trainMs: null, tokensPerS: null, peakMB: null };
  const forwarded = ['backend', 'repeats', 'embed', 'heads'].flatMap((k) => [`--${k}`, String(args[k as keyof typeof args])]);
  const result = await runIsolated<Row>(new URL(import.meta.url).pathname, [...forwarded, '--child', `${mechanism}:${length}`], Number(args['timeout-s']) * 1000);
  if (result.row) return result.row;
  if (result.timedOut) return { ...empty, status: 'timeout', error: `over ${args['timeout-s']} s` };
  return { ...empty, status: result.outOfMemory ? 'OOM' : 'error', error: result.message };
}

if (args.child) {
  const [mechanism, length] = args.child.split(':');
  emitRow(await measure(mechanism, Number(length)));
  process.exit(0);
}

const backend = await initBackend(args.backend, { quiet: true });
const lengths = args.lengths
  ? args.lengths.split(',').map(Number)
  : Array.from({ length: 20 }, (_, i) => 128 * 2 ** i).filter((l) => l <= Number(args['max-length']));
const mechanisms = args.mechanisms ? args.mechanisms.split(',') : attentionNames();
const fmt = (v: number | null, status: string, digits = 1) => (v === null ? status : v.toFixed(digits));

console.log(`backend ${backend}; embedding ${embed}, ${heads} heads, batch 1, causal; median of ${args.repeats}\n`);
console.log('mechanism          L      fwd ms   fwd+bwd ms   tokens/s    peak MB');
const rows: Row[] = [];
for (const mechanism of mechanisms) {
  for (const length of lengths) {
    const row = await measureInChild(mechanism, length);
    rows.push(row);
    console.log(
      `${mechanism.padEnd(14)} ${String(length).padStart(6)} ${fmt(row.forwardMs, row.status).padStart(11)} ${fmt(row.trainMs, row.status).padStart(12)} ${fmt(row.tokensPerS, row.status, 0).padStart(10)} ${fmt(row.peakMB, row.status).padStart(10)}`,
    );
    if (row.status !== 'ok') break;
  }
}

/** Per mechanism: longest length reached, growth exponent of fwd+bwd time, crossover with softmax. */
function scalingSummary(all: Row[]) {
  const ok = (m: string) => all.filter((r) => r.mechanism === m && r.status === 'ok');
  const softmax = new Map(ok('softmax').map((r) => [r.length, r]));
  const softmaxFailedAt = all.find((r) => r.mechanism === 'softmax' && r.status !== 'ok')?.length ?? null;
  return mechanisms.map((mechanism) => {
    const done = ok(mechanism);
    const last = done.at(-1);
    const prev = done.at(-2);
    const exponent = last && prev ? Math.log(last.trainMs! / prev.trainMs!) / Math.log(last.length / prev.length) : null;
    // First length at which this mechanism is faster than softmax, or runs where softmax could not.
    const crossover =
      mechanism === 'softmax'
        ? null
        : (done.find((r) => {
            const s = softmax.get(r.length);
            return s ? r.trainMs! < s.trainMs! : softmaxFailedAt !== null && r.length >= softmaxFailedAt;
          })?.length ?? null);
    const failed = all.find((r) => r.mechanism === mechanism && r.status !== 'ok');
    return { mechanism, longest: last?.length ?? null, stoppedBy: failed ? `${failed.status} at ${failed.length}` : 'cap', exponent, crossover };
  });
}

const summary = scalingSummary(rows);
console.log('\nmechanism       longest L   stopped by        time ∝ L^k (last two L)   faster than softmax from L');
for (const s of summary) {
  console.log(
    `${s.mechanism.padEnd(14)} ${String(s.longest ?? '—').padStart(10)}   ${s.stoppedBy.padEnd(16)}  ${(s.exponent === null ? '—' : s.exponent.toFixed(2)).padStart(10)}               ${s.crossover ?? '—'}`,
  );
}

fs.mkdirSync(path.dirname(args.out), { recursive: true });
fs.writeFileSync(
  args.out,
  JSON.stringify({ backend, embed, heads, batch: 1, causal: true, repeats: Number(args.repeats), rows, summary }, null, 2),
);
const points = (value: 'trainMs' | 'forwardMs') =>
  rows.filter((r) => r.status === 'ok').map((r) => ({ series: r.mechanism, x: r.length, y: r[value]! }));
const plot = args.out.replace(/\.json$/, '') + '.svg';
fs.writeFileSync(
  plot,
  await lineChartSvg(points('trainMs'), {
    title: `One attention layer, forward + backward (${backend}, E=${embed}, H=${heads}, B=1, causal)`,
    xTitle: 'sequence length L',
    yTitle: 'ms (median)',
    seriesTitle: 'attention',
    logX: true,
    logY: true,
  }),
);
console.log(`\nwrote ${args.out} and ${plot}`);
