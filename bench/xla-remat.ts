// train.remat on the XLA route (docs/xla.md, "Rematerialisation"): GPTs of growing depth, each micro-batch's
// gradient program recorded plain and with rematerialised blocks, exported, compiled by the jax runner: XLA's
// compiled bound of each (arguments + outputs + temporaries, the runner's peakBytes), the saving, and the median ms
// of the program over --runs calls (forward and backward, no update). Records on the tensorflow backend
// (npm run setup:tensorflow, npm run setup:xla); runs on the runner's platform (jax's CPU here).
//   node --import tsx bench/xla-remat.ts [--layers 2,4,8] [--d 128] [--seq 256] [--batch 8] [--runs 5] [--json FILE]
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { initBackend } from '../src/backend/start.ts';
import { XlaRunner } from '../src/backend/xla/runner.ts';
import { runnerPython } from '../src/backend/xla/setup.ts';
import { parseOrExit } from '../src/cli/command.ts';
import { Rng } from '../src/core/rng.ts';
import { createLanguageModel, type LanguageModelConfig } from '../src/model/lm.ts';
import { randomBatch } from '../src/train/throughput.ts';
import { gradientInputs, hostArray, modelTensors, RecordingBook, recordGradientProgram } from '../src/train/xla-recording.ts';

const COMMAND = {
  name: 'bench:xla-remat',
  usage: '[options]',
  description: 'Compiled memory bound and time of GPT gradient programs on the xla route, plain and with train.remat.',
  options: {
    layers: { type: 'string', value: 'N,…', default: '2,4,8', help: 'model depths, one row each' },
    d: { type: 'string', value: 'N', number: { integer: true, min: 8 }, default: '128', help: 'model width (heads of 32)' },
    seq: { type: 'string', value: 'N', number: { integer: true, min: 8 }, default: '256', help: 'sequence length' },
    batch: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '8', help: 'sequences per micro-batch' },
    attention: { type: 'string', value: 'NAME', default: 'softmax', help: 'attention mechanism' },
    runs: { type: 'string', value: 'N', number: { integer: true, min: 1 }, default: '5', help: 'timed calls of each program' },
    json: { type: 'string', value: 'FILE', help: 'also write the rows as JSON' },
  },
} as const;

const { values } = parseOrExit(COMMAND, process.argv.slice(2));
await initBackend('tensorflow', { quiet: true });
const python = runnerPython();
if (!python) throw new Error('bench:xla-remat needs the runner (npm run setup:xla)');
const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'slay-xla-remat-'));
const { runner, hello } = await XlaRunner.start(python);
const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(1);
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const rows = [];
try {
  console.log(
    `bench:xla-remat: GPT d=${values.d}, ${values.attention} attention, ${values.batch} × ${values.seq} tokens a micro-batch, on jax ${hello.jax} ${hello.platform} (${hello.device})`,
  );
  console.log('| layers | compiled bound plain / remat (MiB) | saved | ms plain / remat |');
  console.log('| ---: | ---: | ---: | ---: |');
  for (const layers of values.layers.split(',').map(Number)) {
    const config: LanguageModelConfig = {
      kind: 'gpt',
      vocabSize: 512,
      maxSeqLen: values.seq,
      dModel: values.d,
      numLayers: layers,
      numHeads: Math.max(1, values.d / 32),
      mlpRatio: 4,
      dropout: 0,
      bias: true,
      seed: 5,
      attention: { name: values.attention, options: {} },
    };
    const model = createLanguageModel(config);
    try {
      const batch = randomBatch(new Rng(3), 'gpt', values.batch, values.seq, config.vocabSize);
      const variables = [...model.parameters().values()];
      const total = values.batch * values.seq;
      const given = gradientInputs(model, batch, variables, null, total)!;
      const tensors = modelTensors(model);
      await runner.request(
        { op: 'put', names: tensors.map(([n]) => n) },
        tensors.map(([, t]) => hostArray(t)),
      );
      const measured: Record<'plain' | 'remat', { bytes: number; ms: number }> = {} as never;
      for (const remat of [false, true]) {
        const entry = new RecordingBook({ remat }, cache).get('gradient', given.key, () => ({
          spec: recordGradientProgram(model, batch, variables, null, total),
        }));
        const key = `${layers}-${remat}`;
        const loaded = await runner.request({ op: 'load', key, base: entry.base });
        const ms = [];
        for (let r = 0; r <= values.runs; r++) {
          const t0 = performance.now();
          await runner.request(
            { op: 'eval', program: key, names: given.arrays.map(([n]) => n) },
            given.arrays.map(([, a]) => a),
          );
          if (r > 0) ms.push(performance.now() - t0);
        }
        measured[remat ? 'remat' : 'plain'] = { bytes: loaded.header.peakBytes as number, ms: median(ms) };
      }
      const { plain, remat } = measured;
      rows.push({ ...values, layers, plain, remat });
      console.log(
        `| ${layers} | ${mib(plain.bytes)} / ${mib(remat.bytes)} | ${(100 * (1 - remat.bytes / plain.bytes)).toFixed(0)}% | ${plain.ms.toFixed(0)} / ${remat.ms.toFixed(0)} |`,
      );
    } finally {
      model.dispose();
    }
  }
} finally {
  await runner.close();
  fs.rmSync(cache, { recursive: true, force: true });
}
if (values.json) fs.writeFileSync(values.json, JSON.stringify(rows, null, 1) + '\n');
