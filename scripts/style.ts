// node --import tsx scripts/style.ts lint|check|write: the C and C++ sources (clang-format, configured in
// .clang-format) and the Python scripts (Ruff's formatter and linter, configured in ruff.toml) of src/, test/, bench/ and
// scripts/, as Biome does the TypeScript (docs/testing.md, "Lint and formatting"). `lint`: Ruff's lint rules; `check`:
// the files either formatter would change, listed; `write`: formats them in place. Both tools come from npm
// (clang-format's binary, and Ruff built to WebAssembly), so `npm ci` installs them; where node_modules predates them,
// one line says so and the step is skipped.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';

const ROOT = path.resolve(import.meta.dirname, '..');
const FOLDERS = ['src', 'test', 'bench', 'scripts'];
const SKIPPED = new Set(['node_modules', '.cache']);
const require = createRequire(import.meta.url);

/** Files under FOLDERS whose names end with one of `endings`, relative to ROOT, sorted. */
function sources(endings: string[]): string[] {
  const found: string[] = [];
  const walk = (dir: string) => {
    for (const entry of fs.readdirSync(path.join(ROOT, dir), { withFileTypes: true })) {
      const rel = path.join(dir, entry.name);
      if (entry.isDirectory() && !SKIPPED.has(entry.name) && !entry.name.startsWith('.venv')) walk(rel);
      else if (entry.isFile() && endings.some((e) => entry.name.endsWith(e))) found.push(rel);
    }
  };
  for (const folder of FOLDERS) walk(folder);
  return found.sort();
}

/**
 * ruff.toml as the options object Ruff's Workspace takes. The file keeps to a subset of TOML that is JSON on each line:
 * `[section]` headers and `key = value` with a JSON value (a double-quoted string, a number, a boolean, an array).
 */
function readRuffSettings(file: string): Record<string, unknown> {
  const settings: Record<string, unknown> = {};
  let table = settings;
  fs.readFileSync(file, 'utf8')
    .split('\n')
    .forEach((raw, i) => {
      const line = raw.trim();
      if (line === '' || line.startsWith('#')) return;
      const header = /^\[([\w.-]+)\]$/.exec(line);
      const pair = /^([\w-]+)\s*=\s*(.+)$/.exec(line);
      if (header) {
        table = settings;
        for (const key of header[1].split('.')) table = (table[key] ??= {}) as Record<string, unknown>;
        return;
      }
      try {
        if (!pair) throw new Error('not a [section] or a key = value line');
        table[pair[1]] = JSON.parse(pair[2]);
      } catch (err) {
        throw new Error(`${file}:${i + 1}: ${(err as Error).message} (this file keeps to [section] and key = <JSON value> lines)`);
      }
    });
  return settings;
}

type RuffWorkspace = {
  check(text: string): Array<{ code: string | null; message: string; start_location: { row: number; column: number } }>;
  format(text: string): string;
};

const RUFF_PACKAGE: string = '@astral-sh/ruff-wasm-nodejs';

async function ruff(): Promise<RuffWorkspace | null> {
  try {
    // Named through a variable, so that the type check does not need the package (node_modules may predate it).
    const { Workspace, PositionEncoding } = await import(RUFF_PACKAGE);
    return new Workspace(readRuffSettings(path.join(ROOT, 'ruff.toml')), PositionEncoding.Utf16) as RuffWorkspace;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ERR_MODULE_NOT_FOUND') throw err;
    console.log('Python: Ruff (@astral-sh/ruff-wasm-nodejs) is not in node_modules (npm ci installs it): skipped');
    return null;
  }
}

function clangFormat(): string | null {
  try {
    const bin = path.join(path.dirname(require.resolve('clang-format/package.json')), 'bin', `${process.platform}_${process.arch}`, 'clang-format');
    if (fs.existsSync(bin)) return bin;
    console.log(`C++: the clang-format package has no binary for ${process.platform}_${process.arch}: skipped`);
  } catch {
    console.log('C++: clang-format is not in node_modules (npm ci installs it): skipped');
  }
  return null;
}

/** The count of problems found (files to format, lint findings). */
async function main(mode: string): Promise<number> {
  let problems = 0;
  const python = sources(['.py']);
  const workspace = await ruff();
  if (workspace) {
    for (const file of python) {
      const text = fs.readFileSync(path.join(ROOT, file), 'utf8');
      if (mode === 'lint') {
        for (const d of workspace.check(text)) {
          console.log(`${file}:${d.start_location.row}:${d.start_location.column}: ${d.code ?? ''} ${d.message}`);
          problems++;
        }
        continue;
      }
      const formatted = workspace.format(text);
      if (formatted === text) continue;
      if (mode === 'write') fs.writeFileSync(path.join(ROOT, file), formatted);
      else {
        console.log(`${file}: not formatted (ruff format)`);
        problems++;
      }
    }
  }
  const bin = mode === 'lint' ? null : clangFormat();
  const native = sources(['.cc', '.h', '.c']);
  if (bin && native.length > 0) {
    const args = mode === 'write' ? ['-i', ...native] : ['--dry-run', '--Werror', ...native];
    const result = spawnSync(bin, ['--style=file', ...args], { cwd: ROOT, encoding: 'utf8' });
    if (result.error) throw result.error;
    const unformatted = new Set([...`${result.stderr}`.matchAll(/^([^\s:]+):\d+:\d+: error:/gm)].map((m) => m[1]));
    for (const file of unformatted) console.log(`${file}: not formatted (clang-format)`);
    problems += unformatted.size || (result.status === 0 ? 0 : 1);
    if (result.status !== 0 && unformatted.size === 0) console.log(result.stderr.trim());
  }
  return problems;
}

const mode = process.argv[2] ?? '';
if (!['lint', 'check', 'write'].includes(mode)) {
  console.error('usage: node --import tsx scripts/style.ts lint|check|write');
  process.exit(2);
}
process.exitCode = (await main(mode)) > 0 ? 1 : 0;
