import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { checkRecord, readMetrics, type MetricRecord } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { gitSource } from '../../src/telemetry/environment.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { type Recipe } from '../../src/recipe/schema.ts';
import { RUN_MARKER } from '../../src/store/layout.ts';
import { readWandbInfo } from '../../src/telemetry/wandb.ts';
import { TRAINING_SUMMARY } from '../helpers/run-record.ts';

const REQUIRED_FIELDS = ['step', 'tokens', 'split', 'loss', 'ppl', 'lr', 'grad_norm', 'tokens_per_s', 'elapsed_s'];

let tmp: string;
beforeEach(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'metrics-test-'));
});
afterEach(() => fs.rmSync(tmp, { recursive: true, force: true }));

function recipe(): Recipe {
  return parseRecipe(`data: {dataset: d, tokenizer: t.json}\ntrain: {runDir: ${JSON.stringify(tmp)}}\nwandb: {enabled: false}`, 'tiny run.yaml');
}

function trainRecord(step: number, loss: number): MetricRecord {
  return {
    step,
    tokens: step * 256,
    split: 'train',
    loss,
    ppl: Math.exp(loss),
    lr: 1e-3 * Math.min(1, step / 10),
    grad_norm: 1 / step,
    tokens_per_s: 1000 + step,
    elapsed_s: step * 0.25,
  };
}

describe('RunLogger', () => {
  it('makes a run folder with the resolved recipe, environment and W&B run id', async () => {
    const r = recipe();
    const a = await RunLogger.create(r, { echo: false });
    const b = await RunLogger.create(r, { echo: false });
    expect(a.dir).not.toBe(b.dir);
    for (const logger of [a, b]) {
      expect(path.dirname(logger.dir)).toBe(tmp);
      expect(path.basename(logger.dir)).toMatch(/^tiny_run-\d{8}-\d{6}(-\d+)?$/);
      expect(JSON.parse(fs.readFileSync(path.join(logger.dir, 'config.json'), 'utf8'))).toEqual(r);
      const env = JSON.parse(fs.readFileSync(path.join(logger.dir, 'env.json'), 'utf8')) as Record<string, unknown>;
      expect(env.node).toBe(process.version);
      expect(env.cpus).toBe(os.cpus().length);
      expect(readWandbInfo(logger.dir)).toMatchObject({ project: 'slayformer', name: path.basename(logger.dir), status: 'pending' });
    }
    expect(readWandbInfo(a.dir).id).not.toBe(readWandbInfo(b.dir).id);
  });

  it('env.json records where the run came from: the git commit and whether the tree was dirty, the versions, the backend, the CPU, the data paths in both forms; a resume appends its own', async () => {
    await initBackend('cpu', { quiet: true });
    const root = path.resolve(import.meta.dirname, '..', '..');
    const git = (...args: string[]) => execFileSync('git', ['-C', root, ...args], { encoding: 'utf8' });
    const r = recipe();
    const logger = await RunLogger.create(r, { echo: false });
    const envFile = path.join(logger.dir, 'env.json');
    const env = JSON.parse(fs.readFileSync(envFile, 'utf8'));
    expect(env.git).toEqual({ commit: git('rev-parse', 'HEAD').trim(), dirty: git('status', '--porcelain', '--untracked-files=no').trim() !== '' });
    const installed = (name: string) => JSON.parse(fs.readFileSync(path.join(root, 'node_modules', ...name.split('/'), 'package.json'), 'utf8')).version;
    expect(env.backend).toMatchObject({ name: 'cpu', tensorflow: null });
    expect(env.backend.versions).toMatchObject({
      'tfjs-core': installed('@tensorflow/tfjs-core'),
      tfjs: installed('@tensorflow/tfjs'),
      'tfjs-backend-wasm': installed('@tensorflow/tfjs-backend-wasm'),
    });
    expect(env).toMatchObject({ node: process.version, cpus: os.cpus().length, cpuModel: os.cpus()[0].model, platform: `${process.platform}-${process.arch}` });
    expect(env.paths.run).toBe(logger.dir);
    expect(env.paths.dataset).toEqual({ absolute: r.data.dataset, fromRun: path.relative(logger.dir, r.data.dataset) });
    expect(path.resolve(logger.dir, env.paths.tokenizer.fromRun)).toBe(r.data.tokenizer);
    const resumed = await RunLogger.create(r, { echo: false, resumeDir: logger.dir, resumeStep: 0 });
    const after = JSON.parse(fs.readFileSync(envFile, 'utf8'));
    expect(after.startedAt).toBe(env.startedAt); // the first session's environment stays
    expect(after.resumes).toHaveLength(1);
    expect(after.resumes[0]).toMatchObject({ resumedAtStep: 0, git: env.git });
    expect(resumed.dir).toBe(logger.dir);
  });

  it('a tree is dirty when a tracked file changed, not for an untracked one (a run folder, a scratch file)', () => {
    const repo = fs.mkdtempSync(path.join(os.tmpdir(), 'slay-git-'));
    try {
      const git = (...args: string[]) => execFileSync('git', ['-C', repo, '-c', 'user.name=t', '-c', 'user.email=t@t', ...args], { stdio: 'ignore' });
      git('init', '-q');
      fs.writeFileSync(path.join(repo, 'code.ts'), 'a');
      git('add', 'code.ts');
      git('commit', '-qm', 'one');
      fs.writeFileSync(path.join(repo, 'notes.txt'), 'untracked');
      expect(gitSource(repo)).toMatchObject({ commit: expect.stringMatching(/^[0-9a-f]{40}$/), dirty: false });
      fs.writeFileSync(path.join(repo, 'code.ts'), 'b');
      expect(gitSource(repo).dirty).toBe(true);
    } finally {
      fs.rmSync(repo, { recursive: true, force: true });
    }
  });

  it('writes one parseable JSON line per record with every required field', async () => {
    const logger = await RunLogger.create(recipe(), { echo: false });
    const logged: MetricRecord[] = [
      trainRecord(1, 6.2),
      trainRecord(2, 5.9),
      { ...trainRecord(2, 6.0), split: 'val', grad_norm: null, bpb: 2.1, epoch_fraction: 0.01 },
    ];
    logged.forEach((record) => logger.log(record));
    const lines = fs.readFileSync(path.join(logger.dir, 'metrics.jsonl'), 'utf8').trimEnd().split('\n');
    expect(lines).toHaveLength(3);
    lines.forEach((line, i) => {
      const parsed = JSON.parse(line) as Record<string, unknown>;
      for (const field of REQUIRED_FIELDS) expect(parsed, field).toHaveProperty(field);
      expect(parsed).toEqual(logged[i]);
    });
    expect(JSON.parse(lines[2])).toMatchObject({ split: 'val', bpb: 2.1, grad_norm: null });
    expect(readMetrics(logger.dir)).toEqual(logged);
  });

  it('rejects records that miss a field or have a wrong one, naming it', async () => {
    const logger = await RunLogger.create(recipe(), { echo: false });
    const { lr: _lr, ...noLr } = trainRecord(1, 5);
    expect(() => logger.log(noLr as MetricRecord)).toThrow('field lr must be a number');
    expect(() => logger.log({ ...trainRecord(1, 5), split: 'test' as 'val' })).toThrow('field split must be "train" or "val"');
    expect(() => logger.log({ ...trainRecord(1, 5), step: 1.5 })).toThrow('field step must be an integer');
    expect(() => logger.log({ ...trainRecord(1, 5), bpb: 'x' as unknown as number })).toThrow('field bpb must be a number');
    expect(fs.existsSync(path.join(logger.dir, 'metrics.jsonl'))).toBe(false); // nothing half-written
  });

  it('keeps a diverged (NaN) loss as null and reads it back', async () => {
    const logger = await RunLogger.create(recipe(), { echo: false });
    logger.log({ ...trainRecord(3, NaN), ppl: NaN });
    const [record] = readMetrics(logger.dir);
    expect(record.loss).toBeNull();
    expect(record.step).toBe(3);
  });

  it('names the file and line of a corrupt metrics.jsonl', async () => {
    const logger = await RunLogger.create(recipe(), { echo: false });
    logger.log(trainRecord(1, 5));
    fs.appendFileSync(path.join(logger.dir, 'metrics.jsonl'), '{"step": 2, "spl\n');
    expect(() => readMetrics(logger.dir)).toThrow(`${path.join(logger.dir, 'metrics.jsonl')}:2: not valid JSON`);
    expect(() => checkRecord({ step: 1 }, 'here')).toThrow('here: metric record field split');
  });

  it('writes progress lines to log.txt and a summary at finish', async () => {
    const logger = await RunLogger.create(recipe(), { echo: false });
    logger.line('step 1 loss 5.0');
    logger.warn('slow step');
    logger.log(trainRecord(1, 5));
    await logger.finish({ ...TRAINING_SUMMARY, val_loss: 4.2 });
    await logger.finish({ ...TRAINING_SUMMARY, val_loss: 1 }); // idempotent
    // Each line of log.txt after its ISO time; stdout and stderr get the lines as they are.
    const time = '\\d{4}-\\d{2}-\\d{2}T\\d{2}:\\d{2}:\\d{2}\\.\\d{3}Z';
    expect(fs.readFileSync(path.join(logger.dir, 'log.txt'), 'utf8')).toMatch(new RegExp(`^${time} step 1 loss 5\\.0\\n${time} warning: slow step\\n$`));
    const summary = JSON.parse(fs.readFileSync(path.join(logger.dir, 'summary.json'), 'utf8')) as Record<string, unknown>;
    expect(summary).toMatchObject({ ...TRAINING_SUMMARY, val_loss: 4.2, records: 1 });
    expect(summary.peak_rss_bytes).toBeGreaterThan(10 * 2 ** 20); // this process's peak resident memory
  });

  it('resumes a run folder: drops records after the checkpoint step, keeps the W&B id, appends', async () => {
    const first = await RunLogger.create(recipe(), { echo: false });
    for (const step of [10, 20, 30, 40]) first.log(trainRecord(step, 5 - step / 100));
    const id = readWandbInfo(first.dir).id;

    const resumed = await RunLogger.create(recipe(), { echo: false, resumeDir: first.dir, resumeStep: 20 });
    expect(resumed.dir).toBe(first.dir);
    resumed.log(trainRecord(30, 4.65));
    expect(readMetrics(first.dir).map((r) => [r.step, r.loss])).toEqual([
      [10, 4.9],
      [20, 4.8],
      [30, 4.65],
    ]);
    expect(readWandbInfo(first.dir).id).toBe(id);
    await expect(RunLogger.create(recipe(), { resumeDir: path.join(tmp, 'absent') })).rejects.toThrow('the run folder to resume does not exist');
    // A folder without the run marker is not a run, whatever its files: nothing is written into it.
    const lookalike = path.join(tmp, 'lookalike');
    fs.mkdirSync(lookalike);
    fs.cpSync(first.dir, lookalike, { recursive: true });
    fs.rmSync(path.join(lookalike, RUN_MARKER));
    const files = () => Object.fromEntries(fs.readdirSync(lookalike).map((f) => [f, fs.readFileSync(path.join(lookalike, f), 'utf8')]));
    const before = files();
    await expect(RunLogger.create(recipe(), { echo: false, resumeDir: lookalike, resumeStep: 20 })).rejects.toThrow(
      `cannot resume in ${lookalike}: it is not a run folder (${lookalike} has no ${RUN_MARKER} marker; a run folder written by slayformer before it marked its run folders becomes one again with: touch ${path.join(lookalike, RUN_MARKER)})`,
    );
    expect(files()).toEqual(before);
  });

  it('on resume, writes no file of the run through a symbolic link planted at its name: the link is refused, naming it, and its target keeps its bytes', async () => {
    const first = await RunLogger.create(recipe(), { echo: false });
    first.log(trainRecord(10, 4.9));
    first.line('first line');
    const victim = path.join(tmp, 'victim.txt');
    for (const name of ['config.json', 'env.json', 'metrics.jsonl', 'wandb.json', 'log.txt']) {
      fs.writeFileSync(victim, "not the run's");
      const file = path.join(first.dir, name);
      const saved = fs.readFileSync(file);
      fs.rmSync(file);
      fs.symlinkSync(victim, file);
      const refused = `${file} is a symbolic link where slayformer keeps a file of its own: nothing is written through it (remove the link)`;
      await expect(RunLogger.create(recipe(), { echo: false, resumeDir: first.dir, resumeStep: 10 })).rejects.toThrow(refused);
      expect(fs.readFileSync(victim, 'utf8')).toBe("not the run's");
      fs.rmSync(file);
      fs.writeFileSync(file, saved);
    }
    // A link planted while the run goes on: the write is refused (O_NOFOLLOW), not made through it.
    const resumed = await RunLogger.create(recipe(), { echo: false, resumeDir: first.dir, resumeStep: 10 });
    const log = path.join(first.dir, 'log.txt');
    fs.rmSync(log);
    fs.symlinkSync(victim, log);
    expect(() => resumed.line('resumed')).toThrow(`${log} is a symbolic link where slayformer keeps a file of its own`);
    expect(fs.readFileSync(victim, 'utf8')).toBe("not the run's");
  });

  it('a resume replaces config.json, env.json and metrics.jsonl whole: compare or eval reading the run meanwhile never sees a file cut short', async () => {
    const first = await RunLogger.create(recipe(), { echo: false });
    first.log(trainRecord(10, 4.9));
    first.log(trainRecord(20, 4.5));
    // A reader that opened the files just before the resume rewrites them (a truncate-and-write would empty them under it).
    const opened = ['config.json', 'env.json', 'metrics.jsonl'].map((name) => {
      const file = path.join(first.dir, name);
      return { file, bytes: fs.readFileSync(file), fd: fs.openSync(file, 'r') };
    });
    try {
      await RunLogger.create(recipe(), { echo: false, resumeDir: first.dir, resumeStep: 10 });
      for (const { file, bytes, fd } of opened) expect(fs.readFileSync(fd).equals(bytes), file).toBe(true);
    } finally {
      for (const { fd } of opened) fs.closeSync(fd);
    }
    expect(readMetrics(first.dir).map((r) => r.step)).toEqual([10]);
    expect(fs.readdirSync(first.dir).filter((f) => f.endsWith('.tmp'))).toEqual([]);
  });

  it('writes no TensorBoard event file through a symbolic link at its name, on resume or while the run goes on', async () => {
    const first = await RunLogger.create(recipe(), { echo: false });
    first.log(trainRecord(10, 4.9));
    const [written] = fs.readdirSync(first.dir).filter((f) => f.startsWith('events.out.tfevents.'));
    // As a run started long ago has it: a resume a second later would otherwise find the name taken by chance.
    const name = 'events.out.tfevents.1000000000.slayformer';
    const events = path.join(first.dir, name);
    fs.renameSync(path.join(first.dir, written), events);
    const saved = fs.readFileSync(events);
    const victim = path.join(tmp, 'tensorboard-victim.txt');
    fs.writeFileSync(victim, "not the run's");
    fs.rmSync(events);
    fs.symlinkSync(victim, events);
    // Refused by name on resume, whatever the clock says (not a second event file beside the link), before any file changes.
    const files = () =>
      fs.readdirSync(first.dir).map((f) => [f, fs.lstatSync(path.join(first.dir, f)).isFile() ? fs.readFileSync(path.join(first.dir, f), 'utf8') : '']);
    const before = files();
    const refused = `${events} is a symbolic link where slayformer keeps a file of its own: nothing is written through it (remove the link)`;
    await expect(RunLogger.create(recipe(), { echo: false, resumeDir: first.dir, resumeStep: 0 })).rejects.toThrow(refused);
    expect(files()).toEqual(before);
    expect(fs.readFileSync(victim, 'utf8')).toBe("not the run's");
    fs.rmSync(events);
    fs.writeFileSync(events, saved);
    const resumed = await RunLogger.create(recipe(), { echo: false, resumeDir: first.dir, resumeStep: 10 });
    fs.rmSync(events);
    fs.symlinkSync(victim, events);
    expect(() => resumed.log(trainRecord(20, 4.5))).toThrow(refused);
    expect(fs.readFileSync(victim, 'utf8')).toBe("not the run's");
  });
});
