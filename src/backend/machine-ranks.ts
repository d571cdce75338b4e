// How many ranks `train --processes N` starts on this machine without --oversubscribe (docs/distributed.md): at most
// two per core, and no more than the available memory holds at the least a rank takes. Beyond either, the ranks only
// wait for each other's cores or swap (4,096 ranks were accepted on 2 cores; eight of the tiny GPT took ~6.3 GB).
import { availableParallelism, freemem } from 'node:os';

/** Ranks per core: a rank waiting in its all-reduce leaves its core to another, so two per core still overlap work. */
export const RANKS_PER_CORE = 2;
/** The least memory one rank takes: 0.58 GB peak RSS measured for the tests' tiny GPT (TensorFlow, gRPC, Node), rounded up. */
export const RANK_MEMORY_BYTES = 0.6e9;

export interface MachineSize {
  cores: number;
  /** Memory available to new processes, bytes. */
  memoryBytes: number;
}

/** This machine's cores and the memory available now (MemAvailable on Linux; a cgroup's limit when lower). */
export function thisMachine(): MachineSize {
  const limit = process.constrainedMemory?.() || Number.POSITIVE_INFINITY;
  return { cores: availableParallelism(), memoryBytes: Math.min(freemem(), limit) };
}

/**
 * Why `ranks` processes are more than `machine` holds, naming its cores and memory and the flag that starts them
 * anyway; null when they fit. `source` names where the count came from (`--processes`, `train.processes`).
 */
export function machineRanksProblem(ranks: number, machine: MachineSize, source: string): string | null {
  const byCores = RANKS_PER_CORE * machine.cores;
  const byMemory = Math.floor(machine.memoryBytes / RANK_MEMORY_BYTES);
  if (ranks <= Math.min(byCores, byMemory)) return null;
  const gb = (bytes: number) => (bytes / 1e9).toFixed(1);
  return (
    `${source} ${ranks}: more ranks than this machine holds: its ${machine.cores} cores take at most ${byCores} (${RANKS_PER_CORE} per core), ` +
    `its ${gb(machine.memoryBytes)} GB of available memory at most ${byMemory} (a rank takes at least ${gb(RANK_MEMORY_BYTES)} GB); ` +
    'pass --oversubscribe to start them anyway (docs/distributed.md)'
  );
}
