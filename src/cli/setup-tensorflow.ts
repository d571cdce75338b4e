// npm run setup:tensorflow [-- --gpu] [--tensorflow SPEC] [--wheel FILE] [--python EXE] [--nodedir DIR] [--force]
// Builds the native `tensorflow` backend from the TensorFlow pip wheel into .cache/tensorflow and
// checks it against the cpu backend (src/backend/tensorflow-setup.ts).
import { parseArgs } from 'node:util';
import { formatChecks, verifyTensorflow } from '../backend/tensorflow-check.ts';
import { DEFAULT_TENSORFLOW, SetupError, setupTensorflow } from '../backend/tensorflow-setup.ts';

const USAGE = `usage: npm run setup:tensorflow [-- options]
Builds @tensorflow/tfjs-node against the TensorFlow C library of the TensorFlow pip wheel, into
.cache/tensorflow (git-ignored; \`npm ci\` leaves it alone), then checks it. Needs python3 with pip,
g++, make and ~3 GB of disk (~12 GB with --gpu). Re-running keeps a matching build.
  --gpu             CUDA build: pip installs tensorflow[and-cuda] (CUDA 12, cuDNN) into .cache/tensorflow/venv
  --tensorflow SPEC TensorFlow version (pip specifier after ==; default ${DEFAULT_TENSORFLOW})
  --wheel FILE      use this tensorflow-cpu wheel instead of pip download
  --python EXE      the Python whose pip is used (default python3)
  --nodedir DIR     folder holding include/node/node_api.h (default: this Node's own)
  --force           rebuild even when a matching build exists`;

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: process.argv.slice(2),
    options: {
      gpu: { type: 'boolean', default: false },
      tensorflow: { type: 'string', default: DEFAULT_TENSORFLOW },
      wheel: { type: 'string' },
      python: { type: 'string', default: 'python3' },
      nodedir: { type: 'string' },
      force: { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  if (values.gpu && values.wheel) throw new SetupError('--wheel is for CPU builds; --gpu installs its wheels with pip');
  const log = (line: string) => console.log(line);
  log(`setup:tensorflow: native backend from the TensorFlow ${values.gpu ? 'GPU' : 'CPU'} wheel`);
  const { build, reused } = setupTensorflow({
    gpu: values.gpu,
    tensorflow: values.tensorflow,
    wheel: values.wheel,
    python: values.python,
    nodedir: values.nodedir,
    force: values.force,
    log,
  });
  log(reused ? 'checking the build' : `built in ${build.seconds} s; checking it`);
  const checks = await verifyTensorflow();
  for (const line of formatChecks(checks)) log(line);
  if (checks.some((c) => !c.ok)) throw new SetupError('the build loads but fails its checks (see above); rebuild with --force or report it');
  log(`ready: --backend tensorflow (TensorFlow ${build.tensorflow}${build.gpu ? ', GPU build' : ''})`);
}

main().catch((err) => {
  const message = err instanceof SetupError || err?.code?.startsWith?.('ERR_PARSE_ARGS') ? err.message : (err as Error).stack;
  console.error(`setup:tensorflow: ${message}`);
  if (err?.code?.startsWith?.('ERR_PARSE_ARGS')) console.error(USAGE);
  process.exit(1);
});
