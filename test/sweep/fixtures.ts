// The shipped tiny sweep on a small corpus of its own, and the sweep CLI in a child process.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';
import { killStartedClis, startCli, type StartedCli } from '../helpers/cli.ts';

export interface Corpus {
  data: string;
  tokenizer: string;
}

/** 3,000 synthetic documents (≈ 130k tokens) and a 300-token byte-level BPE. */
export async function makeCorpus(dir: string): Promise<Corpus> {
  const docs = syntheticDocuments(3000, 5);
  const data = join(dir, 'data');
  await writeDataset(data, { train: [docs.slice(0, 2800)], validation: [docs.slice(2800)] }, 200);
  const tokenizer = join(dir, 'tokenizer.json');
  await trainByteLevelBpeFromTexts(docs.slice(0, 2800), 300, tokenizer);
  return { data, tokenizer };
}

/**
 * sweeps/tiny.yaml with its data, tokenizer and run folder moved to the test's (and `edit` applied to the parsed
 * file), written to `file`.
 */
export function writeTinySweep(file: string, corpus: Corpus, runDir: string, edit: (sweep: Record<string, any>) => void = () => {}): string {
  const sweep = YAML.parse(readFileSync('sweeps/tiny.yaml', 'utf8')) as Record<string, any>;
  sweep.set['data.dataset'] = corpus.data;
  sweep.set['data.tokenizer'] = corpus.tokenizer;
  sweep.runDir = runDir;
  edit(sweep);
  writeFileSync(file, YAML.stringify(sweep));
  return file;
}

/** For writeTinySweep: one run long enough to be interrupted in the middle (100 steps, a checkpoint every 4). */
export function oneLongerRun(sweep: Record<string, any>): void {
  sweep.set.model = { dModel: 64, numLayers: 2, numHeads: 2, mlpRatio: 2 };
  sweep.set.data = { seqLen: 64, shuffleBuffer: 16 };
  sweep.set.train = { ...sweep.set.train, batchSize: 8, maxTokens: 51200, evalInterval: 50 };
  sweep.grid = { 'model.attention': ['softmax'], 'train.seed': [1] };
}

/** `npm run sweep -- <args>` without npm and the tsx CLI (which relay signals), output collected. */
export function sweepCli(args: string[], env: NodeJS.ProcessEnv = process.env): StartedCli {
  return startCli('src/cli/sweep.ts', args, env);
}

/** Kills what the tests started and left running (after a failed assertion). */
export const killChildren = killStartedClis;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Waits until `check` returns a value about the files under `folder`, checking it every 100 ms, so the wait ends
 * with the state that makes it hold, however busy the machine; `timeoutMs` only bounds a failure (then it throws
 * `what` and `diagnose()`). A check that throws (a file not written yet) counts as not yet. Not fs.watch: Node 20's
 * recursive watcher on Linux throws an uncaught ENOENT when a watched folder disappears under it, which the
 * trainer's atomic checkpoint folders (written aside, renamed, pruned) do all the time.
 */
export function waitForFiles<T>(
  what: string,
  folder: string,
  timeoutMs: number,
  check: () => T | null | undefined | false,
  diagnose: () => string = () => '',
): Promise<T> {
  return pollFor(
    `${what} (under ${folder})`,
    timeoutMs,
    () => {
      try {
        return check();
      } catch {
        return null;
      }
    },
    diagnose,
    100,
  );
}

/**
 * Polls `check` every `everyMs` (200) ms until it returns a value or `timeoutMs` passes (then throws `what` and `diagnose()`): for
 * state outside the file system (Slurm's queue), which has no event to wait on.
 */
export async function pollFor<T>(
  what: string,
  timeoutMs: number,
  check: () => T | null | undefined | false,
  diagnose: () => string = () => '',
  everyMs = 200,
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}\n${diagnose()}`);
    await sleep(everyMs);
  }
}
