// The W&B sink against a loopback mock of the W&B API (never the real service): the GraphQL Viewer query,
// the UpsertBucket mutation and the file_stream POSTs that @wandb/sdk 0.5.1 makes.
import fs from 'node:fs';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { readMetrics, type MetricRecord } from '../../src/store/run-record.ts';
import { RunLogger } from '../../src/telemetry/run-logger.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { type Recipe } from '../../src/recipe/schema.ts';
import { readWandbInfo, replayToWandb, toWandbRow, wandbDecision } from '../../src/telemetry/wandb.ts';
import { TRAINING_SUMMARY } from '../helpers/run-record.ts';

interface MockWandb {
  url: string;
  upserts: Record<string, unknown>[];
  streams: { path: string; body: Record<string, unknown> }[];
  authorizations: string[];
  /** 'ok', or 'reject-upsert' to answer UpsertBucket with HTTP 401. */
  mode: 'ok' | 'reject-upsert';
  reset(): void;
  close(): Promise<void>;
}

async function startMockWandb(): Promise<MockWandb> {
  const mock = {
    url: '',
    upserts: [] as Record<string, unknown>[],
    streams: [] as { path: string; body: Record<string, unknown> }[],
    authorizations: [] as string[],
    mode: 'ok' as MockWandb['mode'],
  };
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8') || '{}') as Record<string, unknown>;
      mock.authorizations.push(String(req.headers.authorization ?? ''));
      const reply = (status: number, payload: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json' });
        res.end(JSON.stringify(payload));
      };
      if (req.method === 'POST' && req.url === '/graphql') {
        const query = String(body.query);
        if (query.includes('query Viewer')) {
          return reply(200, { data: { viewer: { id: 'u1', entity: 'mock-entity', flags: null, teams: { edges: [] } } } });
        }
        if (query.includes('mutation UpsertBucket')) {
          if (mock.mode === 'reject-upsert') return reply(401, { errors: [{ message: 'unauthorized' }] });
          const vars = body.variables as Record<string, unknown>;
          mock.upserts.push(vars);
          const project = { id: 'p1', name: vars.project, entity: { id: 'e1', name: vars.entity } };
          return reply(200, {
            data: {
              upsertBucket: {
                bucket: { id: 'b1', name: vars.name, displayName: vars.displayName, description: null, config: vars.config, sweepName: null, project },
                inserted: true,
              },
            },
          });
        }
        return reply(400, { errors: [{ message: `unexpected query ${query.slice(0, 40)}` }] });
      }
      if (req.method === 'POST' && /^\/files\/[^/]+\/[^/]+\/[^/]+\/file_stream$/.test(req.url ?? '')) {
        mock.streams.push({ path: req.url!, body });
        return reply(200, {});
      }
      reply(404, {});
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  mock.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return Object.assign(mock, {
    reset() {
      mock.upserts.length = 0;
      mock.streams.length = 0;
      mock.authorizations.length = 0;
      mock.mode = 'ok';
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  });
}

/** History lines received, by offset; fails if an offset arrives twice with different content. */
function historyLines(mock: MockWandb): Map<number, Record<string, unknown>> {
  const lines = new Map<number, Record<string, unknown>>();
  for (const { body } of mock.streams) {
    const history = (body.files as Record<string, { offset: number; content: string[] }> | undefined)?.['wandb-history.jsonl'];
    history?.content.forEach((text, i) => lines.set(history.offset + i, JSON.parse(text) as Record<string, unknown>));
  }
  return lines;
}

/** The history rows the records should become: one per optimizer step, its records' fields merged. */
function rowsByStep(list: MetricRecord[]): Record<string, number>[] {
  const rows = new Map<number, Record<string, number>>();
  for (const record of list) rows.set(record.step, { ...rows.get(record.step), ...toWandbRow(record) });
  return [...rows.values()];
}

function records(): MetricRecord[] {
  const base = { lr: 1e-3, tokens_per_s: 900, grad_norm: 0.5 };
  return [
    { step: 10, tokens: 1280, split: 'train', loss: 5.1, ppl: Math.exp(5.1), elapsed_s: 1.5, ...base },
    { step: 20, tokens: 2560, split: 'train', loss: 4.7, ppl: Math.exp(4.7), elapsed_s: 3.0, ...base },
    { step: 20, tokens: 2560, split: 'val', loss: 4.9, ppl: Math.exp(4.9), elapsed_s: 3.4, bpb: 1.9, acc: 0.31, ...base, grad_norm: null },
    { step: 30, tokens: 3840, split: 'train', loss: 4.4, ppl: Math.exp(4.4), elapsed_s: 4.6, epoch_fraction: 0.5, ...base },
  ];
}

let mock: MockWandb;
let tmp: string;
const WANDB_ENV = ['WANDB_API_KEY', 'WANDB_BASE_URL', 'WANDB_MODE'] as const;
const savedEnv = Object.fromEntries(WANDB_ENV.map((key) => [key, process.env[key]]));

function recipe(enabled: boolean | 'auto'): Recipe {
  return parseRecipe(
    `name: wb\ndata: {dataset: d, tokenizer: t.json}\ntrain: {runDir: ${JSON.stringify(tmp)}}\nwandb: {enabled: ${enabled}, project: proj}`,
    'wb.yaml',
  );
}

beforeAll(async () => {
  mock = await startMockWandb();
});
afterAll(async () => {
  await mock.close();
});
afterEach(() => {
  for (const key of WANDB_ENV) {
    if (savedEnv[key] === undefined) delete process.env[key];
    else process.env[key] = savedEnv[key];
  }
  mock.reset();
  fs.rmSync(tmp, { recursive: true, force: true });
});
function useMock(): void {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'wandb-test-'));
  process.env.WANDB_API_KEY = 'test-key';
  process.env.WANDB_BASE_URL = mock.url;
  delete process.env.WANDB_MODE;
}

describe('W&B sink (loopback mock)', () => {
  it('sends one history line per optimizer step at W&B step = that step, upserts the config with tokens as the x-axis, and marks the run complete', async () => {
    useMock();
    const r = recipe(true);
    const logger = await RunLogger.create(r, { echo: false });
    for (const record of records()) logger.log(record);
    await logger.finish(TRAINING_SUMMARY);

    const info = readWandbInfo(logger.dir);
    expect(info.status).toBe('synced');
    expect(info.id).toMatch(/^[a-z0-9]{8}$/);
    expect(mock.authorizations.every((a) => a === `Basic ${Buffer.from('api:test-key').toString('base64')}`)).toBe(true);

    expect(mock.upserts).toHaveLength(1);
    expect(mock.upserts[0]).toMatchObject({ name: info.id, project: 'proj', entity: 'mock-entity', displayName: path.basename(logger.dir) });
    const config = JSON.parse(String(mock.upserts[0].config)) as Record<string, { value: unknown }>;
    expect(config.train.value).toEqual(r.train);
    expect(config.model.value).toEqual(r.model);
    // define_metric('tokens') and define_metric(<every measurement>, step_metric='tokens') in the Python client's
    // encoding: MetricRecord field numbers, step metric as a one-based index into the list.
    const metrics = (config._wandb.value as { m: Record<string, unknown>[] }).m;
    expect(metrics[0]).toEqual({ 1: 'tokens', 6: [3] });
    for (const name of ['train/loss', 'train/ppl', 'train/lr', 'train/grad_norm', 'train/tokens_per_s', 'val/loss', 'val/ppl', 'val/bpb', 'val/acc']) {
      expect(metrics).toContainEqual({ 1: name, 5: 1, 6: [1] });
    }
    expect(metrics.map((m) => m[1])).not.toContain('step');

    expect(mock.streams.every((s) => s.path === `/files/mock-entity/proj/${info.id}/file_stream`)).toBe(true);
    const lines = historyLines(mock);
    expect(readMetrics(logger.dir)).toEqual(records());
    // Steps 10, 20 (train and validation in one row) and 30.
    expect([...lines.keys()].sort()).toEqual([0, 1, 2]);
    expect([...lines.values()].map((line) => line._step)).toEqual([10, 20, 30]);
    rowsByStep(records()).forEach((row, i) => expect(lines.get(i)).toMatchObject(row));
    expect(lines.get(1)).toMatchObject({ step: 20, tokens: 2560, 'train/loss': 4.7, 'val/loss': 4.9, 'val/bpb': 1.9, 'val/acc': 0.31 });
    expect(lines.get(1)).not.toHaveProperty('val/grad_norm');
    expect(lines.get(0)).toMatchObject({ step: 10, tokens: 1280, 'train/loss': 5.1, 'train/grad_norm': 0.5, 'train/lr': 1e-3 });
    expect(mock.streams.at(-1)!.body).toEqual({ complete: true, exitcode: 0 });
  });

  it('replays a finished run folder once, to the same run id each time', async () => {
    useMock();
    process.env.WANDB_API_KEY = '';
    const logger = await RunLogger.create(recipe('auto'), { echo: false }); // no key → no live upload
    for (const record of records()) logger.log(record);
    await logger.finish(TRAINING_SUMMARY);
    expect(mock.upserts).toHaveLength(0);
    const id = readWandbInfo(logger.dir).id;
    expect(readWandbInfo(logger.dir).status).toBe('pending');

    process.env.WANDB_API_KEY = 'test-key';
    const result = await replayToWandb(logger.dir);
    expect(result.records).toBe(4);
    expect(mock.upserts.map((u) => u.name)).toEqual([id]);
    const contents = mock.streams.flatMap((s) => (s.body.files as Record<string, { content: string[] }> | undefined)?.['wandb-history.jsonl']?.content ?? []);
    expect(contents).toHaveLength(3); // every step exactly once
    const lines = historyLines(mock);
    rowsByStep(records()).forEach((row, i) => expect(lines.get(i)).toMatchObject(row));
    expect([...lines.values()].map((line) => line._step)).toEqual([10, 20, 30]);
    expect(readWandbInfo(logger.dir).status).toBe('synced');

    mock.reset();
    await replayToWandb(logger.dir);
    expect(mock.upserts.map((u) => u.name)).toEqual([id]); // same run, same offsets: no duplicate run
    expect([...historyLines(mock).keys()].sort()).toEqual([0, 1, 2]);
  });

  it('replays more records than the SDK sends in one request, each exactly once', async () => {
    useMock();
    process.env.WANDB_API_KEY = '';
    const logger = await RunLogger.create(recipe('auto'), { echo: false });
    const count = 5003; // more than one replay chunk (5000)
    for (let i = 0; i < count; i++) logger.log({ ...records()[0], step: i + 1, tokens: (i + 1) * 128 });
    await logger.finish(TRAINING_SUMMARY);
    process.env.WANDB_API_KEY = 'test-key';
    await replayToWandb(logger.dir);
    const contents = mock.streams.flatMap((s) => (s.body.files as Record<string, { content: string[] }> | undefined)?.['wandb-history.jsonl']?.content ?? []);
    expect(contents).toHaveLength(count);
    const lines = historyLines(mock);
    expect(lines.size).toBe(count);
    for (let i = 0; i < count; i += 1000) expect(lines.get(i)).toMatchObject({ step: i + 1, _step: i + 1 });
    expect(lines.get(count - 1)).toMatchObject({ step: count });
  });

  it('re-sends the kept records when a run is resumed, so W&B matches the JSONL', async () => {
    useMock();
    const first = await RunLogger.create(recipe(true), { echo: false });
    for (const record of records()) first.log(record);
    await first.finish(TRAINING_SUMMARY);
    const id = readWandbInfo(first.dir).id;
    mock.reset();

    const resumed = await RunLogger.create(recipe(true), { echo: false, resumeDir: first.dir, resumeStep: 20 });
    const next: MetricRecord = { ...records()[3], loss: 4.3 };
    resumed.log(next);
    await resumed.finish(TRAINING_SUMMARY);
    expect(mock.upserts.map((u) => u.name)).toEqual([id]);
    const expected = [...records().slice(0, 3), next];
    expect(readMetrics(first.dir)).toEqual(expected);
    const lines = historyLines(mock);
    expect(lines.size).toBe(3);
    rowsByStep(expected).forEach((row, i) => expect(lines.get(i)).toMatchObject(row));
    expect([...lines.values()].map((line) => line._step)).toEqual([10, 20, 30]);
  });

  it('keeps the JSONL and does not throw when W&B cannot be reached', async () => {
    useMock();
    const closed = http.createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise<void>((resolve) => closed.close(() => resolve()));
    process.env.WANDB_BASE_URL = `http://127.0.0.1:${port}`; // nothing listens: connection refused

    const logger = await RunLogger.create(recipe(true), { echo: false });
    for (const record of records()) logger.log(record);
    await expect(logger.finish(TRAINING_SUMMARY)).resolves.toBeUndefined();
    expect(readMetrics(logger.dir)).toEqual(records());
    const log = fs.readFileSync(path.join(logger.dir, 'log.txt'), 'utf8');
    expect(log.match(/warning: W&B: init failed/g)).toHaveLength(1); // warned once
    expect(log).toContain(`npm run wandb:replay -- ${logger.dir}`);
    expect(readWandbInfo(logger.dir).status).toBe('incomplete');
  });

  it('survives the SDK crashing on a rejected run upsert', async () => {
    useMock();
    mock.mode = 'reject-upsert';
    const logger = await RunLogger.create(recipe(true), { echo: false });
    for (const record of records()) logger.log(record);
    await logger.finish(TRAINING_SUMMARY);
    expect(readMetrics(logger.dir)).toHaveLength(4);
    expect(readWandbInfo(logger.dir).status).toBe('incomplete');
    expect(readWandbInfo(logger.dir).reason).toMatch(/^init failed: Failed to upsert run.*401/);
    const log = fs.readFileSync(path.join(logger.dir, 'log.txt'), 'utf8');
    expect(log.match(/warning: W&B: /g)).toHaveLength(1);
    await expect(replayToWandb(logger.dir, { timeoutS: 20 })).rejects.toThrow(logger.dir);
  });

  it('WANDB_MODE=offline: says at the start that no wandb/offline-run-* folder is written, and the replay it names uploads the run', async () => {
    useMock();
    process.env.WANDB_MODE = 'offline';
    const logger = await RunLogger.create(recipe('auto'), { echo: false });
    for (const record of records()) logger.log(record);
    await logger.finish(TRAINING_SUMMARY);
    expect(mock.upserts).toHaveLength(0);
    const log = fs.readFileSync(path.join(logger.dir, 'log.txt'), 'utf8');
    // log.txt lines start with their ISO time.
    const offlineLines = log.split('\n').filter((line) => line.includes('WANDB_MODE=offline'));
    expect(offlineLines.map((line) => line.replace(/^\S+ /, ''))).toEqual([
      'W&B offline (WANDB_MODE=offline): nothing is sent and no wandb/offline-run-* folder is written, so `wandb sync` has nothing to upload; ' +
        `the run's metrics.jsonl is kept: upload it to W&B later with: npm run wandb:replay -- ${logger.dir}`,
    ]);
    expect(fs.existsSync(path.join(logger.dir, 'wandb'))).toBe(false);
    expect(readWandbInfo(logger.dir).status).toBe('pending');

    delete process.env.WANDB_MODE;
    expect((await replayToWandb(logger.dir)).records).toBe(4);
    expect(mock.upserts.map((u) => u.name)).toEqual([readWandbInfo(logger.dir).id]);
    rowsByStep(records()).forEach((row, i) => expect(historyLines(mock).get(i)).toMatchObject(row));
    expect(readWandbInfo(logger.dir).status).toBe('synced');
  });

  it('decides when W&B is on', () => {
    const on = (enabled: boolean | 'auto', env: NodeJS.ProcessEnv) => wandbDecision({ enabled, project: 'p', entity: null, runName: null }, env).enabled;
    expect(on('auto', {})).toBe(false);
    expect(on('auto', { WANDB_API_KEY: 'k' })).toBe(true);
    expect(on('auto', { WANDB_API_KEY: 'k', WANDB_MODE: 'offline' })).toBe(false);
    expect(on(true, {})).toBe(true);
    expect(on(true, { WANDB_MODE: 'disabled' })).toBe(false);
    expect(on(false, { WANDB_API_KEY: 'k' })).toBe(false);
  });
});
