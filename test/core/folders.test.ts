// Folders that cannot be created on a read-only disk say so: Node's recursive mkdir reports ENOENT there, which the
// project's makeFolders replaces by the real cause (EROFS), naming the folder; a run folder and a checkpoint alike.
import { existsSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { writeFolderAtomically } from '../../src/core/atomic-folder.ts';
import { makeFolders } from '../../src/core/folders.ts';
import { makeRunDir } from '../../src/telemetry/run-logger.ts';
import { mountTmpfs } from '../helpers/tmpfs.ts';

const disk = mountTmpfs('size=64k');
if (disk.dir) {
  mkdirSync(join(disk.dir, 'run', 'checkpoints'), { recursive: true });
  disk.remountReadOnly();
}
afterAll(() => disk.unmount());

const readOnly = (folder: string) => expect.objectContaining({ code: 'EROFS', message: expect.stringContaining(`cannot create the folder ${folder}: EROFS`) });

describe.skipIf(!disk.dir)(disk.dir ? 'a read-only disk' : `a read-only disk (skipped: ${disk.reason})`, () => {
  it('creating a folder there fails with EROFS naming it, not ENOENT', () => {
    const ro = disk.dir!;
    expect(() => makeFolders(join(ro, 'runs', 'a'))).toThrow(readOnly(join(ro, 'runs', 'a')));
    expect(() => makeRunDir(join(ro, 'runs'), 'tiny')).toThrow(readOnly(join(ro, 'runs')));
    expect(() => makeFolders(join(ro, 'run'))).not.toThrow(); // it exists: nothing to create
  });

  it('a checkpoint saved there fails with EROFS naming the folder, and leaves nothing behind', async () => {
    const ro = disk.dir!;
    const save = (parent: string) => writeFolderAtomically(parent, 'step-000001', new Map([['state.json', '{}']]), new Set(['state.json']));
    await expect(save(join(ro, 'run', 'new-checkpoints'))).rejects.toThrow(readOnly(join(ro, 'run', 'new-checkpoints')));
    await expect(save(join(ro, 'run', 'checkpoints'))).rejects.toMatchObject({ code: 'EROFS' });
    expect(readdirSync(join(ro, 'run', 'checkpoints'))).toEqual([]);
    expect(existsSync(join(ro, 'run', 'new-checkpoints'))).toBe(false);
  });
});
