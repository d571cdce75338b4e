// The offline GPU archive's checks in bench/xla-run.py (docs/xla.md, "Offline GPU node"), on small archives made
// here with Python's tarfile (no demo data, no jax): a member that is absolute, climbs out with `..`, or is a link or
// a device is refused before anything is written, on the `data` filter's path and on the fallback for Pythons
// without it; the unpacked files must match SHA256SUMS (an altered, unlisted or missing file is an error naming it);
// --archive is required and --dir must be new or empty. Needs python3 (≥ 3.10) on the PATH.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const version = spawnSync('python3', ['-c', 'import sys; print(sys.version_info >= (3, 10))'], { encoding: 'utf8' });
const available = version.status === 0 && version.stdout.trim() === 'True';
if (!available) console.log('[xla-archive-unpack] skipped: needs python3 ≥ 3.10 on the PATH');

const dir = mkdtempSync(join(tmpdir(), 'slay-xla-unpack-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let count = 0;

interface Member {
  name: string;
  type?: 'file' | 'dir' | 'symlink' | 'hardlink' | 'fifo';
  text?: string;
  link?: string;
  mode?: number;
}

const NODE_SCRIPT = '#!/bin/sh\ntouch "$(dirname "$0")/../../NODE-RAN"\n';
const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

/** A .tar.xz of `members`, written by Python's tarfile (it writes names tar itself would not). */
function makeArchive(members: Member[]): string {
  const file = join(dir, `archive-${count++}.tar.xz`);
  const script = `
import io, json, sys, tarfile
with tarfile.open(sys.argv[1], 'w:xz') as archive:
    for m in json.loads(sys.argv[2]):
        info = tarfile.TarInfo(m['name'])
        info.mode = m.get('mode', 0o644)
        kind = m.get('type', 'file')
        data = m.get('text', '').encode()
        if kind == 'file':
            info.size = len(data)
        else:
            info.type = {'dir': tarfile.DIRTYPE, 'symlink': tarfile.SYMTYPE, 'hardlink': tarfile.LNKTYPE, 'fifo': tarfile.FIFOTYPE}[kind]
            info.linkname = m.get('link', '')
        archive.addfile(info, io.BytesIO(data) if kind == 'file' else None)
`;
  const made = spawnSync('python3', ['-c', script, file, JSON.stringify(members)], { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(made.stderr);
  return file;
}

/** A well-formed archive's members: a node that leaves a mark when run, a manifest, and their SHA256SUMS. */
function goodMembers(): Member[] {
  const files: Member[] = [
    { name: 'node/bin/node', text: NODE_SCRIPT, mode: 0o4755 },
    { name: 'manifest.json', text: '{"commit": "test", "bench": [], "train": {}}\n' },
  ];
  const sums = files.map((f) => `${sha256(f.text!)}  ${f.name}\n`).join('');
  return [...files, { name: 'SHA256SUMS', text: sums }];
}

/** bench/xla-run.py as a process: its exit status and what it wrote to stderr. */
function xlaRun(args: string[]) {
  const run = spawnSync('python3', ['bench/xla-run.py', ...args, '--out', join(dir, `out-${count++}`)], { encoding: 'utf8' });
  return { status: run.status, stderr: run.stderr, stdout: run.stdout };
}

/** Runs `code` after importing bench/xla-run.py as `xla_run` (no jax needed: it imports jax only to train). */
function withModule(code: string, args: string[]) {
  const prelude = `import importlib.util, sys
spec = importlib.util.spec_from_file_location('xla_run', 'bench/xla-run.py')
xla_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(xla_run)
`;
  return spawnSync('python3', ['-B', '-c', prelude + code, ...args], { encoding: 'utf8' });
}

const HOSTILE: Array<[string, Member, RegExp]> = [
  ['a member ../x', { name: '../x', text: 'outside' }, /member '\.\.\/x' climbs out of the folder with \.\./],
  ['a member inside/../../x', { name: 'inside/../../x', text: 'outside' }, /member 'inside\/\.\.\/\.\.\/x' climbs out/],
  ['an absolute member', { name: '/ABSOLUTE', text: 'outside' }, /member '\/ABSOLUTE' is an absolute path/],
  ['a symbolic link out', { name: 'escape', type: 'symlink', link: '..' }, /member 'escape' is a link \(to '\.\.'\)/],
  ['a symbolic link inside', { name: 'alias', type: 'symlink', link: 'manifest.json' }, /member 'alias' is a link/],
  ['a hard link', { name: 'hard', type: 'hardlink', link: 'manifest.json' }, /member 'hard' is a link/],
  ['a fifo', { name: 'pipe', type: 'fifo' }, /member 'pipe' is neither a file nor a folder/],
];

describe.skipIf(!available)('xla-run.py unpacking the offline GPU archive', () => {
  for (const [what, member, message] of HOSTILE) {
    it(`refuses ${what}: nothing is unpacked, nothing runs`, () => {
      const case_ = join(dir, `case-${count++}`);
      const target = join(case_, 'unpacked');
      mkdirSync(case_);
      const archive = makeArchive([...goodMembers(), member]);
      const run = xlaRun(['--archive', archive, '--dir', target]);
      expect(run.status, run.stderr).toBe(2);
      expect(run.stderr).toMatch(message);
      expect(run.stderr).toContain(archive);
      expect(existsSync(join(case_, 'x')) || existsSync(join(case_, 'NODE-RAN'))).toBe(false);
      expect(existsSync(join(target, 'manifest.json'))).toBe(false);
      // The fallback for Pythons without tarfile's data filter refuses it the same way.
      const fallback = withModule(
        `try:
    xla_run.unpack(sys.argv[1], sys.argv[2], data_filter=False)
except xla_run.ArchiveError as err:
    print(err)
    sys.exit(3)`,
        [archive, join(case_, 'fallback')],
      );
      expect(fallback.status, fallback.stderr).toBe(3);
      expect(fallback.stdout).toMatch(message);
      expect(existsSync(join(case_, 'x')) || existsSync(join(case_, 'fallback', 'manifest.json'))).toBe(false);
    });
  }

  it('unpacks a good archive on both paths, checks it against SHA256SUMS, and drops set-user-ID bits', () => {
    const archive = makeArchive(goodMembers());
    for (const dataFilter of ['True', 'False']) {
      const target = join(dir, `good-${dataFilter}`);
      const run = withModule(
        `xla_run.unpack(sys.argv[1], sys.argv[2], data_filter=${dataFilter})
xla_run.check_sums(sys.argv[2])
import os, stat
print(oct(stat.S_IMODE(os.stat(os.path.join(sys.argv[2], 'node', 'bin', 'node')).st_mode)))`,
        [archive, target],
      );
      expect(run.status, run.stderr).toBe(0);
      expect(run.stdout.trim()).toBe('0o755');
      expect(readFileSync(join(target, 'node', 'bin', 'node'), 'utf8')).toBe(NODE_SCRIPT);
    }
  });

  it('an altered, unlisted or missing file, or no SHA256SUMS, is an error naming the file; the node never runs', () => {
    const members = goodMembers();
    const sums = members.find((m) => m.name === 'SHA256SUMS')!;
    const cases: Array<[Member[], RegExp]> = [
      [
        members.map((m) => (m.name === 'manifest.json' ? { ...m, text: '{"commit": "altered"}\n' } : m)),
        /manifest\.json: its sha256 differs from the one in .*SHA256SUMS/,
      ],
      [[...members, { name: 'app/extra.mjs', text: 'extra' }], /app\/extra\.mjs is not listed in .*SHA256SUMS/],
      [members.filter((m) => m.name !== 'manifest.json'), /manifest\.json is listed in .*SHA256SUMS but missing/],
      [members.filter((m) => m !== sums), /SHA256SUMS is missing/],
      [[...members.filter((m) => m !== sums), { name: 'SHA256SUMS', text: 'not a sum\n' }], /SHA256SUMS:1: not a "<sha256> {2}<file>" line/],
    ];
    for (const [archiveMembers, message] of cases) {
      const target = join(dir, `sums-${count++}`);
      const run = xlaRun(['--archive', makeArchive(archiveMembers), '--dir', target]);
      expect(run.status, run.stderr).toBe(2);
      expect(run.stderr).toMatch(message);
      expect(run.stderr).toContain(target);
      expect(existsSync(join(target, 'NODE-RAN'))).toBe(false);
    }
  });

  it('needs --archive, and never unpacks into (or reuses) a folder that is not empty', () => {
    const missing = xlaRun(['--dir', join(dir, 'nothing')]);
    expect(missing.status).toBe(2);
    expect(missing.stderr).toMatch(/one of the arguments --archive --staged is required/);
    const noFile = xlaRun(['--archive', join(dir, 'absent.tar.xz'), '--dir', join(dir, 'nothing')]);
    expect(noFile.status).toBe(2);
    expect(noFile.stderr).toContain(`${join(dir, 'absent.tar.xz')}: no such archive`);
    const used = join(dir, 'used');
    mkdirSync(join(used, 'node', 'bin'), { recursive: true });
    writeFileSync(join(used, 'manifest.json'), 'an old unpack');
    const again = xlaRun(['--archive', makeArchive(goodMembers()), '--dir', used]);
    expect(again.status).toBe(2);
    expect(again.stderr).toContain(`${used} is not empty`);
    expect(readFileSync(join(used, 'manifest.json'), 'utf8')).toBe('an old unpack');
  });
});
