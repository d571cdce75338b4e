// Model FLOPs utilisation (docs/training.md, "Model FLOPs and MFU"): the model FLOPs a run's tokens/s stands for
// (src/model/flops.ts) over the peak of what it trains on (src/backend/peak-flops.ts).
import type { Cluster } from '../backend/collective.ts';
import type { Device } from '../backend/entry.ts';
import { cpuPeak, gpuPeak, jaxCpuPeak, type PeakFlops } from '../backend/peak-flops.ts';
import { modelFlops } from '../model/flops.ts';
import type { LanguageModelConfig } from '../model/lm.ts';
import type { StepExecutor } from './step-executor.ts';

export interface UtilisationBasis {
  /** Training FLOPs per token of the model at the run's sequence length. */
  flopsPerToken: number;
  /** null where the device's peak is not known (a GPU of the tensorflow backend, whose name it does not report). */
  peak: PeakFlops | null;
}

/** What a run's MFU is measured against: its model's FLOPs per token and the peak of where its steps run. */
export async function utilisationBasis(
  config: LanguageModelConfig,
  data: { seqLen: number; mlmProbability: number },
  run: { device: Device; executor: Pick<StepExecutor, 'accelerator'>; replicas: number; cluster: Cluster | null },
): Promise<UtilisationBasis> {
  const flopsPerToken = modelFlops(config, data.seqLen, config.kind === 'bert' ? data.mlmProbability : 1).perToken;
  const hosts = run.cluster ? new Set(run.cluster.addresses.map((address) => address.slice(0, address.lastIndexOf(':')))).size : 1;
  const accelerator = run.executor.accelerator;
  let peak: PeakFlops | null;
  // float32 products run as TF32 on NVIDIA GPUs by default (docs/xla.md), bf16 ones against the bf16 peak; the xla
  // executor's devices over all processes (train.devices × ranks), else one GPU per host.
  if (accelerator && accelerator.platform !== 'cpu')
    peak = gpuPeak(accelerator.device, accelerator.precision === 'bf16' ? 'bf16' : 'tf32', accelerator.devices ?? hosts);
  else if (accelerator?.cpuGemm) peak = await jaxCpuPeak(accelerator.cpuGemm.jax, accelerator.cpuGemm.measure, { hosts });
  else if (!accelerator && !run.device.cpuBound) peak = null;
  else peak = await cpuPeak(run.device, { replicas: run.replicas, hosts });
  return { flopsPerToken, peak };
}

/** The model FLOP/s that `tokensPerSecond` stands for, and its fraction of the peak (null without one). */
export function utilisation(basis: UtilisationBasis, tokensPerSecond: number): { flopsPerSecond: number; mfu: number | null } {
  const flopsPerSecond = basis.flopsPerToken * tokensPerSecond;
  return { flopsPerSecond, mfu: basis.peak ? flopsPerSecond / basis.peak.flopsPerSecond : null };
}
