// RunFolder (src/store/run-folder.ts), the one reader of a run folder: each file it reads (the marker, config.json,
// env.json, summary.json, metrics.jsonl, the checkpoints), the errors for a missing, broken or oversized file (each
// naming it, a size refused before the file is read), and the telemetry sinks (src/telemetry/sink.ts): a sink of the
// caller's gets every record metrics.jsonl gets, from RunLogger and from a training run.
import fs from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { COMPLETE_MARKER } from '../../src/core/atomic-folder.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { markRunFolder, RunFolder } from '../../src/store/run-folder.ts';
import { METRIC_LINE_MAX_CHARS, readMetrics, RUN_JSON_MAX_BYTES, writeSummary, type MetricRecord } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import type { TelemetrySink } from '../../src/telemetry/sink.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { TRAINING_SUMMARY } from '../helpers/run-record.ts';
import { makeTinySetup, tinyRecipeText } from '../train/checkpoint-fixtures.ts';

const root = fs.mkdtempSync(path.join(tmpdir(), 'slayformer-run-folder-reader-'));
afterAll(() => fs.rmSync(root, { recursive: true, force: true }));
let folders = 0;
const newDir = () => fs.mkdtempSync(path.join(root, `run${folders++}-`));
/** A marked run folder, as RunLogger makes one. */
const markedDir = () => {
  const dir = newDir();
  markRunFolder(dir);
  return dir;
};

const record = (step: number, split: 'train' | 'val' = 'train'): MetricRecord => ({
  step,
  tokens: step * 64,
  split,
  loss: 5 - step / 1000,
  ppl: Math.exp(5 - step / 1000),
  lr: 1e-3,
  grad_norm: split === 'train' ? 1 : null,
  tokens_per_s: 100,
  elapsed_s: step,
});
const lines = (records: MetricRecord[]) => records.map((r) => JSON.stringify(r) + '\n').join('');
/** A file of `bytes` bytes that takes no disk (sparse): what a size check must refuse without reading it. */
const sparseFile = (file: string, bytes: number) => {
  fs.writeFileSync(file, '');
  fs.truncateSync(file, bytes);
};

describe('RunFolder: the marker and what the folder holds', () => {
  it('reads the run id of the marker; a folder holds a run by its marker, config.json or metrics.jsonl; finished by summary.json', () => {
    const dir = newDir();
    const run = RunFolder.at(dir);
    expect(run.holdsRun()).toBe(false);
    expect(run.marker()).toEqual({ marked: false, why: `${dir} has no .slayformer-run marker` });
    const id = markRunFolder(dir);
    expect(run.marker()).toEqual({ marked: true, id });
    expect(run.holdsRun()).toBe(true);
    const older = newDir(); // a run of a version before the marker
    fs.writeFileSync(path.join(older, 'metrics.jsonl'), lines([record(1)]));
    expect(RunFolder.at(older).holdsRun()).toBe(true);
    expect(run.finished()).toBe(false);
    writeSummary(dir, { ...TRAINING_SUMMARY, records: 1, peak_rss_bytes: 1, finished_at: '2026-12-05T00:00:00.000Z' });
    expect(run.finished()).toBe(true);
  });

  it('lists the complete checkpoints, oldest first, passing over unmarked and temporary folders', () => {
    const dir = markedDir();
    const checkpoint = (name: string, complete: boolean) => {
      fs.mkdirSync(path.join(dir, 'checkpoints', name), { recursive: true });
      if (complete) fs.writeFileSync(path.join(dir, 'checkpoints', name, COMPLETE_MARKER), '{}');
    };
    expect(RunFolder.at(dir).checkpoints()).toEqual([]);
    checkpoint('step-000020', true);
    checkpoint('step-000005', true);
    checkpoint('step-000030', false);
    checkpoint('.step-000040.tmp-123', true);
    expect(RunFolder.at(dir).checkpoints()).toEqual([
      { dir: path.join(dir, 'checkpoints', 'step-000005'), step: 5 },
      { dir: path.join(dir, 'checkpoints', 'step-000020'), step: 20 },
    ]);
  });
});

describe('RunFolder: config.json, env.json and summary.json', () => {
  it('reads the recorded recipe; missing is an error naming the file (a marked folder: an incomplete run), or absent where a broken file says nothing', () => {
    const dir = markedDir();
    const file = path.join(dir, 'config.json');
    const run = RunFolder.at(dir);
    expect(() => run.config()).toThrow(`${file}: missing: ${dir} is an incomplete run folder (interrupted before it started?)`);
    const unmarked = newDir();
    expect(() => RunFolder.at(unmarked).config()).toThrow(`${path.join(unmarked, 'config.json')}: cannot be read (ENOENT)`);
    const said: string[] = [];
    expect(run.config({ unreadable: (m) => said.push(m) })).toBeUndefined();
    expect(said).toEqual([`${file}: missing: ${dir} is an incomplete run folder (interrupted before it started?)`]);
    fs.writeFileSync(file, JSON.stringify({ name: 'gpt', model: { attention: { name: 'slay' } } }));
    expect(run.config()).toEqual({ name: 'gpt', model: { attention: { name: 'slay' } } });
  });

  it('refuses a file cut short, one that holds no object and one that is no file, naming it', () => {
    const run = RunFolder.at(markedDir());
    const file = run.file('config.json');
    fs.writeFileSync(file, '{"name": "gp');
    expect(() => run.config()).toThrow(`${file}: not valid JSON`);
    fs.writeFileSync(file, '[1, 2]');
    expect(() => run.config()).toThrow(`${file}: expected a JSON object`);
    fs.rmSync(file);
    fs.mkdirSync(file);
    expect(() => run.config()).toThrow(`${file}: not a file`);
  });

  it('refuses config.json, env.json and summary.json beyond their size before reading them', () => {
    const run = RunFolder.at(markedDir());
    for (const name of ['config.json', 'env.json', 'summary.json']) sparseFile(run.file(name), RUN_JSON_MAX_BYTES + 1);
    const tooBig = (name: string) => `${run.file(name)}: ${(RUN_JSON_MAX_BYTES + 1).toLocaleString('en-US')} bytes, more than a run's JSON file holds`;
    expect(() => run.config()).toThrow(tooBig('config.json'));
    expect(() => run.env()).toThrow(tooBig('env.json'));
    expect(() => run.summary()).toThrow(tooBig('summary.json'));
    // Readers to whom a broken file says nothing hear why and read it as absent.
    const said: string[] = [];
    expect(run.summary({ unreadable: (m) => said.push(m) })).toBeUndefined();
    expect(run.env({ unreadable: (m) => said.push(m) })).toBeUndefined();
    expect(said.map((m) => m.slice(0, m.indexOf(':')))).toEqual([run.file('summary.json'), run.file('env.json')]);
  });

  it('env.json: absent in an older run, read when there, an error naming it when broken', () => {
    const run = RunFolder.at(markedDir());
    expect(run.env()).toBeUndefined();
    fs.writeFileSync(run.file('env.json'), JSON.stringify({ git: { commit: 'abc', dirty: false } }));
    expect(run.env()).toEqual({ git: { commit: 'abc', dirty: false } });
    fs.writeFileSync(run.file('env.json'), '{');
    expect(() => run.env()).toThrow(`${run.file('env.json')}: not valid JSON`);
  });

  it('summary.json: absent until the run finishes, then as written', () => {
    const dir = markedDir();
    const run = RunFolder.at(dir);
    expect(run.summary()).toBeUndefined();
    const summary = { ...TRAINING_SUMMARY, records: 3, peak_rss_bytes: 2 ** 20, finished_at: '2026-12-05T00:00:00.000Z' };
    writeSummary(dir, summary);
    expect(run.summary()).toEqual(summary);
  });
});

describe('RunFolder: metrics.jsonl', () => {
  it('reads every record of a file many read chunks long, lines split across chunks', () => {
    const run = RunFolder.at(markedDir());
    const records = Array.from({ length: 2000 }, (_, i) => record(i + 1, i % 10 === 9 ? 'val' : 'train'));
    fs.writeFileSync(run.file('metrics.jsonl'), lines(records));
    expect(fs.statSync(run.file('metrics.jsonl')).size).toBeGreaterThan(4 * 2 ** 16);
    expect(run.metrics()).toEqual(records);
  });

  it('refuses a line longer than any record, naming the file and the line, within or at the end of the file', () => {
    const run = RunFolder.at(markedDir());
    const file = run.file('metrics.jsonl');
    const long = `{"step": 3, "pad": "${'x'.repeat(METRIC_LINE_MAX_CHARS)}"}`;
    fs.writeFileSync(file, `${lines([record(1), record(2)])}${long}\n${lines([record(4)])}`);
    expect(() => run.metrics()).toThrow(`${file}:3: a line of over ${METRIC_LINE_MAX_CHARS} characters, longer than any metric record`);
    // Even where a cut last line is tolerated: a line this long is no write in progress.
    fs.writeFileSync(file, `${lines([record(1)])}${long}`);
    expect(() => run.metrics({ cutLastLine: () => {} })).toThrow(`${file}:2: a line of over`);
  });

  it('keeps the one tolerance of a last line cut short, and names a missing file as an incomplete run', () => {
    const dir = markedDir();
    const run = RunFolder.at(dir);
    expect(() => run.metrics()).toThrow(`${run.file('metrics.jsonl')}: missing: ${dir} is an incomplete run folder`);
    fs.writeFileSync(run.file('metrics.jsonl'), `${lines([record(1), record(2, 'val')])}{"step": 3, "tok`);
    const said: string[] = [];
    expect(run.metrics({ cutLastLine: (m) => said.push(m) })).toEqual([record(1), record(2, 'val')]);
    expect(said).toEqual([`${run.file('metrics.jsonl')}:3: incomplete last line ignored`]);
    expect(() => run.metrics()).toThrow(`${run.file('metrics.jsonl')}:3: not valid JSON`);
  });
});

/** A sink of the test's: every record and the records a resume started it with. */
function recordingSink(): TelemetrySink & { records: MetricRecord[]; started: MetricRecord[][]; closed: number } {
  const sink = {
    records: [] as MetricRecord[],
    started: [] as MetricRecord[][],
    closed: 0,
    start: (kept: readonly MetricRecord[]) => void sink.started.push([...kept]),
    record: (r: MetricRecord) => void sink.records.push(r),
    close: async () => void (sink.closed += 1),
  };
  return sink;
}

describe('telemetry sinks', () => {
  const recipe = (runDir: string) =>
    parseRecipe(`name: sinks\ndata: {dataset: d, tokenizer: t.json}\ntrain: {runDir: ${JSON.stringify(runDir)}}\nwandb: {enabled: false}`, 'sinks.yaml');

  it('a sink added to the list gets every record metrics.jsonl gets, the records a resume keeps first, and is closed at finish', async () => {
    const runDir = newDir();
    const first = recordingSink();
    const logger = await RunLogger.create(recipe(runDir), { echo: false, sinks: [first] });
    const written = [record(10), record(20), record(20, 'val'), record(30)];
    for (const r of written) logger.log(r);
    expect(first.started).toEqual([[]]);
    expect(first.records).toEqual(readMetrics(logger.dir));
    expect(first.records).toEqual(written);

    const second = recordingSink();
    const resumed = await RunLogger.create(recipe(runDir), { echo: false, resumeDir: logger.dir, resumeStep: 20, sinks: [second] });
    resumed.log(record(30));
    await resumed.finish(TRAINING_SUMMARY);
    expect([...second.started[0], ...second.records]).toEqual(readMetrics(logger.dir));
    expect(second.records).toEqual([record(30)]);
    expect(second.closed).toBe(1);
  });

  it("a training run hands the trainer's sinks every record of its metrics.jsonl", async () => {
    await initBackend('cpu', { quiet: true });
    const dir = newDir();
    const setup = await makeTinySetup(dir);
    const sink = recordingSink();
    const { runDir } = await runTraining(parseRecipe(tinyRecipeText(setup, path.join(dir, 'runs')), path.join(dir, 'tiny.yaml')), { sinks: [sink] });
    const records = readMetrics(runDir);
    expect(records.filter((r) => r.split === 'val').length).toBeGreaterThan(0);
    expect(sink.records).toEqual(records);
    expect(sink.closed).toBe(1);
  });
});
