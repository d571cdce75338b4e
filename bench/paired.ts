// Paired A/B of the model's fused forms against their composed twins (issue 35; docs/benchmarks.md,
// "Fewer ops and fused kernels"): one process, one model, the same batches, steps alternating
// fused / composed (the order flipped every round), so that the host's load, which moves its
// absolute speed by ±15%, cancels out of the per-round ratio. The ratio of the process's CPU time per
// step is printed beside it: on a host busy with other work it moves less than wall time does. Each form records its own step
// function (compiled-step.ts keys the program by it). --composed names CPU kernels to compare alone
// (their fused op against their composed twin, everything else fused in both).
//
//   npm run bench:paired -- [attention names…] [--composed KERNELS] [--rounds 30] [--warmup 4] [--seq 256] [--batch 8] [--vocab 4096] [--d 128] [--layers 4] [--heads 4]
import { FUSED_KERNEL_NAMES, type FusedKernel, fusedCpuKernelsStatus, withComposedKernels } from '../src/backend/fused-kernels.ts';
import { initBackend } from '../src/backend/start.ts';
import { BENCH_SHAPE_OPTIONS, integerOption, parseOrExit } from '../src/cli/command.ts';
import { Rng } from '../src/core/rng.ts';
import { attentionNames } from '../src/model/attention/index.ts';
import { createLanguageModel } from '../src/model/lm.ts';
import { AdamW } from '../src/train/optimizer.ts';
import { trainStep } from '../src/train/step.ts';
import { BENCH_ADAMW, benchGptConfig, median, medianAndQuartiles, randomBatch } from '../src/train/throughput.ts';

const COMMAND = {
  name: 'bench:paired',
  usage: '[attention names…] [options]',
  description: 'Step time of the fused forms against the composed ones, paired step by step in one process (tensorflow backend).',
  options: {
    rounds: integerOption(2, 30, 'timed rounds (each one fused and one composed step)'),
    warmup: integerOption(0, 4, "untimed rounds first (the first records each form's step function)"),
    ...BENCH_SHAPE_OPTIONS,
    composed: {
      type: 'string',
      value: 'KERNELS',
      help: 'comma-separated fused kernels whose composed twins the composed steps run (default: every fused form)',
    },
  },
  positionals: { max: Infinity, name: 'attention names' },
} as const;

/** Median [interquartile range] of the per-round ratios fused / composed. */
const pairedRatio = (times: { fused: number[]; composed: number[] }) => medianAndQuartiles(times.fused.map((t, i) => t / times.composed[i]));

async function main(): Promise<void> {
  const { values, positionals } = parseOrExit(COMMAND, process.argv.slice(2));
  const n = (k: keyof typeof COMMAND.options) => Number(values[k]);
  const unknown = positionals.filter((name) => !attentionNames().includes(name));
  if (unknown.length > 0) throw new Error(`bench:paired: unknown attention ${unknown.join(', ')} (one of ${attentionNames().join(', ')})`);
  const kernelNames: readonly string[] = FUSED_KERNEL_NAMES;
  const only = values.composed?.split(',');
  const unknownKernel = only?.find((name) => !kernelNames.includes(name));
  if (unknownKernel !== undefined) throw new Error(`bench:paired: --composed: unknown kernel ${unknownKernel} (one of ${kernelNames.join(', ')})`);
  const composedKernels = only as FusedKernel[] | undefined;
  const device = await initBackend('tensorflow', { quiet: true });
  console.log(
    `bench:paired: fused CPU kernels ${fusedCpuKernelsStatus()}; ${n('rounds')} rounds after ${n('warmup')}, batch ${n('batch')} × ${n('seq')}, vocab ${n('vocab')}, d ${n('d')}, ${n('layers')} layers × ${n('heads')} heads; composed: ${composedKernels?.join(', ') ?? 'every fused form'}`,
  );
  console.log(
    '| attention | fused ms/step | composed ms/step | paired ratio (fused / composed), median [IQR] | fused CPU-ms/step | composed CPU-ms/step | CPU-time ratio, median [IQR] | last losses (fused, composed) |',
  );
  console.log('| --- | ---: | ---: | --- | ---: | ---: | --- | --- |');
  for (const attention of positionals.length > 0 ? positionals : ['softmax', 'slay']) {
    const model = createLanguageModel(benchGptConfig({ vocab: n('vocab'), seq: n('seq'), d: n('d'), layers: n('layers'), heads: n('heads') }, attention));
    // The step as trainStep's graph: true runs it, AdamW's update recorded too where the binding has functions.
    const optimizer = new AdamW(model.parameters(), { ...BENCH_ADAMW, update: device.graphSteps ? 'recorded' : 'op-by-op' });
    try {
      const rng = new Rng(7);
      const times = { fused: [] as number[], composed: [] as number[] };
      const cpuTimes = { fused: [] as number[], composed: [] as number[] };
      const losses = { fused: NaN, composed: NaN };
      for (let round = 0; round < n('warmup') + n('rounds'); round++) {
        const batch = randomBatch(rng, 'gpt', n('batch'), n('seq'), n('vocab'));
        for (const form of round % 2 === 0 ? (['fused', 'composed'] as const) : (['composed', 'fused'] as const)) {
          const step = () => trainStep(model, optimizer, [batch], { lr: 3e-4, clip: 1, dropoutSeed: null, graph: true });
          const t0 = performance.now();
          const cpu0 = process.cpuUsage();
          // The step's program is recorded synchronously, inside withComposedKernels; what follows awaits the update.
          const result = await (form === 'composed' ? withComposedKernels(step, composedKernels) : step());
          if (round >= n('warmup')) {
            times[form].push(performance.now() - t0);
            const cpu = process.cpuUsage(cpu0);
            cpuTimes[form].push((cpu.user + cpu.system) / 1000);
          }
          losses[form] = result.loss;
        }
      }
      console.log(
        `| ${attention} | ${median(times.fused).toFixed(1)} | ${median(times.composed).toFixed(1)} | ${pairedRatio(times)} | ${median(cpuTimes.fused).toFixed(1)} | ${median(cpuTimes.composed).toFixed(1)} | ${pairedRatio(cpuTimes)} | ${losses.fused.toFixed(4)}, ${losses.composed.toFixed(4)} |`,
      );
    } finally {
      optimizer.dispose();
      model.dispose();
    }
  }
}

await main();
