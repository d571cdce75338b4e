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
  'test/model/{layers,lm,decode,learning,ops,tied-head-loss}.test.ts',
  'test/train/{trainer,resume,finetune,accumulation,optimizer,checkpoint,eval-generate,accuracy,loss-by-position}.test.ts',
  'test/hf/{import,architecture,export}.test.ts',
];

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
const excluded = hasHfFixtures ? [] : HF_FIXTURE_SUITES;

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
