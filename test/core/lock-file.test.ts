// The lock a sweep's run and a run folder being trained take (src/core/lock-file.ts), taken by several processes at
// once over a stale lock (one left by a process that died): exactly one holds it, the others are told who does. The
// processes start, say they are ready, and take the lock together when told to (no clock involved).
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { takeLockFile, thisProcess } from '../../src/core/lock-file.ts';
import { TSX_IMPORT } from '../../src/tsx-import.ts';

const dir = mkdtempSync(join(tmpdir(), 'lock-file-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const DEAD = { pid: 2 ** 22 + 12345, host: hostname(), startedAt: '2026-01-01T00:00:00.000Z' };

const TAKER = join(dir, 'take.mts'); // .mts: an ES module wherever it lies (top-level await)
writeFileSync(
  TAKER,
  `import { takeLockFile, thisProcess } from ${JSON.stringify(pathToFileURL(resolve('src/core/lock-file.ts')).href)};
import { createInterface } from 'node:readline';
const lines = createInterface({ input: process.stdin });
console.log('ready');
for await (const line of lines) {
  if (line !== 'go') break;
  const lock = takeLockFile(process.argv[2], thisProcess());
  console.log(lock.held ? 'held' : 'refused ' + lock.holder.pid);
}
`,
);

/** Starts `n` takers of `file` and waits until each is ready; `said(k)` resolves with a taker's first k lines. */
async function takers(file: string, n: number) {
  const children = Array.from({ length: n }, () => spawn(process.execPath, ['--import', TSX_IMPORT, TAKER, file], { stdio: ['pipe', 'pipe', 'inherit'] }));
  const said = children.map((child) => {
    let text = '';
    const waiters: (() => void)[] = [];
    child.stdout!.on('data', (d) => {
      text += d;
      for (const w of waiters.splice(0)) w();
    });
    return (lines: number) =>
      new Promise<string[]>((done) => {
        const check = () => (text.split('\n').length > lines ? done(text.trim().split('\n')) : waiters.push(check));
        check();
      });
  });
  await Promise.all(said.map((s) => s(1)));
  return { children, said };
}

describe('takeLockFile', () => {
  it('over a stale lock, several processes at once: exactly one holds it, the others are refused naming it', async () => {
    const file = join(dir, 'run.lock');
    const { children, said } = await takers(file, 6);
    try {
      writeFileSync(file, JSON.stringify(DEAD));
      for (const child of children) child.stdin!.write('go\n');
      const answers = (await Promise.all(said.map((s) => s(2)))).map((lines) => lines[1]);
      const held = answers.filter((a) => a === 'held');
      expect(held, answers.join(', ')).toHaveLength(1);
      const holder = children[answers.indexOf('held')].pid;
      expect(answers.filter((a) => a !== 'held')).toEqual(Array(5).fill(`refused ${holder}`));
    } finally {
      for (const child of children) child.stdin!.end();
    }
  });

  it('a live holder is reported, a dead one taken over, and release removes only its own lock', () => {
    const file = join(dir, 'own.lock');
    writeFileSync(file, JSON.stringify({ ...DEAD, pid: process.ppid }));
    expect(takeLockFile(file, thisProcess())).toMatchObject({ held: false, holder: { pid: process.ppid } });
    writeFileSync(file, JSON.stringify(DEAD));
    const lock = takeLockFile(file, thisProcess());
    expect(lock.held).toBe(true);
    writeFileSync(file, JSON.stringify({ ...DEAD, pid: process.ppid })); // another process's now
    if (lock.held) lock.release();
    expect(takeLockFile(file, thisProcess())).toMatchObject({ held: false, holder: { pid: process.ppid } });
  });
});
