// `npm run bench -- <name> [args…]` runs bench/<name>.ts (attention, data, train, long-context, startup) with the arguments after the name.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { exitWithUsage, parseOrExit } from '../src/cli/command.ts';

const dir = path.dirname(new URL(import.meta.url).pathname);
const available = fs
  .readdirSync(dir)
  .filter((f) => f.endsWith('.ts') && f !== 'run.ts')
  .map((f) => f.slice(0, -3));
const COMMAND = {
  name: 'bench',
  usage: `<${available.join('|')}> [options of that benchmark]`,
  description: `Runs one benchmark; 'npm run bench -- <name> --help' lists its options (same as npm run bench:<name>).`,
  options: {},
  positionals: { min: 1, max: 1, name: 'benchmark name' },
} as const;

// Only the name is this command's; everything after it belongs to the benchmark.
const [first, ...rest] = process.argv.slice(2);
const name = parseOrExit(COMMAND, first === undefined ? [] : [first]).positionals[0];
if (!available.includes(name)) exitWithUsage(COMMAND, `unknown benchmark '${name}'`);
const result = spawnSync(process.execPath, ['--import', 'tsx', path.join(dir, `${name}.ts`), ...rest], { stdio: 'inherit' });
process.exit(result.status ?? 1);
