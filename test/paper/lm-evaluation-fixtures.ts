// What the lm-compare evaluation tests share: a tiny dataset and tokenizer, a tiny GPT trained as a training unit
// trains (its run folder inside the unit's), and a done training unit's folder as runUnitHere leaves it.
import { writeFileSync } from 'node:fs';
import path from 'node:path';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { lmCompare } from '../../src/paper/lm-compare.ts';
import type { UnitContext, UnitOutcome } from '../../src/paper/protocol.ts';
import { writeSummary } from '../../src/store/run-record.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { makeRunDir } from '../../src/telemetry/run-logger.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';

/** A dataset and a 300-id tokenizer in `dir`, for trainInto. */
export async function writeTinyCorpus(dir: string): Promise<void> {
  const docs = syntheticDocuments(300, 5);
  await writeDataset(path.join(dir, 'data'), { train: [docs.slice(0, 260)], validation: [docs.slice(260)] }, 50);
  await trainByteLevelBpeFromTexts(docs, 300, path.join(dir, 'tokenizer.json'));
}

/** A tiny GPT trained a few steps inside `unitDir`, as a training unit trains (its run folder inside the unit's). */
async function trainInto(dir: string, unitDir: string, maxSeqLen: number): Promise<void> {
  const recipe = parseRecipe(
    `
model: { kind: gpt, dModel: 16, numLayers: 1, numHeads: 2, maxSeqLen: ${maxSeqLen}, attention: { name: softmax } }
data: { dataset: ${path.join(dir, 'data')}, tokenizer: ${path.join(dir, 'tokenizer.json')}, seqLen: 32 }
train: { batchSize: 4, dataParallel: 1, maxTokens: 256, evalInterval: 2, evalTokens: 256, warmupSteps: 1, checkpointInterval: 0, runDir: ${unitDir}, seed: 1 }
`,
    path.join(dir, 'tiny.yaml'),
  );
  await runTraining(recipe);
}

/** A done training unit in `parent` (corpus in `dir`), as runUnitHere leaves it: its trained run inside, result.json and summary.json. */
export async function doneTrainingUnit(dir: string, parent: string, name: string, maxSeqLen: number): Promise<string> {
  const unitDir = makeRunDir(parent, name);
  writeFileSync(path.join(unitDir, 'env.json'), '{}\n');
  await trainInto(dir, unitDir, maxSeqLen);
  const outcome: UnitOutcome = { values: [5], extra: { acc: 0.1 }, headline: 'trained' };
  const now = new Date().toISOString();
  const result = { experiment: 'lm-compare', version: lmCompare.version, unit: name, outcome, seconds: 1, cpuSeconds: 1, startedAt: now, finishedAt: now };
  writeFileSync(path.join(unitDir, 'result.json'), JSON.stringify(result));
  writeSummary(unitDir, { headline: 'trained', elapsed_s: 1, finished_at: now });
  return unitDir;
}

export const contextOf = (evalDir: string, units: Record<string, string>): UnitContext => ({
  dir: evalDir,
  leader: true,
  doneUnit: (name) => (units[name] ? { dir: units[name], outcome: { values: [5], extra: {}, headline: '' } } : null),
});
