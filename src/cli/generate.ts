// npm run generate -- <checkpoint> --prompt "…" [--max-tokens N] [--temperature T] [--top-k K] [--seed S]
// Samples a continuation from a trained GPT, one token at a time with each attention layer's
// recurrent state (src/model/decode.ts): O(1) work per new token for the linear mechanisms.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { initBackend } from '../backend.ts';
import { generateTokens, validateSampling } from '../model/decode.ts';
import { loadModel, loadModelTokenizer } from '../train/load-checkpoint.ts';

const USAGE = `usage: npm run generate -- <checkpoint> --prompt "…" [--max-tokens N] [--temperature T] [--top-k K] [--seed S]
  <checkpoint>       a GPT run's final/ folder, a checkpoint folder or a run folder
  --prompt TEXT      the text to continue (empty: start from the end-of-text token)
  --max-tokens N     new tokens to sample (default 100; generation also stops at the model's maxSeqLen and after an end-of-text token)
  --temperature T    softmax temperature (default 1; 0 = greedy)
  --top-k K          sample among the K most likely tokens (default 50; 0 = all)
  --seed S           sampling seed (default 0)
  --tokenizer FILE   tokenizer.json (default: the recipe's data.tokenizer)
  --backend NAME     auto | tensorflow | wasm | cpu (default $SLAYFORMER_BACKEND, else auto)`;

export interface GenerateCheckpointOptions {
  checkpoint: string;
  prompt: string;
  maxTokens: number;
  temperature: number;
  topK: number;
  seed: number;
  tokenizer?: string;
}

export interface GenerateCheckpointResult {
  /** Prompt and continuation, decoded together (so multi-byte characters split across tokens survive). */
  text: string;
  promptTokens: number[];
  newTokens: number[];
  /** True when the model's maxSeqLen stopped generation before maxTokens. */
  truncated: boolean;
  seconds: number;
}

/** Loads the checkpoint and samples (the backend must be initialised). */
export async function generateFromCheckpoint(opts: GenerateCheckpointOptions): Promise<GenerateCheckpointResult> {
  if (!(Number.isInteger(opts.maxTokens) && opts.maxTokens >= 0)) throw new Error(`--max-tokens must be an integer ≥ 0 (got ${opts.maxTokens})`);
  if (!Number.isInteger(opts.seed)) throw new Error(`--seed must be an integer (got ${opts.seed})`);
  validateSampling(opts);
  const loaded = await loadModel(opts.checkpoint);
  const { dir, model } = loaded;
  try {
    if (model.kind !== 'gpt') throw new Error(`${dir} holds a '${model.kind}' model; generation needs a GPT (causal) model`);
    const tokenizer = await loadModelTokenizer(loaded, opts.tokenizer);
    const eos = tokenizer.specialIds.eos;
    let promptTokens = Array.from((await tokenizer.encodeBatch([opts.prompt]))[0]);
    if (promptTokens.length === 0) {
      if (eos === undefined) throw new Error('--prompt is empty and the tokenizer has no end-of-text token to start from');
      promptTokens = [eos];
    }
    const started = performance.now();
    const { tokens, truncated } = generateTokens(model, promptTokens, { ...opts, maxNewTokens: opts.maxTokens, stopToken: eos });
    const seconds = (performance.now() - started) / 1000;
    const text = await tokenizer.decode([...promptTokens, ...tokens], true);
    return { text, promptTokens, newTokens: tokens, truncated, seconds };
  } finally {
    model.dispose();
  }
}

function parseNumber(value: string | undefined, fallback: number, flag: string): number {
  if (value === undefined) return fallback;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n)) throw new Error(`${flag} must be a number (got ${value})`);
  return n;
}

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    options: {
      prompt: { type: 'string' },
      'max-tokens': { type: 'string' },
      temperature: { type: 'string' },
      'top-k': { type: 'string' },
      seed: { type: 'string' },
      tokenizer: { type: 'string' },
      backend: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help || positionals.length !== 1 || values.prompt === undefined) {
    console.log(USAGE);
    if (!values.help) process.exitCode = 1;
    return;
  }
  await initBackend(values.backend);
  const result = await generateFromCheckpoint({
    checkpoint: positionals[0],
    prompt: values.prompt,
    maxTokens: parseNumber(values['max-tokens'], 100, '--max-tokens'),
    temperature: parseNumber(values.temperature, 1, '--temperature'),
    topK: parseNumber(values['top-k'], 50, '--top-k'),
    seed: parseNumber(values.seed, 0, '--seed'),
    tokenizer: values.tokenizer,
  });
  console.log(result.text);
  const rate = result.newTokens.length / Math.max(result.seconds, 1e-9);
  process.stderr.write(
    `[generate] ${result.promptTokens.length} prompt + ${result.newTokens.length} new tokens in ${result.seconds.toFixed(2)} s (${rate.toFixed(1)} tokens/s)` +
      `${result.truncated ? '; stopped at the model’s maxSeqLen' : ''}\n`,
  );
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  main().catch((err: Error) => {
    console.error(`generate: ${err.message}`);
    process.exit(1);
  });
}
