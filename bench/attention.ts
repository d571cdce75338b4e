// Attention scaling benchmark: one attention layer (q/k/v/out projections + mechanism) at the SLAY
// paper's shape (embedding 256, 8 heads, batch 1, causal), forward and forward + backward, with its
// peak memory, over sequence lengths 128, 256, … up to a cap, until a length runs out of memory or
// time.
//
// Each (mechanism, length) runs in its own child process: an allocation failure leaves the wasm heap
// unusable ("memory access out of bounds" on every later op), so one OOM must not poison the next
// measurement; a fresh process also makes its memory high-water mark that of this measurement alone.
// Timings are medians after a warm-up. Memory is reported two ways: the peak of live tensor bytes
// during one forward + backward (peakTensorBytes) and, on wasm, the heap's size at the end
// (WebAssembly memory only grows, so this is the allocator's high-water mark, fragmentation included
// — what must fit in the 4 GB wasm heap).
import * as tf from '@tensorflow/tfjs';
import fs from 'node:fs';
import path from 'node:path';
import { initBackend } from '../src/backend/start.ts';
import { chooseBackend } from '../src/backend/device.ts';
import { backendOption } from '../src/cli/backend-option.ts';
import { listOption, numberListOption, optionsOrExit, type CommandSpec } from '../src/cli/command.ts';
import { median } from '../src/train/throughput.ts';
import { benchmarkEntry, ISOLATED_OPTIONS, measureInChild, type MeasurementStatus } from '../src/paper/isolated.ts';
import { lineChartSvg } from '../src/report/plot.ts';
import { attentionNames, createAttention } from '../src/model/attention/index.ts';
import { matMulTransposeB, weightGradient } from '../src/model/ops.ts';
import { currentDevice } from '../src/backend/current.ts';
import { GraphCache } from '../src/backend/tf-graph.ts';
import { gradientsThroughGraph } from '../src/train/compiled-step.ts';
import { Rng } from '../src/core/rng.ts';

const SPEC = {
  name: 'bench:attention',
  usage: '[options]',
  description: `Times one attention layer (q/k/v/out projections + mechanism) at the SLAY paper's shape, forward and
forward + backward, with its peak memory, for L = 128, 256, … until a length runs out of memory or
time; each measurement runs in its own process. Prints the table and the scaling summary; writes
JSON and log-log SVGs of time and memory.`,
  options: {
    backend: backendOption('wasm'),
    ...ISOLATED_OPTIONS,
    'timeout-s': { ...ISOLATED_OPTIONS['timeout-s'], default: '600' },
    'max-length': {
      type: 'string',
      value: 'L',
      number: { integer: true, min: 1 },
      default: '16384',
      help: "longest L of the series 128, 256, … (131072 reaches the paper's range)",
    },
    lengths: { type: 'string', value: 'L,…', help: 'exactly these lengths instead of the series' },
    repeats: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '5', help: 'timed runs per measurement (the median is reported)' },
    'max-timed-s': {
      type: 'string',
      value: 'S',
      number: { integer: true, min: 1 },
      default: '120',
      help: "fewer repeats once a measurement's timed runs took this long (at least one)",
    },
    embed: { type: 'string', value: 'E', number: { integer: true, min: 1 }, default: '256', help: 'embedding width' },
    heads: { type: 'string', value: 'H', number: { integer: true, min: 1 }, default: '8', help: 'attention heads' },
    out: { type: 'string', value: 'FILE', default: 'reports/bench-attention.json', help: 'JSON output (plots beside it: -time.svg, -memory.svg)' },
    merge: {
      type: 'string',
      value: 'a.json,…',
      help: "no measurement: the table and plots of earlier runs' results (a mechanism's rows in a later file replace earlier ones)",
    },
  },
} as const satisfies CommandSpec;

/** The command line as typed options (the only place that reads process.argv). */
const parseOptions = (argv: string[]) =>
  optionsOrExit(
    SPEC,
    (v) => ({
      child: v.child,
      backend: chooseBackend({ flag: v.backend, recipe: 'wasm' }).choice,
      maxLength: v['max-length'],
      lengths: numberListOption(v.lengths, 'lengths', { integer: true, min: 1 }),
      mechanisms: listOption(v.mechanisms, 'mechanisms', attentionNames()),
      repeats: v.repeats,
      maxTimedS: v['max-timed-s'],
      timeoutS: v['timeout-s'],
      embed: v.embed,
      heads: v.heads,
      out: v.out,
      merge: listOption(v.merge, 'merge'),
    }),
    argv,
  );

type Options = ReturnType<typeof parseOptions>;

interface Row {
  mechanism: string;
  length: number;
  forwardMs: number | null;
  trainMs: number | null;
  tokensPerS: number | null;
  /** Peak of live tensor bytes during one forward + backward. */
  peakTensorMB: number | null;
  /** wasm only: the heap's size after the measurement (its high-water mark). */
  heapMB: number | null;
  status: MeasurementStatus;
  error?: string;
}

const MB = 2 ** 20;

async function time(fn: () => tf.Tensor | tf.Tensor[]): Promise<number> {
  const t0 = performance.now();
  const out = fn();
  const list = Array.isArray(out) ? out : [out];
  await Promise.all(list.map((t) => t.data()));
  tf.dispose(list);
  return performance.now() - t0;
}

/** The wasm heap's current size (it only grows); null on other backends. */
function wasmHeapBytes(): number | null {
  const backend = tf.backend() as unknown as { wasm?: { HEAPU8: Uint8Array } };
  return backend.wasm ? backend.wasm.HEAPU8.buffer.byteLength : null;
}

/**
 * The peak of live tensor bytes while `fn` runs. On wasm the allocator's own count (its malloc and
 * free wrapped: every buffer once); elsewhere the engine's tensor bytes after every kernel (views of
 * one buffer counted each). Not tf.profile: it keeps a record per kernel, and spreading ~10⁵ of them
 * into Math.max fails at long lengths.
 */
function peakTensorBytes(fn: () => void): number {
  const wasm = (tf.backend() as unknown as { wasm?: { _malloc(n: number): number; _free(p: number): void } }).wasm;
  if (wasm) {
    wasm._free(wasm._malloc(8)); // emscripten replaces these stubs with the raw exports on first call
    const [malloc, free] = [wasm._malloc, wasm._free];
    const sizes = new Map<number, number>();
    let live = 0;
    let peak = 0;
    wasm._malloc = (n) => {
      const pointer = malloc(n) >>> 0;
      sizes.set(pointer, n);
      live += n;
      peak = Math.max(peak, live);
      return pointer;
    };
    wasm._free = (pointer) => {
      live -= sizes.get(pointer >>> 0) ?? 0;
      sizes.delete(pointer >>> 0);
      free(pointer);
    };
    try {
      fn();
    } finally {
      [wasm._malloc, wasm._free] = [malloc, free];
    }
    return peak;
  }
  const engine = tf.engine();
  const runKernel = engine.runKernel;
  let peak = engine.state.numBytes;
  engine.runKernel = ((...args: Parameters<typeof runKernel>) => {
    const out = runKernel.apply(engine, args);
    peak = Math.max(peak, engine.state.numBytes);
    return out;
  }) as typeof runKernel;
  try {
    fn();
  } finally {
    engine.runKernel = runKernel;
  }
  return peak;
}

/**
 * The layer's projections as ops that keep only their inputs for the backward pass, as a fused
 * kernel would: x [L, E]·W → heads [1, H, L, E/H], and back, heads → [L, E]·W. Written out because
 * tfjs's autodiff of the same matMul/reshape/transpose keeps every intermediate until the backward
 * pass ends (Reshape and Add save their inputs to read shapes): ~24 KB per token for the projections
 * alone (measured at L = 16384), more than any linear attention needs, so the harness would hide
 * what is measured.
 */
function projections(heads: number, headDim: number) {
  const toHeads = (t: tf.Tensor) => tf.transpose(tf.reshape(t, [1, -1, heads, headDim]), [0, 2, 1, 3]);
  const fromHeads = (t: tf.Tensor) => tf.reshape(tf.transpose(t, [0, 2, 1, 3]), [-1, heads * headDim]) as tf.Tensor2D;
  const split = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const [x, w, save] = args as [tf.Tensor2D, tf.Tensor2D, tf.GradSaveFunc];
    save([x, w]);
    return {
      value: toHeads(tf.matMul(x, w)),
      gradFunc: (dy: tf.Tensor, [sx, sw]: tf.Tensor[]) =>
        tf.tidy(() => {
          const g = fromHeads(dy);
          return [matMulTransposeB(g, sw as tf.Tensor2D), weightGradient(sx as tf.Tensor2D, g)];
        }),
    };
  }) as (x: tf.Tensor2D, w: tf.Tensor2D) => tf.Tensor4D;
  const merge = tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const [o, w, save] = args as [tf.Tensor4D, tf.Tensor2D, tf.GradSaveFunc];
    save([o, w]);
    return {
      value: tf.matMul(fromHeads(o), w),
      gradFunc: (dy: tf.Tensor, [so, sw]: tf.Tensor[]) =>
        tf.tidy(() => [toHeads(matMulTransposeB(dy as tf.Tensor2D, sw as tf.Tensor2D)), weightGradient(fromHeads(so), dy as tf.Tensor2D)]),
    };
  }) as (o: tf.Tensor4D, w: tf.Tensor2D) => tf.Tensor2D;
  return { split, merge };
}

/** Σ y·r for one fixed random row r [1, E]: a loss whose gradient (r, broadcast) needs no saved activation. */
function probe(r: tf.Tensor2D) {
  return tf.customGrad((...args: Array<tf.Tensor | tf.GradSaveFunc>) => {
    const y = args[0] as tf.Tensor2D;
    return { value: tf.sum(tf.mul(y, r)), gradFunc: (dy: tf.Tensor) => tf.mul(tf.broadcastTo(r, y.shape), dy) };
  }) as (y: tf.Tensor2D) => tf.Scalar;
}

/** One measurement, in this process (child mode). */
async function measure(opts: Options, mechanism: string, length: number): Promise<Row> {
  await initBackend(opts.backend, { quiet: true });
  const { embed, heads } = opts;
  const headDim = embed / heads;
  const rng = new Rng(0);
  const weight = () =>
    tf.variable(
      tf.tensor2d(
        Float32Array.from(rng.normalArray(embed * embed), (x) => x * 0.05),
        [embed, embed],
      ),
    );
  const [wq, wk, wv, wo] = [weight(), weight(), weight(), weight()];
  const attn = createAttention(mechanism, { numHeads: heads, headDim, causal: true, seed: 1 });
  const params = [wq, wk, wv, wo, ...attn.trainableVariables];
  const x = tf.tensor2d(Float32Array.from(rng.normalArray(length * embed)), [length, embed]);
  const { split, merge } = projections(heads, headDim);
  const loss = probe(tf.tensor2d(Float32Array.from(rng.normalArray(embed)), [1, embed]));
  const layer = () => merge(attn.apply(split(x, wq), split(x, wk), split(x, wv)), wo);
  // On tensorflow both run as TensorFlow functions once recorded twice (train.graph's path,
  // src/train/compiled-step.ts): the input and every weight and buffer are feeds.
  const graphs = currentDevice().graphSteps ? new GraphCache() : null;
  const state = [...params, ...attn.buffers];
  const forward = () => tf.tidy(() => (graphs ? graphs.call('forward', [x, ...state], () => [layer()])[0] : layer()));
  const train = () =>
    tf.tidy(() => {
      const { value, grads } = gradientsThroughGraph(graphs, 'train', [x], state, params, () => loss(layer()));
      return [value, ...Object.values(grads)];
    });
  const peakBytes = peakTensorBytes(() => tf.dispose(train())); // doubles as the warm-up (and builds the function)
  await time(forward);
  // Up to `repeats` timed runs of each, fewer once they have taken maxTimedS (long sequences).
  const timed = async (fn: () => tf.Tensor | tf.Tensor[]) => {
    const ms: number[] = [];
    while (ms.length < opts.repeats && (ms.length === 0 || ms.reduce((a, b) => a + b) < opts.maxTimedS * 500)) ms.push(await time(fn));
    return ms;
  };
  const fwd = await timed(forward);
  const fb = await timed(train);
  const trainMs = median(fb);
  const heap = wasmHeapBytes();
  return {
    mechanism,
    length,
    forwardMs: median(fwd),
    trainMs,
    tokensPerS: (length / trainMs) * 1000,
    peakTensorMB: peakBytes / MB,
    heapMB: heap === null ? null : heap / MB,
    status: 'ok',
  };
}

/** One measurement in its own process (its arguments forwarded). */
function measureIsolated(opts: Options, mechanism: string, length: number): Promise<Row> {
  const forwarded = [
    '--backend',
    opts.backend,
    '--repeats',
    String(opts.repeats),
    '--max-timed-s',
    String(opts.maxTimedS),
    '--embed',
    String(opts.embed),
    '--heads',
    String(opts.heads),
  ];
  const empty = { mechanism, length, forwardMs: null, trainMs: null, tokensPerS: null, peakTensorMB: null, heapMB: null };
  return measureInChild(new URL(import.meta.url).pathname, forwarded, [mechanism, length], opts.timeoutS, empty);
}

/** Growth exponent k of fwd+bwd time ∝ L^k between two rows. */
const exponent = (a: Row, b: Row) => Math.log(b.trainMs! / a.trainMs!) / Math.log(b.length / a.length);

/** Per mechanism: longest length reached, growth exponents, crossover with softmax, memory per token. */
function scalingSummary(all: Row[], mechanisms: string[]) {
  const ok = (m: string) => all.filter((r) => r.mechanism === m && r.status === 'ok');
  const softmax = new Map(ok('softmax').map((r) => [r.length, r]));
  const softmaxFailedAt = all.find((r) => r.mechanism === 'softmax' && r.status !== 'ok')?.length ?? null;
  return mechanisms.map((mechanism) => {
    const done = ok(mechanism);
    const last = done.at(-1);
    const prev = done.at(-2);
    const from4096 = done.find((r) => r.length === 4096);
    // First length at which this mechanism is faster than softmax, or runs where softmax could not.
    const crossover =
      mechanism === 'softmax'
        ? null
        : (done.find((r) => {
            const s = softmax.get(r.length);
            return s ? r.trainMs! < s.trainMs! : softmaxFailedAt !== null && r.length >= softmaxFailedAt;
          })?.length ?? null);
    const failed = all.find((r) => r.mechanism === mechanism && r.status !== 'ok');
    return {
      mechanism,
      longest: last?.length ?? null,
      stoppedBy: failed ? `${failed.status} at ${failed.length}` : 'cap',
      exponentLastTwo: last && prev ? exponent(prev, last) : null,
      exponentFrom4096: last && from4096 && last !== from4096 ? exponent(from4096, last) : null,
      crossover,
      /** At the longest length: peak bytes per token (wasm heap, else tensors). */
      bytesPerToken: last ? ((last.heapMB ?? last.peakTensorMB!) * MB) / last.length : null,
    };
  });
}

/** Measures every (mechanism, length), printing each row as it comes; a mechanism stops at its first failure. */
async function measureAll(opts: Options, mechanisms: string[]): Promise<Row[]> {
  const lengths = opts.lengths ?? Array.from({ length: 20 }, (_, i) => 128 * 2 ** i).filter((l) => l <= opts.maxLength);
  const fmt = (v: number | null, status: string, digits = 1) => (v === null ? status : v.toFixed(digits));
  console.log('mechanism           L      fwd ms   fwd+bwd ms   tokens/s  tensor peak MB   heap MB');
  const rows: Row[] = [];
  for (const mechanism of mechanisms) {
    for (const length of lengths) {
      const row = await measureIsolated(opts, mechanism, length);
      rows.push(row);
      console.log(
        `${mechanism.padEnd(14)} ${String(length).padStart(7)} ${fmt(row.forwardMs, row.status).padStart(11)} ${fmt(row.trainMs, row.status).padStart(12)} ${fmt(row.tokensPerS, row.status, 0).padStart(10)} ${fmt(row.peakTensorMB, row.status).padStart(16)} ${fmt(row.heapMB, row.status === 'ok' ? '—' : row.status).padStart(9)}`,
      );
      if (row.status !== 'ok') break;
    }
  }
  return rows;
}

/** Rows of earlier runs' JSON files (and the first one's backend); a mechanism's rows in a later file replace those of earlier ones. */
function mergedResults(files: string[]): { backend: string; rows: Row[] } {
  const byMechanism = new Map<string, Row[]>();
  let backend = '';
  for (const file of files) {
    const results = JSON.parse(fs.readFileSync(file, 'utf8')) as { backend: string; rows: Row[] };
    backend ||= results.backend;
    for (const mechanism of new Set(results.rows.map((r) => r.mechanism)))
      byMechanism.set(
        mechanism,
        results.rows.filter((r) => r.mechanism === mechanism),
      );
  }
  return { backend, rows: [...byMechanism.values()].flat() };
}

function printSummary(summary: ReturnType<typeof scalingSummary>): void {
  console.log('\nmechanism       longest L   stopped by        k (last two L)   k (4096 → longest)   bytes/token at longest   faster than softmax from L');
  const k = (v: number | null) => (v === null ? '—' : v.toFixed(2));
  for (const s of summary) {
    console.log(
      `${s.mechanism.padEnd(14)} ${String(s.longest ?? '—').padStart(10)}   ${s.stoppedBy.padEnd(16)}  ${k(s.exponentLastTwo).padStart(14)}   ${k(s.exponentFrom4096).padStart(18)}   ${(s.bytesPerToken === null ? '—' : Math.round(s.bytesPerToken).toLocaleString('en-US')).padStart(22)}   ${s.crossover ?? '—'}`,
    );
  }
}

/** The JSON results and the log-log plots of time and memory against L beside them. */
async function writeResults(opts: Options, backend: string, rows: Row[], summary: ReturnType<typeof scalingSummary>): Promise<void> {
  fs.mkdirSync(path.dirname(opts.out), { recursive: true });
  fs.writeFileSync(
    opts.out,
    JSON.stringify(
      { backend, embed: opts.embed, heads: opts.heads, batch: 1, causal: true, repeats: opts.repeats, maxTimedS: opts.maxTimedS, rows, summary },
      null,
      2,
    ),
  );
  const base = opts.out.replace(/\.json$/, '');
  const points = (value: (r: Row) => number | null) => rows.filter((r) => r.status === 'ok').map((r) => ({ series: r.mechanism, x: r.length, y: value(r)! }));
  const shape = `${backend}, E=${opts.embed}, H=${opts.heads}, B=1, causal`;
  const plots: Array<[string, string, string, (r: Row) => number | null]> = [
    [`${base}-time.svg`, `One attention layer, forward + backward (${shape})`, 'ms (median)', (r) => r.trainMs],
    [
      `${base}-memory.svg`,
      `Peak memory of one forward + backward (${shape})`,
      backend === 'wasm' ? 'MB (wasm heap high-water mark)' : 'MB (peak of live tensors)',
      (r) => r.heapMB ?? r.peakTensorMB,
    ],
  ];
  for (const [file, title, yTitle, value] of plots) {
    fs.writeFileSync(file, await lineChartSvg(points(value), { title, xTitle: 'sequence length L', yTitle, seriesTitle: 'attention', logX: true, logY: true }));
  }
  console.log(`\nwrote ${opts.out}, ${plots.map(([file]) => file).join(' and ')}`);
}

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2));
  if (!(await benchmarkEntry(opts, (mechanism, length) => measure(opts, mechanism, length)))) return;
  let backend: string;
  let rows: Row[];
  if (opts.merge) {
    ({ backend, rows } = mergedResults(opts.merge));
  } else {
    ({ backend } = await initBackend(opts.backend, { quiet: true }));
    console.log(
      `backend ${backend}; embedding ${opts.embed}, ${opts.heads} heads, batch 1, causal; median of ${opts.repeats} (fewer past ${opts.maxTimedS} s of timed runs)\n`,
    );
    rows = await measureAll(opts, opts.mechanisms ?? attentionNames());
  }
  const summary = scalingSummary(rows, [...new Set(rows.map((r) => r.mechanism))]);
  printSummary(summary);
  await writeResults(opts, backend, rows, summary);
}

await main();
