// The shipped tiny sweep on a small corpus of its own, and the sweep CLI in a child process.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import YAML from 'yaml';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';

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

export interface Cli {
  process: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const children: ChildProcess[] = [];

/** `npm run sweep -- <args>` without npm and the tsx CLI (which relay signals), output collected. */
export function sweepCli(args: string[], env: NodeJS.ProcessEnv = process.env): Cli {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/sweep.ts', ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  children.push(child);
  let text = '';
  child.stdout!.on('data', (d) => (text += d));
  child.stderr!.on('data', (d) => (text += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
  return { process: child, output: () => text, exited };
}

/** Kills what the tests started and left running (after a failed assertion). */
export function killChildren(): void {
  for (const child of children) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Polls `check` every 200 ms until it returns a value or `timeoutMs` passes (then throws `what` and `diagnose()`). */
export async function waitFor<T>(what: string, timeoutMs: number, check: () => T | null | undefined | false, diagnose: () => string = () => ''): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = check();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs / 1000} s waiting for ${what}\n${diagnose()}`);
    await sleep(200);
  }
}
