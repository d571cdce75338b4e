import { defineConfig } from 'vitest/config';
import { isTensorflowSetUp, SETUP_COMMAND } from './src/backend/native-build.ts';
import { hasHfFixtures, HF_FIXTURE_SUITES, HF_FIXTURES, SHARED_DIR } from './test/helpers/shared.ts';

/**
 * The numerical suites that also run on the native tensorflow backend (test/helpers/backend.ts):
 * attention outputs and gradients against float64 references, causality, recurrent decoding,
 * feature maps, the model, a training step, resume, finetune freezing, tensor leaks.
 */
const NATIVE_SUITES = [
  'test/attention/**/*.test.ts',
  'test/features/**/*.test.ts',
  'test/model/{layers,lm,decode,learning,ops,tied-head-loss,documents,transformer-pp}.test.ts',
  'test/train/{trainer,resume,finetune,accumulation,optimizer,checkpoint,eval-generate,accuracy,loss-by-position,document-mask}.test.ts',
  'test/hf/{import,architecture,export}.test.ts',
];

/**
 * The integration suites: real processes end to end — runs across processes and on a local Slurm, the XLA route's jax
 * process, kills and signals, sweeps and paper units, PyTorch and transformers, the sanitizer build. `npm test` leaves
 * them out (the inner loop: unit and numerical suites, a few minutes); `npm run test:all` (CI) runs everything
 * (docs/testing.md).
 */
const INTEGRATION_SUITES = [
  'test/train/{collective,collective-launcher,collective-slurm,collective-zero,kill,terminal,failure-stderr}.test.ts',
  'test/train/xla-{executor,run,archive,archive-rows,child-killed,program-cache,precision-run,remat-run,devices,processes,attention-boundary}.test.ts',
  'test/sweep/{slurm,slurm-units,local}.test.ts',
  'test/paper/{quick,slurm-units,mqar-quick,lm-evaluation-units}.test.ts',
  'test/cli/ctrl-c.test.ts',
  'test/hf/{transformers,pytorch,python-bounds,lm-eval}.test.ts',
  'test/backend/fused-ops-asan.test.ts',
];
/** `npm run test:all` sets it. */
const ALL_SUITES = process.env.SLAYFORMER_TESTS === 'all';

/** Prints `line` once per process: vitest evaluates this file once for the run and once more per project. */
function noteOnce(line: string): void {
  const printed = ((globalThis as { slayformerConfigNotes?: Set<string> }).slayformerConfigNotes ??= new Set());
  if (printed.has(line)) return;
  printed.add(line);
  console.log(line);
}

const native = isTensorflowSetUp();
if (!native) noteOnce(`[slayformer] tensorflow backend not set up: its suites are skipped (\`${SETUP_COMMAND}\` sets it up)`);

if (!hasHfFixtures) noteOnce(`[slayformer] ${HF_FIXTURES} not found: the Hugging Face fixture suites are skipped (set SLAYFORMER_SHARED=<the shared folder>)`);
const excluded = [...(hasHfFixtures ? [] : HF_FIXTURE_SUITES), ...(ALL_SUITES ? [] : INTEGRATION_SUITES)];
if (!ALL_SUITES) noteOnce('[slayformer] the fast suites: the integration suites (processes, Slurm, jax, PyTorch) run with `npm run test:all`');

export default defineConfig({
  test: {
    // Numerical tests run many small tfjs programs; the cpu backend is slow, so give them room.
    testTimeout: 300_000,
    hookTimeout: 300_000,
    env: { SLAYFORMER_SHARED: SHARED_DIR },
    pool: 'forks',
    maxWorkers: 2,
    projects: [
      { extends: true, test: { name: 'default', include: ['test/**/*.test.ts'], exclude: [...excluded, '**/node_modules/**'] } },
      ...(native
        ? [
            {
              extends: true as const,
              test: {
                name: 'tensorflow',
                include: NATIVE_SUITES,
                exclude: [...excluded, '**/node_modules/**'],
                env: { SLAYFORMER_TEST_BACKEND: 'tensorflow' },
              },
            },
          ]
        : []),
    ],
  },
});
