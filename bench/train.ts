// Training throughput of the reference GPT shape (vocab 4096, d 128, 4 layers, 4 heads, seq 256,
// batch 8) with each attention mechanism: tokens/s and ms per optimizer step after warm-up steps.
//
//   npm run bench:train -- [names…] [--replicas 1,auto] [--backend wasm|cpu|auto|tensorflow] [--steps 10]
//                          [--warmup 2] [--seq 256] [--batch 8] [--vocab 4096] [--d 128] [--layers 4] [--heads 4]
//                          [--profile] [--options '{"chunkSize":32}']   (attention options, applied to every named mechanism)
//
// --replicas: data-parallel replica counts to measure (train.dataParallel; auto = one per core); by
// default 1 (one thread) and auto.
// --profile runs tf.profile on one extra step (main thread only) and prints kernel time by kernel name.
// Besides wall time it reports the process CPU time per step, all threads together: with one replica
// on a shared machine it is the better estimate of the uncontended step time, and with several it
// shows what the parallelism costs in total work.
// The PyTorch peer (../shared/bench/torch_peer_gpt.py) does ~8,000 tokens/s on this shape on CPU
// (OpenBLAS on both cores).
import * as tf from '@tensorflow/tfjs';
import { initBackend } from '../src/backend.ts';
import { attentionNames } from '../src/model/attention/index.ts';
import { createLanguageModel } from '../src/model/lm.ts';
import type { ModelBatch } from '../src/model/lm.ts';
import { Rng } from '../src/model/rng.ts';
import { AdamW } from '../src/train/optimizer.ts';
import { trainStep } from '../src/train/trainer.ts';
import { DataParallelGroup, resolveDataParallel } from '../src/train/data-parallel.ts';
import { backendOption } from '../src/cli/backend-option.ts';
import { exitWithUsage, parseOrExit } from '../src/cli/command.ts';

const int = (min: number, fallback: number, help: string) => ({ type: 'string', value: 'N', number: { integer: true, min }, default: String(fallback), help }) as const;

const COMMAND = {
  name: 'bench:train',
  usage: '[attention names…] [options]',
  description: 'Training throughput of the reference GPT shape with each attention mechanism (default: all registered).',
  options: {
    replicas: { type: 'string', value: 'N,…', default: '1,auto', help: 'data-parallel replica counts to measure (auto = one per core)' },
    backend: backendOption('wasm'),
    steps: int(1, 10, 'timed steps'),
    warmup: int(0, 2, 'warm-up steps'),
    seq: int(1, 256, 'sequence length'),
    batch: int(1, 8, 'batch size'),
    vocab: int(1, 4096, 'vocabulary size'),
    d: int(1, 128, 'model width'),
    layers: int(1, 4, 'layers'),
    heads: int(1, 4, 'attention heads'),
    profile: { type: 'boolean', help: 'tf.profile one extra step (main thread) and print kernel time by kernel name' },
    options: { type: 'string', value: 'JSON', default: '{}', help: 'attention options applied to every named mechanism, e.g. \'{"chunkSize":32}\'' },
  },
  positionals: { max: Infinity, name: 'attention names' },
} as const;

function parseArgs(argv: string[]) {
  const { values, positionals } = parseOrExit(COMMAND, argv);
  let options: Record<string, unknown>;
  try {
    options = JSON.parse(values.options) as Record<string, unknown>;
  } catch (err) {
    exitWithUsage(COMMAND, `--options is not JSON (${(err as Error).message})`);
  }
  const replicas = values.replicas.split(',');
  if (!replicas.every((r) => r === 'auto' || /^[1-9]\d*$/.test(r))) exitWithUsage(COMMAND, `--replicas must be replica counts or auto, separated by commas (got '${values.replicas}')`);
  const known = attentionNames();
  const unknown = positionals.filter((n) => !known.includes(n));
  if (unknown.length > 0) exitWithUsage(COMMAND, `unknown attention '${unknown.join("', '")}'; allowed: ${known.join(', ')}`);
  return { ...values, names: positionals.length > 0 ? positionals : known, options, replicas };
}

function randomBatch(rng: Rng, batch: number, seq: number, vocab: number): ModelBatch {
  const inputIds = new Int32Array(batch * seq);
  const labels = new Int32Array(batch * seq);
  for (let r = 0; r < batch; r++) {
    let prev = rng.int(vocab);
    for (let t = 0; t < seq; t++) {
      const next = rng.int(vocab);
      inputIds[r * seq + t] = prev;
      labels[r * seq + t] = next;
      prev = next;
    }
  }
  return { batchSize: batch, seqLen: seq, inputIds, labels };
}

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const backend = await initBackend(o.backend);
  const tokensPerStep = o.batch * o.seq;
  console.log(`bench:train on ${backend}: GPT vocab ${o.vocab}, d ${o.d}, ${o.layers} layers, ${o.heads} heads, seq ${o.seq}, batch ${o.batch}; ${o.warmup} warm-up + ${o.steps} timed steps`);
  const replicaCounts = [...new Set(o.replicas.map((r) => resolveDataParallel(r === 'auto' ? 'auto' : Number(r), backend, o.batch)))];
  const rows: string[][] = [];
  for (const name of o.names) for (const replicas of replicaCounts) {
    const model = createLanguageModel({
      kind: 'gpt', vocabSize: o.vocab, maxSeqLen: o.seq, dModel: o.d, numLayers: o.layers, numHeads: o.heads,
      mlpRatio: 4, dropout: 0, bias: true, attention: { name, options: o.options }, seed: 1,
    });
    const optimizer = new AdamW(model.parameters(), { beta1: 0.9, beta2: 0.95, eps: 1e-8, weightDecay: 0.1 });
    const group = replicas > 1 ? await DataParallelGroup.start(model, replicas) : null;
    const step = (batch: ModelBatch) => {
      const opts = { lr: 3e-4, clip: 1, dropoutSeed: null };
      return group ? group.step(optimizer, [batch], opts) : trainStep(model, optimizer, [batch], opts);
    };
    const rng = new Rng(7);
    const times: number[] = [];
    const cpuTimes: number[] = [];
    let loss = NaN;
    for (let s = 0; s < o.warmup + o.steps; s++) {
      const batch = randomBatch(rng, o.batch, o.seq, o.vocab);
      const t0 = performance.now();
      const c0 = process.cpuUsage();
      loss = (await step(batch)).loss;
      const cpu = process.cpuUsage(c0);
      if (s >= o.warmup) {
        times.push(performance.now() - t0);
        cpuTimes.push((cpu.user + cpu.system) / 1000);
      }
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
    const wall = median(times);
    const cpu = median(cpuTimes);
    const rate = (ms: number) => (tokensPerStep / (ms / 1000)).toFixed(0);
    rows.push([name, String(replicas), rate(wall), wall.toFixed(0), rate(cpu), cpu.toFixed(0), loss.toFixed(3)]);
    console.log(`  ${name} × ${replicas}: median ${wall.toFixed(0)} ms/step wall (${rate(wall)} tokens/s), ${cpu.toFixed(0)} CPU-ms/step (${rate(cpu)} tokens per CPU-second)`);
    if (o.profile) {
      const batch = randomBatch(rng, o.batch, o.seq, o.vocab);
      const info = await tf.profile(async () => {
        await step(batch);
      });
      // By kernel name, and matrix products by operand shapes. 'forward' entries are tf.customGrad
      // wrappers whose time is already counted in the kernels they call, so they are left out.
      const byKernel = new Map<string, { ms: number; calls: number }>();
      let total = 0;
      for (const k of info.kernels) {
        if (k.name === 'forward') continue;
        const ms = typeof k.kernelTimeMs === 'number' ? k.kernelTimeMs : 0;
        for (const key of [k.name, ...(k.name === 'BatchMatMul' ? [`  BatchMatMul ${JSON.stringify(k.inputShapes)}`] : [])]) {
          const e = byKernel.get(key) ?? { ms: 0, calls: 0 };
          e.ms += ms;
          e.calls++;
          byKernel.set(key, e);
        }
        total += ms;
      }
      console.log(`  profile (${name}): ${total.toFixed(0)} ms kernel time`);
      for (const [k, e] of [...byKernel].sort((a, b) => b[1].ms - a[1].ms).slice(0, 25)) {
        console.log(`    ${k.padEnd(52)} ${e.ms.toFixed(1).padStart(8)} ms ${((100 * e.ms) / total).toFixed(1).padStart(5)}%  ${e.calls} calls`);
      }
    }
    await group?.close();
    optimizer.dispose();
    model.dispose();
  }
  const header = ['attention', 'replicas', 'tokens/s (wall)', 'ms/step (wall)', 'tokens per CPU-s', 'CPU-ms/step', 'last loss'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  console.log('\n' + line(header));
  console.log(`| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`);
  for (const r of rows) console.log(line(r));
}

main().catch((err) => {
  console.error(err instanceof Error ? err.message : err);
  process.exit(1);
});
