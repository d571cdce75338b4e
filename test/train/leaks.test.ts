// No leaks across the whole training loop on the wasm backend: live tensors, their bytes and the size of the wasm
// heap stay flat over a run that saves a checkpoint every step, validates every other step and drops every third
// update as non-finite (train.nanPolicy skip). Memory is sampled at every progress line the run prints (after each
// step, each validation, each checkpoint and each dropped update), the points where nothing should be alive.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { parseRecipe } from '../../src/store/recipes.ts';
import { runTraining } from '../../src/train/trainer.ts';
import { makeTinySetup, tinyRecipeText } from './checkpoint-fixtures.ts';
import type { TinySetup } from './checkpoint-fixtures.ts';

// Every third update reports a NaN gradient norm (AdamW.prepare, which the step reads before committing), so the step
// takes the NaN-skip path with its real tensors.
const checks = vi.hoisted(() => ({ count: 0 }));
vi.mock('../../src/train/optimizer.ts', async (importOriginal) => {
  const original = await importOriginal<typeof import('../../src/train/optimizer.ts')>();
  class AdamW extends original.AdamW {
    override prepare(...args: Parameters<InstanceType<typeof original.AdamW>['prepare']>) {
      const pending = super.prepare(...args);
      if (++checks.count % 3 !== 0) return pending;
      const norm = tf.mul(pending.norm, NaN) as tf.Scalar;
      const finish = (how: () => void) => () => {
        norm.dispose();
        how();
      };
      return { norm, commit: finish(pending.commit), discard: finish(pending.discard) };
    }
  }
  return { ...original, AdamW };
});

let dir: string;
let setup: TinySetup;
beforeAll(async () => {
  await initBackend('wasm', { quiet: true });
  dir = await mkdtemp(join(tmpdir(), 'slay-leaks-'));
  setup = await makeTinySetup(dir);
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Bytes of the wasm backend's heap (it only grows: a leak of wasm memory shows as growth). */
function wasmHeapBytes(): number {
  return (tf.backend() as unknown as { wasm: { HEAPU8: Uint8Array } }).wasm.HEAPU8.buffer.byteLength;
}

describe('no leaks over the full training loop (wasm)', () => {
  it('tensors, their bytes and the wasm heap stay flat through checkpoint saves, validation and dropped NaN updates', async () => {
    const text = tinyRecipeText(setup, join(dir, 'runs'), {
      maxTokens: 64 * 30,
      checkpointInterval: 1,
      keepCheckpoints: 2,
      evalInterval: 2,
      logInterval: 1,
      nanPolicy: 'skip',
      nanSkipLimit: 5,
    }).replace('backend: cpu', 'backend: wasm');
    const recipe = parseRecipe(text, join(dir, 'leaks.yaml'));
    const samples: { line: string; tensors: number; bytes: number; heap: number }[] = [];
    const before = tf.memory().numTensors;
    const result = await runTraining(recipe, {
      logger: {
        dir: join(dir, 'run'),
        log: () => {},
        line: (line) => samples.push({ line, tensors: tf.memory().numTensors, bytes: tf.memory().numBytes, heap: wasmHeapBytes() }),
        finish: async () => {},
      },
    });
    expect(result.steps).toBe(30);
    const kinds = (re: RegExp) => samples.filter((s) => re.test(s.line)).length;
    expect(kinds(/update dropped/)).toBe(10);
    expect(kinds(/^checkpoint step/)).toBeGreaterThanOrEqual(30);
    expect(kinds(/^val /)).toBe(16); // step 0 (the model before training), every 2 steps, and the end
    // Caches (masks, constants) fill during the first steps; after a third of the run nothing may grow.
    const settled = samples.slice(Math.floor(samples.length / 3));
    console.log(
      `leaks: ${samples.length} samples; tensors ${[...new Set(settled.map((s) => s.tensors))]}, bytes ${[...new Set(settled.map((s) => s.bytes))]}, heap ${[...new Set(settled.map((s) => s.heap))]}`,
    );
    expect(new Set(settled.map((s) => s.tensors)).size).toBe(1);
    expect(new Set(settled.map((s) => s.bytes)).size).toBe(1);
    expect(new Set(settled.map((s) => s.heap)).size).toBe(1);
    // The run freed everything it made (model, optimizer, stream) except the backend's own caches.
    expect(tf.memory().numTensors).toBeLessThanOrEqual(before + 4);
  });
});
