// npm run setup:xla [-- --python EXE]
// The Python of the XLA route (docs/xla.md): a venv in .cache/xla with TensorFlow from the native backend's wheel
// and pinned jax/jaxlib (src/backend/xla/setup.ts). One line naming what is missing when it cannot.
import { setupXla, XLA_PINS } from '../backend/xla/setup.ts';
import { runCommand } from './command.ts';

const COMMAND = {
  name: 'setup:xla',
  usage: '[options]',
  description: `Makes .cache/xla/venv (git-ignored) with tensorflow-cpu ${XLA_PINS.tensorflow}, jax ${XLA_PINS.jax} and jaxlib ${XLA_PINS.jaxlib}
from pip (a mirror or the network), for train.executor xla and npm run compile. Re-running keeps a matching venv.`,
  options: {
    python: { type: 'string', value: 'EXE', default: 'python3', help: 'the Python the venv is made from' },
  },
} as const;

await runCommand(COMMAND, async ({ values }) => {
  const log = (line: string) => console.log(line);
  const { reused } = setupXla({ python: values.python, log });
  log(
    `${reused ? 'setup:xla: the venv is there' : 'setup:xla: installed'}; ready: train.executor xla (jax ${XLA_PINS.jax}, TensorFlow ${XLA_PINS.tensorflow})`,
  );
});
