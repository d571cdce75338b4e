// One run across processes under Slurm: `srun -n2` on a real single-host cluster (scripts/slurm-local.sh, as
// test/sweep/slurm.test.ts) starts two tasks of the train command; each finds its rank and the step's addresses
// in Slurm's variables (src/backend/cluster-env.ts), and the two give, bit for bit, the weights of one process
// taking each batch's shards as micro-batches. Skipped, with the reason in the suite's name, where Slurm or the
// tensorflow backend is missing.
import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { readSafetensors } from '../../src/hf/safetensors.ts';
import { startCli } from '../helpers/cli.ts';
import { makeTinySetup, writeTinyRecipe } from './checkpoint-fixtures.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';
import { startLocalSlurm } from '../helpers/slurm.ts';

const native = isTensorflowSetUp();
const slurm = startLocalSlurm('collective-slurm', native ? '' : 'the tensorflow backend is not set up');
const { dir: clusterDir, available, reason, env } = slurm;

let setup: TinySetup;
beforeAll(async () => {
  if (available) setup = await makeTinySetup(clusterDir);
});
afterAll(() => {
  slurm.stop();
});

async function finalWeights(output: string): Promise<Map<string, Float32Array>> {
  const saved = /\| saved (\S+)\n/.exec(output);
  expect(saved, output).not.toBeNull();
  const { tensors } = await readSafetensors(join(saved![1], 'model.safetensors'));
  return new Map([...tensors].map(([name, t]) => [name, t.data]));
}

describe.skipIf(!available)(available ? 'train under srun -n2' : `train under srun -n2 (skipped: ${reason})`, () => {
  it("two Slurm tasks are the two ranks of one run: one set of logs, one process's weights over the same shards", async () => {
    const recipe = await writeTinyRecipe(join(clusterDir, 'gpt.yaml'), setup, join(clusterDir, 'runs'), { maxTokens: 512 });
    const args = ['--import', 'tsx', 'src/cli/train.ts', recipe, '--backend', 'tensorflow'];
    const srun = spawn('srun', ['-n2', '--kill-on-bad-exit=1', process.execPath, ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    srun.stdout.on('data', (d) => (output += d));
    srun.stderr.on('data', (d) => (output += d));
    const code = await new Promise<number | null>((resolve) => srun.on('close', resolve));
    expect(code, output).toBe(0);
    expect(output).toMatch(/train\.executor collective: rank 0 of 2 on \/job:worker\/replica:0\/task:0\/device:CPU:0/);
    expect(output.match(/^done: /gm)).toHaveLength(1);
    expect(output).not.toMatch(/^E\d{4} /m); // no error line from TensorFlow, at the end either

    const single = startCli('src/cli/train.ts', [recipe, '--backend', 'tensorflow', '--train.batchSize=2', '--train.gradAccum=2']);
    expect((await single.exited).code, single.output()).toBe(0);
    const [a, b] = [await finalWeights(output), await finalWeights(single.output())];
    let max = 0;
    for (const [name, x] of a) x.forEach((v, i) => (max = Math.max(max, Math.abs(v - b.get(name)![i]))));
    expect(a.size).toBe(b.size);
    expect(max).toBe(0);
  });
});
