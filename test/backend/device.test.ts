// The backend as a value (src/backend/device.ts, src/backend/current.ts): the one precedence, `auto` resolved
// without loading tfjs (with an injected probe of what is installed, so every case runs on every machine), and the
// device description that the model's kernels and the sweep's packing ask instead of backend names.
import { afterAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { currentDevice } from '../../src/backend/current.ts';
import { BACKENDS, chooseBackend, describeDevice, LOCAL_PROBE, resolveBackend, type BackendProbe } from '../../src/backend/device.ts';
import { currentBuild } from '../../src/backend/native-build.ts';
import { explicitTransposes } from '../../src/model/ops.ts';

/** A machine with the given things installed. */
function probe({
  build = null,
  pkg = null,
  wasm = true,
}: {
  build?: { gpu: boolean } | null;
  pkg?: { name: string; gpu: boolean } | null;
  wasm?: boolean;
}): BackendProbe {
  return {
    nativeBuild: () => (build ? { tensorflow: '2.21.0', gpu: build.gpu } : undefined),
    nativePackage: () => pkg ?? undefined,
    installed: (name) => name === '@tensorflow/tfjs-backend-wasm' && wasm,
  };
}

describe('chooseBackend: --backend > $SLAYFORMER_BACKEND > recipe > auto', () => {
  it('takes the first source that says something', () => {
    expect(chooseBackend({ flag: 'cpu', env: 'tensorflow', recipe: 'wasm' })).toEqual({ choice: 'cpu', from: '--backend' });
    expect(chooseBackend({ env: 'tensorflow', recipe: 'wasm' })).toEqual({ choice: 'tensorflow', from: 'SLAYFORMER_BACKEND' });
    // A recipe always has a backend (the schema's default is auto), and the environment still wins over it.
    expect(chooseBackend({ env: 'cpu', recipe: 'auto' })).toEqual({ choice: 'cpu', from: 'SLAYFORMER_BACKEND' });
    expect(chooseBackend({ env: '', recipe: 'wasm' })).toEqual({ choice: 'wasm', from: 'recipe' });
    expect(chooseBackend({ env: undefined })).toEqual({ choice: 'auto', from: 'default' });
  });

  it('names where a bad value came from', () => {
    expect(() => chooseBackend({ flag: 'tpu' })).toThrow("--backend: unknown backend 'tpu'; allowed: auto, tensorflow, wasm, cpu");
    expect(() => chooseBackend({ env: 'gpu', recipe: 'wasm' })).toThrow("SLAYFORMER_BACKEND: unknown backend 'gpu'; allowed: auto, tensorflow, wasm, cpu");
  });
});

describe('resolveBackend: auto without loading tfjs', () => {
  it('prefers the native build in .cache/tensorflow, then an installed tfjs-node, then wasm, then cpu', () => {
    const built = resolveBackend('auto', probe({ build: { gpu: false }, pkg: { name: '@tensorflow/tfjs-node', gpu: false } }));
    expect(built).toMatchObject({ backend: 'tensorflow', native: true, graphSteps: true, cpuBound: true, coresPerReplica: 'all' });
    expect(built.source).toBe('.cache/tensorflow (TensorFlow 2.21.0, CPU build)');
    // A stock tfjs-node binding has no TensorFlow functions; a -gpu package computes on the GPU.
    expect(resolveBackend('auto', probe({ pkg: { name: '@tensorflow/tfjs-node-gpu', gpu: true } }))).toMatchObject({
      backend: 'tensorflow',
      source: '@tensorflow/tfjs-node-gpu',
      graphSteps: false,
      cpuBound: false,
      coresPerReplica: 'all',
    });
    expect(resolveBackend('auto', probe({}))).toMatchObject({ backend: 'wasm', native: false, graphSteps: false, cpuBound: true, coresPerReplica: 1 });
    expect(resolveBackend('auto', probe({ wasm: false })).backend).toBe('cpu');
  });

  it('describes a named backend as it would load, whatever auto would pick', () => {
    const machine = probe({ build: { gpu: true } });
    expect(resolveBackend('wasm', machine).backend).toBe('wasm');
    expect(resolveBackend('cpu', machine).backend).toBe('cpu');
    expect(resolveBackend('tensorflow', machine)).toMatchObject({ backend: 'tensorflow', cpuBound: false, graphSteps: true });
    expect(resolveBackend('tensorflow', probe({}))).toMatchObject({ backend: 'tensorflow', source: 'not set up' });
  });

  it.skipIf(!currentBuild())('on this machine (native build present: skipped without `npm run setup:tensorflow`) auto is the .cache build', () => {
    expect(resolveBackend('auto', LOCAL_PROBE)).toMatchObject({ backend: 'tensorflow', graphSteps: true, coresPerReplica: 'all' });
    expect(resolveBackend('auto').source).toMatch(/^\.cache\/tensorflow \(TensorFlow /);
  });
});

describe('kernel preferences', () => {
  it('are the ones the model code followed by backend name', () => {
    const [tensorflow, wasm, cpu] = BACKENDS.filter((b) => b !== 'auto').map((name) => describeDevice(name));
    expect([tensorflow, wasm, cpu].map((d) => d.kernels.plainProductsOnly)).toEqual([false, true, false]);
    expect([tensorflow, wasm, cpu].map((d) => d.kernels.wholeSequenceValues)).toEqual([2 ** 26, 2 ** 22, 2 ** 22]);
  });
});

describe('currentDevice', () => {
  afterAll(async () => {
    await initBackend('cpu', { quiet: true });
  });

  it.each(['cpu', 'wasm'] as const)('is what initBackend started (%s), and the kernels ask it', async (name) => {
    const device = await initBackend(name, { quiet: true });
    expect(device).toEqual(describeDevice(name));
    expect(currentDevice()).toBe(device);
    expect(explicitTransposes()).toBe(device.kernels.plainProductsOnly);
  });
});
