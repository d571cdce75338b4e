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
    // An 80-column terminal, the width of a laptop's split window.
    const command = `stty cols 80 rows 24 && ${process.execPath} --import tsx src/cli/train.ts ${recipe}`;
    // script -q: no banner; -e: its exit status is the command's; -c: the command; the transcript file is not needed.
    const tty = spawnSync('script', ['-qec', command, '/dev/null'], { encoding: 'utf8', timeout: 120_000 });
    expect(tty.status, tty.stdout + tty.stderr).toBe(0);
    expect(tty.stdout).toMatch(BAR);
    expect(tty.stdout).toContain('compiling the first steps… (a progress line every 2 steps)');
    // The progress lines still print, above the bar, as many fields as fit: tokens/s and ETA are kept, ppl and lr go.
    expect(tty.stdout).toMatch(/step 12\/12 \| (epoch [\d.]+% \| )?loss [\d.]+ \| grad [\d.]+ \| [\d,]+ tok\/s \| ETA \S+\r?\n/);
    // Nothing written between two returns to the first column passes 80 columns, and the terminal's own line
    // wrapping stays on (with it off, a longer line would lose its end and show its last character in the last column).
    expect(tty.stdout).not.toContain('\x1b[?7l');
    // eslint-disable-next-line no-control-regex
    const rows = tty.stdout.split(/\n|\r|\x1b\[\d*G|\x1b\[\d*K/).map((row) => row.replace(/\x1b\[[0-9;?]*[A-Za-z]|\x1b[78]/g, ''));
    const progressRows = rows.filter((row) => row.startsWith('step '));
    expect(progressRows.length).toBeGreaterThan(6);
    for (const row of progressRows) expect([...row].length, row).toBeLessThanOrEqual(80);
    const log = logOf(runs);
    expect(log).not.toMatch(/█|░|\x1b/);
    for (const line of log.trimEnd().split('\n')) expect(line).toMatch(TIME);
    expect(log).toMatch(/Z compiling the first steps…/);
    // log.txt keeps every field.
    expect(log).toMatch(/Z step 2\/12 \| epoch [\d.]+% \| loss [\d.]+ \| ppl [\d.]+ \| lr [\d.e+-]+ \| grad [\d.]+ \| [\d,]+ tok\/s \| ETA /);

    const pipedRuns = join(dir, 'runs-piped');
    const piped = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'src/cli/train.ts', await writeTinyRecipe(join(dir, 'piped.yaml'), setup, pipedRuns, { checkpointInterval: 0 })],
      { encoding: 'utf8', timeout: 120_000 },
    );
    expect(piped.status, piped.stderr).toBe(0);
    expect(piped.stdout).not.toMatch(/█|\x1b/);
    expect(piped.stdout).toMatch(/^compiling the first steps…/m);
    expect(existsSync(join(pipedRuns, readdirSync(pipedRuns)[0], 'final', 'tokenizer.json'))).toBe(true);
  }, 240_000);
});
