// `train --processes N` on one machine (src/backend/machine-ranks.ts): more ranks than two per core, or than the available
// memory holds at ~0.6 GB each, are refused before any rank starts, naming both figures and --oversubscribe.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { machineRanksProblem, thisMachine } from '../../src/backend/machine-ranks.ts';
import { startCli } from '../helpers/cli.ts';

describe('the ranks one machine holds', () => {
  it('allows two ranks per core while the memory holds them', () => {
    expect(machineRanksProblem(2, { cores: 1, memoryBytes: 24e9 }, '--processes')).toBeNull();
    expect(machineRanksProblem(4, { cores: 2, memoryBytes: 24e9 }, '--processes')).toBeNull();
  });

  it('refuses more, naming the cores, the memory and the flag that starts them anyway', () => {
    expect(machineRanksProblem(4096, { cores: 2, memoryBytes: 24e9 }, '--processes')).toBe(
      '--processes 4096: more ranks than this machine holds: its 2 cores take at most 4 (2 per core), its 24.0 GB of available memory at most 40 ' +
        '(a rank takes at least 0.6 GB); pass --oversubscribe to start them anyway (docs/distributed.md)',
    );
    expect(machineRanksProblem(5, { cores: 2, memoryBytes: 24e9 }, 'train.processes')).toMatch(/^train\.processes 5: more ranks than this machine holds/);
    expect(machineRanksProblem(8, { cores: 64, memoryBytes: 3.1e9 }, '--processes')).toMatch(
      /its 64 cores take at most 128 .* its 3\.1 GB of available memory at most 5 /,
    );
  });

  it("reads this machine's cores and available memory", () => {
    const machine = thisMachine();
    expect(machine.cores).toBe(availableParallelism());
    expect(machine.memoryBytes).toBeGreaterThan(0);
  });
});

describe('train --processes beyond the machine', () => {
  const work = mkdtempSync(join(tmpdir(), 'train-processes-'));
  afterAll(() => rmSync(work, { recursive: true, force: true }));
  const recipe = join(work, 'tiny.yaml');
  writeFileSync(
    recipe,
    `model: { dModel: 16, numHeads: 2, numLayers: 1 }\ndata: { dataset: ${join(work, 'data')}, tokenizer: ${join(work, 't.json')}, seqLen: 16 }\ntrain: { runDir: ${join(work, 'runs')} }\n`,
  );

  it('is refused before any rank starts, from the flag and from the recipe', async () => {
    const cores = `its ${availableParallelism()} cores take at most ${2 * availableParallelism()} \\(2 per core\\)`;
    for (const [args, source] of [
      [['--processes', '4096'], '--processes'],
      [['--train.processes=4096'], 'train.processes'],
    ]) {
      const run = startCli('src/cli/train.ts', [recipe, '--backend', 'tensorflow', ...args]);
      expect((await run.exited).code, run.output()).toBe(2);
      expect(run.output()).toMatch(new RegExp(`^train: ${source} 4096: more ranks than this machine holds: ${cores}, its [\\d.]+ GB of available memory`, 'm'));
      expect(run.output()).toContain('pass --oversubscribe to start them anyway');
      expect(run.output()).not.toMatch(/\[train\] \d+ processes/);
    }
  });
});
