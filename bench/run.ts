// `npm run bench -- <name> [args…]` runs bench/<name>.ts (attention, data, train).
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const [name, ...rest] = process.argv.slice(2);
const dir = path.dirname(new URL(import.meta.url).pathname);
const available = fs.readdirSync(dir).filter((f) => f.endsWith('.ts') && f !== 'run.ts').map((f) => f.slice(0, -3));
if (!name || !available.includes(name)) {
  console.error(`usage: npm run bench -- <${available.join('|')}> [options]`);
  process.exit(2);
}
const result = spawnSync(process.execPath, ['--import', 'tsx', path.join(dir, `${name}.ts`), ...rest], { stdio: 'inherit' });
process.exit(result.status ?? 1);
