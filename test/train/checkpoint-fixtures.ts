// A tiny corpus, tokenizer and recipe for the checkpoint, resume and kill tests (seconds on the cpu backend).
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import type { StopRequest } from '../../src/train/stop.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';

export interface TinySetup {
  data: string;
  tokenizer: string;
  /** The same tokenizer trained with a different vocabulary size (a different file and hash). */
  otherTokenizer: string;
}

export async function makeTinySetup(dir: string): Promise<TinySetup> {
  const docs = syntheticDocuments(300, 11);
  const data = join(dir, 'data');
  await writeDataset(data, { train: [docs.slice(0, 270)], validation: [docs.slice(270)] }, 40);
  const tokenizer = join(dir, 'tokenizer.json');
  await trainByteLevelBpeFromTexts(docs.slice(0, 270), 300, tokenizer);
  const otherTokenizer = join(dir, 'tokenizer-other.json');
  await trainByteLevelBpeFromTexts(docs.slice(0, 270), 310, otherTokenizer);
  return { data, tokenizer, otherTokenizer };
}

/**
 * GPT with Performer attention (projection redrawn every 2 steps) and dropout 0.1, so an exact resume must get the
 * data order, the dropout masks and the random features right. 12 steps of 4×16 tokens.
 */
export function tinyRecipeText(setup: TinySetup, runDir: string, train: Record<string, number | string> = {}): string {
  const keys: Record<string, number | string> = {
    batchSize: 4,
    lr: 1e-2,
    warmupSteps: 2,
    maxTokens: 768,
    evalInterval: 4,
    evalTokens: 128,
    logInterval: 2,
    checkpointInterval: 3,
    keepCheckpoints: 2,
    seed: 3,
    runDir,
    ...train,
  };
  const trainSection = Object.entries(keys)
    .map(([k, v]) => `${k}: ${v}`)
    .join(', ');
  return `
backend: cpu
model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2, mlpRatio: 2, dropout: 0.1, attention: { name: performer, options: { features: 8, redrawInterval: 2 } } }
data: { dataset: ${setup.data}, tokenizer: ${setup.tokenizer}, seqLen: 16, shuffleBuffer: 8 }
train: { ${trainSection} }
wandb: { enabled: false }
`;
}

export async function writeTinyRecipe(file: string, setup: TinySetup, runDir: string, train: Record<string, number | string> = {}): Promise<string> {
  await writeFile(file, tinyRecipeText(setup, runDir, train));
  return file;
}

/** A stop request that fires when the loop checks it for the n-th time, i.e. after step n. */
export function stopAfter(n: number): StopRequest {
  let reads = 0;
  return {
    get signal() {
      reads++;
      return reads >= n ? 'SIGTERM' : null;
    },
  };
}
