// One run across processes (train --processes N, src/cli/launch.ts; the 'collective' step executor): the
// ranks are child processes of the command, never test workers (a started gRPC server cannot stop inside
// a process). Two ranks must give, bit for bit, the weights of one process taking each batch's shards as
// micro-batches; a rank killed with SIGKILL must end the run in seconds, naming it, and the last
// checkpoint must resume with two ranks exactly and with one.
import { cpSync, existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CLUSTER_ENV, RANK_ENV } from '../../src/backend/cluster-env.ts';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { freePorts } from '../../src/cli/launch.ts';
import { startCli } from '../helpers/cli.ts';
import { makeTinySetup, writeTinyRecipe } from './checkpoint-fixtures.ts';
import { maxDifference, TRAIN, tensorsOf, trainCommand } from './collective-fixtures.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';

let dir: string;
let setup: TinySetup;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'slay-collective-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs `npm run train -- <recipe> --backend tensorflow <args>` to its end. */
const train = (recipe: string, args: string[]) => trainCommand([recipe, '--backend', 'tensorflow', ...args]);
const weights = (finalDir: string) => tensorsOf(join(finalDir, 'model.safetensors'));

describe.skipIf(!isTensorflowSetUp())('one run across processes (train --processes)', () => {
  it('two ranks give the weights of one process over the same shards, bit for bit: GPT with dropout and Performer redraws', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'gpt.yaml'), setup, join(dir, 'runs-gpt'), { maxTokens: 512 });
    const ranks = await train(recipe, ['--processes', '2']);
    expect(ranks.output).toMatch(/^\[train\] 2 processes \(pids \d+, \d+\) on 127\.0\.0\.1:\d+,127\.0\.0\.1:\d+/m);
    expect(ranks.output).toMatch(
      /train\.executor collective: rank 0 of 2 on \/job:worker\/replica:0\/task:0\/device:CPU:0, steps as TensorFlow functions; one ring all-reduce/,
    );
    // One set of logs: rank 1 prints nothing of its own.
    expect(ranks.output.match(/^done: /gm)).toHaveLength(1);
    // The run records its ranks: config.json the number, env.json where they ran.
    const runDir = join(ranks.finalDir, '..');
    expect(JSON.parse(readFileSync(join(runDir, 'config.json'), 'utf8')).train.processes).toBe(2);
    expect(JSON.parse(readFileSync(join(runDir, 'env.json'), 'utf8')).cluster).toMatchObject({
      worldSize: 2,
      communication: 'ring',
      addresses: [expect.stringMatching(/^127\.0\.0\.1:\d+$/), expect.stringMatching(/^127\.0\.0\.1:\d+$/)],
    });
    // Shard r of each batch of 4 rows is rows 2r, 2r+1 with dropout seed r: one process reading batches of 2 rows, 2 per step.
    const single = await train(recipe, ['--train.batchSize=2', '--train.gradAccum=2']);
    expect(maxDifference(await weights(ranks.finalDir), await weights(single.finalDir))).toBe(0);
    // The comparison means something: the same recipe without the shards (batches of 4, other dropout masks) ends elsewhere.
    const unsharded = await train(recipe, []);
    expect(maxDifference(await weights(ranks.finalDir), await weights(unsharded.finalDir))).toBeGreaterThan(1e-4);
  });

  it("two ranks give one process's BERT weights over the same shards, bit for bit", async () => {
    const recipe = await writeTinyRecipe(join(dir, 'bert.yaml'), setup, join(dir, 'runs-bert'), { maxTokens: 384 });
    const ranks = await train(recipe, ['--processes', '2', '--model.kind=bert']);
    const single = await train(recipe, ['--model.kind=bert', '--train.batchSize=2', '--train.gradAccum=2']);
    expect(maxDifference(await weights(ranks.finalDir), await weights(single.finalDir))).toBe(0);
  });

  it('kill -9 of rank 1: rank 0 ends the run within seconds naming rank 1; the last checkpoint resumes exactly with 2 ranks and with 1', async () => {
    // No dropout, whose masks depend on the number of ranks: one rank then takes the same steps up to float rounding.
    const recipe = await writeTinyRecipe(join(dir, 'kill.yaml'), setup, join(dir, 'runs-kill'), {
      maxTokens: 6400,
      logInterval: 1,
      checkpointInterval: 3,
      evalInterval: 0,
    });
    const args = ['--processes', '2', '--model.dropout=0'];
    const whole = await train(recipe, args);

    const run = startCli(TRAIN, [recipe, '--backend', 'tensorflow', ...args]);
    const pids = await run.waitForOutput(/^\[train\] 2 processes \(pids (\d+), (\d+)\)/m);
    const checkpoint = await run.waitForOutput(/^checkpoint step 3 saved in [\d.]+ s: (\S+)\n/m, pids.end);
    await run.waitForOutput(/^step 4\/100 \|/m, checkpoint.end);
    const killedAt = performance.now();
    process.kill(Number(pids.match[2]), 'SIGKILL');
    const exit = await run.exited;
    const seconds = (performance.now() - killedAt) / 1000;
    expect(exit.code, run.output()).not.toBe(0);
    expect(run.output()).toMatch(new RegExp(`train: rank 1 of 2 \\(pid ${pids.match[2]}\\) was killed by SIGKILL; the other ranks were stopped`));
    // Rank 0 found out by itself (heartbeats), before the launcher's grace period would have killed it.
    expect(run.output()).toMatch(/rank 0: the all-reduce failed: rank 1 \(127\.0\.0\.1:\d+\) does not answer/);
    expect(seconds, run.output()).toBeLessThan(15);
    expect(run.output()).not.toMatch(/^done: /m);

    const last = [...run.output().matchAll(/^checkpoint step (\d+) saved in [\d.]+ s: (\S+)\n/gm)].at(-1)!;
    expect(existsSync(join(last[2], 'COMPLETE'))).toBe(true);
    // Resumed by one process from a copy (a checkpoint outside its run continues in a new run folder).
    const copy = join(dir, 'checkpoint-copy');
    cpSync(last[2], copy, { recursive: true });
    const alone = await train(recipe, ['--model.dropout=0', '--resume', copy]);
    expect(alone.output).toMatch(new RegExp(`resumed from .* at step ${last[1]}`));
    const twice = await train(recipe, [...args, '--resume', last[2]]);
    expect(twice.output).toMatch(new RegExp(`resumed from .* at step ${last[1]}`));

    const reference = await weights(whole.finalDir);
    expect(maxDifference(await weights(twice.finalDir), reference)).toBe(0);
    // One rank sums each batch's rows in another order: the same run up to float rounding.
    const startMoved = maxDifference(await weights(alone.finalDir), reference);
    expect(startMoved).toBeLessThan(1e-3);
    const summary = JSON.parse(readFileSync(join(alone.finalDir, '..', 'summary.json'), 'utf8')) as { steps: number; tokens: number };
    expect(summary).toMatchObject({ steps: 100, tokens: 6400 });
  });

  it("a rank whose recipe differs from rank 0's is refused at start, naming it; a port already taken is named", async () => {
    const recipe = await writeTinyRecipe(join(dir, 'mismatch.yaml'), setup, join(dir, 'runs-mismatch'));
    const cluster = (await freePorts(2)).map((p) => `127.0.0.1:${p}`).join(',');
    const rank = (r: number, extra: string[]) =>
      startCli(TRAIN, [recipe, '--backend', 'tensorflow', ...extra], { ...process.env, [RANK_ENV]: String(r), [CLUSTER_ENV]: cluster });
    const [zero, one] = [rank(0, []), rank(1, ['--train.lr=0.02'])];
    const [exitZero, exitOne] = await Promise.all([zero.exited, one.exited]);
    expect(exitOne.code, one.output()).toBe(1);
    expect(one.output()).toMatch(
      /train: rank 1: its recipe and data fingerprint \(\w+\) differs from rank 0's \(\w+\): every rank must run the same recipe on the same data/,
    );
    // Rank 0, waiting in its first collective, hears it from rank 1 at once.
    expect(exitZero.code, zero.output()).toBe(1);
    expect(zero.output()).toMatch(/train: rank 0: the all-reduce failed: rank 1 ended: rank 1: its recipe and data fingerprint/);
    // Refused before anything was written: rank 0 waits for every rank's comparison before it makes the run folder.
    expect(existsSync(join(dir, 'runs-mismatch'))).toBe(false);

    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    const port = (taken.address() as import('node:net').AddressInfo).port;
    try {
      const blocked = startCli(TRAIN, [recipe, '--backend', 'tensorflow'], {
        ...process.env,
        [RANK_ENV]: '0',
        [CLUSTER_ENV]: `127.0.0.1:${port},${cluster.split(',')[1]}`,
      });
      expect((await blocked.exited).code).toBe(1);
      expect(blocked.output()).toContain(`train: rank 0: could not start its server on 127.0.0.1:${port} (is 127.0.0.1:${port} already taken?)`);
    } finally {
      taken.close();
    }
  });

  it('a rank that never starts: rank 0 ends within train.joinTimeout naming it, non-zero, having written nothing', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'alone.yaml'), setup, join(dir, 'runs-alone'));
    const [port, absent] = await freePorts(2);
    const zero = startCli(TRAIN, [recipe, '--backend', 'tensorflow', '--train.joinTimeout=3'], {
      ...process.env,
      [RANK_ENV]: '0',
      [CLUSTER_ENV]: `127.0.0.1:${port},127.0.0.1:${absent}`,
    });
    const exit = await zero.exited;
    expect(exit.code, zero.output()).toBe(1);
    expect(zero.output()).toContain(
      `train: rank 0: rank 1 (127.0.0.1:${absent}) of 2 did not join within 3 s (train.joinTimeout): is it running, and can it reach the others?`,
    );
    expect(existsSync(join(dir, 'runs-alone'))).toBe(false);
  });

  it('a long rank-0 evaluation trips no timeout: the others wait in the next all-reduce past the heartbeat timeout', async () => {
    const cluster = (await freePorts(2)).map((p) => `127.0.0.1:${p}`).join(',');
    // A 1 s heartbeat timeout; rank 0 holds its thread 4 s between two all-reduces (rank 1 gets there well within 3 s).
    const heartbeatMs = 1000;
    const ranks = [0, 1].map((r) =>
      startCli('test/train/collective-wait-fixture.ts', [String(4 * heartbeatMs), String(heartbeatMs)], {
        ...process.env,
        [RANK_ENV]: String(r),
        [CLUSTER_ENV]: cluster,
      }),
    );
    const exits = await Promise.all(ranks.map((r) => r.exited));
    for (const [r, exit] of exits.entries()) expect(exit.code, ranks[r].output()).toBe(0);
    const waited = /rank 1: sum 3 after waiting (\d+) ms/.exec(ranks[1].output());
    expect(waited, ranks[1].output()).not.toBeNull();
    // The wait really outlasted the heartbeat timeout (rank 1 entered its all-reduce while rank 0 held its thread).
    expect(Number(waited![1])).toBeGreaterThan(heartbeatMs);
    expect(ranks[0].output()).toMatch(/rank 0: sum 3 after/);
  });

  it('Ctrl-C on the launcher: rank 0 saves one checkpoint, every rank stops, and the printed command resumes with 2 ranks', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'ctrl-c.yaml'), setup, join(dir, 'runs-ctrl-c'), {
      maxTokens: 6400,
      logInterval: 1,
      checkpointInterval: 1000,
      evalInterval: 0,
    });
    // As a terminal does: the launcher leads its own process group and SIGINT goes to the whole group.
    const run = startCli(TRAIN, [recipe, '--backend', 'tensorflow', '--processes', '2'], process.env, { ownProcessGroup: true });
    const pids = await run.waitForOutput(/^\[train\] 2 processes \(pids (\d+), (\d+)\)/m);
    await run.waitForOutput(/^step 3\/100 \|/m, pids.end);
    process.kill(-run.process.pid!, 'SIGINT');
    expect((await run.exited).code, run.output()).toBe(130);
    const text = run.output();
    expect(text.match(/stopped by SIGINT/g), text).toHaveLength(1);
    expect(text.match(/^checkpoint step \d+ saved/gm), text).toHaveLength(1);
    for (const pid of [pids.match[1], pids.match[2]]) expect(() => process.kill(Number(pid), 0)).toThrow(); // every rank has ended
    const command = /\nresume with: npm run train -- (.+)\n/.exec(text);
    expect(command![1]).toContain('--processes 2');
    const resumed = startCli(TRAIN, command![1].split(' '));
    expect((await resumed.exited).code, resumed.output()).toBe(0);
    expect(resumed.output()).toMatch(/resumed from .* at step \d+/);
    expect(resumed.output().match(/^done: 100 steps/gm)).toHaveLength(1);
  });
});
