// lm-compare's evaluation units through the paper's run set (a worker process each): an evaluation unit evaluates a
// done training unit without training it again, is not run again once done, and its numbers reach the results'
// measure tables; `<unit>.lm-eval` runs the harness where it is set up (its test skips, saying so, otherwise).
import { existsSync, mkdirSync, readdirSync, rmSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { CONTEXT, lmCompare } from '../../src/paper/lm-compare.ts';
import { harnessTrained, lmEvalKey, positionKey } from '../../src/paper/lm-evaluation.ts';
import { buildResults, resultsMarkdown } from '../../src/paper/results.ts';
import { collectUnits, experimentRunSet, runExperimentGuard } from '../../src/paper/run.ts';
import { LM_EVAL_SETUP, lmEvalPython } from '../../src/report/lm-eval-results.ts';
import { pendingRuns } from '../../src/sweep/run-folders.ts';
import { contextOf, doneTrainingUnit, writeTinyCorpus } from './lm-evaluation-fixtures.ts';

let dir: string;
const python = lmEvalPython();
if (!python) console.warn(`skipped: the lm-eval evaluation unit's test needs the harness's Python (set up with: ${LM_EVAL_SETUP})`);
beforeAll(async () => {
  await initBackend('wasm', { quiet: true });
  dir = await mkdtemp(path.join(tmpdir(), 'lm-evaluation-'));
  await writeTinyCorpus(dir);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.skipIf(!python)(`<unit>.lm-eval (needs: ${LM_EVAL_SETUP})`, () => {
  it('runs the harness on the trained model and keeps its scores', async () => {
    const unitDir = await doneTrainingUnit(dir, path.join(dir, 'harness'), 'gpt-tiny-seed1', 512);
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
    const trained = await doneTrainingUnit(dir, set.runDir, 'gpt-softmax-seed1', CONTEXT);
    const index = set.units.findIndex((u) => u.name === 'gpt-softmax-seed1.eval');
    expect(set.units[index].settings).toMatchObject({ evaluates: 'gpt-softmax-seed1', step: 'eval' });

    const first = await runExperimentGuard(set, index);
    expect(first).toMatchObject({ action: 'trained', exitCode: 0 });
    expect(pendingRuns(set).map((r) => r.name)).not.toContain('gpt-softmax-seed1.eval');
    const again = await runExperimentGuard(set, index);
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
