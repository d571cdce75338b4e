// lm-compare's evaluation units (src/paper/lm-evaluation.ts) on a tiny trained GPT: `<unit>.eval` reads the loss by
// position of the final validation record and scores passkey retrieval at the lengths its prompt fits, saying which it
// cannot; `<unit>.lm-eval` runs the harness (where it is set up); an evaluation unit run through the paper's run set
// evaluates a done training unit without training it again, and is not run again once done; the measure tables
// carry the units' numbers into the results.
import { existsSync, mkdirSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { CONTEXT, lmCompare } from '../../src/paper/lm-compare.ts';
import { evaluateTrained, harnessTrained, lmEvalKey, PASSKEY_MIN_TOKENS, passkeyKey, passkeyTokenKey, positionKey } from '../../src/paper/lm-evaluation.ts';
import type { UnitContext, UnitOutcome } from '../../src/paper/protocol.ts';
import { buildResults, resultsMarkdown } from '../../src/paper/results.ts';
import { collectUnits, experimentRunSet, runExperimentTask } from '../../src/paper/run.ts';
import { LM_EVAL_SETUP, lmEvalPython } from '../../src/report/lm-eval-results.ts';
import { writeSummary } from '../../src/store/run-record.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { RunFolder } from '../../src/store/run-folder.ts';
import { pendingRuns } from '../../src/sweep/run-folders.ts';
import { makeRunDir } from '../../src/telemetry/run-logger.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';

let dir: string;
const python = lmEvalPython();
if (!python) console.warn(`skipped: the lm-eval evaluation unit's test needs the harness's Python (set up with: ${LM_EVAL_SETUP})`);

/** A tiny GPT trained a few steps inside `unitDir`, as a training unit trains (its run folder inside the unit's). */
async function trainInto(unitDir: string, maxSeqLen: number): Promise<void> {
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

/** A done training unit, as runUnitHere leaves it: its trained run inside, result.json and summary.json. */
async function doneTrainingUnit(parent: string, name: string, maxSeqLen: number): Promise<string> {
  const unitDir = makeRunDir(parent, name);
  writeFileSync(path.join(unitDir, 'env.json'), '{}\n');
  await trainInto(unitDir, maxSeqLen);
  const outcome: UnitOutcome = { values: [5], extra: { acc: 0.1 }, headline: 'trained' };
  const now = new Date().toISOString();
  const result = { experiment: 'lm-compare', version: lmCompare.version, unit: name, outcome, seconds: 1, cpuSeconds: 1, startedAt: now, finishedAt: now };
  writeFileSync(path.join(unitDir, 'result.json'), JSON.stringify(result));
  writeSummary(unitDir, { headline: 'trained', elapsed_s: 1, finished_at: now });
  return unitDir;
}

const contextOf = (evalDir: string, units: Record<string, string>): UnitContext => ({
  dir: evalDir,
  leader: true,
  doneUnit: (name) => (units[name] ? { dir: units[name], outcome: { values: [5], extra: {}, headline: '' } } : null),
});

beforeAll(async () => {
  await initBackend('wasm', { quiet: true });
  dir = await mkdtemp(path.join(tmpdir(), 'lm-evaluation-'));
  const docs = syntheticDocuments(300, 5);
  await writeDataset(path.join(dir, 'data'), { train: [docs.slice(0, 260)], validation: [docs.slice(260)] }, 50);
  await trainByteLevelBpeFromTexts(docs, 300, path.join(dir, 'tokenizer.json'));
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('<unit>.eval', () => {
  it('takes the loss by position from the final validation record and scores passkey retrieval where the prompt fits', async () => {
    const unitDir = await doneTrainingUnit(path.join(dir, 'direct'), 'gpt-tiny-seed1', 512);
    const evalDir = path.join(dir, 'direct', 'eval');
    mkdirSync(evalDir);
    const outcome = await evaluateTrained(
      'gpt-tiny-seed1',
      'gpt',
      [16, 400],
      { passkeyTrialsPerDepth: 1, lmEvalLimit: null },
      contextOf(evalDir, { 'gpt-tiny-seed1': unitDir }),
    );

    const run = readdirSync(unitDir).find((e) => e.startsWith('tiny-'))!;
    const last = RunFolder.at(path.join(unitDir, run))
      .metrics()
      .filter((r) => r.split === 'val')
      .at(-1)!;
    expect(last.by_position).toHaveLength(6); // [0,1) [1,2) [2,4) [4,8) [8,16) [16,32)
    for (const bucket of last.by_position!) expect(outcome.extra[positionKey(bucket.from, bucket.to)]).toBe(bucket.loss);

    // The prompt's fixed text takes more than 16 tokens: that length is reported, not run; 400 runs, 5 depths × 1 key.
    const minTokens = outcome.extra[PASSKEY_MIN_TOKENS]!;
    expect(minTokens).toBeGreaterThan(16);
    expect(minTokens).toBeLessThan(400);
    expect(outcome.extra[passkeyKey(16)]).toBeUndefined();
    const rows = outcome.details!.passkey as { length: number; trials: number; retrieval: number; tokenAccuracy: number }[];
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ length: 400, trials: 5 });
    expect(outcome.extra[passkeyKey(400)]).toBe(rows[0].retrieval);
    expect(outcome.extra[passkeyTokenKey(400)]).toBe(rows[0].tokenAccuracy);
    expect(outcome.details!.passkeyTooShort).toEqual([16]);
    expect(outcome.headline).toMatch(/loss by position in 6 buckets; passkey retrieval 400: \d\.\d\d \(16: shorter than its prompt\)/);
    expect(outcome.values).toEqual([]);
  });

  it('refuses to evaluate a training unit that is not done, naming it', async () => {
    await expect(
      evaluateTrained('gpt-missing-seed1', 'gpt', [400], { passkeyTrialsPerDepth: 1, lmEvalLimit: null }, contextOf(path.join(dir, 'none'), {})),
    ).rejects.toThrow(/unit gpt-missing-seed1 is not done: its evaluation reads its trained model/);
  });
});

describe.skipIf(!python)(`<unit>.lm-eval (needs: ${LM_EVAL_SETUP})`, () => {
  it('runs the harness on the trained model and keeps its scores', async () => {
    const unitDir = await doneTrainingUnit(path.join(dir, 'harness'), 'gpt-tiny-seed1', 512);
    const evalDir = path.join(dir, 'harness', 'lm-eval-unit');
    mkdirSync(evalDir);
    const outcome = await harnessTrained('gpt-tiny-seed1', { passkeyTrialsPerDepth: 1, lmEvalLimit: 2 }, contextOf(evalDir, { 'gpt-tiny-seed1': unitDir }));
    for (const task of ['moby_dick_ppl', 'moby_dick_lambada', 'moby_dick_cloze']) expect(existsSync(path.join(evalDir, 'lm-eval', `${task}.json`))).toBe(true);
    expect(outcome.extra[lmEvalKey('moby_dick_ppl', 'bits_per_byte')]).toBeGreaterThan(0);
    expect(outcome.extra[lmEvalKey('moby_dick_cloze', 'acc')]).toBeGreaterThanOrEqual(0);
    expect(outcome.details).toMatchObject({ limit: 2, samples: { moby_dick_cloze: 2 } });
  });
});

describe('lm-compare evaluation units through the run set', () => {
  it('evaluates a done training unit without training it again, and does not evaluate it twice', async () => {
    const set = experimentRunSet(lmCompare, { quick: true, backend: 'wasm', runsRoot: path.join(dir, 'runs') });
    const trained = await doneTrainingUnit(set.runDir, 'gpt-softmax-seed1', CONTEXT);
    const index = set.units.findIndex((u) => u.name === 'gpt-softmax-seed1.eval');
    expect(set.units[index].settings).toMatchObject({ evaluates: 'gpt-softmax-seed1', step: 'eval' });

    const first = await runExperimentTask(set, index);
    expect(first).toMatchObject({ action: 'trained', exitCode: 0 });
    expect(pendingRuns(set).map((r) => r.name)).not.toContain('gpt-softmax-seed1.eval');
    const again = await runExperimentTask(set, index);
    expect(again.action).toBe('skipped-done');
    expect(readdirSync(set.runDir).filter((e) => e.startsWith('gpt-softmax-seed1.eval-'))).toHaveLength(1);
    // The training unit was read, not run again: still its one folder with its one trained run.
    expect(readdirSync(set.runDir).filter((e) => e.startsWith('gpt-softmax-seed1-'))).toEqual([path.basename(trained)]);

    // Its numbers reach the results: the GPT loss-by-position table's softmax row, one seed of two done.
    const results = buildResults(set, collectUnits(set));
    const table = results.measured.find((t) => t.title === 'GPT (next-token): validation loss by position (nats/token)')!;
    const evalUnit = results.units.find((u) => u.name === 'gpt-softmax-seed1.eval')!;
    expect(table.columns[0]).toBe('[0, 1)');
    expect(table.rows.find((r) => r.row === 'softmax')!.cells[0]).toMatchObject({ mean: evalUnit.extra[positionKey(0, 1)], n: 1 });
    expect(table.rows.find((r) => r.row === 'performer')!.cells[0].n).toBe(0);
    const markdown = resultsMarkdown(results, null);
    expect(markdown).toContain('## GPT (next-token): validation loss by position (nats/token)');
    expect(markdown).toContain('## GPT (next-token): passkey retrieval');
    expect(markdown).toContain('## GPT (next-token): lm-evaluation-harness');
  });
});
