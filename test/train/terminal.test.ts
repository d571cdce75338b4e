// What a person at a terminal sees: the train command under a pseudo-terminal (util-linux `script`) draws a live
// progress bar (cli-progress) below its progress lines and says that the first steps compile, while log.txt and a
// piped run keep plain lines, each in log.txt after its time.
import { spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { makeTinySetup, writeTinyRecipe } from './checkpoint-fixtures.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';

const hasScript = spawnSync('script', ['--version'], { encoding: 'utf8' }).status === 0;
let dir: string;
let setup: TinySetup;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'slay-terminal-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

const BAR = /step \d+\/12 [█░]+ +\d+% \| epoch [\d.]+% \| loss \d+\.\d{4} \| ETA /;
const TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z /;

function logOf(runs: string): string {
  const [run] = readdirSync(runs);
  return readFileSync(join(runs, run, 'log.txt'), 'utf8');
}

describe.skipIf(!hasScript)(hasScript ? 'train on a terminal' : 'train on a terminal (skipped: util-linux `script` not found)', () => {
  it('draws a progress bar on a terminal only; log.txt keeps plain, timed lines', async () => {
    const runs = join(dir, 'runs-tty');
    const recipe = await writeTinyRecipe(join(dir, 'tty.yaml'), setup, runs, { checkpointInterval: 0 });
    const command = `${process.execPath} --import tsx src/cli/train.ts ${recipe}`;
    // script -q: no banner; -e: its exit status is the command's; -c: the command; the transcript file is not needed.
    const tty = spawnSync('script', ['-qec', command, '/dev/null'], { encoding: 'utf8', timeout: 120_000 });
    expect(tty.status, tty.stdout + tty.stderr).toBe(0);
    expect(tty.stdout).toMatch(BAR);
    expect(tty.stdout).toContain('compiling the first steps… (a progress line every 2 steps)');
    expect(tty.stdout).toMatch(/step 12\/12 \| epoch/); // the progress lines still print, above the bar
    const log = logOf(runs);
    expect(log).not.toMatch(/█|░|\x1b/);
    for (const line of log.trimEnd().split('\n')) expect(line).toMatch(TIME);
    expect(log).toMatch(/Z compiling the first steps…/);
    expect(log).toMatch(/Z step 2\/12 \| epoch/);

    const pipedRuns = join(dir, 'runs-piped');
    const piped = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/train.ts', await writeTinyRecipe(join(dir, 'piped.yaml'), setup, pipedRuns, { checkpointInterval: 0 })], { encoding: 'utf8', timeout: 120_000 });
    expect(piped.status, piped.stderr).toBe(0);
    expect(piped.stdout).not.toMatch(/█|\x1b/);
    expect(piped.stdout).toMatch(/^compiling the first steps…/m);
    expect(existsSync(join(pipedRuns, readdirSync(pipedRuns)[0], 'final', 'tokenizer.json'))).toBe(true);
  }, 240_000);
});
