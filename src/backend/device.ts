// The resolver: the list of backends (read from their entries, src/backend/entries/), which one a command
// runs on (--backend > $SLAYFORMER_BACKEND > the recipe's backend > auto), what `auto` resolves to on this
// machine, and the device description the rest of the code asks instead of backend names. No tfjs import: the
// command-line layer builds its --backend option from this, --help answers before any backend loads,
// and sweeps and `npm run paper` pack their runs by the resolved device before any backend loads.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import * as path from 'node:path';
import { BACKEND_ENTRIES } from './entries/index.ts';
import type { BackendEntry, BackendProbe, Device as EntryDevice, DeviceFacts } from './entry.ts';
import { currentBuild } from './native-build.ts';

export type { BackendProbe, KernelPreferences } from './entry.ts';
/** A device of one of the built-in backends (entry.ts's Device names any). */
export type Device<N extends string = BackendName> = EntryDevice<N>;

/** The backends' names: the entries' (src/backend/entries/index.ts). */
export type BackendName = (typeof BACKEND_ENTRIES)[number]['name'];
export type BackendChoice = 'auto' | BackendName;
export const BACKENDS: readonly BackendChoice[] = ['auto', ...BACKEND_ENTRIES.map((e) => e.name)];
export const BACKEND_ENV = 'SLAYFORMER_BACKEND';

/** The built-in entries, typed as a list a test may extend with its own entry. */
export const BUILT_IN_BACKENDS: readonly BackendEntry<BackendName>[] = BACKEND_ENTRIES;

export function parseBackend<N extends string = BackendName>(
  value: string,
  source: string,
  entries: readonly BackendEntry<N>[] = BUILT_IN_BACKENDS as readonly BackendEntry<never>[],
): N | 'auto' {
  if (value === 'auto' || entries.some((e) => e.name === value)) return value as N | 'auto';
  throw new Error(`${source}: unknown backend '${value}'; allowed: ${['auto', ...entries.map((e) => e.name)].join(', ')}`);
}

/** The entry called `name`. */
export function backendEntry<N extends string = BackendName>(
  name: N,
  entries: readonly BackendEntry<N>[] = BUILT_IN_BACKENDS as readonly BackendEntry<never>[],
): BackendEntry<N> {
  const entry = entries.find((e) => e.name === name);
  if (!entry) throw new Error(`unknown backend '${name}'; allowed: ${entries.map((e) => e.name).join(', ')}`);
  return entry;
}

/** The entries in the order `auto` tries them: the highest priority first. */
export function autoOrder<N extends string>(entries: readonly BackendEntry<N>[]): BackendEntry<N>[] {
  return [...entries].sort((a, b) => b.priority - a.priority);
}

/** The description of backend `name` given what provides it (the tensorflow backend: which build, and whether it has functions and a GPU). */
export function describeDevice(name: BackendName, facts: DeviceFacts = {}): Device {
  return backendEntry(name).describe(facts);
}

/** Which backend a command runs on, and who said so (for messages). */
export interface BackendDecision {
  choice: BackendChoice;
  from: '--backend' | typeof BACKEND_ENV | 'recipe' | 'default';
}

/**
 * The one precedence: `flag` (--backend) > $SLAYFORMER_BACKEND > `recipe` (a recipe's, or a command's own
 * default such as an experiment's) > auto. A bad value names where it came from.
 */
export function chooseBackend({ flag, recipe, env = process.env[BACKEND_ENV] }: { flag?: string; recipe?: string; env?: string } = {}): BackendDecision {
  if (flag !== undefined) return { choice: parseBackend(flag, '--backend'), from: '--backend' };
  if (env !== undefined && env !== '') return { choice: parseBackend(env, BACKEND_ENV), from: BACKEND_ENV };
  if (recipe !== undefined) return { choice: parseBackend(recipe, 'backend'), from: 'recipe' };
  return { choice: 'auto', from: 'default' };
}

/**
 * The device a choice gives on this machine, without loading tfjs: `auto` = the first entry by priority
 * whose probe finds it installed (the native build in .cache/tensorflow or an installed tfjs-node, else
 * wasm, else cpu) — the order in which initBackend (start.ts) tries them. A named backend is described as
 * it would load (loading may still fail, and says why).
 */
export function resolveBackend<N extends string = BackendName>(
  choice: N | 'auto',
  probe: BackendProbe = LOCAL_PROBE,
  entries: readonly BackendEntry<N>[] = BUILT_IN_BACKENDS as readonly BackendEntry<never>[],
): Device<N> {
  if (choice !== 'auto') {
    const entry = backendEntry(choice, entries);
    return entry.probe(probe) ?? entry.describe({ source: 'not set up' });
  }
  for (const entry of autoOrder(entries)) {
    const device = entry.probe(probe);
    if (device) return device;
  }
  throw new Error(
    `no backend is installed here (tried ${autoOrder(entries)
      .map((e) => e.name)
      .join(', ')})`,
  );
}

const requireHere = createRequire(import.meta.url);

/** The folder of an installed package, if it resolves from here. */
function packageDir(name: string): string | undefined {
  try {
    return path.dirname(requireHere.resolve(`${name}/package.json`));
  } catch {
    return undefined;
  }
}

/** This machine: .cache/tensorflow's build stamp, node_modules. */
export const LOCAL_PROBE: BackendProbe = {
  nativeBuild: () => currentBuild(),
  nativePackage: () => {
    for (const [name, gpu] of [
      ['@tensorflow/tfjs-node-gpu', true],
      ['@tensorflow/tfjs-node', false],
    ] as const) {
      const dir = packageDir(name);
      // tfjs-node's install builds lib/napi-v<N>/tfjs_binding.node; without it the package does not load.
      const lib = dir && path.join(dir, 'lib');
      if (lib && fs.existsSync(lib) && fs.readdirSync(lib).some((d) => fs.existsSync(path.join(lib, d, 'tfjs_binding.node')))) return { name, gpu };
    }
    return undefined;
  },
  installed: (name) => packageDir(name) !== undefined,
};

/**
 * The number of replicas for train.dataParallel: `auto` = one per core on a device whose replica keeps one
 * core busy (wasm, cpu), 1 on one whose own thread pool takes them all (tensorflow); never more than the rows of a batch.
 */
export function resolveDataParallel(setting: number | 'auto', device: Pick<Device, 'coresPerReplica'>, batchSize: number): number {
  const wanted = setting === 'auto' ? (device.coresPerReplica === 'all' ? 1 : availableParallelism()) : setting;
  return Math.max(1, Math.min(wanted, batchSize));
}
