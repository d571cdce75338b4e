// Long-context GPT inference, the SLAY paper's Table 11 on this machine: for each mechanism and
// length L, a GPT (the demo recipes' shape: vocab 4096, width 128, 4 layers of 4 heads, random
// weights) prefills a prompt of L tokens and then generates tokens one at a time from each layer's
// recurrent state (linear mechanisms: the fixed-size sums; softmax and exact Yat: the key/value
// cache). The prompt goes in blocks through the layers' whole-sequence form (IncrementalDecoder.
// feedBlock), so only one block's activations exist at a time. Each (mechanism, L) runs in its own
// process and reports its time, its memory high-water mark (wasm heap; tensor bytes elsewhere) and
// the size of the recurrent state; the longest L that fits the memory budget is the table's answer.
//
//   npm run bench:long-context [--backend wasm] [--lengths 4096,16384,65536,131072]
//       [--mechanisms slay,softmax] [--generate 32] [--block 2048] [--budget-mb 4096] [--timeout-s 1800]
//       [--out reports/bench-long-context.json]
import * as tf from '@tensorflow/tfjs';
import fs from 'node:fs';
import path from 'node:path';
import { initBackend } from '../src/backend/start.ts';
import { chooseBackend } from '../src/backend/device.ts';
import { backendOption } from '../src/cli/backend-option.ts';
import { listOption, numberListOption, optionsOrExit, type CommandSpec } from '../src/cli/command.ts';
import { benchmarkEntry, ISOLATED_OPTIONS, measureInChild, type MeasurementStatus } from '../src/paper/isolated.ts';
import { attentionNames } from '../src/model/attention/index.ts';
import { IncrementalDecoder, sampleToken } from '../src/model/decode.ts';
import { createLanguageModel } from '../src/model/lm.ts';
import { Rng } from '../src/core/rng.ts';

const SPEC = {
  name: 'bench:long-context',
  usage: '[options]',
  description: `A GPT of the demo recipes' shape prefills a prompt of L tokens in blocks and generates tokens from
each layer's recurrent state, per mechanism and L, each in its own process: prefill speed, decoding
time per token, the state's size and the memory high-water mark against a budget.`,
  options: {
    backend: backendOption('wasm'),
    ...ISOLATED_OPTIONS,
    'timeout-s': { ...ISOLATED_OPTIONS['timeout-s'], default: '1800' },
    lengths: { type: 'string', value: 'L,…', default: '4096,16384,65536,131072', help: 'prompt lengths' },
    generate: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '32', help: 'tokens generated after the prompt' },
    block: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '2048', help: 'prompt tokens per prefill block' },
    'budget-mb': {
      type: 'string',
      value: 'MB',
      number: { integer: true, min: 1 },
      default: '4096',
      help: 'memory budget: a run whose high-water mark exceeds it does not fit (the wasm heap)',
    },
    out: { type: 'string', value: 'FILE', default: 'reports/bench-long-context.json', help: 'JSON output' },
  },
} as const satisfies CommandSpec;

/** The command line as typed options (the only place that reads process.argv). */
const parseOptions = (argv: string[]) =>
  optionsOrExit(
    SPEC,
    (v) => ({
      child: v.child,
      backend: chooseBackend({ flag: v.backend, recipe: 'wasm' }).choice,
      lengths: numberListOption(v.lengths, 'lengths', { integer: true, min: 1 })!,
      mechanisms: listOption(v.mechanisms, 'mechanisms', attentionNames()) ?? attentionNames(),
      generate: v.generate,
      block: v.block,
      budgetMB: v['budget-mb'],
      timeoutS: v['timeout-s'],
      out: v.out,
    }),
    argv,
  );

type Options = ReturnType<typeof parseOptions>;

interface Row {
  mechanism: string;
  length: number;
  prefillS: number | null;
  prefillTokensPerS: number | null;
  decodeMsPerToken: number | null;
  /** Bytes of every layer's recurrent state after the prompt (sums, or the key/value cache). */
  stateMB: number | null;
  /** wasm: the heap's high-water mark; elsewhere the largest live tensor bytes seen between blocks. */
  peakMB: number | null;
  status: MeasurementStatus | 'over budget';
  error?: string;
}

const MB = 2 ** 20;
const VOCAB = 4096;

/** One measurement, in this process (child mode). */
async function measure(opts: Options, mechanism: string, length: number): Promise<Row> {
  await initBackend(opts.backend, { quiet: true });
  const model = createLanguageModel({
    kind: 'gpt',
    vocabSize: VOCAB,
    maxSeqLen: length + opts.generate,
    dModel: 128,
    numLayers: 4,
    numHeads: 4,
    mlpRatio: 4,
    dropout: 0,
    bias: true,
    attention: { name: mechanism, options: {} },
    seed: 1,
  });
  const rng = new Rng(2);
  const prompt = Array.from({ length }, () => rng.int(VOCAB));
  const decoder = new IncrementalDecoder(model, 1);
  let tensorPeak = tf.memory().numBytes;
  const t0 = performance.now();
  let logits: tf.Tensor2D | null = null;
  for (let start = 0; start < length; start += opts.block) {
    logits?.dispose();
    logits = decoder.feedBlock([prompt.slice(start, start + opts.block)]);
    await logits.data();
    tensorPeak = Math.max(tensorPeak, tf.memory().numBytes);
  }
  const prefillS = (performance.now() - t0) / 1000;
  const stateBytes = decoder.layerStates.reduce((sum, state) => sum + Object.values(state.tensors).reduce((s, t) => s + t.size * 4, 0), 0);
  const t1 = performance.now();
  for (let i = 0; i < opts.generate; i++) {
    const next = sampleToken(logits!.dataSync(), { temperature: 0, topK: 0 }, rng);
    logits!.dispose();
    logits = decoder.feed([next]);
  }
  await logits!.data();
  const decodeMsPerToken = (performance.now() - t1) / opts.generate;
  logits!.dispose();
  decoder.dispose();
  const wasm = (tf.backend() as unknown as { wasm?: { HEAPU8: Uint8Array } }).wasm;
  const peakMB = (wasm ? wasm.HEAPU8.buffer.byteLength : tensorPeak) / MB;
  return {
    mechanism,
    length,
    prefillS,
    prefillTokensPerS: length / prefillS,
    decodeMsPerToken,
    stateMB: stateBytes / MB,
    peakMB,
    status: peakMB <= opts.budgetMB ? 'ok' : 'over budget',
  };
}

/** One measurement in its own process (its arguments forwarded). */
function measureIsolated(opts: Options, mechanism: string, length: number): Promise<Row> {
  const forwarded = ['--backend', opts.backend, '--generate', String(opts.generate), '--block', String(opts.block), '--budget-mb', String(opts.budgetMB)];
  const empty = { mechanism, length, prefillS: null, prefillTokensPerS: null, decodeMsPerToken: null, stateMB: null, peakMB: null };
  return measureInChild(new URL(import.meta.url).pathname, forwarded, [mechanism, length], opts.timeoutS, empty);
}

async function main(): Promise<void> {
  const opts = parseOptions(process.argv.slice(2));
  if (!(await benchmarkEntry(opts, (mechanism, length) => measure(opts, mechanism, length)))) return;
  const { backend } = await initBackend(opts.backend, { quiet: true });
  console.log(
    `backend ${backend}; GPT vocab ${VOCAB}, width 128, 4 layers × 4 heads; prompt in blocks of ${opts.block}, then ${opts.generate} tokens; budget ${opts.budgetMB} MB\n`,
  );
  console.log('mechanism           L   prefill s   prefill tok/s   decode ms/token   state MB    peak MB   status');
  const fmt = (v: number | null, digits = 1) => (v === null ? '—' : v.toFixed(digits));
  const rows: Row[] = [];
  for (const mechanism of opts.mechanisms) {
    for (const length of opts.lengths) {
      const row = await measureIsolated(opts, mechanism, length);
      rows.push(row);
      console.log(
        `${mechanism.padEnd(14)} ${String(length).padStart(7)} ${fmt(row.prefillS).padStart(11)} ${fmt(row.prefillTokensPerS, 0).padStart(15)} ${fmt(row.decodeMsPerToken).padStart(17)} ${fmt(row.stateMB, 2).padStart(10)} ${fmt(row.peakMB, 0).padStart(10)}   ${row.status}`,
      );
      if (row.status !== 'ok') break;
    }
  }
  const longest = opts.mechanisms.map((mechanism) => ({
    mechanism,
    longest: rows.filter((r) => r.mechanism === mechanism && r.status === 'ok').at(-1)?.length ?? null,
  }));
  console.log(`\nlongest prompt that fits ${opts.budgetMB} MB: ${longest.map((l) => `${l.mechanism} ${l.longest ?? '—'}`).join(', ')}`);
  fs.mkdirSync(path.dirname(opts.out), { recursive: true });
  fs.writeFileSync(opts.out, JSON.stringify({ backend, generate: opts.generate, block: opts.block, budgetMB: opts.budgetMB, rows, longest }, null, 2));
  console.log(`wrote ${opts.out}`);
}

await main();
