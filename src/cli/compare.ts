// npm run compare -- <run folders, quoted globs or a parent folder such as runs/> [--out DIR] [--skip-invalid]
// Writes a comparison report (report.md, index.html, SVG curves, runs.json) of logged training runs;
// see src/experiments/compare.ts.
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { compareRuns, resolveRunDirs } from '../experiments/compare.ts';

const USAGE = `usage: npm run compare -- <run folder | "glob" | parent folder>... [--out DIR] [--skip-invalid]
  --out DIR         report folder (default reports/compare-<timestamp>)
  --skip-invalid    leave out runs with a missing or corrupt config.json/metrics.jsonl (warning) instead of failing`;

function timestamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-').replace('T', '_').slice(0, 19);
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    options: {
      out: { type: 'string' },
      'skip-invalid': { type: 'boolean', default: false },
      help: { type: 'boolean', default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help || positionals.length === 0) {
    console.log(USAGE);
    if (!values.help) process.exitCode = 1;
    return;
  }
  const dirs = resolveRunDirs(positionals);
  const outDir = values.out ?? join('reports', `compare-${timestamp()}`);
  const { runs, groups, files } = await compareRuns(dirs, { outDir, skipInvalid: values['skip-invalid'] });
  console.log(`compared ${runs.length} runs in ${groups.length} groups; wrote:`);
  for (const file of files) console.log(`  ${file}`);
}

main().catch((err: Error) => {
  console.error(`compare: ${err.message}`);
  process.exit(1);
});
