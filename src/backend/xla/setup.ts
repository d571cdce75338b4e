// Where the XLA route keeps its Python and its programs, and `npm run setup:xla`, which makes that Python: a venv
// with TensorFlow from the native backend's wheel (the exporter, export.py) and pinned jax/jaxlib (the runner,
// runner.py) (docs/xla.md). No tfjs import: the test configuration reads this to decide whether the suites run.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../../..');
export const XLA_CACHE = path.join(PROJECT_ROOT, '.cache', 'xla');
export const XLA_VENV = path.join(XLA_CACHE, 'venv');
/** Exported programs by content hash (program-cache.ts). */
export const PROGRAM_CACHE = path.join(XLA_CACHE, 'programs');
export const XLA_SETUP_COMMAND = 'npm run setup:xla';

/**
 * The versions the route is tested with. TensorFlow is the native backend's (setup:tensorflow builds from
 * the same wheel), so the exporter reads the GraphDefs that backend's ops produce; jax and jaxlib are pinned
 * because the runner reaches jaxlib's client (compile_and_load, execute) and the portable-artifact reader,
 * which move between versions (docs/xla.md, "Versions").
 */
export const XLA_PINS = { tensorflow: '2.21.0', jax: '0.10.2', jaxlib: '0.10.2' } as const;

/** $SLAYFORMER_XLA_PYTHON: another interpreter with jax for the runner (a GPU host's own Python). */
export const XLA_PYTHON_ENV = 'SLAYFORMER_XLA_PYTHON';

export const venvPython = () => path.join(XLA_VENV, 'bin', 'python');

/** Whether setup:xla made its venv (its stamp is written last). */
export function isXlaSetUp(): boolean {
  return fs.existsSync(path.join(XLA_CACHE, 'setup.json')) && fs.existsSync(venvPython());
}

/** The Python that runs runner.py: $SLAYFORMER_XLA_PYTHON, else the venv's; null when neither exists. */
export function runnerPython(): string | null {
  return process.env[XLA_PYTHON_ENV] || (isXlaSetUp() ? venvPython() : null);
}

/** The Python that runs export.py (needs TensorFlow): the venv's, or null. */
export function exporterPython(): string | null {
  return isXlaSetUp() ? venvPython() : null;
}

export class XlaSetupError extends Error {}

/**
 * Makes the venv and installs the pinned wheels into it (pip as configured here: a mirror or the network).
 * Throws an XlaSetupError whose message is one line naming what is missing.
 */
export function setupXla(options: { python: string; log: (line: string) => void }): { reused: boolean } {
  const { python, log } = options;
  const stamp = path.join(XLA_CACHE, 'setup.json');
  if (isXlaSetUp()) {
    const previous = JSON.parse(fs.readFileSync(stamp, 'utf8')) as Record<string, string>;
    if (Object.entries(XLA_PINS).every(([k, v]) => previous[k] === v)) return { reused: true };
  }
  if (spawnSync(python, ['--version']).status !== 0) throw new XlaSetupError(`${python} not found: install Python 3 (3.10–3.13) with venv and pip`);
  fs.mkdirSync(XLA_CACHE, { recursive: true });
  if (!fs.existsSync(venvPython())) {
    const venv = spawnSync(python, ['-m', 'venv', XLA_VENV], { encoding: 'utf8' });
    if (venv.status !== 0) throw new XlaSetupError(`${python} -m venv failed: ${lastLine(venv.stderr)} (Debian/Ubuntu: apt-get install python3-venv)`);
  }
  const wheels = [`tensorflow-cpu==${XLA_PINS.tensorflow}`, `jax==${XLA_PINS.jax}`, `jaxlib==${XLA_PINS.jaxlib}`];
  log(`setup:xla: pip install ${wheels.join(' ')} into ${path.relative(PROJECT_ROOT, XLA_VENV)}`);
  const pip = spawnSync(venvPython(), ['-m', 'pip', 'install', '--retries', '1', '--timeout', '15', ...wheels], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  if (pip.status !== 0) {
    const missing = /No matching distribution found for (\S+)/.exec(pip.stderr)?.[1];
    throw new XlaSetupError(missing ? `pip cannot get ${missing} (no mirror or network has it)` : `pip install failed: ${lastLine(pip.stderr)}`);
  }
  const check = spawnSync(venvPython(), ['-c', 'import tensorflow, jax, jax.extend.backend; jax.devices("cpu")'], { encoding: 'utf8' });
  if (check.status !== 0) throw new XlaSetupError(`the venv's tensorflow/jax do not import: ${lastLine(check.stderr)}`);
  fs.writeFileSync(stamp, JSON.stringify({ ...XLA_PINS, python: spawnSync(venvPython(), ['--version'], { encoding: 'utf8' }).stdout.trim() }, null, 1) + '\n');
  return { reused: false };
}

function lastLine(text: string | null): string {
  return (
    (text ?? '')
      .trim()
      .split('\n')
      .filter((l) => l.trim())
      .pop() ?? 'no output'
  );
}
