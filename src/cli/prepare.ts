// npm run prepare -- <inputs…> --out data/<name>   |   --demo [--out data/sotu]   |   --corpus sotu,kjv,moby-dick --out data/<name>
import { prepareDemoCorpus } from '../data/prepare/demo-corpus.ts';
import { OFFLINE_CORPORA, prepareOfflineCorpora } from '../data/prepare/offline-corpora.ts';
import { formatSummary, prepareDataset } from '../data/prepare/prepare.ts';
import { inputsHelp } from '../data/prepare/source-registry.ts';
import { listOption, runCommand, UsageError } from './command.ts';

const COMMAND = {
  name: 'prepare',
  usage: ['<inputs…> --out data/<name> [options]', '--demo [--out data/sotu]', '--corpus NAME[,NAME…] --out data/<name>'],
  description: `Writes a HuggingFace DatasetDict.save_to_disk dataset (train/ and validation/ folders of Arrow IPC
shards with 1,000-row record batches, state.json, dataset_info.json, dataset_dict.json) that
datasets.load_from_disk opens and the trainer streams.

Inputs (files, folders searched recursively in name order, or quoted file-name globs):
${inputsHelp()
  .map((line) => `  ${line}`)
  .join('\n')}`,
  options: {
    out: { type: 'string', value: 'FOLDER', help: 'output folder (required unless --demo; default for --demo: data/sotu)' },
    demo: { type: 'boolean', help: 'prepare the State of the Union demo corpus (no network needed)' },
    corpus: {
      type: 'string',
      value: 'a,b',
      help: `prepare English text that npm packages ship (no network needed), in this order: ${Object.keys(OFFLINE_CORPORA).join(', ')} (columns text, corpus, title)`,
    },
    'text-column': { type: 'string', value: 'NAME', help: 'text field/column in the inputs and the output (default text)' },
    'keep-columns': { type: 'string', value: 'a,b', help: 'extra input fields kept as string columns (e.g. url,timestamp)' },
    'validation-fraction': { type: 'string', value: 'F', default: '0.05', number: {}, help: 'share of documents drawn into validation, in [0, 1)' },
    seed: {
      type: 'string',
      value: 'N',
      default: '0',
      number: { integer: true },
      help: 'seed of the document order and of the split (--demo and --corpus: always 0)',
    },
    'keep-order': { type: 'boolean', help: 'write the documents in input order (default: a seeded random order, recorded in document_order.json)' },
    'shard-size': { type: 'string', value: 'ROWS|SIZE', help: 'rows per shard (e.g. 100000) or size (e.g. 500MB, the default)' },
    overwrite: {
      type: 'boolean',
      help: 'replace the output folder if it is an earlier prepare output (its .slayformer-prepared marker); any other folder is refused',
    },
  },
  positionals: { max: Infinity, name: 'inputs' },
  notes: `Documents are written in a seeded random order (the trainer streams a split in file order through a bounded
shuffle, and inputs in a meaningful order would train on one era or source after another); the order is recorded
in <out>/document_order.json. Empty (or whitespace-only) documents are skipped and counted; malformed input stops
with an error naming the file and line.`,
} as const;

// npm also runs a script named "prepare" by itself after `npm install` and `npm ci` (a lifecycle hook).
// That call has no arguments and is not `npm run`: it must do nothing.
const lifecycleHook = process.argv.length <= 2 && process.env.npm_lifecycle_event === 'prepare' && process.env.npm_command !== 'run-script';
if (!lifecycleHook) {
  await runCommand(COMMAND, async ({ values, positionals }) => {
    const started = Date.now();
    let summary;
    const corpora = listOption(values.corpus, 'corpus', Object.keys(OFFLINE_CORPORA)) ?? [];
    if ((values.demo || corpora.length > 0) && positionals.length > 0)
      throw new UsageError(`--demo and --corpus take no inputs, got: ${positionals.join(' ')}`);
    if (values.demo && corpora.length > 0) throw new UsageError('--demo and --corpus exclude each other');
    if (values.demo) {
      summary = await prepareDemoCorpus(values.out ?? 'data/sotu', values['keep-order'] ?? false);
    } else if (corpora.length > 0) {
      if (!values.out) throw new UsageError('--out <folder> is required');
      summary = await prepareOfflineCorpora(corpora, values.out, values.overwrite ?? false, values['keep-order'] ?? false);
    } else {
      if (!values.out) throw new UsageError('--out <folder> is required');
      if (positionals.length === 0) throw new UsageError('no inputs given');
      summary = await prepareDataset({
        inputs: positionals,
        out: values.out,
        textColumn: values['text-column'],
        keepColumns: listOption(values['keep-columns'], 'keep-columns'),
        validationFraction: values['validation-fraction'],
        seed: values.seed,
        keepOrder: values['keep-order'],
        shardSize: values['shard-size'],
        overwrite: values.overwrite,
        log: (line) => console.log(line),
      });
    }
    for (const line of formatSummary(summary)) console.log(line);
    console.log(`done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
  });
}
