// A Python with torch and transformers for the suites that load exports in PyTorch (and tensorboard for the
// suite that reads event files back): `npm run setup:transformers` makes one in .venv-hf/, or SLAYFORMER_PYTHON
// names one.
import { spawnSync } from 'node:child_process';
import { existsSync, writeFileSync } from 'node:fs';
import path from 'node:path';

export const TRANSFORMERS_SETUP = 'npm run setup:transformers';

/** The first candidate that has torch and transformers (found without importing them: that takes seconds), or null. */
export function findTransformersPython(): string | null {
  return findPythonWith(['torch', 'transformers']);
}

/** The first candidate Python (SLAYFORMER_PYTHON, then .venv-hf) that has every module of `modules`, or null. */
export function findPythonWith(modules: readonly string[]): string | null {
  const candidates = [process.env.SLAYFORMER_PYTHON, path.resolve('.venv-hf/bin/python')].filter((p): p is string => !!p && existsSync(p));
  const probe = `import importlib.util, sys; sys.exit(0 if all(importlib.util.find_spec(m) for m in ${JSON.stringify(modules)}) else 1)`;
  return candidates.find((p) => spawnSync(p, ['-c', probe], { timeout: 60_000 }).status === 0) ?? null;
}

let requestCount = 0;

/**
 * Runs test/hf/transformers_check.py on `requests` (see its docstring) and returns its JSON answer.
 * transformers' module cache for trust_remote_code goes under `dir`, not the user's home.
 */
export function runTransformersCheck<T>(python: string, dir: string, requests: unknown[]): T[] {
  const file = path.join(dir, `transformers-request-${requestCount++}.json`);
  writeFileSync(file, JSON.stringify(requests));
  const run = spawnSync(python, ['test/hf/transformers_check.py', file], {
    encoding: 'utf8',
    timeout: 240_000,
    maxBuffer: 1 << 28,
    env: { ...process.env, HF_MODULES_CACHE: path.join(dir, 'hf-modules'), HF_HUB_OFFLINE: '1' },
  });
  if (run.status !== 0) throw new Error(`transformers_check.py exited with ${run.status}:\n${run.stderr}`);
  return JSON.parse(run.stdout) as T[];
}
