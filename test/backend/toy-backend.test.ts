// Adding a backend is one entry file plus one line in the entry list (src/backend/entries/index.ts):
// test/fixtures/toy-backend.ts is written as an entry file is, and TOY_ENTRIES below is the list with its line
// added. With no other edit, the resolver takes it up: by name, by priority under `auto` (before anything
// loads, and when loading), in the names a bad value is refused with, and as the device the kernels ask.
import * as tf from '@tensorflow/tfjs';
import { afterAll, describe, expect, it } from 'vitest';
import { toyBackend } from '../fixtures/toy-backend.ts';
import { currentDevice } from '../../src/backend/current.ts';
import { BUILT_IN_BACKENDS, parseBackend, resolveBackend, type BackendProbe } from '../../src/backend/device.ts';
import { initBackend, startDevice } from '../../src/backend/start.ts';

const TOY_ENTRIES = [...BUILT_IN_BACKENDS, toyBackend]; // the list line

/** A machine without the native build, with wasm, and with the toy's package or not. */
const machine = (toy: boolean): BackendProbe => ({
  nativeBuild: () => undefined,
  nativePackage: () => undefined,
  installed: (name) => (name.startsWith('toy') ? toy : true),
});

afterAll(async () => {
  await initBackend('cpu', { quiet: true });
});

describe('a toy backend added as one entry', () => {
  it('resolves by name, and by priority under auto where its probe finds it, without loading anything', () => {
    expect(resolveBackend('toy', machine(true), TOY_ENTRIES)).toMatchObject({ backend: 'toy', source: 'toy (the cpu backend under another name)' });
    expect(resolveBackend('toy', machine(false), TOY_ENTRIES)).toMatchObject({ backend: 'toy', source: 'not set up' });
    expect(resolveBackend('auto', machine(true), TOY_ENTRIES).backend).toBe('toy');
    // Not installed: auto goes on down the priorities.
    expect(resolveBackend('auto', machine(false), TOY_ENTRIES).backend).toBe('wasm');
    // The built-in list alone does not know it.
    expect(() => parseBackend('toy', '--backend')).toThrow("--backend: unknown backend 'toy'; allowed: auto, tensorflow, wasm, cpu");
    expect(parseBackend('toy', '--backend', TOY_ENTRIES)).toBe('toy');
  });

  it('starts by name and under auto (the highest priority that loads), runs ops, and is the device the kernels ask', async () => {
    const byName = await startDevice('toy', TOY_ENTRIES);
    expect(byName).toEqual({ device: expect.objectContaining({ backend: 'toy', source: 'toy (the cpu backend under another name), loaded' }), skipped: [] });
    expect(tf.getBackend()).toBe('toy');
    expect(currentDevice()).toBe(byName.device);
    const product = tf.tidy(() => tf.matMul(tf.tensor2d([[1, 2]]), tf.tensor2d([[3], [4]])));
    expect(Array.from(await product.data())).toEqual([11]);
    product.dispose();
    await initBackend('cpu', { quiet: true });
    const byAuto = await startDevice('auto', TOY_ENTRIES);
    expect(byAuto.device.backend).toBe('toy');
    expect(byAuto.skipped).toEqual([]);
    expect(currentDevice().kernels.wholeSequenceValues).toBe(2 ** 10);
  });
});
