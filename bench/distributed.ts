// One run across processes (docs/distributed.md): tokens/s of the reference GPT shape on 1 and N ranks
// of this machine (the same global batch, cut into N shards), the all-reduce's time alone and its share
// of the step (N ranks' step against one process computing one shard's rows), and the bytes each step moves; with
// --zero also each N > 1 with AdamW's moments sharded over the ranks (ZeRO-1, train.shardOptimizer), and a second
// table of rank 0's memory: the moments it keeps, the tensors TensorFlow.js holds, its peak RSS. Prints Markdown
// tables (docs/distributed.md quotes them).
//
//   npm run bench:distributed -- [--processes 1,2] [--zero] [--steps 10] [--warmup 3] [--seq 256] [--batch 8]
//                                [--vocab 4096] [--d 128] [--layers 4] [--heads 4] [--reduces 20] [--rounds 3]
//
// Each N runs as N child processes started here with free 127.0.0.1 ports (as train --processes does,
// TensorFlow threads = cores / N each); N = 1 is one process with the 'functions' executor, no all-reduce.
import { spawn } from 'node:child_process';
import { availableParallelism, loadavg } from 'node:os';
import * as tf from '@tensorflow/tfjs';
import { allReduceSum, joinCluster, type Cluster } from '../src/backend/collective.ts';
import { clusterFromEnv, CLUSTER_ENV, RANK_ENV } from '../src/backend/cluster-env.ts';
import { currentDevice } from '../src/backend/current.ts';
import { initBackend } from '../src/backend/start.ts';
import { GraphCache } from '../src/backend/tf-graph.ts';
import { exitWithUsage, parseOrExit, integerOption } from '../src/cli/command.ts';
import { freePorts } from '../src/cli/launch.ts';
import { createLanguageModel } from '../src/model/lm.ts';
import { measureThroughput, median } from '../src/train/throughput.ts';
import { resolveExecutionPlan } from '../src/train/execution-plan.ts';

const COMMAND = {
  name: 'bench:distributed',
  usage: '[options]',
  description: 'Tokens/s and the all-reduce share of the step for 1 and N ranks of one run on this machine (tensorflow backend).',
  options: {
    processes: { type: 'string', value: 'LIST', default: '1,2', help: 'rank counts to measure, e.g. 1,2' },
    zero: { type: 'boolean', help: "also measure each N > 1 with AdamW's moments sharded over the ranks (ZeRO-1), and print rank 0's memory" },
    steps: integerOption(1, 10, 'timed optimizer steps'),
    warmup: integerOption(0, 3, 'warm-up steps (the first records the step functions and resolves the group)'),
    reduces: integerOption(1, 20, 'all-reduces of the packed gradient timed alone'),
    rounds: integerOption(1, 3, 'rounds of every measurement, alternating; each figure is the median over the rounds'),
    seq: integerOption(2, 256, 'sequence length'),
    batch: integerOption(1, 8, 'rows per step, over all ranks'),
    vocab: integerOption(2, 4096, 'vocabulary'),
    d: integerOption(2, 128, 'dModel'),
    layers: integerOption(1, 4, 'layers'),
    heads: integerOption(1, 4, 'heads'),
    child: { type: 'boolean', hidden: true, help: 'internal: one measuring process (a rank, or the one process of 1 rank)' },
    sharded: { type: 'boolean', hidden: true, help: "internal: this rank keeps its slice of AdamW's moments" },
  },
  positionals: { min: 0, max: 0 },
} as const;

interface Measured {
  ranks: number;
  /** AdamW's moments sharded over the ranks (ZeRO-1). */
  sharded: boolean;
  /** With N > 1 ranks: ms per step of one process computing one shard's rows alone (no all-reduce). */
  shardAloneMs?: number;
  parameters: number;
  msPerStep: number;
  tokensPerSecond: number;
  allReduceMs: number;
  /** Rank 0's memory: the moments it keeps, the tensors TensorFlow.js holds after the timed steps, its peak RSS. */
  momentBytes: number;
  tensorBytes: number;
  maxRssBytes: number;
}

/** One rank (or the one process of N = 1): measures and, on rank 0, prints one JSON line. */
async function measureHere(values: Record<string, string>, cluster: Cluster | null): Promise<void> {
  const model = createLanguageModel({
    kind: 'gpt',
    vocabSize: Number(values.vocab),
    maxSeqLen: Number(values.seq),
    dModel: Number(values.d),
    numLayers: Number(values.layers),
    numHeads: Number(values.heads),
    mlpRatio: 4,
    dropout: 0,
    seed: 1,
    attention: { name: 'softmax', options: {} },
  } as Parameters<typeof createLanguageModel>[0]);
  const parameters = [...model.parameters().values()].reduce((n, v) => n + v.size, 0);
  const result = await measureThroughput(model, {
    batchSize: Number(values.batch),
    seqLen: Number(values.seq),
    warmup: Number(values.warmup),
    steps: Number(values.steps),
    plan: resolveExecutionPlan({ executor: cluster ? 'collective' : 'functions', shardOptimizer: Boolean(values.sharded) }, currentDevice(), cluster, model),
  });
  let allReduceMs = 0;
  if (cluster) {
    // The step's collective alone, as the step runs it: the packed [P + 2] vector in a recorded
    // TensorFlow function, its result read back so that each call has ended — after the tidy, which would
    // otherwise walk the 1.3M returned floats one by one for tensors (~1 s, once mistaken for the all-reduce).
    const packed = tf.zeros([parameters + 2]);
    const graphs = new GraphCache();
    const reduce = () => {
      const summed = tf.tidy(() => graphs.call('all-reduce', [packed], () => [allReduceSum(cluster, packed)])[0]);
      summed.dataSync();
      summed.dispose();
    };
    // Untimed: the recordings, and the ranks leaving the timed steps at different moments.
    for (let i = 0; i < 3; i++) reduce();
    const times: number[] = [];
    for (let i = 0; i < Number(values.reduces); i++) {
      const t0 = performance.now();
      reduce();
      times.push(performance.now() - t0);
    }
    graphs.dispose();
    packed.dispose();
    allReduceMs = median(times);
  }
  model.dispose();
  if (!cluster || cluster.rank === 0) {
    const measured: Measured = {
      ranks: cluster?.worldSize ?? 1,
      sharded: Boolean(cluster && values.sharded),
      parameters,
      msPerStep: result.msPerStep,
      tokensPerSecond: result.tokensPerSecond,
      allReduceMs,
      momentBytes: result.momentBytes,
      tensorBytes: result.tensorBytes,
      // ru_maxrss, in kilobytes on Linux.
      maxRssBytes: process.resourceUsage().maxRSS * 1024,
    };
    console.log(JSON.stringify(measured));
  }
}

/** Runs N ranks of this script (1: one process) and returns rank 0's measurement. */
async function measureRanks(n: number, argv: string[], sharing = n): Promise<Measured> {
  const ports = await freePorts(n);
  // `sharing`: how many processes the cores are divided among (a rank's share, also for the one-shard comparison).
  const threads = String(Math.max(1, Math.floor(availableParallelism() / sharing)));
  const children = ports.map((_, rank) => {
    const env = {
      ...process.env,
      TF_NUM_INTRAOP_THREADS: threads,
      TF_NUM_INTEROP_THREADS: threads,
      ...(n > 1 ? { [RANK_ENV]: String(rank), [CLUSTER_ENV]: ports.map((p) => `127.0.0.1:${p}`).join(',') } : {}),
    };
    const child = spawn(process.execPath, [...process.execArgv, import.meta.filename, ...argv], { env, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    return new Promise<string>((resolve, reject) =>
      child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`rank ${rank} of ${n} exited with status ${code}`)))),
    );
  });
  const outputs = await Promise.all(children);
  return JSON.parse(outputs[0].trim().split('\n').at(-1)!) as Measured;
}

function table(rows: Measured[], values: Record<string, string>): string {
  const one = rows.find((r) => r.ranks === 1);
  const lines = [
    `GPT softmax, vocab ${values.vocab}, d ${values.d}, ${values.layers} layers, ${values.heads} heads, seq ${values.seq}, ${values.batch} rows per step over all ranks; ` +
      `${values.steps} timed steps after ${values.warmup} warm-up, medians, then the median of ${values.rounds} alternating rounds; ${availableParallelism()} cores, TensorFlow threads = cores / ranks; ` +
      `load average ${loadavg()[0].toFixed(1)} at the end (other work on the machine slows every figure, the all-reduce's most)`,
    '',
    '| ranks | tok/s | ms/step | vs 1 rank | one shard alone, ms/step | step − shard alone | all-reduce alone, ms | reduced per step | sent per rank per step (ring) |',
    '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of rows) {
    const bytes = (r.parameters + 2) * 4;
    // ZeRO-1 adds the all-gather of the parameters: each rank sends its slice of ⌈P / N⌉ floats to the N − 1 others (ring).
    const gathered = r.sharded ? (r.ranks - 1) * Math.ceil(r.parameters / r.ranks) * 4 : 0;
    const sent = r.ranks > 1 ? (2 * (r.ranks - 1) * bytes) / r.ranks + gathered : 0;
    const mb = (b: number) => `${(b / 1e6).toFixed(2)} MB`;
    lines.push(
      `| ${rankLabel(r)} | ${Math.round(r.tokensPerSecond).toLocaleString('en-US')} | ${r.msPerStep.toFixed(1)} | ${one ? `${(r.tokensPerSecond / one.tokensPerSecond).toFixed(2)}×` : '–'} | ` +
        `${r.shardAloneMs !== undefined ? r.shardAloneMs.toFixed(1) : '–'} | ` +
        `${r.shardAloneMs !== undefined ? `${(r.msPerStep - r.shardAloneMs).toFixed(1)} ms (${((100 * (r.msPerStep - r.shardAloneMs)) / r.msPerStep).toFixed(0)}%)` : '–'} | ` +
        `${r.ranks > 1 ? r.allReduceMs.toFixed(1) : '–'} | ${r.ranks > 1 ? mb(bytes) : '–'} | ${r.ranks > 1 ? mb(sent) : '–'} |`,
    );
  }
  return lines.join('\n');
}

const rankLabel = (r: Measured) => `${r.ranks}${r.sharded ? ', ZeRO-1' : r.ranks > 1 ? ', DDP' : ''}`;

/** Rank 0's memory per row: what ZeRO-1 saves is the moments' share; the rest of a process is the same. */
function memoryTable(rows: Measured[]): string {
  const mib = (b: number) => `${(b / 2 ** 20).toFixed(2)} MiB`;
  const lines = [
    "Rank 0's memory after the timed steps: AdamW's moments it keeps (2 × 4 bytes × P, or of its slice when sharded), the tensors TensorFlow.js holds " +
      "(parameters, moments, caches; not the step functions' intermediates inside TensorFlow), and the process's peak resident set (Node, TensorFlow and all).",
    '',
    '| ranks | parameters | moments kept | tensors held (tf.memory) | peak RSS |',
    '| ---: | ---: | ---: | ---: | ---: |',
  ];
  for (const r of rows)
    lines.push(`| ${rankLabel(r)} | ${r.parameters.toLocaleString('en-US')} | ${mib(r.momentBytes)} | ${mib(r.tensorBytes)} | ${mib(r.maxRssBytes)} |`);
  return lines.join('\n');
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const { values } = parseOrExit(COMMAND, argv);
  if (values.child) {
    await initBackend('tensorflow', { quiet: true });
    const spec = clusterFromEnv();
    // Before the model exists: joining renames the devices.
    await measureHere(values as unknown as Record<string, string>, spec ? joinCluster(spec) : null);
    return;
  }
  const counts = String(values.processes).split(',').map(Number);
  if (counts.some((n) => !Number.isInteger(n) || n < 1)) exitWithUsage(COMMAND, `--processes ${values.processes}: expected rank counts such as 1,2`);
  // The measurements alternate, round after round, and each figure is the median over the rounds: load from
  // other work that comes and goes then weighs on every row alike instead of on whichever ran at the time.
  const rounds: Measured[][] = [];
  for (let round = 0; round < Number(values.rounds); round++) {
    const rows: Measured[] = [];
    for (const n of counts) {
      const row = await measureRanks(n, [...argv, '--child']);
      // What the step costs beyond the computation: N ranks' step against one process doing one shard's rows.
      if (n > 1) row.shardAloneMs = (await measureRanks(1, [...argv, '--child', '--batch', String(Math.ceil(Number(values.batch) / n))], n)).msPerStep;
      rows.push(row);
      if (n > 1 && values.zero) rows.push(await measureRanks(n, [...argv, '--child', '--sharded']));
    }
    rounds.push(rows);
  }
  const rows = rounds[0].map((_, i): Measured => {
    const of = (pick: (m: Measured) => number) => median(rounds.map((r) => pick(r[i])));
    const first = rounds[0][i];
    return {
      ...first,
      msPerStep: of((m) => m.msPerStep),
      tokensPerSecond: of((m) => m.tokensPerSecond),
      allReduceMs: of((m) => m.allReduceMs),
      ...(first.shardAloneMs !== undefined ? { shardAloneMs: of((m) => m.shardAloneMs!) } : {}),
    };
  });
  console.log(table(rows, values as unknown as Record<string, string>));
  if (values.zero) console.log(`\n${memoryTable(rows)}`);
}

await main();
