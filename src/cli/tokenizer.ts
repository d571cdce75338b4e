// npm run tokenizer -- train --data data/<name> --vocab <n> --out <file>.json   |   npm run tokenizer -- info <file>.json
import { parseArgs } from 'node:util';
import { TextTokenizer } from '../data/tokenizer.ts';
import { BYTE_LEVEL_SPECIALS, trainTokenizer } from '../data/train-tokenizer.ts';

const HELP = `Usage:
  npm run tokenizer -- train --data <dataset> --vocab <n> --out <file>.json [options]
  npm run tokenizer -- info <file>.json [--text "some text"]

train   Trains a byte-level BPE tokenizer (HF tokenizers) on the text column of a dataset split and
        writes a standard tokenizer.json with exactly <n> ids: the special tokens
        ${BYTE_LEVEL_SPECIALS.join(' ')} (ids 0, 1, 2), all 256 byte symbols (every byte
        round-trips, nothing is ever unknown), then the learned merges. n must be in [259, 30000].
info    Loads any tokenizer.json (ours, GPT-2's, BERT's WordPiece) and prints its vocabulary size,
        special ids and sha256; with --text, also the ids and the round trip of that text.

Options (train):
  --data <path>          dataset folder, split folder, folder or glob of .arrow shards (required)
  --vocab <n>            vocabulary size including specials and bytes (required)
  --out <file>           output tokenizer.json (required)
  --split <name>         train | validation (default: train)
  --text-column <name>   text column (default: text)
  --max-mb <n>           train on at most the first n MB of text (default: all)
  -h, --help             show this help`;

function fail(message: string): never {
  console.error(`tokenizer: ${message}`);
  process.exit(1);
}

function positiveInteger(name: string, value: string | undefined): number {
  if (value === undefined) fail(`--${name} is required\n\n${HELP}`);
  const n = Number(value);
  if (value.trim() === '' || !Number.isInteger(n) || n <= 0) fail(`--${name} expects a positive integer, got "${value}"`);
  return n;
}

async function main(): Promise<void> {
  let parsed;
  try {
    parsed = parseArgs({
      allowPositionals: true,
      options: {
        data: { type: 'string' },
        vocab: { type: 'string' },
        out: { type: 'string' },
        split: { type: 'string', default: 'train' },
        'text-column': { type: 'string', default: 'text' },
        'max-mb': { type: 'string' },
        text: { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
  } catch (err) {
    fail(`${(err as Error).message}\n\n${HELP}`);
  }
  const { values, positionals } = parsed;
  const [command, ...rest] = positionals;
  if (values.help || command === undefined) {
    console.log(HELP);
    return;
  }
  if (command === 'train') {
    if (rest.length > 0) fail(`unexpected arguments: ${rest.join(' ')}`);
    if (!values.data) fail(`--data is required\n\n${HELP}`);
    if (!values.out) fail(`--out is required\n\n${HELP}`);
    if (values.split !== 'train' && values.split !== 'validation') fail(`--split must be train or validation, got "${values.split}"`);
    const vocabSize = positiveInteger('vocab', values.vocab);
    const maxBytes = values['max-mb'] === undefined ? Infinity : positiveInteger('max-mb', values['max-mb']) * 1e6;
    const started = performance.now();
    const summary = await trainTokenizer({
      dataset: values.data,
      vocabSize,
      out: values.out,
      split: values.split,
      textColumn: values['text-column'],
      maxBytes,
    });
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `wrote ${summary.path}: vocab ${summary.vocabSize} (${BYTE_LEVEL_SPECIALS.length} specials + 256 bytes + ${summary.merges} merges), ` +
        `trained on ${summary.documents} documents, ${(summary.bytes / 1e6).toFixed(1)} MB, ${summary.skippedEmpty} empty documents skipped, ${seconds.toFixed(1)} s`,
    );
    return;
  }
  if (command === 'info') {
    if (rest.length !== 1) fail(`info expects one tokenizer.json path\n\n${HELP}`);
    const tokenizer = await TextTokenizer.load(rest[0]);
    console.log(`${tokenizer.path}\n  vocab size: ${tokenizer.vocabSize}\n  special ids: ${JSON.stringify(tokenizer.specialIds)}\n  sha256: ${tokenizer.sha256}`);
    if (values.text !== undefined) {
      const [ids] = await tokenizer.encodeBatch([values.text]);
      const bytes = Array.from(ids).reduce((n, id) => n + tokenizer.tokenBytes(id), 0);
      console.log(`  ids (${ids.length}): ${Array.from(ids).join(' ')}\n  decoded: ${JSON.stringify(await tokenizer.decode(ids))}\n  token bytes: ${bytes}`);
    }
    return;
  }
  fail(`unknown command "${command}" (expected train or info)\n\n${HELP}`);
}

main().catch((err: unknown) => fail(err instanceof Error ? err.message : String(err)));
