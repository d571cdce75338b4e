// npm run prepare -- <inputs…> --out data/<name>   |   npm run prepare -- --demo --out data/sotu
import { parseArgs } from 'node:util';
import { prepareDemoCorpus } from '../data/demo-corpus.ts';
import { formatSummary, prepareDataset } from '../data/prepare.ts';

const HELP = `Usage:
  npm run prepare -- <inputs…> --out data/<name> [options]
  npm run prepare -- --demo [--out data/sotu]

Writes a HuggingFace DatasetDict.save_to_disk dataset (train/ and validation/ folders of Arrow IPC
shards with 1,000-row record batches, state.json, dataset_info.json, dataset_dict.json) that
datasets.load_from_disk opens and the trainer streams.

Inputs (files, folders searched recursively in name order, or quoted file-name globs):
  *.jsonl, *.json, *.ndjson, optionally gzipped (*.json.gz: C4's original files), one JSON object per line
  *.parquet
  *.txt  (one document per file)

Options:
  --out <folder>                 output folder (required unless --demo; default for --demo: data/sotu)
  --demo                         prepare the State of the Union demo corpus (no network needed)
  --text-column <name>           text field/column in the inputs and the output (default: text)
  --keep-columns <a,b>           extra input fields kept as string columns (e.g. url,timestamp)
  --validation-fraction <f>      share of documents drawn into validation, in [0, 1) (default: 0.05)
  --seed <n>                     seed of the split (default: 0)
  --shard-size <rows|size>       rows per shard (e.g. 100000) or size (e.g. 500MB, the default)
  --overwrite                    replace the output folder if it exists
  -h, --help                     show this help

Empty (or whitespace-only) documents are skipped and counted; malformed input stops with an error
naming the file and line.`;

function fail(message: string): never {
  console.error(`prepare: ${message}`);
  process.exit(1);
}

function parseNumber(name: string, value: string | undefined, fallback: number, integer: boolean): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || (integer && !Number.isInteger(n))) {
    fail(`--${name} expects ${integer ? 'an integer' : 'a number'}, got "${value}"`);
  }
  return n;
}

async function main(): Promise<void> {
  // npm also runs a script named "prepare" by itself after `npm install` and `npm ci` (a lifecycle
  // hook). That call has no arguments and is not `npm run`: it must do nothing.
  if (process.argv.length <= 2 && process.env.npm_lifecycle_event === 'prepare' && process.env.npm_command !== 'run-script') return;
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        out: { type: 'string' },
        demo: { type: 'boolean', default: false },
        'text-column': { type: 'string' },
        'keep-columns': { type: 'string' },
        'validation-fraction': { type: 'string' },
        seed: { type: 'string' },
        'shard-size': { type: 'string' },
        overwrite: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    fail(`${(err as Error).message}\nRun with --help for the options.`);
  }
  const { values, positionals } = parsed;
  if (values.help) {
    console.log(HELP);
    return;
  }
  const started = Date.now();
  try {
    let summary;
    if (values.demo) {
      if (positionals.length > 0) fail(`--demo takes no inputs, got: ${positionals.join(' ')}`);
      summary = await prepareDemoCorpus(values.out ?? 'data/sotu');
    } else {
      if (!values.out) fail('--out <folder> is required (see --help)');
      if (positionals.length === 0) fail('no inputs given (see --help)');
      summary = await prepareDataset({
        inputs: positionals,
        out: values.out,
        textColumn: values['text-column'],
        keepColumns: values['keep-columns']?.split(',').map((c) => c.trim()).filter((c) => c !== ''),
        validationFraction: parseNumber('validation-fraction', values['validation-fraction'], 0.05, false),
        seed: parseNumber('seed', values.seed, 0, true),
        shardSize: values['shard-size'],
        overwrite: values.overwrite,
        log: (line) => console.log(line),
      });
    }
    for (const line of formatSummary(summary)) console.log(line);
    console.log(`done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  } catch (err) {
    fail((err as Error).message);
  }
}

await main();
