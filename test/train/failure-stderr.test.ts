// A failed run on the native backend ends its stderr with the project's error: TensorFlow's own lines that used to
// follow it (a run across processes: the abort each rank reports, the coordination agent's complaints at exit, each
// an `E0000 hh:mm:ss…` line) are dropped once the error is said (src/backend/quiet-stderr.ts). The run diverges at
// step 2 (lr 1e30), on every rank.
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { SETUP_COMMAND } from '../../src/backend/native-build.ts';
import { makeTinySetup, writeTinyRecipe } from './checkpoint-fixtures.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';
import { TRAIN } from './collective-fixtures.ts';

let dir: string;
let setup: TinySetup;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'slay-failure-stderr-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs `npm run train -- <argv>` to its end; its exit status and stderr. */
function train(argv: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawn(process.execPath, ['--import', 'tsx', TRAIN, ...argv], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => child.on('close', (code) => resolve({ code, stderr })));
}

/** A line of TensorFlow's C++ logging (`E0000 00:00:1796417967.588576   12724 file.cc:252] …`), or its hint line. */
const TENSORFLOW_LINE = /^(\[rank \d+\] )?([IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ |This is usually caused by an earlier error)/m;
const ERROR = 'train: training diverged at step 2';

describe.skipIf(!isTensorflowSetUp())(`a failed run's stderr on the tensorflow backend (skipped when not built: ${SETUP_COMMAND})`, () => {
  it('ends with the error line in one process', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'one.yaml'), setup, join(dir, 'runs-one'), { lr: 1e30 });
    const run = await train([recipe, '--backend', 'tensorflow']);
    expect(run.code, run.stderr).toBe(1);
    expect(run.stderr.trimEnd().split('\n').at(-1)).toMatch(new RegExp(`^${ERROR}`));
  });

  it('across two processes, nothing of TensorFlow follows the error: only the launcher says which rank ended', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'two.yaml'), setup, join(dir, 'runs-two'), { lr: 1e30 });
    const run = await train([recipe, '--backend', 'tensorflow', '--processes', '2']);
    expect(run.code, run.stderr).toBe(1);
    const after = run.stderr.slice(run.stderr.indexOf(ERROR));
    expect(after, run.stderr).toMatch(new RegExp(`^${ERROR}`));
    expect(after, run.stderr).not.toMatch(TENSORFLOW_LINE);
    for (const line of after.trimEnd().split('\n')) expect(line, run.stderr).toMatch(/^(\[rank \d+\] )?train: /);
  });
});
