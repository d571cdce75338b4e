// npm run setup:tensorflow [-- --gpu] [--tensorflow SPEC] [--wheel FILE] [--python EXE] [--nodedir DIR] [--sanitize address] [--force]
// Builds the native `tensorflow` backend from the TensorFlow pip wheel into .cache/tensorflow and
// checks it against the cpu backend (src/backend/tensorflow-setup.ts).
// tensorflow-check.ts loads TensorFlow.js: imported after the build, so that --help answers at once.
import { DEFAULT_TENSORFLOW, SetupError, setupTensorflow } from '../backend/tensorflow-setup.ts';
import { runCommand, UsageError } from './command.ts';

const COMMAND = {
  name: 'setup:tensorflow',
  usage: '[options]',
  description: `Builds @tensorflow/tfjs-node against the TensorFlow C library of the TensorFlow pip wheel, into
.cache/tensorflow (git-ignored; \`npm ci\` leaves it alone), then checks it. Needs python3 with pip,
g++, make and ~3 GB of disk (~12 GB with --gpu). Re-running keeps a matching build.`,
  options: {
    gpu: { type: 'boolean', help: 'CUDA build: pip installs tensorflow[and-cuda] (CUDA 12, cuDNN) into .cache/tensorflow/venv' },
    tensorflow: { type: 'string', value: 'SPEC', default: DEFAULT_TENSORFLOW, help: 'TensorFlow version (pip specifier after ==)' },
    wheel: { type: 'string', value: 'FILE', help: 'use this tensorflow-cpu wheel instead of pip download' },
    python: { type: 'string', value: 'EXE', default: 'python3', help: 'the Python whose pip is used' },
    nodedir: { type: 'string', value: 'DIR', help: "folder holding include/node/node_api.h (default: this Node's own)" },
    sanitize: {
      type: 'string',
      value: 'KIND',
      choices: ['address'] as const,
      help: 'also build the fused CPU kernels with AddressSanitizer, beside the plain ones (test/backend/fused-ops-asan.test.ts runs their tests on it)',
    },
    force: { type: 'boolean', help: 'rebuild even when a matching build exists' },
  },
} as const;

await runCommand(COMMAND, async ({ values }) => {
  if (values.gpu && values.wheel) throw new UsageError('--wheel is for CPU builds; --gpu installs its wheels with pip');
  if (values.gpu && values.sanitize) throw new UsageError('--sanitize builds the fused CPU kernels, which GPU builds do not use');
  const log = (line: string) => console.log(line);
  log(`setup:tensorflow: native backend from the TensorFlow ${values.gpu ? 'GPU' : 'CPU'} wheel`);
  const { build, reused } = setupTensorflow({
    gpu: values.gpu,
    tensorflow: values.tensorflow,
    wheel: values.wheel,
    python: values.python,
    nodedir: values.nodedir,
    force: values.force,
    sanitize: values.sanitize,
    log,
  });
  log(reused ? 'checking the build' : `built in ${build.seconds} s; checking it`);
  const { formatChecks, verifyTensorflow } = await import('../backend/tensorflow-check.ts');
  const checks = await verifyTensorflow();
  for (const line of formatChecks(checks)) log(line);
  if (checks.some((c) => !c.ok)) throw new SetupError('the build loads but fails its checks (see above); rebuild with --force or report it');
  log(`ready: --backend tensorflow (TensorFlow ${build.tensorflow}${build.gpu ? ', GPU build' : ''})`);
});
