// npm run ablate -- [--backend wasm] [--seeds 0,1,2] [--lengths 128,256,512] [--epsilon 1e-6] [--bidirectional] [--out reports/ablate]
// Kernel-fidelity ablation at the SLAY paper's three scales; prints a markdown table per scale and
// writes table.md + results.json. Each (scale, method) runs in its own process: a failed
// allocation leaves the wasm heap unusable, and `exact` at T = 512 needs R·M·d² features per head.
import fs from 'node:fs';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { initBackend } from '../backend.ts';
import { emitRow, runIsolated } from '../experiments/isolated.ts';
import { fidelityMarkdown, PAPER_SCALES, PAPER_SETTINGS, paperCases, runFidelity, type FidelityRow } from '../experiments/fidelity.ts';

const { values: args } = parseArgs({
  options: {
    backend: { type: 'string', default: 'wasm' },
    seeds: { type: 'string', default: PAPER_SETTINGS.seeds.join(',') },
    lengths: { type: 'string' },
    epsilon: { type: 'string', default: '1e-6' },
    bidirectional: { type: 'boolean', default: false },
    out: { type: 'string', default: 'reports/ablate' },
    child: { type: 'string' },
    help: { type: 'boolean', default: false },
  },
});
if (args.help) {
  console.log('usage: npm run ablate -- [--backend wasm|cpu] [--seeds 0,1,2] [--lengths 128,256,512] [--epsilon 1e-6] [--bidirectional] [--out DIR]');
  process.exit(0);
}

const seeds = args.seeds.split(',').map(Number);
const epsilon = Number(args.epsilon);
const settings = { ...PAPER_SETTINGS, seeds, causal: !args.bidirectional };

if (args.child) {
  const [length, label] = args.child.split(':');
  const scale = PAPER_SCALES.find((s) => s.length === Number(length))!;
  await initBackend(args.backend, { quiet: true });
  const [row] = await runFidelity(paperCases(scale, epsilon).filter((c) => c.label === label), scale.length, settings);
  emitRow(row);
  process.exit(0);
}

async function runChild(length: number, label: string): Promise<FidelityRow> {
  const forwarded = ['--backend', args.backend, '--seeds', args.seeds, '--epsilon', args.epsilon, ...(args.bidirectional ? ['--bidirectional'] : [])];
  const result = await runIsolated<FidelityRow>(new URL(import.meta.url).pathname, [...forwarded, '--child', `${length}:${label}`]);
  if (result.row) return result.row;
  const none = { relL2: NaN, cosine: NaN, mse: NaN };
  return { label, length, status: result.outOfMemory ? 'OOM (process died)' : `error (${result.message})`, ...none, forwardMs: NaN, sd: none, seeds: 0 };
}

const backend = await initBackend(args.backend, { quiet: true });
const lengths = args.lengths ? new Set(args.lengths.split(',').map(Number)) : null;
const scales = PAPER_SCALES.filter((s) => !lengths || lengths.has(s.length));
if (scales.length === 0) {
  console.error(`--lengths: choose among ${PAPER_SCALES.map((s) => s.length).join(', ')}`);
  process.exit(2);
}

const rows: FidelityRow[] = [];
for (const scale of scales) {
  const t0 = performance.now();
  const scaleRows: FidelityRow[] = [];
  for (const c of paperCases(scale, epsilon)) scaleRows.push(await runChild(scale.length, c.label));
  rows.push(...scaleRows);
  console.log(
    `\nT=${scale.length} R=${scale.quadratureNodes} M=${scale.prfFeatures} P=${scale.anchors} (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
  );
  console.log(fidelityMarkdown(scaleRows));
}

fs.mkdirSync(args.out, { recursive: true });
const header = `Kernel fidelity on ${backend}: E=${settings.embed}, H=${settings.heads}, B=${settings.batch}, ${settings.causal ? 'causal' : 'bidirectional'}, ε=${epsilon}, seeds ${seeds.join(',')}. SLAY variants vs exact spherical Yat; Performer/DARKFormer (m = R·P·M) vs softmax.\n\n`;
fs.writeFileSync(path.join(args.out, 'table.md'), header + fidelityMarkdown(rows) + '\n');
fs.writeFileSync(path.join(args.out, 'results.json'), JSON.stringify({ backend, epsilon, settings, scales, rows }, null, 2));
console.log(`\nwrote ${path.join(args.out, 'table.md')} and results.json`);
