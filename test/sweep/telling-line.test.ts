// What a failed run's one line says: Node's own output after an uncaught error (stack, caret, version banner) is
// skipped, so the sweep's "FAILED …" line and the attempt record name the error itself.
import { spawnSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { tellingLine } from '../../src/sweep/set-files.ts';

describe('tellingLine', () => {
  it("names the error of a real Node crash, not Node's version banner", () => {
    const crash = spawnSync(process.execPath, ['-e', "function f() { throw new Error('boom: shard 3 is truncated'); } f();"], { encoding: 'utf8' });
    expect(crash.status).not.toBe(0);
    expect(crash.stderr.trim().split('\n').at(-1)).toMatch(/^Node\.js v\d/); // what the sweep used to show
    expect(tellingLine('starting', crash.stderr)).toBe('Error: boom: shard 3 is truncated');
  });
  it('keeps the previous line when a chunk holds only noise, and takes the last telling line otherwise', () => {
    expect(tellingLine('step 10/20', '\n    at f (file.js:1:1)\n\nNode.js v20.20.2\n')).toBe('step 10/20');
    expect(tellingLine('starting', 'step 1/20\nstep 2/20\n')).toBe('step 2/20');
  });
});
