// A write that fails (a full disk, ENOSPC) names the file it was writing: Node's own write errors name none.
// /dev/full answers every write with ENOSPC, as a full disk does.
import { existsSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { writeFileSynced } from '../../src/core/atomic-folder.ts';
import { appendOwnFile, writeOwnFile } from '../../src/core/own-file.ts';

describe.skipIf(!existsSync('/dev/full'))('a full disk', () => {
  it('the error of a failed write names the file and keeps its code', async () => {
    await expect(writeFileSynced('/dev/full', 'model bytes')).rejects.toMatchObject({ code: 'ENOSPC', message: expect.stringMatching(/^\/dev\/full: ENOSPC/) });
    for (const write of [writeOwnFile, appendOwnFile]) {
      expect(() => write('/dev/full', 'a record\n')).toThrow(
        expect.objectContaining({ code: 'ENOSPC', message: expect.stringMatching(/^\/dev\/full: ENOSPC/) }),
      );
    }
  });
});
