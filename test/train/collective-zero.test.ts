// ZeRO-1 across processes (train.shardOptimizer; docs/distributed.md): each rank keeps AdamW's moments for its
// slice of the raveled parameters and all-gathers the parameters after the update. The ranks are child processes
// of the command, never test workers (a started gRPC server cannot stop inside a process). Two sharded ranks must
// give, bit for bit, the weights and the moments of one process taking each batch's shards as micro-batches; their
// checkpoints hold the whole moments and resume unsharded, with 2 ranks or 1, and an unsharded checkpoint resumes
// sharded; Ctrl-C checkpoints once with every rank's slice of the moments.
import { cpSync, existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { CHECKPOINTS_DIR, MODEL_FILE, OPTIMIZER_FILE } from '../../src/store/layout.ts';
import { startCli } from '../helpers/cli.ts';
import { makeTinySetup, writeTinyRecipe } from './checkpoint-fixtures.ts';
import { maxDifference, TRAIN, tensorsOf, trainCommand } from './collective-fixtures.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';

const SHARDED = ['--processes', '2', '--train.shardOptimizer=true'];
let dir: string;
let setup: TinySetup;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'slay-zero-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs `npm run train -- <recipe> --backend tensorflow <args>` to its end; returns its output, run folder and final/ folder. */
const train = (recipe: string, args: string[]) => trainCommand([recipe, '--backend', 'tensorflow', ...args]);

const tensors = tensorsOf;

const checkpoint = (runDir: string, step: number) => join(runDir, CHECKPOINTS_DIR, `step-${String(step).padStart(6, '0')}`);

/** The largest |a − b| over every tensor; at least one value must be non-zero. */
const differenceOf = (a: Map<string, Float32Array>, b: Map<string, Float32Array>) => maxDifference(a, b, { nonZero: true });

describe.skipIf(!isTensorflowSetUp())('ZeRO-1: optimizer state sharded over ranks (train.shardOptimizer)', () => {
  it("two sharded ranks give one process's weights and AdamW moments over the same shards, bit for bit (GPT with dropout and Performer redraws)", async () => {
    const recipe = await writeTinyRecipe(join(dir, 'gpt.yaml'), setup, join(dir, 'runs-gpt'), { maxTokens: 512, weightDecay: 0.1, clip: 0.5 });
    const ranks = await train(recipe, SHARDED);
    expect(ranks.output).toMatch(/one ring all-reduce of [\d,]+ floats .* per step; AdamW's moments sharded \(ZeRO-1\): this rank keeps [\d,]+ of each/);
    // Shard r of each batch of 4 rows is rows 2r, 2r+1 with dropout seed r: one process reading batches of 2 rows, 2 per step.
    const single = await train(recipe, ['--train.batchSize=2', '--train.gradAccum=2']);
    expect(differenceOf(await tensors(join(ranks.finalDir, MODEL_FILE)), await tensors(join(single.finalDir, MODEL_FILE)))).toBe(0);
    // The last checkpoint (step 8) holds the whole moments, gathered from both ranks by rank 0.
    const moments = async (run: { runDir: string }) => tensors(join(checkpoint(run.runDir, 8), OPTIMIZER_FILE));
    expect(differenceOf(await moments(ranks), await moments(single))).toBe(0);
  });

  it('a sharded checkpoint resumes unsharded with 2 ranks exactly and with 1 up to rounding; an unsharded one resumes sharded exactly', async () => {
    // No dropout, whose masks depend on the number of ranks: one rank then takes the same steps up to float rounding.
    const recipe = await writeTinyRecipe(join(dir, 'resume.yaml'), setup, join(dir, 'runs-resume'), {
      maxTokens: 768,
      checkpointInterval: 3,
      keepCheckpoints: 10,
      evalInterval: 0,
    });
    const noDropout = '--model.dropout=0';
    const sharded = await train(recipe, [...SHARDED, noDropout]);
    const unsharded = await train(recipe, ['--processes', '2', noDropout]);
    const reference = await tensors(join(sharded.finalDir, MODEL_FILE));
    expect(differenceOf(await tensors(join(unsharded.finalDir, MODEL_FILE)), reference)).toBe(0);
    const midway = async (run: { runDir: string }) => tensors(join(checkpoint(run.runDir, 6), OPTIMIZER_FILE));
    expect(differenceOf(await midway(sharded), await midway(unsharded))).toBe(0);

    // Each resume from a copy: a checkpoint outside its run continues in a new run folder.
    const copy = (run: { runDir: string }, name: string) => {
      const target = join(dir, name);
      cpSync(checkpoint(run.runDir, 6), target, { recursive: true });
      return target;
    };
    const unshardedFromSharded = await train(recipe, ['--processes', '2', noDropout, '--resume', copy(sharded, 'from-sharded-2')]);
    expect(unshardedFromSharded.output).toMatch(/resumed from .* at step 6/);
    expect(differenceOf(await tensors(join(unshardedFromSharded.finalDir, MODEL_FILE)), reference)).toBe(0);
    const shardedFromUnsharded = await train(recipe, [...SHARDED, noDropout, '--resume', copy(unsharded, 'from-unsharded')]);
    expect(differenceOf(await tensors(join(shardedFromUnsharded.finalDir, MODEL_FILE)), reference)).toBe(0);
    // One process sums each batch's rows in another order than the two ranks' all-reduce does.
    const alone = await train(recipe, [noDropout, '--resume', copy(sharded, 'from-sharded-1')]);
    // Measured: 4.1e-8 after the 6 resumed steps (docs/distributed.md).
    expect(differenceOf(await tensors(join(alone.finalDir, MODEL_FILE)), reference)).toBeLessThan(1e-6);
  });

  it('Ctrl-C on the launcher: rank 0 saves one complete checkpoint with both slices of the moments, and it resumes to the uninterrupted run', async () => {
    const recipe = await writeTinyRecipe(join(dir, 'ctrl-c.yaml'), setup, join(dir, 'runs-ctrl-c'), {
      maxTokens: 6400,
      logInterval: 1,
      checkpointInterval: 1000,
      evalInterval: 0,
    });
    const whole = await train(recipe, SHARDED);
    // As a terminal does: the launcher leads its own process group and SIGINT goes to the whole group.
    const run = startCli(TRAIN, [recipe, '--backend', 'tensorflow', ...SHARDED], process.env, { ownProcessGroup: true });
    const pids = await run.waitForOutput(/^\[train\] 2 processes \(pids (\d+), (\d+)\)/m);
    await run.waitForOutput(/^step 3\/100 \|/m, pids.end);
    process.kill(-run.process.pid!, 'SIGINT');
    expect((await run.exited).code, run.output()).toBe(130);
    const text = run.output();
    // Rank 1 ended well as it learned of the stop, not failing in a collective after rank 0 left.
    expect(text).not.toMatch(/rank 1 of 2/);
    const saved = [...text.matchAll(/^checkpoint step (\d+) saved in [\d.]+ s: (\S+)\n/gm)];
    expect(saved, text).toHaveLength(1);
    expect(existsSync(join(saved[0][2], 'COMPLETE'))).toBe(true);
    const command = /\nresume with: npm run train -- (.+)\n/.exec(text);
    expect(command![1]).toContain('--train.shardOptimizer=true');
    const resumed = await trainCommand(command![1].split(' '));
    expect(resumed.output).toMatch(new RegExp(`resumed from .* at step ${saved[0][1]}`));
    expect(differenceOf(await tensors(join(resumed.finalDir, MODEL_FILE)), await tensors(join(whole.finalDir, MODEL_FILE)))).toBe(0);
  });
});
