// The peak a run's MFU is measured against (docs/training.md, "Model FLOPs and MFU"): for NVIDIA's data-centre GPUs
// the datasheet's dense (no sparsity) tensor-core figure of the run's precision; on a CPU, where no datasheet figure
// is what a framework can reach, the GEMM ceiling measured on this machine by the running backend (measureGemmCeiling).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { isRecord } from '../core/json.ts';
import { writeOwnFile } from '../core/own-file.ts';
import type { Device } from './entry.ts';
import { PROJECT_ROOT } from './native-build.ts';

/** The precision of the matrix products: fp32 runs take the TF32 tensor cores (XLA's default for f32 dots on A100/H100). */
export type MatmulPrecision = 'tf32' | 'bf16';

/** Dense tensor-core FLOP/s per GPU, from NVIDIA's datasheets (SXM parts; PCIe parts are listed apart). */
const GPU_PEAKS: readonly { pattern: RegExp; name: string; tf32: number; bf16: number }[] = [
  { pattern: /H100.*PCIe/i, name: 'H100 PCIe', tf32: 378e12, bf16: 756e12 },
  { pattern: /H100|H200|GH200/i, name: 'H100/H200 SXM', tf32: 494.7e12, bf16: 989.4e12 },
  { pattern: /A100/i, name: 'A100', tf32: 156e12, bf16: 312e12 },
];

export interface PeakFlops {
  /** FLOP/s of the whole device set the run trains on. */
  flopsPerSecond: number;
  /** Where the figure comes from, for logs and reports. */
  source: string;
}

/** The datasheet peak of `devices` GPUs called `deviceKind` (jax's device_kind, nvidia-smi's name), null when not in the table. */
export function gpuPeak(deviceKind: string, precision: MatmulPrecision, devices = 1): PeakFlops | null {
  const gpu = GPU_PEAKS.find((g) => g.pattern.test(deviceKind));
  if (!gpu) return null;
  return {
    flopsPerSecond: gpu[precision] * devices,
    source: `${devices > 1 ? `${devices} × ` : ''}NVIDIA ${gpu.name} ${precision} dense peak (datasheet)`,
  };
}

/** Measured ceilings by backend and machine: measured once, since every run's MFU should be on one scale (and a measure costs ~1 s). */
export const GEMM_CEILING_CACHE = path.join(PROJECT_ROOT, '.cache', 'gemm-ceiling.json');

/** The product size each backend is measured at: large enough to reach its ceiling, small enough for tfjs's JavaScript kernels. */
const GEMM_SIZE: Record<string, number> = { cpu: 256, wasm: 512 };

/**
 * The peak of a CPU-bound run: the GEMM ceiling of `device` on this machine (cached in GEMM_CEILING_CACHE, keyed by the
 * backend's build and the CPU), times the replicas when each keeps one core busy (wasm, cpu) and times the hosts.
 */
export async function cpuPeak(device: Device, { replicas = 1, hosts = 1, cache = GEMM_CEILING_CACHE } = {}): Promise<PeakFlops> {
  const size = GEMM_SIZE[device.backend] ?? 1024;
  const ceiling = await cachedCeiling(`${device.backend} | ${device.source}`, size, () => measureGemmCeiling({ size }), cache);
  const copies = (device.coresPerReplica === 1 ? replicas : 1) * hosts;
  return {
    flopsPerSecond: ceiling * copies,
    source: `${copies > 1 ? `${copies} × ` : ''}the float32 GEMM ceiling of ${device.backend} on this CPU (${(ceiling / 1e9).toFixed(1)} GFLOP/s at ${size}², measured once: ${path.basename(cache)})`,
  };
}

/**
 * The peak of the XLA executor on jax's CPU: the float32 GEMM ceiling jax itself reaches on this machine (`measure`, the
 * runner's timed product: not the tfjs backend's, which XLA's multithreaded kernels exceed), cached as cpuPeak's, times the hosts.
 */
export async function jaxCpuPeak(jax: string, measure: (size: number) => Promise<number>, { hosts = 1, cache = GEMM_CEILING_CACHE } = {}): Promise<PeakFlops> {
  const size = 1024;
  const ceiling = await cachedCeiling(`xla | jax ${jax} (CPU)`, size, () => measure(size), cache);
  return {
    flopsPerSecond: ceiling * hosts,
    source: `${hosts > 1 ? `${hosts} × ` : ''}the float32 GEMM ceiling of jax ${jax} on this CPU (${(ceiling / 1e9).toFixed(1)} GFLOP/s at ${size}², measured once: ${path.basename(cache)})`,
  };
}

/** The ceiling cached for `what` on this CPU at `size`, measured and kept when absent. */
async function cachedCeiling(what: string, size: number, measure: () => Promise<number>, cache: string): Promise<number> {
  const key = `${what} | ${os.cpus()[0]?.model ?? 'unknown CPU'} × ${os.availableParallelism()} | ${size}`;
  let ceiling = readCeilings(cache)[key];
  if (ceiling === undefined) {
    ceiling = await measure();
    if (!(Number.isFinite(ceiling) && ceiling > 0)) throw new Error(`the GEMM ceiling of ${what} measured ${ceiling} FLOP/s`);
    writeCeilings(cache, { ...readCeilings(cache), [key]: ceiling });
  }
  return ceiling;
}

/** The cache's entries; an unreadable or malformed file counts as empty (it is only a cache: the figure is measured again). */
function readCeilings(file: string): Record<string, number> {
  try {
    const parsed: unknown = JSON.parse(fs.readFileSync(file, 'utf8'));
    if (!isRecord(parsed)) return {};
    return Object.fromEntries(Object.entries(parsed).filter((e): e is [string, number] => typeof e[1] === 'number' && Number.isFinite(e[1]) && e[1] > 0));
  } catch {
    return {};
  }
}

/**
 * Written whole under a name of this process's, then renamed over: runs starting at once never read half a file. A
 * cache that cannot be written (a read-only install, a full disk) only means the next run measures again.
 */
function writeCeilings(file: string, entries: Record<string, number>): void {
  const temporary = `${file}.tmp-${process.pid}`;
  let written = false;
  try {
    fs.mkdirSync(path.dirname(file), { recursive: true });
    writeOwnFile(temporary, `${JSON.stringify(entries, null, 2)}\n`);
    written = true;
    fs.renameSync(temporary, file);
  } catch {
    if (written) fs.rmSync(temporary, { force: true });
  }
}

/**
 * The FLOP/s of a square float32 matrix product of `size` on the running tfjs backend: the best of a few timed
 * rounds after a warm-up, each long enough (≥ `minSeconds`) to hide the timer's resolution.
 */
export async function measureGemmCeiling({ size = 1024, minSeconds = 0.2, rounds = 3 } = {}): Promise<number> {
  const a = tf.randomNormal([size, size], 0, 1, 'float32', 1);
  const b = tf.randomNormal([size, size], 0, 1, 'float32', 2);
  try {
    // Summed on the device: one number read back, not the product's size² floats.
    const product = async () => {
      const sum = tf.tidy(() => tf.sum(tf.matMul(a, b)));
      await sum.data();
      sum.dispose();
    };
    await product();
    let best = 0;
    for (let round = 0; round < rounds; round++) {
      let products = 0;
      const start = performance.now();
      while (performance.now() - start < minSeconds * 1000 || products === 0) {
        await product();
        products++;
      }
      const seconds = (performance.now() - start) / 1000;
      best = Math.max(best, (2 * size ** 3 * products) / seconds);
    }
    return best;
  } finally {
    tf.dispose([a, b]);
  }
}
