// npm run tokenizer -- train --data data/<name> --vocab <n> --out <file>.json   |   npm run tokenizer -- info <file>.json
import { TextTokenizer } from '../data/tokenizer.ts';
import { BYTE_LEVEL_SPECIALS, trainTokenizer } from '../data/train-tokenizer.ts';
import { runCommand, UsageError } from './command.ts';

const COMMAND = {
  name: 'tokenizer',
  usage: ['train --data <dataset> --vocab <n> --out <file>.json [options]', 'info <file>.json [--text "some text"]'],
  description: `train   Trains a byte-level BPE tokenizer (HF tokenizers) on the text column of a dataset split and
        writes a standard tokenizer.json with exactly <n> ids: the special tokens
        ${BYTE_LEVEL_SPECIALS.join(' ')} (ids 0, 1, 2), all 256 byte symbols (every byte
        round-trips, nothing is ever unknown), then the learned merges. n must be in [259, 30000].
info    Loads any tokenizer.json (ours, GPT-2's, BERT's WordPiece) and prints its vocabulary size,
        special ids and sha256; with --text, also the ids and the round trip of that text.`,
  options: {
    data: { type: 'string', value: 'PATH', help: 'train: dataset folder, split folder, folder or glob of .arrow shards (required)' },
    vocab: { type: 'string', value: 'N', number: { integer: true, min: 1 }, help: 'train: vocabulary size including specials and bytes (required)' },
    out: { type: 'string', value: 'FILE', help: 'train: output tokenizer.json (required)' },
    split: { type: 'string', value: 'NAME', default: 'train', choices: ['train', 'validation'], help: 'train: the split to read' },
    'text-column': { type: 'string', value: 'NAME', default: 'text', help: 'train: text column' },
    'max-mb': { type: 'string', value: 'N', number: { integer: true, min: 1 }, help: 'train: read at most the first N MB of text (default all)' },
    text: { type: 'string', value: 'TEXT', help: 'info: also print the ids and the round trip of this text' },
  },
  positionals: { min: 1, max: 2, name: 'command (train or info) and its arguments' },
} as const;

function required<T>(value: T | undefined, option: string): T {
  if (value === undefined) throw new UsageError(`--${option} is required`);
  return value;
}

await runCommand(COMMAND, async ({ values, positionals }) => {
  const [command, ...rest] = positionals;
  if (command === 'train') {
    if (rest.length > 0) throw new UsageError(`unexpected arguments: ${rest.join(' ')}`);
    const started = performance.now();
    const summary = await trainTokenizer({
      dataset: required(values.data, 'data'),
      vocabSize: required(values.vocab, 'vocab'),
      out: required(values.out, 'out'),
      split: values.split,
      textColumn: values['text-column'],
      maxBytes: (values['max-mb'] ?? Infinity) * 1e6,
    });
    const seconds = (performance.now() - started) / 1000;
    console.log(
      `wrote ${summary.path}: vocab ${summary.vocabSize} (${BYTE_LEVEL_SPECIALS.length} specials + 256 bytes + ${summary.merges} merges), ` +
        `trained on ${summary.documents} documents, ${(summary.bytes / 1e6).toFixed(1)} MB, ${summary.skippedEmpty} empty documents skipped, ${seconds.toFixed(1)} s`,
    );
    return;
  }
  if (command === 'info') {
    if (rest.length !== 1) throw new UsageError('info expects one tokenizer.json path');
    const tokenizer = await TextTokenizer.load(rest[0]);
    console.log(
      `${tokenizer.path}\n  vocab size: ${tokenizer.vocabSize}\n  special ids: ${JSON.stringify(tokenizer.specialIds)}\n  sha256: ${tokenizer.sha256}`,
    );
    if (values.text !== undefined) {
      const [ids] = await tokenizer.encodeBatch([values.text]);
      const bytes = Array.from(ids).reduce((n, id) => n + tokenizer.tokenBytes(id), 0);
      console.log(`  ids (${ids.length}): ${Array.from(ids).join(' ')}\n  decoded: ${JSON.stringify(await tokenizer.decode(ids))}\n  token bytes: ${bytes}`);
    }
    return;
  }
  throw new UsageError(`unknown command '${command}' (expected train or info)`);
});
