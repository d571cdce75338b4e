// lm-compare's evaluation unit (src/paper/lm-evaluation.ts) on a tiny trained GPT, in process: `<unit>.eval` reads
// the loss by position of the final validation record and scores passkey retrieval at the lengths its prompt fits,
// saying which it cannot; it refuses a training unit that is not done. (Through the run set and with the harness:
// lm-evaluation-units.test.ts.)
import { mkdirSync, readdirSync, rmSync } from 'node:fs';
import { mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { evaluateTrained, PASSKEY_MIN_TOKENS, passkeyKey, passkeyTokenKey, positionKey } from '../../src/paper/lm-evaluation.ts';
import { RunFolder } from '../../src/store/run-folder.ts';
import { contextOf, doneTrainingUnit, writeTinyCorpus } from './lm-evaluation-fixtures.ts';

let dir: string;
beforeAll(async () => {
  await initBackend('wasm', { quiet: true });
  dir = await mkdtemp(path.join(tmpdir(), 'lm-evaluation-'));
  await writeTinyCorpus(dir);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('<unit>.eval', () => {
  it('takes the loss by position from the final validation record and scores passkey retrieval where the prompt fits', async () => {
    const unitDir = await doneTrainingUnit(dir, path.join(dir, 'direct'), 'gpt-tiny-seed1', 512);
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
