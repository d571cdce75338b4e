// Our training step, run on command so that bench/versus.ts can interleave it with the PyTorch peer's
// (peer_lockstep.py is its twin): one process per attention, because a process holds one model's named
// variables. Prints {"ready": …} once the model is built; `steps N` on stdin runs N steps (the reference GPT,
// AdamW, recorded functions on the tensorflow backend with its fused kernels) and prints
// {"ms": [wall ms per step], "cpuMs": [process CPU ms per step], "loss": …}; EOF ends it.
//
//   node --import tsx bench/step_lockstep.ts ATTENTION [--vocab 4096] [--d 128] [--layers 4] [--heads 4] [--seq 256] [--batch 8]
import * as readline from 'node:readline';
import { fusedCpuKernelsStatus } from '../src/backend/fused-kernels.ts';
import { initBackend } from '../src/backend/start.ts';
import { BENCH_SHAPE_OPTIONS, parseOrExit } from '../src/cli/command.ts';
import { Rng } from '../src/core/rng.ts';
import { createLanguageModel } from '../src/model/lm.ts';
import { AdamW } from '../src/train/optimizer.ts';
import { trainStep } from '../src/train/step.ts';
import { BENCH_ADAMW, benchGptConfig, randomBatch } from '../src/train/throughput.ts';

const COMMAND = {
  name: 'bench/step_lockstep.ts',
  usage: 'ATTENTION [options]',
  description: "Our training step on command, for bench:versus ('steps N' on stdin).",
  options: BENCH_SHAPE_OPTIONS,
  positionals: { min: 1, max: 1, name: 'attention' },
} as const;

const { values, positionals } = parseOrExit(COMMAND, process.argv.slice(2));
const [vocab, d, layers, heads, seq, batchSize] = (['vocab', 'd', 'layers', 'heads', 'seq', 'batch'] as const).map((k) => Number(values[k]));
const attention = positionals[0];
const device = await initBackend('tensorflow', { quiet: true });
const model = createLanguageModel(benchGptConfig({ vocab, seq, d, layers, heads }, attention));
// The step as trainStep's graph: true runs it, AdamW's update recorded too where the binding has functions.
const optimizer = new AdamW(model.parameters(), { ...BENCH_ADAMW, update: device.graphSteps ? 'recorded' : 'op-by-op' });
const rng = new Rng(7);
console.log(JSON.stringify({ ready: 'tensorflow', fusedKernels: fusedCpuKernelsStatus() }));
for await (const line of readline.createInterface({ input: process.stdin })) {
  const match = /^steps (\d+)$/.exec(line.trim());
  if (!match) throw new Error(`step_lockstep: expected 'steps N', got '${line}'`);
  const result = { ms: [] as number[], cpuMs: [] as number[], loss: NaN };
  for (let i = 0; i < Number(match[1]); i++) {
    const batch = randomBatch(rng, 'gpt', batchSize, seq, vocab);
    const t0 = performance.now();
    const cpu0 = process.cpuUsage();
    result.loss = (await trainStep(model, optimizer, [batch], { lr: 3e-4, clip: 1, dropoutSeed: null, graph: true })).loss;
    result.ms.push(performance.now() - t0);
    const cpu = process.cpuUsage(cpu0);
    result.cpuMs.push((cpu.user + cpu.system) / 1000);
  }
  console.log(JSON.stringify(result));
}
optimizer.dispose();
model.dispose();
