// npm run generate -- <checkpoint> --prompt "…" [--max-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--backend NAME] [--verbose]
// Samples a continuation from a trained GPT, one token at a time with each attention layer's
// recurrent state (src/model/decode.ts): O(1) work per new token for the linear mechanisms.
// The modules that load TensorFlow.js are imported when the command runs, so that --help answers at once.
import { backendOption, startBackend, VERBOSE_OPTION } from './backend-option.ts';
import { isMainModule, runCommand, UsageError } from './command.ts';

const COMMAND = {
  name: 'generate',
  usage: '<checkpoint> --prompt TEXT [options]',
  description: `Samples a continuation of TEXT from a trained GPT (a run's final/ folder, a checkpoint folder or a run folder),
one token at a time with each attention layer's recurrent state. The text goes to stdout; timing, and a stop at the
model's context length, to stderr.`,
  options: {
    prompt: { type: 'string', value: 'TEXT', help: 'the text to continue (empty: start from the end-of-text token); required' },
    'max-tokens': {
      type: 'string',
      value: 'N',
      default: '100',
      number: { integer: true, min: 0 },
      help: "new tokens to sample; generation also stops at the model's maxSeqLen and after an end-of-text token",
    },
    temperature: { type: 'string', value: 'T', default: '1', number: { min: 0 }, help: 'softmax temperature (0 = greedy)' },
    'top-k': { type: 'string', value: 'K', default: '50', number: { integer: true, min: 0 }, help: 'sample among the K most likely tokens (0 = all)' },
    'top-p': {
      type: 'string',
      value: 'P',
      default: '1',
      number: { min: 0, exclusiveMin: true },
      help: 'nucleus sampling: among the fewest most likely tokens whose probability sums to ≥ P, after --top-k (1 = all)',
    },
    seed: { type: 'string', value: 'S', default: '0', number: { integer: true }, help: 'sampling seed' },
    tokenizer: { type: 'string', value: 'FILE', help: "tokenizer.json (default: the recipe's data.tokenizer)" },
    backend: backendOption(),
    verbose: VERBOSE_OPTION,
  },
  positionals: { min: 1, max: 1, name: '<checkpoint>' },
} as const;

export interface GenerateCheckpointOptions {
  checkpoint: string;
  prompt: string;
  maxTokens: number;
  temperature: number;
  topK: number;
  /** Nucleus sampling's p (default 1: off). */
  topP?: number;
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
  /** The model's context length (maxSeqLen). */
  contextLength: number;
  seconds: number;
}

/** Loads the checkpoint and samples (the backend must be initialised). */
export async function generateFromCheckpoint(opts: GenerateCheckpointOptions): Promise<GenerateCheckpointResult> {
  const [{ generateTokens, validateSampling }, { loadModel, loadModelTokenizer }] = await Promise.all([
    import('../model/decode.ts'),
    import('../store/load-model.ts'),
  ]);
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
    return { text, promptTokens, newTokens: tokens, truncated, contextLength: model.config.maxSeqLen, seconds };
  } finally {
    model.dispose();
  }
}

if (isMainModule(import.meta.url)) {
  await runCommand(COMMAND, async ({ values, positionals }) => {
    if (values.prompt === undefined) throw new UsageError('--prompt is required (--prompt "" starts from the end-of-text token)');
    const options = { maxTokens: values['max-tokens'], temperature: values.temperature, topK: values['top-k'], topP: values['top-p'], seed: values.seed };
    await startBackend(COMMAND.name, { flag: values.backend }, { verbose: values.verbose });
    const result = await generateFromCheckpoint({ checkpoint: positionals[0], prompt: values.prompt, tokenizer: values.tokenizer, ...options });
    console.log(result.text);
    const rate = result.newTokens.length / Math.max(result.seconds, 1e-9);
    process.stderr.write(
      `[generate] ${result.promptTokens.length} prompt + ${result.newTokens.length} new tokens in ${result.seconds.toFixed(2)} s (${rate.toFixed(1)} tokens/s)\n`,
    );
    if (result.truncated) {
      process.stderr.write(
        `[generate] stopped at the model's context length (maxSeqLen ${result.contextLength}) after ${result.newTokens.length} of the ${options.maxTokens} new tokens asked\n`,
      );
    }
  });
}
