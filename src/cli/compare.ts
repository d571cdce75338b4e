// npm run compare -- <run folders, quoted globs or a parent folder such as runs/> [--out DIR] [--baseline NAME] [--split] [--skip-invalid] [--force]
// Writes a comparison report (report.md, index.html, SVG curves, CSV and LaTeX tables, runs.json) of logged
// training runs; see src/report/compare.ts.
import { join } from 'node:path';
import { runCommand } from './command.ts';

const COMMAND = {
  name: 'compare',
  usage: '<run folder | "glob" | parent folder>… [options]',
  description: `Compares training runs: a table per run (with backend, commit and peak memory), runs of one recipe and
attention that differ only in the seed grouped as mean ± sd over distinct seeds (a re-run of a seed is a repeat,
averaged with it, never counted in n; n = 1: the seed's values; a group's perplexity is exp(mean loss)), what
settings tell the groups apart, each group's paired difference to the baseline attention
with its 95% interval, and loss/perplexity curves against tokens and wall-clock time with a ±sd band per group:
report.md, index.html, runs.csv, groups.csv and groups.tex (LaTeX).
Runs of different model kinds (GPT, BERT), tokenizers, evaluation tokens or validation data are an error naming
the difference (their losses share no axis), unless --split. A group whose runs differ in more than the seed
(tokens trained, learning-rate schedule) is an error naming them, unless --force.`,
  options: {
    out: { type: 'string', value: 'DIR', defaultText: 'reports/compare-<timestamp>', help: 'report folder' },
    baseline: {
      type: 'string',
      value: 'NAME',
      defaultText: 'softmax, when a run uses it',
      help: "the attention the other groups' final validation loss is paired with, seed by seed ('none': no pairing)",
    },
    split: { type: 'boolean', help: 'runs of different model kinds, tokenizers, evaluation tokens or validation data: one report per kind, in sub-folders' },
    'skip-invalid': { type: 'boolean', help: 'leave out runs with a missing or corrupt config.json/metrics.jsonl (warning) instead of failing' },
    force: { type: 'boolean', help: 'average groups whose runs differ in more than the seed (warned about, and marked in the report)' },
  },
  positionals: { min: 1, max: Infinity, name: 'run folder' },
} as const;

function timestamp(): string {
  return new Date().toISOString().replace(/[:.]/g, '-').replace('T', '_').slice(0, 19);
}

await runCommand(COMMAND, async ({ values, positionals }) => {
  // The report's modules (vega for the plots) load when the command runs, so that --help answers at once.
  const [{ compareRuns }, { resolveRunDirs }] = await Promise.all([import('../report/compare.ts'), import('../report/load-runs.ts')]);
  const dirs = resolveRunDirs(positionals);
  const outDir = values.out ?? join('reports', `compare-${timestamp()}`);
  const baseline = values.baseline === 'none' ? null : values.baseline;
  const { runs, groups, files, reports } = await compareRuns(dirs, {
    outDir,
    skipInvalid: values['skip-invalid'],
    force: values.force,
    split: values.split,
    baseline,
  });
  console.log(
    `compared ${runs.length} runs in ${groups.length} groups${reports.length > 1 ? `, ${reports.length} reports (one per kind of run)` : ''}; wrote:`,
  );
  for (const file of files) console.log(`  ${file}`);
});
