// npm run ablate -- [--backend NAME] [--seeds 0,1,2] [--lengths 128,256,512] [--epsilon 1e-6] [--bidirectional] [--out reports/ablate]
// Kernel-fidelity ablation at the SLAY paper's three scales; prints a markdown table per scale and
// writes table.md + results.json. Each (scale, method) runs in its own process: a failed
// allocation leaves the wasm heap unusable, and `exact` at T = 512 needs R·M·d² features per head.
import fs from 'node:fs';
import path from 'node:path';
// fidelity.ts and the backend load TensorFlow.js: imported when the command runs, so that --help answers at once.
import { emitRow, runIsolated } from '../paper/isolated.ts';
import { PAPER_SCALES, PAPER_SETTINGS, paperCases, type FidelityRow } from '../paper/fidelity-cases.ts';
import { chooseBackend, type BackendChoice } from '../backend/device.ts';
import { backendOption, startBackend } from './backend-option.ts';
import { listOption, numberListOption, runCommand, type OptionValues } from './command.ts';
import { makeFolders } from '../core/folders.ts';

const COMMAND = {
  name: 'ablate',
  usage: '[options]',
  description: `Kernel-fidelity ablation at the SLAY paper's scales (T, R, M, P) = (128, 2, 8, 8), (256, 2, 16, 16), (512, 2, 32, 32):
every SLAY polynomial variant against exact spherical Yat, Performer/DARKFormer against softmax (rel-ℓ2, cosine,
MSE, forward latency; mean ± sd over seeds). Each (scale, method) runs in its own process.`,
  options: {
    backend: backendOption('wasm'),
    seeds: { type: 'string', value: '0,1,2', default: PAPER_SETTINGS.seeds.join(','), help: 'seeds' },
    lengths: { type: 'string', value: 'T,…', help: `scales to run, by sequence length (default all: ${PAPER_SCALES.map((s) => s.length).join(',')})` },
    epsilon: { type: 'string', value: 'ε', default: '1e-6', number: { min: 0, exclusiveMin: true }, help: 'spherical Yat ε' },
    bidirectional: { type: 'boolean', help: 'non-causal attention' },
    projections: {
      type: 'string',
      value: 'NAME',
      default: PAPER_SETTINGS.projections,
      choices: ['torch-linear', 'plain'],
      help: 'torch-linear: q/k/v/out as PyTorch nn.Linear at its default init, output compared after the out projection (the paper harness); plain: bias-free N(0, 1/E) q/k/v, the attention output compared',
    },
    out: { type: 'string', value: 'DIR', default: 'reports/ablate', help: 'folder for table.md and results.json' },
    child: { type: 'string', hidden: true, help: 'internal: run one (length, method) and print its row' },
  },
} as const;

type Args = OptionValues<typeof COMMAND.options>;

async function runChild(args: Args, backend: BackendChoice, length: number, label: string): Promise<FidelityRow> {
  const forwarded = [
    '--backend',
    backend,
    '--seeds',
    args.seeds,
    '--epsilon',
    String(args.epsilon),
    '--projections',
    args.projections,
    ...(args.bidirectional ? ['--bidirectional'] : []),
  ];
  const result = await runIsolated<FidelityRow>(new URL(import.meta.url).pathname, [...forwarded, '--child', `${length}:${label}`]);
  if (result.row) return result.row;
  const none = { relL2: NaN, cosine: NaN, mse: NaN };
  return {
    label,
    length,
    status: result.outOfMemory ? 'OOM (process died)' : `error (${result.message})`,
    ...none,
    forwardMs: NaN,
    sd: none,
    seeds: 0,
    relL2PerSeed: [],
  };
}

await runCommand(COMMAND, async ({ values: args }) => {
  const { fidelityMarkdown, runFidelity } = await import('../paper/fidelity.ts');
  const seeds = numberListOption(args.seeds, 'seeds', { integer: true })!;
  const epsilon = args.epsilon;
  const settings = { ...PAPER_SETTINGS, seeds, causal: !args.bidirectional, projections: args.projections };
  const { choice } = chooseBackend({ flag: args.backend, recipe: 'wasm' });

  if (args.child) {
    const [length, label] = args.child.split(':');
    const scale = PAPER_SCALES.find((s) => s.length === Number(length))!;
    await startBackend(COMMAND.name, { flag: choice }, { silent: true });
    const [row] = await runFidelity(
      paperCases(scale, epsilon).filter((c) => c.label === label),
      scale.length,
      settings,
    );
    emitRow(row);
    process.exit(0);
  }

  const { backend } = await startBackend(COMMAND.name, { flag: choice });
  const lengths = listOption(
    args.lengths,
    'lengths',
    PAPER_SCALES.map((s) => String(s.length)),
  );
  const scales = PAPER_SCALES.filter((s) => !lengths || lengths.includes(String(s.length)));

  const rows: FidelityRow[] = [];
  for (const scale of scales) {
    const t0 = performance.now();
    const scaleRows: FidelityRow[] = [];
    for (const c of paperCases(scale, epsilon)) scaleRows.push(await runChild(args, backend, scale.length, c.label));
    rows.push(...scaleRows);
    console.log(`\nT=${scale.length} R=${scale.quadratureNodes} M=${scale.prfFeatures} P=${scale.anchors} (${((performance.now() - t0) / 1000).toFixed(1)} s)`);
    console.log(fidelityMarkdown(scaleRows));
  }

  makeFolders(args.out);
  const header = `Kernel fidelity on ${backend}: E=${settings.embed}, H=${settings.heads}, B=${settings.batch}, ${settings.causal ? 'causal' : 'bidirectional'}, ε=${epsilon}, seeds ${seeds.join(',')}. SLAY variants vs exact spherical Yat; Performer/DARKFormer (m = R·P·M) vs softmax.\n\n`;
  fs.writeFileSync(path.join(args.out, 'table.md'), header + fidelityMarkdown(rows) + '\n');
  fs.writeFileSync(path.join(args.out, 'results.json'), JSON.stringify({ backend, epsilon, settings, scales, rows }, null, 2));
  console.log(`\nwrote ${path.join(args.out, 'table.md')} and results.json`);
});
