// Our training step against the PyTorch peer's, in lock step (issue 35; docs/benchmarks.md): every contender — our
// step with each attention named (tensorflow backend, recorded functions, fused kernels) and the peer eager and
// under torch.compile (bench/peer_lockstep.py, processes kept alive and idle between blocks) — runs a block of
// steps in turn, the order rotated every round. Each round gives paired ratios of contenders measured within
// seconds of each other; the table gives their median [IQR]. bench:train's whole-process comparison cannot: this
// host's speed drifts by ±20% over minutes, and the process that ran first in a round was ~30% faster.
//
//   npm run bench:versus -- [attention names…] --peer PYTHON [--rounds 12] [--block 3] [--warmup 2] [--peer-threads 2]
//                           [--seq 256] [--batch 8] [--vocab 4096] [--d 128] [--layers 4] [--heads 4]
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as readline from 'node:readline';
import { PROJECT_ROOT } from '../src/backend/native-build.ts';
import { BENCH_SHAPE_OPTIONS, integerOption, parseOrExit } from '../src/cli/command.ts';
import { attentionNames } from '../src/model/attention/index.ts';
import { median, medianAndQuartiles } from '../src/train/throughput.ts';

const PEER_SCRIPT = path.resolve(PROJECT_ROOT, '..', 'shared', 'bench', 'torch_peer_gpt.py');
const PEER_LOCKSTEP = path.join(import.meta.dirname, 'peer_lockstep.py');
const STEP_LOCKSTEP = path.join(import.meta.dirname, 'step_lockstep.ts');
/** Our attention → the peer's (--attn of the peer script), where it has one. */
const PEER_ATTENTION: Record<string, string> = { softmax: 'softmax', 'linear-elu': 'linear' };

const COMMAND = {
  name: 'bench:versus',
  usage: '[attention names…] --peer PYTHON [options]',
  description: "Our training step against PyTorch's (eager and torch.compile), blocks of steps in turn in live processes.",
  options: {
    peer: { type: 'string', value: 'PYTHON', help: `the Python with torch that runs the peer (${path.relative(PROJECT_ROOT, PEER_SCRIPT)})` },
    'peer-threads': integerOption(1, 2, "the peer's threads (torch.set_num_threads)"),
    rounds: integerOption(2, 12, 'timed rounds (each one block of every contender)'),
    block: integerOption(1, 3, 'steps per block; a block counts by its median step'),
    warmup: integerOption(0, 2, 'untimed rounds first (recording, torch.compile)'),
    ...BENCH_SHAPE_OPTIONS,
  },
  positionals: { max: Infinity, name: 'attention names' },
} as const;

interface Contender {
  label: string;
  attention: string;
  /** Runs `steps` steps; their wall milliseconds and the process's CPU milliseconds (all threads). */
  run(steps: number): Promise<{ ms: number[]; cpuMs: number[] }>;
  close(): void;
}

async function main(): Promise<void> {
  const { values, positionals } = parseOrExit(COMMAND, process.argv.slice(2));
  const n = (k: keyof typeof COMMAND.options) => Number(values[k]);
  const names = positionals.length > 0 ? positionals : ['softmax', 'slay'];
  const unknown = names.filter((name) => !attentionNames().includes(name));
  if (unknown.length > 0) throw new Error(`bench:versus: unknown attention ${unknown.join(', ')} (one of ${attentionNames().join(', ')})`);
  if (!values.peer)
    throw new Error('bench:versus: --peer PYTHON is required (a Python with torch, e.g. .venv-hf/bin/python after `npm run setup:transformers`)');
  if (!fs.existsSync(PEER_SCRIPT)) throw new Error(`bench:versus: the peer script ${PEER_SCRIPT} is not there`);
  const shape = { vocab: n('vocab'), d: n('d'), layers: n('layers'), heads: n('heads'), seq: n('seq'), batch: n('batch') };
  console.log(
    `bench:versus: ${n('rounds')} rounds of ${n('block')}-step blocks after ${n('warmup')}, batch ${shape.batch} × ${shape.seq}, vocab ${shape.vocab}, d ${shape.d}, ${shape.layers} layers × ${shape.heads} heads; peer threads ${n('peer-threads')}`,
  );
  const contenders: Contender[] = [];
  try {
    const dims = ['vocab', 'd', 'layers', 'heads', 'seq', 'batch'] as const;
    for (const name of names)
      contenders.push(
        await live(process.execPath, ['--import', 'tsx', STEP_LOCKSTEP, name, ...dims.flatMap((k) => [`--${k}`, String(shape[k])])], name, (r) => r),
      );
    for (const name of names.filter((name) => PEER_ATTENTION[name])) {
      for (const compile of [false, true]) {
        const args = [PEER_LOCKSTEP, '--peer-script', PEER_SCRIPT, '--attn', PEER_ATTENTION[name], '--threads', String(n('peer-threads'))];
        args.push(...dims.flatMap((k) => [`--${k}`, String(shape[k])]), ...(compile ? ['--compile'] : []));
        contenders.push(await live(values.peer, args, name, (r) => `${r}, ${n('peer-threads')} thread${n('peer-threads') > 1 ? 's' : ''}`));
      }
    }
    const perRound = new Map(contenders.map((c) => [c, { ms: [] as number[], cpuMs: [] as number[] }]));
    for (let round = 0; round < n('warmup') + n('rounds'); round++) {
      // Rotated order: each contender runs first, middle and last equally often.
      const order = contenders.map((_, i) => contenders[(i + round) % contenders.length]);
      for (const c of order) {
        const { ms, cpuMs } = await c.run(n('block'));
        if (round < n('warmup')) continue;
        perRound.get(c)!.ms.push(median(ms));
        perRound.get(c)!.cpuMs.push(median(cpuMs));
      }
      if (round >= n('warmup')) process.stdout.write(`\rbench:versus: round ${round - n('warmup') + 1} of ${n('rounds')}`);
    }
    console.log('\n');
    report(contenders, perRound, shape.batch * shape.seq);
  } finally {
    for (const c of contenders) c.close();
  }
}

/** The table: each contender's median ms/step and tokens/s; ours against the fastest peer and against our softmax, per round. */
function report(contenders: Contender[], perRound: Map<Contender, { ms: number[]; cpuMs: number[] }>, tokens: number): void {
  const rounds = perRound.get(contenders[0])!.ms.length;
  // Per round, the faster PyTorch run (eager or compiled) of this attention: by wall time, or by CPU time.
  const bestPeer = (attention: string, by: 'ms' | 'cpuMs') =>
    Array.from({ length: rounds }, (_, r) =>
      Math.min(...contenders.filter((c) => c.label.startsWith('pytorch') && c.attention === attention).map((c) => perRound.get(c)![by][r])),
    );
  const softmax = contenders.find((c) => c.label === 'tensorflow' && c.attention === 'softmax');
  console.log(
    '| attention | contender | ms/step (median) | tokens/s | CPU-ms/step | × fastest PyTorch (paired, median [IQR]) | × fastest PyTorch in CPU time (paired) | step time ÷ our softmax (paired) |',
  );
  console.log('| --- | --- | ---: | ---: | ---: | --- | --- | --- |');
  for (const c of contenders) {
    const { ms, cpuMs } = perRound.get(c)!;
    const [peers, peersCpu] = [bestPeer(c.attention, 'ms'), bestPeer(c.attention, 'cpuMs')];
    const vsPeer = Number.isFinite(peers[0]) ? medianAndQuartiles(ms.map((t, r) => peers[r] / t)) : '';
    const vsPeerCpu = Number.isFinite(peersCpu[0]) ? medianAndQuartiles(cpuMs.map((t, r) => peersCpu[r] / t)) : '';
    const vsSoftmax = softmax && c.label === 'tensorflow' && c !== softmax ? medianAndQuartiles(ms.map((t, r) => t / perRound.get(softmax)!.ms[r])) : '';
    const row = [c.attention, c.label, median(ms).toFixed(1), Math.round((tokens * 1000) / median(ms)), median(cpuMs).toFixed(1), vsPeer, vsPeerCpu, vsSoftmax];
    console.log(`| ${row.join(' | ')} |`);
  }
}

/** A contender as a live process speaking the lock-step protocol (step_lockstep.ts, peer_lockstep.py), ready once its model is built. */
async function live(command: string, args: string[], attention: string, labelOf: (ready: string) => string): Promise<Contender> {
  const child: ChildProcessWithoutNullStreams = spawn(command, args, { stdio: ['pipe', 'pipe', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr = (stderr + chunk.toString()).slice(-4000)));
  const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const next = async () => {
    for (;;) {
      const line = await lines.next();
      if (line.done) throw new Error(`bench:versus: ${command} ${path.basename(args[0])} ended: ${stderr.trim().split('\n').pop() ?? ''}`);
      if (line.value.startsWith('{')) return JSON.parse(line.value) as { ready?: string; fusedKernels?: string; ms?: number[]; cpuMs?: number[] };
    }
  };
  const ready = await next();
  if (ready.fusedKernels) console.log(`bench:versus: ${attention} on ${ready.ready}, fused CPU kernels ${ready.fusedKernels}`);
  return {
    label: labelOf(ready.ready!),
    attention,
    async run(steps) {
      child.stdin.write(`steps ${steps}\n`);
      const { ms, cpuMs } = await next();
      return { ms: ms!, cpuMs: cpuMs! };
    },
    close: () => child.stdin.end(),
  };
}

await main();
