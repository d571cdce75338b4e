// Training throughput of the reference GPT shape (vocab 4096, d 128, 4 layers, 4 heads, seq 256,
// batch 8) with each attention mechanism: tokens/s and ms per optimizer step after warm-up steps.
//
//   npm run bench:train -- [names…] [--backends tensorflow,wasm] [--replicas 1,auto] [--graph on,off] [--xla off,on] [--xla-executor] [--peer PYTHON]
//                          [--peer-threads 1,2] [--rounds 1] [--steps 10] [--warmup 4] [--seq 256] [--batch 8] [--vocab 4096] [--d 128]
//                          [--layers 4] [--heads 4] [--profile] [--options '{"chunkSize":32}']
//
// Each backend runs in its own process (a process holds one tfjs backend), one after the other, so
// that one invocation compares them back to back; --peer adds the PyTorch peer (PEER below, a script
// of the shared folder beside the checkout, left out where it is absent; docs/benchmarks.md: same
// shape, eager and torch.compile, --threads 1 and 2) run by that Python, and the table gives every
// row's ratio to the peer's fastest run. --rounds R repeats the whole comparison R times, one after the
// other, and gives each row's median over the rounds, its ratio to the peer as the median of the rounds'
// ratios, the peer measured first in every other round: this host's speed drifts by ±20% over minutes, and
// a row measured a few minutes after another would otherwise carry the drift into their ratio.
// --replicas: data-parallel replica counts (train.dataParallel; auto = what a recipe's `auto` picks
// on that backend). Besides wall time it reports the process CPU time per step, all threads
// together: on a shared machine it is the steadier figure, and with several replicas it shows what
// the parallelism costs in total work.
// --graph: on tensorflow, measure the step as TF functions (train.graph, the default) and op by op;
// --xla: the function rows with and/or without XLA (train.xla). Each row also gives the values read
// back into JavaScript per step (backend/readback.ts).
// --xla-executor: on tensorflow, also rows of train.executor xla (the step compiled by XLA and run by a jax process,
// docs/xla.md). Every row gives its first step's wall time apart ("first step s": recording, exporting and compiling),
// which the warm-up steps keep out of the median.
// --profile runs tf.profile on one extra step (main thread) and prints kernel time by kernel name (on
// tensorflow for the op-by-op rows only: a function call is one op that tf.profile cannot see into).
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { initBackend } from '../src/backend/start.ts';
import { BACKEND_ENV, BACKENDS, chooseBackend } from '../src/backend/device.ts';
import { PROJECT_ROOT } from '../src/backend/native-build.ts';
import { exitWithUsage, parseOrExit, integerOption } from '../src/cli/command.ts';
import { attentionNames } from '../src/model/attention/index.ts';
import { createLanguageModel } from '../src/model/lm.ts';
import { resolveDataParallel } from '../src/backend/device.ts';
import { benchGptConfig, measureThroughput, median } from '../src/train/throughput.ts';
import { resolveExecutionPlan } from '../src/train/execution-plan.ts';

const PEER = path.resolve(PROJECT_ROOT, '..', 'shared', 'bench', 'torch_peer_gpt.py');
const SHAPE = ['seq', 'batch', 'vocab', 'd', 'layers', 'heads'] as const;

interface Row {
  label: string;
  attention: string;
  replicas: number;
  tokensPerSecond: number;
  msPerStep: number;
  tokensPerCpuSecond?: number;
  lastLoss: number;
  firstStepMs?: number;
  readbackValues?: number;
  readbackBytes?: number;
  /** tokens/s over the fastest PyTorch peer row of the same attention (measureAll, per round). */
  peerRatio?: number;
  /** How many rounds measured this row (its figures are their medians). */
  rounds?: number;
}

const COMMAND = {
  name: 'bench:train',
  usage: '[attention names…] [options]',
  description: 'Training throughput of the reference GPT shape with each attention mechanism (default: all registered).',
  options: {
    backends: { type: 'string', value: 'LIST', defaultText: `$${BACKEND_ENV}, else wasm`, help: 'comma-separated backends, each in its own process' },
    backend: { type: 'string', choices: BACKENDS, hidden: true, help: 'internal: the backend of one child process' },
    replicas: { type: 'string', value: 'LIST', default: '1,auto', help: 'data-parallel replica counts, N or auto' },
    peer: { type: 'string', value: 'PYTHON', help: `also run the PyTorch peer (${path.relative(PROJECT_ROOT, PEER)}) with this Python` },
    'peer-threads': { type: 'string', value: 'LIST', default: '1,2', help: "the peer's thread counts" },
    rounds: integerOption(1, 1, 'times the whole comparison runs; each figure is the median over the rounds'),
    steps: integerOption(1, 10, 'timed steps'),
    warmup: integerOption(0, 4, 'warm-up steps (on tensorflow the first step also records the step and builds its function)'),
    graph: {
      type: 'string',
      value: 'LIST',
      default: 'on,off',
      help: 'tensorflow only: train.graph settings to measure (on = the step as TF functions, off = op by op)',
    },
    xla: { type: 'string', value: 'LIST', default: 'off', help: 'tensorflow only: train.xla settings of the function rows (on, off or off,on)' },
    'xla-executor': { type: 'boolean', help: 'tensorflow only: also rows of train.executor xla (jax process; npm run setup:xla)' },
    seq: integerOption(1, 256, 'sequence length'),
    batch: integerOption(1, 8, 'batch size'),
    vocab: integerOption(1, 4096, 'vocabulary size'),
    d: integerOption(1, 128, 'model width'),
    layers: integerOption(1, 4, 'layers'),
    heads: integerOption(1, 4, 'attention heads'),
    options: { type: 'string', value: 'JSON', default: '{}', help: 'attention options applied to every named mechanism, e.g. \'{"chunkSize":32}\'' },
    profile: { type: 'boolean', help: 'kernel time by kernel name for one extra step' },
    json: { type: 'boolean', help: 'one JSON line per measurement (used between the processes)' },
  },
  positionals: { max: Infinity, name: 'attention names' },
} as const;

function parse(argv: string[]) {
  const { values, positionals } = parseOrExit(COMMAND, argv);
  const fail = (message: string) => exitWithUsage(COMMAND, message);
  const backends = (values.backend ?? values.backends ?? chooseBackend({ recipe: 'wasm' }).choice).split(',');
  const unknownBackend = backends.find((b) => !(BACKENDS as readonly string[]).includes(b));
  if (unknownBackend !== undefined) fail(`--backends: unknown backend '${unknownBackend}'; allowed: ${BACKENDS.join(', ')}`);
  const replicas = values.replicas.split(',');
  if (!values['peer-threads'].split(',').every((t) => /^[1-9]\d*$/.test(t)))
    fail(`--peer-threads takes thread counts, comma-separated (got '${values['peer-threads']}')`);
  if (!replicas.every((r) => r === 'auto' || /^[1-9]\d*$/.test(r))) fail(`--replicas takes N or auto, comma-separated (got '${values.replicas}')`);
  const known = attentionNames();
  const unknown = positionals.filter((n) => !known.includes(n));
  if (unknown.length > 0) fail(`unknown attention '${unknown.join("', '")}'; allowed: ${known.join(', ')}`);
  let options: Record<string, unknown> = {};
  try {
    options = JSON.parse(values.options) as Record<string, unknown>;
  } catch (err) {
    fail(`--options is not JSON (${(err as Error).message})`);
  }
  return {
    names: positionals.length ? positionals : known,
    backends,
    replicas,
    peer: values.peer,
    peerThreads: values['peer-threads'].split(',').map(Number),
    rounds: values.rounds,
    steps: values.steps,
    warmup: values.warmup,
    shape: Object.fromEntries(SHAPE.map((k) => [k, values[k]])) as Record<(typeof SHAPE)[number], number>,
    options,
    profile: values.profile,
    json: values.json,
    xlaExecutor: values['xla-executor'] ?? false,
    graph: onOff(values.graph, '--graph', fail),
    xla: onOff(values.xla, '--xla', fail),
  };
}

function onOff(list: string, flag: string, fail: (message: string) => never): boolean[] {
  return list.split(',').map((g) => {
    if (g !== 'on' && g !== 'off') fail(`${flag} takes on, off or on,off (got '${g}')`);
    return g === 'on';
  });
}

type Options = ReturnType<typeof parse>;

/** This process: one backend, every mechanism × replica count. */
async function measureHere(o: Options): Promise<Row[]> {
  const device = await initBackend(o.backends[0], { quiet: true });
  const { backend } = device;
  const { seq, batch, vocab, d, layers, heads } = o.shape;
  if (!o.json)
    console.log(
      `bench:train on ${backend}: GPT vocab ${vocab}, d ${d}, ${layers} layers, ${heads} heads, seq ${seq}, batch ${batch}; ${o.warmup} warm-up + ${o.steps} timed steps`,
    );
  const replicaCounts = [...new Set(o.replicas.map((r) => resolveDataParallel(r === 'auto' ? 'auto' : Number(r), device, batch)))];
  const rows: Row[] = [];
  // (graph, xla) pairs: XLA applies to the function rows only.
  type Mode = { graph: boolean; xla: boolean; executor?: string };
  const modes: Mode[] = device.native
    ? o.graph.flatMap((graph): Mode[] => (graph ? o.xla.map((xla) => ({ graph, xla })) : [{ graph, xla: false }]))
    : [{ graph: true, xla: false }];
  if (device.native && o.xlaExecutor) modes.push({ graph: true, xla: false, executor: 'xla' });
  for (const name of o.names)
    for (const replicas of replicaCounts)
      for (const { graph, xla, executor } of modes) {
        if (executor === 'xla' && replicas > 1) continue;
        const model = createLanguageModel(benchGptConfig({ vocab, seq, d, layers, heads }, name, o.options));
        const plan = resolveExecutionPlan({ executor, graph, xla: xla ? 'on' : 'off', dataParallel: replicas }, device, null, model);
        const r = await measureThroughput(model, {
          batchSize: batch,
          seqLen: seq,
          warmup: o.warmup,
          steps: o.steps,
          plan,
          // A function call is one op, which tf.profile does not see into: profiles are of op-by-op steps.
          afterTimed: o.profile && !(device.native && graph) ? (step) => profile(name, step) : undefined,
        });
        model.dispose();
        const label =
          executor === 'xla' ? 'xla executor (jax CPU)' : device.native ? `${backend} (${graph ? (xla ? 'function+XLA' : 'function') : 'eager'})` : backend;
        const row: Row = { label, attention: name, replicas, ...r };
        // The xla executor's work is in the jax process, whose CPU time this process does not see.
        if (executor === 'xla') row.tokensPerCpuSecond = undefined;
        rows.push(row);
        if (o.json) console.log(JSON.stringify(row));
        else
          console.log(
            `  ${name} × ${replicas}, ${label}: median ${r.msPerStep.toFixed(0)} ms/step wall (${r.tokensPerSecond.toFixed(0)} tokens/s), ${r.cpuMsPerStep.toFixed(0)} CPU-ms/step (${r.tokensPerCpuSecond.toFixed(0)} tokens per CPU-second), ${r.readbackValues} values read back per step`,
          );
      }
  return rows;
}

/** Kernel time of one step by kernel name ('forward' entries are customGrad wrappers, counted in their kernels). */
async function profile(name: string, step: () => Promise<void>): Promise<void> {
  const info = await tf.profile(step);
  const byKernel = new Map<string, { ms: number; calls: number }>();
  let total = 0;
  for (const k of info.kernels) {
    if (k.name === 'forward') continue;
    const ms = typeof k.kernelTimeMs === 'number' ? k.kernelTimeMs : 0;
    const e = byKernel.get(k.name) ?? { ms: 0, calls: 0 };
    byKernel.set(k.name, { ms: e.ms + ms, calls: e.calls + 1 });
    total += ms;
  }
  console.log(`  profile (${name}): ${total.toFixed(0)} ms kernel time, ${info.kernels.length} kernels`);
  for (const [k, e] of [...byKernel].sort((a, b) => b[1].ms - a[1].ms).slice(0, 25)) {
    console.log(`    ${k.padEnd(32)} ${e.ms.toFixed(1).padStart(8)} ms ${((100 * e.ms) / total).toFixed(1).padStart(5)}%  ${e.calls} calls`);
  }
}

/** Every backend in a child process of its own, then the peer; one table at the end. */
function measureAll(o: Options, argv: string[]): Row[] {
  const passOn = argv.filter((a, i) => !/^--(backends?|peer|rounds)(=|$)/.test(a) && !/^--(backends?|peer|rounds)$/.test(argv[i - 1] ?? ''));
  const rounds: Row[][] = [];
  for (let round = 0; round < o.rounds; round++) {
    if (o.rounds > 1) console.log(`bench:train: round ${round + 1} of ${o.rounds}`);
    const rows: Row[] = [];
    // The peer goes first every other round, so that a drift of the host's speed within a round favours neither side.
    if (o.peer && round % 2 === 1) rows.push(...measurePeer(o));
    for (const backend of o.backends) {
      console.log(`bench:train: ${backend} …`);
      const child = spawnSync(process.execPath, ['--import', 'tsx', import.meta.filename, ...passOn, '--backend', backend, '--json'], {
        cwd: PROJECT_ROOT,
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      const got = child.stdout
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Row);
      if (child.status !== 0 || got.length === 0) console.log(`  ${backend}: failed (exit ${child.status}); left out`);
      rows.push(...got);
    }
    if (o.peer && round % 2 === 0) rows.push(...measurePeer(o));
    const rated = withPeerRatios(rows);
    const ratios = rated.filter((r) => r.peerRatio !== undefined && !r.label.startsWith('pytorch'));
    if (ratios.length) console.log(`  × PyTorch this round: ${ratios.map((r) => `${r.attention} ${r.label} ${r.peerRatio!.toFixed(2)}`).join('; ')}`);
    rounds.push(rated);
  }
  return medianRows(rounds);
}

/** Each row's ratio of tokens/s to the fastest peer row of its attention, within one round. */
function withPeerRatios(rows: Row[]): Row[] {
  const peerBest = new Map<string, number>();
  for (const r of rows) if (r.label.startsWith('pytorch')) peerBest.set(r.attention, Math.max(peerBest.get(r.attention) ?? 0, r.tokensPerSecond));
  return rows.map((r) => (peerBest.has(r.attention) ? { ...r, peerRatio: r.tokensPerSecond / peerBest.get(r.attention)! } : r));
}

/** One row per measurement, with the medians over the rounds that measured it (rounds where it failed are left out). */
function medianRows(rounds: Row[][]): Row[] {
  const key = (r: Row) => `${r.attention}|${r.label}|${r.replicas}`;
  const seen = new Map<string, Row[]>();
  for (const row of rounds.flat()) seen.set(key(row), [...(seen.get(key(row)) ?? []), row]);
  return [...seen.values()].map((runs) => {
    const of = (pick: (r: Row) => number | undefined) => {
      const values = runs.map(pick).filter((v): v is number => v !== undefined);
      return values.length ? median(values) : undefined;
    };
    return {
      ...runs[0],
      tokensPerSecond: of((r) => r.tokensPerSecond)!,
      msPerStep: of((r) => r.msPerStep)!,
      tokensPerCpuSecond: of((r) => r.tokensPerCpuSecond),
      peerRatio: of((r) => r.peerRatio),
      rounds: runs.length,
    };
  });
}

function measurePeer(o: Options): Row[] {
  if (!fs.existsSync(PEER)) {
    console.log(`  PyTorch peer: ${PEER} not found; left out`);
    return [];
  }
  const rows: Row[] = [];
  const attentions = [...new Set(o.names.map((n) => (n === 'softmax' ? 'softmax' : n === 'linear-elu' ? 'linear' : null)).filter((n) => n !== null))];
  for (const attn of attentions)
    for (const compile of [false, true])
      for (const threads of o.peerThreads) {
        console.log(`bench:train: PyTorch peer, ${attn}, ${compile ? 'torch.compile' : 'eager'}, ${threads} thread(s) …`);
        const shape = SHAPE.flatMap((k) => [`--${k}`, String(o.shape[k])]);
        const args = [
          PEER,
          ...shape,
          '--steps',
          String(o.steps),
          '--warmup',
          String(o.warmup),
          '--attn',
          attn,
          '--threads',
          String(threads),
          ...(compile ? ['--compile'] : []),
        ];
        const child = spawnSync(o.peer!, args, { encoding: 'utf8' });
        const line = child.stdout?.split('\n').find((l) => l.startsWith('{'));
        if (child.status !== 0 || !line) {
          console.log(`  PyTorch peer failed: ${(child.stderr || child.error?.message || '').trim().split('\n').pop()}`);
          continue;
        }
        const r = JSON.parse(line) as { peer: string; tokens_per_s: number; step_ms: number; final_loss: number };
        rows.push({
          label: `${r.peer}, ${threads} thread${threads > 1 ? 's' : ''}`,
          attention: attn === 'linear' ? 'linear-elu' : 'softmax',
          replicas: 1,
          tokensPerSecond: r.tokens_per_s,
          msPerStep: r.step_ms,
          lastLoss: r.final_loss,
        });
      }
  return rows;
}

function printTable(rows: Row[]): void {
  const withPeer = rows.some((r) => r.peerRatio !== undefined);
  const rounds = Math.max(...rows.map((r) => r.rounds ?? 1));
  const header = [
    'attention',
    'backend',
    'replicas',
    'tokens/s (wall)',
    'ms/step',
    'tokens per CPU-s',
    'host reads/step',
    'first step s',
    'last loss',
    ...(withPeer ? [rounds > 1 ? `× PyTorch (median of ${rounds} rounds)` : '× PyTorch'] : []),
  ];
  const cells = rows.map((r) => [
    r.attention,
    r.label,
    String(r.replicas),
    r.tokensPerSecond.toFixed(0),
    r.msPerStep.toFixed(0),
    r.tokensPerCpuSecond?.toFixed(0) ?? '',
    r.readbackValues !== undefined && r.label.startsWith('tensorflow') ? `${r.readbackValues} (${r.readbackBytes} B)` : '',
    r.firstStepMs !== undefined ? (r.firstStepMs / 1000).toFixed(1) : '',
    r.lastLoss.toFixed(3),
    ...(withPeer ? [r.peerRatio?.toFixed(2) ?? ''] : []),
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i].length)));
  const line = (c: string[]) => `| ${c.map((x, i) => x.padEnd(widths[i])).join(' | ')} |`;
  console.log(['', line(header), `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`, ...cells.map(line)].join('\n'));
}

async function main(): Promise<void> {
  const argv = process.argv.slice(2);
  const o = parse(argv);
  const oneProcess = o.backends.length === 1 && !o.peer && o.rounds === 1;
  printTable(oneProcess ? await measureHere(o) : measureAll(o, argv));
}

main().catch((err) => {
  console.error(`bench:train: ${err instanceof Error ? err.message : err}`);
  process.exit(1);
});
