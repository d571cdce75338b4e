// The peaks MFU is measured against (src/backend/peak-flops.ts, src/train/mfu.ts): the datasheet table, the measured
// CPU ceiling and its cache, and which one a run takes.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { initBackend } from '../../src/backend/start.ts';
import { currentDevice } from '../../src/backend/current.ts';
import { cpuPeak, gpuPeak, jaxCpuPeak, measureGemmCeiling } from '../../src/backend/peak-flops.ts';
import { utilisation, utilisationBasis } from '../../src/train/mfu.ts';
import { modelFlops } from '../../src/model/flops.ts';
import type { LanguageModelConfig } from '../../src/model/lm.ts';

let dir: string;
beforeAll(async () => {
  await initBackend('cpu', { quiet: true });
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'slay-peak-'));
});
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

describe('gpuPeak', () => {
  it("takes the datasheet's dense figure by the device's name and precision, times the devices", () => {
    expect(gpuPeak('NVIDIA H200', 'bf16')!.flopsPerSecond).toBe(989.4e12);
    expect(gpuPeak('NVIDIA H100 80GB HBM3', 'tf32')!.flopsPerSecond).toBe(494.7e12);
    expect(gpuPeak('NVIDIA H100 PCIe', 'bf16')!.flopsPerSecond).toBe(756e12);
    expect(gpuPeak('NVIDIA A100-SXM4-80GB', 'bf16', 8)).toMatchObject({ flopsPerSecond: 8 * 312e12, source: expect.stringMatching(/^8 × NVIDIA A100 bf16/) });
    expect(gpuPeak('Tesla T4', 'bf16')).toBeNull();
  });
});

describe('cpuPeak', () => {
  it('measures the ceiling once, then reads it from its cache; a malformed cache is measured again', async () => {
    const cache = path.join(dir, 'ceiling.json');
    const device = currentDevice();
    const first = await cpuPeak(device, { cache });
    expect(first.flopsPerSecond).toBeGreaterThan(0);
    const [key] = Object.keys(JSON.parse(fs.readFileSync(cache, 'utf8')));
    // A figure planted in the cache is what the next run takes: the cache, not a new measure, answered.
    fs.writeFileSync(cache, JSON.stringify({ [key]: 1234 }));
    expect((await cpuPeak(device, { cache })).flopsPerSecond).toBe(1234);
    // Replicas that keep one core each (cpu, wasm) and hosts multiply it.
    expect((await cpuPeak(device, { cache, replicas: 3, hosts: 2 })).flopsPerSecond).toBe(1234 * (device.coresPerReplica === 1 ? 3 : 1) * 2);
    fs.writeFileSync(cache, JSON.stringify({ [key]: -5 }));
    expect((await cpuPeak(device, { cache })).flopsPerSecond).toBeGreaterThan(0);
    fs.writeFileSync(cache, '{ not json');
    expect((await cpuPeak(device, { cache })).flopsPerSecond).toBeGreaterThan(0);
    expect(JSON.parse(fs.readFileSync(cache, 'utf8'))[key]).toBeGreaterThan(0);
  });

  it("the XLA executor on jax's CPU: jax's own ceiling (the runner's measure), measured once and cached apart from tfjs's, times the hosts", async () => {
    const cache = path.join(dir, 'jax-ceiling.json');
    const sizes: number[] = [];
    const measure = async (size: number) => (sizes.push(size), 5e10);
    expect(await jaxCpuPeak('0.10.2', measure, { cache, hosts: 2 })).toEqual({
      flopsPerSecond: 1e11,
      source: expect.stringMatching(/^2 × the float32 GEMM ceiling of jax 0\.10\.2 on this CPU \(50\.0 GFLOP\/s at 1024²/),
    });
    expect((await jaxCpuPeak('0.10.2', measure, { cache })).flopsPerSecond).toBe(5e10);
    expect(sizes).toEqual([1024]);
    expect(Object.keys(JSON.parse(fs.readFileSync(cache, 'utf8')))).toEqual([expect.stringMatching(/^xla \| jax 0\.10\.2 \(CPU\) \| .* \| 1024$/)]);
    await expect(jaxCpuPeak('0.10.3', async () => Number.NaN, { cache })).rejects.toThrow(/GEMM ceiling of xla \| jax 0\.10\.3 \(CPU\) measured NaN/);
  });

  it('a cache that cannot be written is measured and used all the same', async () => {
    const readOnly = path.join(dir, 'read-only');
    fs.mkdirSync(readOnly);
    fs.chmodSync(readOnly, 0o555);
    // As root the folder stays writable: a file where the cache's folder should be fails for every user.
    const blocked = path.join(dir, 'a-file');
    fs.writeFileSync(blocked, '');
    for (const cache of [path.join(readOnly, 'ceiling.json'), path.join(blocked, 'ceiling.json')]) {
      expect((await cpuPeak(currentDevice(), { cache })).flopsPerSecond).toBeGreaterThan(0);
    }
    expect(fs.existsSync(path.join(blocked, 'ceiling.json'))).toBe(false);
  });

  it('the measured ceiling is a real rate: above zero, below what any CPU core reaches (1 TFLOP/s)', async () => {
    const flops = await measureGemmCeiling({ size: 64, minSeconds: 0.01, rounds: 1 });
    expect(flops).toBeGreaterThan(0);
    expect(flops).toBeLessThan(1e12);
  });
});

describe('utilisationBasis', () => {
  const config = {
    kind: 'gpt',
    vocabSize: 100,
    maxSeqLen: 32,
    dModel: 16,
    numLayers: 2,
    numHeads: 2,
    mlpRatio: 4,
    dropout: 0,
    bias: true,
    attention: { name: 'softmax', options: {} },
    seed: 1,
  } as LanguageModelConfig;
  const data = { seqLen: 32, mlmProbability: 0.15 };

  it("an XLA executor on a GPU takes that GPU's TF32 peak (BF16 in bf16); a GPU of unknown name gives no MFU", async () => {
    const device = { ...currentDevice(), cpuBound: false };
    const onH100 = await utilisationBasis(config, data, {
      device,
      executor: { accelerator: { platform: 'gpu', device: 'NVIDIA H100 80GB HBM3' } },
      replicas: 1,
      cluster: null,
    });
    expect(onH100).toEqual({ flopsPerToken: modelFlops(config, 32).perToken, peak: expect.objectContaining({ flopsPerSecond: 494.7e12 }) });
    expect(utilisation(onH100, 1000)).toEqual({ flopsPerSecond: 1000 * onH100.flopsPerToken, mfu: (1000 * onH100.flopsPerToken) / 494.7e12 });
    // train.precision bf16: the products run on the BF16 tensor cores, at twice TF32's peak.
    const bf16 = await utilisationBasis(config, data, {
      device,
      executor: { accelerator: { platform: 'gpu', device: 'NVIDIA H100 80GB HBM3', precision: 'bf16' } },
      replicas: 1,
      cluster: null,
    });
    expect(bf16.peak).toEqual(expect.objectContaining({ flopsPerSecond: 989.4e12, source: 'NVIDIA H100/H200 SXM bf16 dense peak (datasheet)' }));
    // train.devices × ranks: the peak of all the devices the XLA executor trains on.
    const onEight = await utilisationBasis(config, data, {
      device,
      executor: { accelerator: { platform: 'gpu', device: 'NVIDIA H100 80GB HBM3', devices: 8 } },
      replicas: 1,
      cluster: null,
    });
    expect(onEight.peak?.flopsPerSecond).toBeCloseTo(8 * 494.7e12, -6);
    const unknown = await utilisationBasis(config, data, { device, executor: {}, replicas: 1, cluster: null });
    expect(unknown.peak).toBeNull();
    expect(utilisation(unknown, 1000).mfu).toBeNull();
  });

  it("BERT's head counts on data.mlmProbability of the positions", async () => {
    const bert = { ...config, kind: 'bert', typeVocabSize: 2 } as LanguageModelConfig;
    const basis = await utilisationBasis(bert, data, { device: { ...currentDevice(), cpuBound: false }, executor: {}, replicas: 1, cluster: null });
    expect(basis.flopsPerToken).toBe(modelFlops(bert, 32, 0.15).perToken);
  });
});
