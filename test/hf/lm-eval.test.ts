// EleutherAI's lm-evaluation-harness on our exports (npm run lm-eval, docs/evaluation.md): its rolling-window
// log-likelihood of a text equals our eval's on the same text, for softmax and for a kernel attention (slay), and the
// shipped multiple-choice and LAMBADA-shaped tasks run end to end into the run folder and compare's report.
// Needs the harness's Python: `npm run setup:lm-eval` makes one in .venv-lm-eval/ (or point SLAYFORMER_LM_EVAL_PYTHON
// at one); without it the tests are skipped with one line saying so.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { evalCheckpoint } from '../../src/cli/eval.ts';
import { LAUNCHER_FD, LAUNCHER_FD_ENV } from '../../src/core/launcher-channel.ts';
import { runLmEval } from '../../src/cli/lm-eval.ts';
import { LM_EVAL_SETUP, lmEvalPython } from '../../src/report/lm-eval-results.ts';
import { TextTokenizer } from '../../src/data/tokenizer.ts';
import { trainByteLevelBpeFromTexts } from '../../src/data/train-tokenizer.ts';
import { compareRuns } from '../../src/report/compare.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { exportHf } from '../../src/store/hf-export.ts';
import { syntheticDocuments, writeDataset } from '../data/stream-fixtures.ts';
import { testBackend } from '../helpers/backend.ts';
import { savedRun } from './fixtures.ts';

const candidate = lmEvalPython();
const python =
  candidate && spawnSync(candidate, ['-c', 'import importlib.util, sys; sys.exit(0 if importlib.util.find_spec("lm_eval") else 1)']).status === 0
    ? candidate
    : null;
if (!python) console.warn(`skipped: the lm-evaluation-harness tests need its Python (set up with: ${LM_EVAL_SETUP})`);

/** The context length of the models, and so of the harness's rolling windows and our eval's sequences. */
const SEQ_LEN = 16;
/** Windows of the text: it is WINDOWS × SEQ_LEN + 1 tokens long. */
const WINDOWS = 4;

let dir: string;
let tokenizerFile: string;
beforeAll(async () => {
  await initBackend(testBackend(), { quiet: true });
  dir = mkdtempSync(path.join(tmpdir(), 'slay-lm-eval-'));
  tokenizerFile = path.join(dir, 'tokenizer.json');
  await trainByteLevelBpeFromTexts(syntheticDocuments(200, 7), 300, tokenizerFile);
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const recipeFor = (attention: string, maxSeqLen: number) =>
  parseRecipe(
    `model: { kind: gpt, dModel: 32, numLayers: 2, numHeads: 2, maxSeqLen: ${maxSeqLen}, attention: { name: ${attention} } }
data: { dataset: ${path.join(dir, 'data')}, tokenizer: ${tokenizerFile}, seqLen: ${SEQ_LEN} }
train: { batchSize: 4, runDir: ${path.join(dir, 'runs')} }`,
    path.join(dir, `${attention}.yaml`),
  );

const exportModel = async (checkpoint: string, out: string) => void (await exportHf(checkpoint, { out, overwrite: true }));

describe('npm run lm-eval, before the harness runs', () => {
  it("refuses a Hugging Face folder or a checkpoint without --out (their scores are no run's), writing nothing", async () => {
    const hf = path.join(dir, 'refused', 'hf');
    const checkpoint = path.join(dir, 'refused', 'run', 'checkpoints', 'step-000010');
    mkdirSync(hf, { recursive: true });
    mkdirSync(checkpoint, { recursive: true });
    writeFileSync(path.join(hf, 'config.json'), JSON.stringify({ model_type: 'gpt2' }));
    const exportModel = () => Promise.reject(new Error('nothing is exported'));
    const options = { tasks: ['moby_dick_cloze'], python: 'no-python-is-run', exportModel };
    await expect(runLmEval({ model: hf, ...options })).rejects.toThrow(`${hf} is a Hugging Face folder: give --out DIR`);
    await expect(runLmEval({ model: checkpoint, ...options })).rejects.toThrow(`${checkpoint} is not a run folder nor its final/: give --out DIR`);
    await expect(runLmEval({ model: path.join(dir, 'refused', 'run'), ...options, tasks: ['a b'] })).rejects.toThrow('--tasks: "a b" is not a task name');
    expect(readdirSync(hf)).toEqual(['config.json']);
    expect(readdirSync(checkpoint)).toEqual([]);
  });
});

describe.skipIf(!python)(`lm-evaluation-harness on exported folders (needs: ${LM_EVAL_SETUP})`, () => {
  it("the harness's rolling log-likelihood of a text equals eval's on it (softmax and slay, float32 rounding)", async () => {
    // What both compute: our eval reads a split of one document t0 … tN (N = WINDOWS × SEQ_LEN) in windows of
    // SEQ_LEN + 1 tokens overlapping by one, so it predicts t1 … tN, each from the tokens before it in its window.
    // The harness's loglikelihood_rolling on the text of t1 … tN, with t0 as its prefix token (--model_args
    // prefix_token_id), cuts the same windows: its first is t0 … t15 predicting t1 … t16, the next t16 … t31
    // predicting t17 … t32, and so on; max_length is the model's context (n_positions = SEQ_LEN).
    const tokenizer = await TextTokenizer.load(tokenizerFile);
    const [stream] = await tokenizer.encodeBatch([syntheticDocuments(60, 11).join(' ')]);
    const ids = Array.from(stream.subarray(0, WINDOWS * SEQ_LEN + 1));
    const whole = await tokenizer.decode(ids);
    const predicted = await tokenizer.decode(ids.slice(1));
    // The texts tokenize back to the same tokens (else the two would not read the same text).
    expect(Array.from((await tokenizer.encodeBatch([whole]))[0])).toEqual(ids);
    expect(Array.from((await tokenizer.encodeBatch([predicted]))[0])).toEqual(ids.slice(1));
    await writeDataset(path.join(dir, 'data'), { train: [[whole]], validation: [[whole]] }, 4);

    const tasks = path.join(dir, 'tasks');
    mkdirSync(tasks);
    writeFileSync(path.join(tasks, 'text.jsonl'), `${JSON.stringify({ text: predicted })}\n`);
    writeFileSync(
      path.join(tasks, 'text.yaml'),
      [
        'task: slayformer_text_ppl',
        'dataset_path: json',
        `dataset_kwargs: { data_files: { test: ${JSON.stringify(path.join(tasks, 'text.jsonl'))} } }`,
        'test_split: test',
        'output_type: loglikelihood_rolling',
        'doc_to_text: ""',
        'doc_to_target: "{{text}}"',
        'metric_list: [{ metric: word_perplexity }, { metric: byte_perplexity }, { metric: bits_per_byte }]',
      ].join('\n'),
    );

    for (const attention of ['softmax', 'slay']) {
      const run = path.join(dir, 'runs', attention);
      const final = await savedRun(recipeFor(attention, SEQ_LEN), run, 5);
      const ours = await evalCheckpoint({ checkpoint: final, data: path.join(dir, 'data'), tokens: Infinity });
      expect(ours.tokens).toBe(WINDOWS * SEQ_LEN);
      expect(ours.bytes).toBe(Buffer.byteLength(predicted));

      const result = await runLmEval({
        model: run,
        tasks: ['slayformer_text_ppl'],
        includePaths: [tasks],
        modelArgs: `prefix_token_id=${ids[0]}`,
        python: python!,
        exportModel,
        stdio: 'pipe',
      });
      const file = path.join(run, 'lm-eval', 'slayformer_text_ppl.json');
      expect(result.files.get('slayformer_text_ppl')).toBe(file);
      const json = JSON.parse(readFileSync(file, 'utf8'));
      expect(json.max_length).toBe(SEQ_LEN);
      const scores = json.results.slayformer_text_ppl;
      // The harness's bits per byte is −Σ log p / (ln 2 · bytes of the text): the same bytes as ours, so the same
      // total log-likelihood, from which the token perplexity follows. Observed 4e-8 (softmax) and 2e-8 (slay) relative;
      // with the harness's default prefix (end-of-text) instead of t0, softmax's differed by 1.4e-3.
      const bpb = scores['bits_per_byte,none'];
      expect(Math.abs(bpb - ours.bpb) / ours.bpb).toBeLessThan(1e-5);
      const harnessPpl = Math.exp((bpb * Math.LN2 * ours.bytes) / ours.tokens);
      expect(Math.abs(harnessPpl - ours.ppl) / ours.ppl).toBeLessThan(1e-5);
      expect(Math.abs(scores['byte_perplexity,none'] - 2 ** ours.bpb) / 2 ** ours.bpb).toBeLessThan(1e-5);
    }
  });

  it('the shipped multiple-choice and LAMBADA-shaped tasks run end to end (npm run lm-eval) into the run folder and the report', async () => {
    // A context of 128 tokens holds the longest ending of moby_dick_cloze in this small vocabulary.
    const recipe = recipeFor('softmax', 128);
    const run = path.join(dir, 'runs', 'e2e');
    await savedRun(recipe, run, 6);
    // What compare needs of a run folder besides: its recipe and a metrics record.
    writeFileSync(path.join(run, 'config.json'), JSON.stringify(recipe));
    const record = { step: 1, tokens: 64, lr: 1e-3, grad_norm: null, tokens_per_s: 100, elapsed_s: 1, split: 'val', loss: 5, ppl: Math.exp(5), bpb: 2, acc: 0 };
    writeFileSync(path.join(run, 'metrics.jsonl'), `${JSON.stringify(record)}\n`);

    const limit = 6;
    const cli = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'src/cli/lm-eval.ts', run, '--tasks', 'moby_dick_cloze,moby_dick_lambada', '--limit', String(limit), '--backend', testBackend()],
      { encoding: 'utf8', env: { ...process.env, SLAYFORMER_LM_EVAL_PYTHON: python! }, maxBuffer: 1 << 26 },
    );
    expect(cli.status, cli.stderr).toBe(0);
    expect(cli.stdout).toContain(`wrote ${path.join(run, 'lm-eval', 'moby_dick_cloze.json')}`);
    const cloze = JSON.parse(readFileSync(path.join(run, 'lm-eval', 'moby_dick_cloze.json'), 'utf8'));
    expect(Object.keys(cloze.results)).toEqual(['moby_dick_cloze']);
    expect(cloze['n-samples'].moby_dick_cloze.effective).toBe(limit);
    for (const metric of ['acc,none', 'acc_norm,none']) {
      // With 6 documents, an accuracy is a multiple of 1/6.
      const acc = cloze.results.moby_dick_cloze[metric];
      expect(Math.abs(acc * limit - Math.round(acc * limit))).toBeLessThan(1e-9);
    }
    const lambada = JSON.parse(readFileSync(path.join(run, 'lm-eval', 'moby_dick_lambada.json'), 'utf8'));
    expect(lambada.results.moby_dick_lambada['perplexity,none']).toBeGreaterThan(1);

    const report = path.join(dir, 'report');
    await compareRuns([run], { outDir: report, warn: () => {}, baseline: null });
    const md = readFileSync(path.join(report, 'report.md'), 'utf8');
    expect(md).toContain('## lm-evaluation-harness');
    const acc = cloze.results.moby_dick_cloze['acc,none'].toFixed(4);
    expect(md).toMatch(new RegExp(`\\| e2e \\| softmax \\| ${acc.replace('.', '\\.')} ± `));
    expect(readFileSync(path.join(report, 'lm-eval.csv'), 'utf8')).toContain('moby_dick_lambada perplexity');
  });

  it('a parent killed with SIGKILL leaves no harness behind: the channel it held closes, and the command ends the harness and itself', async () => {
    const run = path.join(dir, 'runs', 'orphan');
    await savedRun(recipeFor('softmax', 128), run, 7);
    // As a paper unit's worker starts it (src/paper/lm-evaluation.ts): the last descriptor is the channel.
    const cli = spawn(process.execPath, ['--import', 'tsx', 'src/cli/lm-eval.ts', run, '--tasks', 'moby_dick_cloze', '--backend', testBackend()], {
      env: { ...process.env, SLAYFORMER_LM_EVAL_PYTHON: python!, [LAUNCHER_FD_ENV]: String(LAUNCHER_FD) },
      stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    });
    const exited = new Promise<number | null>((resolve) => cli.once('exit', (code) => resolve(code)));
    let output = '';
    cli.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const harnessPid = await new Promise<number>((resolve, reject) => {
      cli.stdout!.on('data', (d: Buffer) => {
        output += d.toString();
        const started = /the harness runs as pid (\d+)/.exec(output);
        if (started) resolve(Number(started[1]));
      });
      cli.once('exit', () => reject(new Error(`the command ended before its harness started:\n${output}`)));
    });
    // What the parent's end does when SIGKILL ends the parent: it closes.
    cli.stdio[LAUNCHER_FD]!.destroy();
    expect(await exited, output).not.toBe(0);
    // The command ends only once its harness has (runHarness waits for it), so the harness is gone, reaped.
    expect(() => process.kill(harnessPid, 0)).toThrow();
    expect(readdirSync(path.join(run, 'lm-eval')).filter((f) => f.endsWith('.json'))).toEqual([]);
  });
});
