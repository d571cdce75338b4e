// Run-time start of a TensorFlow.js backend: the entry a choice names, or with `auto` the first entry by
// priority that loads (src/backend/entries/; resolveBackend in device.ts predicts which without loading).
import * as tf from '@tensorflow/tfjs';
import { rememberStarted } from './current.ts';
import { autoOrder, backendEntry, BUILT_IN_BACKENDS, chooseBackend, parseBackend, type BackendName } from './device.ts';
import type { BackendEntry, Device } from './entry.ts';

/** A started backend, and why `auto` passed over the entries before it ('name: reason'). */
export interface StartedBackend<N extends string = BackendName> {
  device: Device<N>;
  skipped: string[];
}

/**
 * Starts the backend `requested` names among `entries` (a test may add its own) and returns its device.
 * A named backend that cannot load throws, saying why; `auto` tries the entries by priority.
 */
export async function startDevice<N extends string = BackendName>(
  requested: string,
  entries: readonly BackendEntry<N>[] = BUILT_IN_BACKENDS as readonly BackendEntry<never>[],
): Promise<StartedBackend<N>> {
  // PROD only silences tfjs's console warnings (among them a banner on every cpu-backend start).
  tf.env().set('PROD', true);
  const choice = parseBackend(requested, 'backend', entries);
  if (choice !== 'auto') {
    const entry = backendEntry(choice, entries);
    try {
      return { device: rememberStarted(await entry.load()), skipped: [] };
    } catch (err) {
      throw new Error(`backend '${choice}' cannot be loaded: ${firstLine(err)}`);
    }
  }
  const skipped: string[] = [];
  for (const entry of autoOrder(entries)) {
    try {
      return { device: rememberStarted(await entry.load()), skipped };
    } catch (err) {
      skipped.push(`${entry.name}: ${firstLine(err)}`);
    }
  }
  throw new Error(`no TensorFlow.js backend could be loaded: ${skipped.join('; ')}`);
}

const firstLine = (err: unknown) => (err instanceof Error ? err.message : String(err)).split('\n')[0];

/**
 * Selects and initialises the backend and returns its device, for tests and benchmarks (commands start
 * theirs with startBackend, src/cli/backend-option.ts). `requested` defaults to $SLAYFORMER_BACKEND, then
 * 'auto'; with 'auto' it says on stderr which one it picked, unless `quiet`.
 */
export async function initBackend(requested: string = chooseBackend().choice, { quiet = false }: { quiet?: boolean } = {}): Promise<Device<BackendName>> {
  const { device, skipped } = await startDevice(requested);
  if (!quiet && requested === 'auto') {
    const why = skipped.length ? ` (skipped ${skipped.join('; ')})` : '';
    process.stderr.write(`[slayformer] backend auto → ${device.backend}${why}\n`);
  }
  return device;
}
