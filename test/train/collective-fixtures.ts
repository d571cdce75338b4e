// What the tests of runs across processes share (collective.test.ts, collective-zero.test.ts): a whole
// `npm run train` to its end, and the tensors of the safetensors files it saved, compared value by value.
import { join } from 'node:path';
import { expect } from 'vitest';
import { readSafetensors } from '../../src/hf/safetensors.ts';
import { startCli } from '../helpers/cli.ts';

export const TRAIN = 'src/cli/train.ts';

/** Runs `npm run train -- <argv>` to its end (exit 0); returns its output, run folder and final/ folder. */
export async function trainCommand(argv: string[]): Promise<{ output: string; runDir: string; finalDir: string }> {
  const run = startCli(TRAIN, argv);
  const exit = await run.exited;
  expect(exit.code, run.output()).toBe(0);
  const saved = /\| saved (\S+)\n/.exec(run.output());
  expect(saved, run.output()).not.toBeNull();
  return { output: run.output(), runDir: join(saved![1], '..'), finalDir: saved![1] };
}

/** The tensors of a safetensors file by name. */
export async function tensorsOf(file: string): Promise<Map<string, Float32Array>> {
  const { tensors } = await readSafetensors(file);
  return new Map([...tensors].map(([name, t]) => [name, t.data]));
}

/** The largest |a − b| over every tensor (the two hold the same names); with `nonZero`, at least one value of a must be non-zero. */
export function maxDifference(a: Map<string, Float32Array>, b: Map<string, Float32Array>, { nonZero = false } = {}): number {
  expect([...a.keys()].sort()).toEqual([...b.keys()].sort());
  let max = 0;
  let seen = false;
  for (const [name, x] of a) {
    const y = b.get(name)!;
    for (let i = 0; i < x.length; i++) {
      max = Math.max(max, Math.abs(x[i] - y[i]));
      seen ||= x[i] !== 0;
    }
  }
  if (nonZero) expect(seen).toBe(true);
  return max;
}
