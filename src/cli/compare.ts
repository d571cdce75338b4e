// npm run compare -- <run folders, quoted globs or a parent folder such as runs/> [--out DIR] [--skip-invalid] [--force]
// Writes a comparison report (report.md, index.html, SVG curves, runs.json) of logged training runs;
// see src/experiments/compare.ts.
import { join } from 'node:path';
import { compareRuns, resolveRunDirs } from '../experiments/compare.ts';
import { runCommand } from './command.ts';

const COMMAND = {
  name: 'compare',
  usage: '<run folder | "glob" | parent folder>… [options]',
  description: `Compares training runs: a table per run, runs of one recipe and attention that differ only in the seed
grouped as mean ± sd (a group's perplexity is exp(mean loss)), and loss/perplexity curves against tokens
with a ±sd band per group, in report.md and index.html.
A group whose runs differ in more than the seed (tokens trained, learning-rate schedule) is an error
naming them, unless --force.`,
  options: {
    out: { type: 'string', value: 'DIR', defaultText: 'reports/compare-<timestamp>', help: 'report folder' },
    'skip-invalid': { type: 'boolean', help: 'leave out runs with a missing or corrupt config.json/metrics.jsonl (warning) instead of failing' },
    force: { type: 'boolean', help: 'average groups whose runs differ in more than the seed (warned about, and marked in the report)' },
  },
  positionals: { min: 1, max: Infinity, name: 'run folder' },
} as const;

function timestamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-').replace('T', '_').slice(0, 19);
}

await runCommand(COMMAND, async ({ values, positionals }) => {
  const dirs = resolveRunDirs(positionals);
  const outDir = values.out ?? join('reports', `compare-${timestamp()}`);
  const { runs, groups, files } = await compareRuns(dirs, { outDir, skipInvalid: values['skip-invalid'], force: values.force });
  console.log(`compared ${runs.length} runs in ${groups.length} groups; wrote:`);
  for (const file of files) console.log(`  ${file}`);
});
