// npm run eval -- <checkpoint> [--data PATH] [--tokens N | --all] [--tokenizer FILE] [--backend NAME]
// Validation loss, perplexity and bits per byte of a trained model (a run's final/ folder, a
// checkpoint folder or a run folder) on the validation split of its recipe's dataset or --data.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { initBackend } from '../backend.ts';
import { collectEvalBatches, evaluate, type EvalResult } from '../train/evaluate.ts';
import { loadModel, loadModelTokenizer } from '../train/load-checkpoint.ts';
import { streamOptions } from '../train/trainer.ts';

const USAGE = `usage: npm run eval -- <checkpoint> [--data PATH] [--tokens N | --all] [--tokenizer FILE] [--backend NAME]
  <checkpoint>      a run's final/ folder, a checkpoint folder (model.safetensors + recipe.json) or a run folder
  --data PATH       dataset whose validation split is read (default: the recipe's data.dataset)
  --tokens N        evaluate the first N validation tokens, in whole batches (default: the recipe's train.evalTokens)
  --all             evaluate the whole validation split
  --tokenizer FILE  tokenizer.json (default: the recipe's data.tokenizer; must be the one the model was trained with)
  --backend NAME    auto | tensorflow | wasm | cpu (default $SLAYFORMER_BACKEND, else auto)`;

export interface EvalCheckpointOptions {
  checkpoint: string;
  data?: string;
  /** Labelled tokens to evaluate; Infinity = the whole split; absent = the recipe's train.evalTokens. */
  tokens?: number;
  tokenizer?: string;
}

export interface EvalCheckpointResult extends EvalResult {
  dir: string;
  dataset: string;
  description: string;
}

/** Loads the checkpoint, reads validation batches as training does, evaluates (the backend must be initialised). */
export async function evalCheckpoint(opts: EvalCheckpointOptions): Promise<EvalCheckpointResult> {
  const loaded = await loadModel(opts.checkpoint);
  const { dir, model, recipe, metadata } = loaded;
  try {
    const tokenizer = await loadModelTokenizer(loaded, opts.tokenizer);
    const dataset = opts.data ?? recipe.data.dataset;
    if (!dataset) throw new Error(`${dir} names no dataset (a Hugging Face folder): give --data PATH`);
    const tokens = opts.tokens ?? recipe.train.evalTokens;
    const batches = await collectEvalBatches({ ...streamOptions(recipe, tokenizer), dataset }, tokens);
    const result = await evaluate(model, batches);
    const description = `${model.kind} ${model.config.attention.name}${metadata.step ? ` (step ${metadata.step})` : ''}`;
    return { ...result, dir, dataset, description };
  } finally {
    model.dispose();
  }
}

export function formatEval(r: EvalCheckpointResult): string {
  return [
    `checkpoint ${r.dir}: ${r.description}`,
    `validation split of ${r.dataset}`,
    `loss ${r.loss.toFixed(4)}  ppl ${r.ppl.toFixed(2)}  bpb ${r.bpb.toFixed(4)}  tokens ${r.tokens}  bytes ${r.bytes}`,
  ].join('\n');
}

function positiveInt(value: string, flag: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 1) throw new Error(`${flag} must be an integer ≥ 1 (got ${value})`);
  return n;
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    options: {
      data: { type: 'string' },
      tokens: { type: 'string' },
      all: { type: 'boolean', default: false },
      tokenizer: { type: 'string' },
      backend: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help || positionals.length !== 1) {
    console.log(USAGE);
    if (!values.help) process.exitCode = 1;
    return;
  }
  if (values.all && values.tokens !== undefined) throw new Error('give either --tokens or --all, not both');
  const tokens = values.all ? Infinity : values.tokens !== undefined ? positiveInt(values.tokens, '--tokens') : undefined;
  await initBackend(values.backend);
  const result = await evalCheckpoint({ checkpoint: positionals[0], data: values.data, tokens, tokenizer: values.tokenizer });
  console.log(formatEval(result));
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  main().catch((err: Error) => {
    console.error(`eval: ${err.message}`);
    process.exit(1);
  });
}
