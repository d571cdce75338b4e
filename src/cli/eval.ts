// npm run eval -- <checkpoint> [--data PATH] [--tokens N | --all] [--sample spread|head] [--tokenizer FILE] [--by-position] [--json FILE] [--backend NAME] [--verbose]
// npm run eval -- <checkpoint> --passkey [--passkey-lengths N,N,…] [--passkey-trials N] [--json FILE]
// Validation loss, perplexity, bits per byte and top-1 accuracy of a trained model (a run's final/ folder, a
// checkpoint folder or a run folder) on the validation split of its recipe's dataset or --data; or, with --passkey, a
// GPT's passkey retrieval at long context lengths (src/train/passkey.ts).
// The modules that load TensorFlow.js are imported when the command runs, so that --help answers at once.
import type { EvalResult } from '../train/evaluate.ts';
import type { PasskeyCheckpointResult, PasskeyRow } from '../train/passkey.ts';
import { existsSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { replaceOwnFile } from '../core/own-file.ts';
import { DEFAULT_EVAL_TOKENS, EVAL_SAMPLES } from '../data/batch.ts';
import type { EvalSampleKind } from '../data/batch.ts';
import { backendOption, startBackend, VERBOSE_OPTION } from './backend-option.ts';
import { isMainModule, runCommand, UsageError } from './command.ts';

const COMMAND = {
  name: 'eval',
  usage: '<checkpoint> [options]',
  description: `Validation loss, perplexity, bits per byte and top-1 accuracy (next-token for GPT, masked-token for BERT, on
the loss's tokens) of a trained model on the validation split of its recipe's dataset (or --data): --tokens labelled
tokens drawn across the split by a fixed seed, as training's default validation (train.evalSample: spread), so every
model on the same data and tokenizer is measured on the same tokens. The output says how many tokens and documents.
<checkpoint> is a run's final/ folder, a checkpoint folder (model.safetensors + recipe.json) or a run folder.`,
  options: {
    data: { type: 'string', value: 'PATH', help: "dataset whose validation split is read (default: the recipe's data.dataset)" },
    tokens: {
      type: 'string',
      value: 'N',
      number: { integer: true, min: 1 },
      help: `labelled validation tokens to evaluate (default ${DEFAULT_EVAL_TOKENS.toLocaleString('en-US')} for every model, run folder or Hugging Face export alike; give a run's train.evalTokens to match its log)`,
    },
    sample: {
      type: 'string',
      value: 'spread|head',
      default: 'spread',
      help: "spread: drawn across the split by a fixed seed; head: the split's first tokens (a protocol's train.evalSample: head)",
    },
    all: { type: 'boolean', help: 'evaluate the whole validation split' },
    tokenizer: { type: 'string', value: 'FILE', help: "tokenizer.json (default: the recipe's data.tokenizer; must be the one the model was trained with)" },
    'by-position': { type: 'boolean', help: 'also the loss by position in the sequence: buckets [0,1), [1,2), [2,4), … doubling to the sequence length' },
    json: { type: 'string', value: 'FILE', help: 'also write the result as JSON to FILE (with --by-position: its by_position field)' },
    passkey: {
      type: 'boolean',
      help: "instead: passkey retrieval of a GPT, a 5-digit key hidden in filler text at 5 depths and asked for at the end (docs/training.md, 'Passkey retrieval')",
    },
    'passkey-lengths': {
      type: 'string',
      value: 'N,N,…',
      help: "prompt lengths in tokens (default 1024,2048,4096,8192,16384,32768); those beyond the model's position table are reported, not run",
    },
    'passkey-trials': { type: 'string', value: 'N', number: { integer: true, min: 1 }, help: 'keys per depth at each length (default 2)' },
    backend: backendOption(),
    verbose: VERBOSE_OPTION,
  },
  positionals: { min: 1, max: 1, name: '<checkpoint>' },
} as const;

export interface EvalCheckpointOptions {
  checkpoint: string;
  data?: string;
  /**
   * Labelled tokens to evaluate; Infinity = the whole split; absent = DEFAULT_EVAL_TOKENS, one number for every model
   * (not the recipe's train.evalTokens: a Hugging Face export records none, and the same model would measure otherwise).
   */
  tokens?: number;
  /** How they are drawn (default spread). */
  sample?: EvalSampleKind;
  tokenizer?: string;
  /** Also the loss by position bucket (EvalResult.byPosition). */
  byPosition?: boolean;
}

export interface EvalCheckpointResult extends EvalResult {
  dir: string;
  dataset: string;
  description: string;
  /** Documents the evaluated tokens come from. */
  documents: number;
  /** How the tokens were drawn; `all` = the whole split (--all). */
  sample: EvalSampleKind | 'all';
}

/** Loads the checkpoint, reads validation batches as training does, evaluates (the backend must be initialised). */
export async function evalCheckpoint(opts: EvalCheckpointOptions): Promise<EvalCheckpointResult> {
  const [{ collectEvalBatches, evaluate }, { loadModel, loadModelTokenizer }, { streamOptions }] = await Promise.all([
    import('../train/evaluate.ts'),
    import('../store/load-model.ts'),
    import('../train/plan.ts'),
  ]);
  const loaded = await loadModel(opts.checkpoint);
  const { dir, model, recipe, metadata } = loaded;
  try {
    const tokenizer = await loadModelTokenizer(loaded, opts.tokenizer);
    const dataset = opts.data ?? recipe.data.dataset;
    if (!dataset) throw new Error(`${dir} names no dataset (a Hugging Face folder): give --data PATH`);
    const tokens = opts.tokens ?? DEFAULT_EVAL_TOKENS;
    const sample = Number.isFinite(tokens) ? (opts.sample ?? 'spread') : 'head';
    const { batches, documents } = await collectEvalBatches({ ...streamOptions(recipe, tokenizer), dataset }, tokens, sample);
    const result = await evaluate(model, batches, true, opts.byPosition ?? false);
    const description = `${model.kind} ${model.config.attention.name}${metadata.step ? ` (step ${metadata.step})` : ''}`;
    return { ...result, dir, dataset, description, documents, sample: Number.isFinite(tokens) ? sample : 'all' };
  } finally {
    model.dispose();
  }
}

export function formatEval(r: EvalCheckpointResult): string {
  return [
    `checkpoint ${r.dir}: ${r.description}`,
    `validation split of ${r.dataset}: ${r.tokens.toLocaleString('en-US')} labelled tokens from ${r.documents.toLocaleString('en-US')} documents (${{ spread: 'drawn across the split', head: "the split's first", all: 'the whole split' }[r.sample]})`,
    `loss ${r.loss.toFixed(4)}  ppl ${r.ppl.toFixed(2)}  bpb ${r.bpb.toFixed(4)}  acc ${r.accuracy.toFixed(4)}  tokens ${r.tokens}  bytes ${r.bytes}`,
    ...(r.byPosition ? formatByPosition(r.byPosition) : []),
  ].join('\n');
}

/** The loss by position as table lines: positions [from, to), mean loss, perplexity, labelled tokens ('-' for an empty bucket). */
function formatByPosition(rows: NonNullable<EvalResult['byPosition']>): string[] {
  const cells = rows.map((r) => [`[${r.from}, ${r.to})`, r.tokens > 0 ? r.loss.toFixed(4) : '-', r.tokens > 0 ? r.ppl.toFixed(2) : '-', String(r.tokens)]);
  const table = [['positions', 'loss', 'ppl', 'tokens'], ...cells];
  const widths = table[0].map((_, c) => Math.max(...table.map((row) => row[c].length)));
  return [
    'loss by position in the sequence:',
    ...table.map((row) => row.map((cell, c) => (c === 0 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))).join('  ')),
  ];
}

/** The result as written by --json: EvalCheckpointResult with the loss by position as `by_position` (an empty bucket's loss and ppl null). */
export function evalJson(r: EvalCheckpointResult): string {
  const { byPosition, ...rest } = r;
  return `${JSON.stringify({ ...rest, ...(byPosition ? { by_position: byPosition } : {}) }, null, 2)}\n`;
}

export function formatPasskey(r: PasskeyCheckpointResult): string {
  const note = (row: PasskeyRow) =>
    row.status !== 'run' ? `beyond the position table (${r.positionTable}): not run` : row.beyondTrainedContext ? 'beyond the trained context' : '';
  const table = [
    ['length', 'retrieval', 'token acc', 'loss', `by depth ${r.depths.join('/')}`, ''],
    ...r.rows.map((row) => [
      String(row.length),
      row.retrieval === null ? '—' : row.retrieval.toFixed(2),
      row.tokenAccuracy === null ? '—' : row.tokenAccuracy.toFixed(3),
      row.loss === null ? '—' : row.loss.toFixed(3),
      row.byDepth.length ? row.byDepth.map((d) => d.retrieval.toFixed(2)).join('/') : '—',
      note(row),
    ]),
  ];
  const widths = table[0].map((_, c) => Math.max(...table.map((row) => row[c].length)));
  return [
    `checkpoint ${r.dir}: ${r.description}`,
    `passkey retrieval: ${r.depths.length} depths × ${r.trialsPerDepth} keys per length; trained on sequences of ${r.trainedLength} tokens; position table ${r.positionTable}`,
    ...table.map((row) =>
      row
        .map((cell, c) => (c === row.length - 1 ? cell : c === 4 ? cell.padEnd(widths[c]) : cell.padStart(widths[c])))
        .join('  ')
        .trimEnd(),
    ),
  ].join('\n');
}

/** --passkey-lengths: positive integers, comma-separated. */
function passkeyLengths(text: string): number[] {
  return text.split(',').map((part) => {
    if (!/^\d+$/.test(part.trim()) || Number(part) < 1)
      throw new UsageError(`--passkey-lengths takes lengths in tokens, comma-separated (got '${part}' in '${text}')`);
    return Number(part);
  });
}

if (isMainModule(import.meta.url)) {
  await runCommand(COMMAND, async ({ values, positionals }) => {
    if (values.passkey) {
      const others = (['data', 'tokens', 'all', 'by-position'] as const).filter((key) => values[key] !== undefined && values[key] !== false);
      if (others.length) throw new UsageError(`--passkey scores passkey retrieval, not the validation split: drop --${others.join(', --')}`);
      if (values.json && !existsSync(dirname(resolve(values.json))))
        throw new UsageError(`--json ${values.json}: the folder ${dirname(resolve(values.json))} does not exist`);
      const lengths = values['passkey-lengths'] === undefined ? undefined : passkeyLengths(values['passkey-lengths']);
      await startBackend(COMMAND.name, { flag: values.backend }, { verbose: values.verbose });
      const { passkeyCheckpoint } = await import('../train/passkey.ts');
      const result = await passkeyCheckpoint({
        checkpoint: positionals[0],
        tokenizer: values.tokenizer,
        lengths,
        trialsPerDepth: values['passkey-trials'] as number | undefined,
      });
      console.log(formatPasskey(result));
      if (values.json) replaceOwnFile(values.json, `${JSON.stringify(result, null, 2)}\n`);
      return;
    }
    if (values['passkey-lengths'] !== undefined || values['passkey-trials'] !== undefined)
      throw new UsageError('--passkey-lengths and --passkey-trials go with --passkey');
    if (values.all && values.tokens !== undefined) throw new UsageError('give either --tokens or --all, not both');
    const tokens = values.all ? Infinity : values.tokens;
    if (!(EVAL_SAMPLES as readonly string[]).includes(values.sample))
      throw new UsageError(`--sample must be one of ${EVAL_SAMPLES.join(', ')}, got ${JSON.stringify(values.sample)}`);
    if (values.json && !existsSync(dirname(resolve(values.json))))
      throw new UsageError(`--json ${values.json}: the folder ${dirname(resolve(values.json))} does not exist`);
    await startBackend(COMMAND.name, { flag: values.backend }, { verbose: values.verbose });
    const result = await evalCheckpoint({
      checkpoint: positionals[0],
      data: values.data,
      tokens,
      sample: values.sample as EvalSampleKind,
      tokenizer: values.tokenizer,
      byPosition: values['by-position'],
    });
    console.log(formatEval(result));
    if (values.json) replaceOwnFile(values.json, evalJson(result));
  });
}
