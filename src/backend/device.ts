// The backend as a value: the list of backends, which one a command runs on (--backend >
// $SLAYFORMER_BACKEND > the recipe's backend > auto), what `auto` resolves to on this machine, and
// the device description the rest of the code asks instead of backend names. No tfjs import: the
// command-line layer builds its --backend option from this, --help answers before any backend loads,
// and sweeps and `npm run paper` pack their runs by the resolved device before any backend loads.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { currentBuild } from './native-build.ts';

export const BACKENDS = ['auto', 'tensorflow', 'wasm', 'cpu'] as const;
export type BackendChoice = (typeof BACKENDS)[number];
export type BackendName = Exclude<BackendChoice, 'auto'>;
/** The order `auto` tries them in. */
export const AUTO_ORDER: readonly BackendName[] = ['tensorflow', 'wasm', 'cpu'];
export const BACKEND_ENV = 'SLAYFORMER_BACKEND';

export function parseBackend(value: string, source: string): BackendChoice {
  if ((BACKENDS as readonly string[]).includes(value)) return value as BackendChoice;
  throw new Error(`${source}: unknown backend '${value}'; allowed: ${BACKENDS.join(', ')}`);
}

/** What the model's kernels prefer on a device (src/model/ops.ts, src/model/attention/linear-attention.ts). */
export interface KernelPreferences {
  /**
   * 2-D products take explicit transposes instead of transposeA/B flags, and batched products are split
   * into 2-D ones: wasm runs XNNPACK only for the plain 2-D product; its transposed and batched products
   * fall to a loop ~25× slower (docs/backends.md#wasm).
   */
  plainProductsOnly: boolean;
  /**
   * Values B·H·L·(F + C) a linear-attention contraction may keep for a whole sequence as one segment:
   * 2^22 (~0.6 GB of autodiff state) in wasm's 4 GB heap and on cpu, 2^26 where the native library
   * allocates (a GPU's memory or the host's).
   */
  wholeSequenceValues: number;
}

/** A backend as the code that runs on it needs to know it. */
export interface Device {
  backend: BackendName;
  /** What provides it, for logs: '.cache/tensorflow (TensorFlow 2.21.0, CPU build)', '@tensorflow/tfjs-backend-wasm', … */
  source: string;
  /** The TensorFlow C library runs the ops: tensors live in its memory, and every read is a copy into JavaScript. */
  native: boolean;
  /** Training steps can run as TensorFlow functions (train.graph): the binding `npm run setup:tensorflow` builds has them. */
  graphSteps: boolean;
  /** The computation runs on the CPU (false: a GPU). */
  cpuBound: boolean;
  /**
   * Cores one model replica keeps busy: 'all' for the native library, whose thread pool takes every core;
   * 1 for wasm and cpu, whose kernels run on one thread under Node (train.dataParallel adds replicas).
   */
  coresPerReplica: 'all' | 1;
  kernels: KernelPreferences;
}

const PACKAGES: Record<BackendName, string> = { tensorflow: '@tensorflow/tfjs-node', wasm: '@tensorflow/tfjs-backend-wasm', cpu: '@tensorflow/tfjs (pure JavaScript)' };

/** The description of backend `name` given what provides it (the tensorflow backend: which build, and whether it has functions and a GPU). */
export function describeDevice(name: BackendName, facts: { source?: string; graphSteps?: boolean; gpu?: boolean } = {}): Device {
  const native = name === 'tensorflow';
  return {
    backend: name,
    source: facts.source ?? PACKAGES[name],
    native,
    graphSteps: native && (facts.graphSteps ?? false),
    cpuBound: !(native && facts.gpu === true),
    coresPerReplica: native ? 'all' : 1,
    kernels: { plainProductsOnly: name === 'wasm', wholeSequenceValues: native ? 2 ** 26 : 2 ** 22 },
  };
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

/** What is installed here, as the resolver needs it (injected in tests). */
export interface BackendProbe {
  /** The complete, current build of `npm run setup:tensorflow` in .cache/tensorflow, if any. */
  nativeBuild(): { tensorflow: string; gpu: boolean } | undefined;
  /** An installed @tensorflow/tfjs-node-gpu or tfjs-node whose binding was built, if any (the -gpu one first). */
  nativePackage(): { name: string; gpu: boolean } | undefined;
  wasmInstalled(): boolean;
}

/**
 * The device a choice gives on this machine, without loading tfjs: `auto` = the native build in
 * .cache/tensorflow or an installed tfjs-node, else wasm, else cpu — the order in which initBackend
 * (src/backend.ts) tries them. A named backend is described as it would load (loading may still fail,
 * and says why).
 */
export function resolveBackend(choice: BackendChoice, probe: BackendProbe = LOCAL_PROBE): Device {
  const native = (): Device | undefined => {
    const build = probe.nativeBuild();
    if (build) return describeDevice('tensorflow', { source: `.cache/tensorflow (TensorFlow ${build.tensorflow}, ${build.gpu ? 'GPU' : 'CPU'} build)`, graphSteps: true, gpu: build.gpu });
    const pkg = probe.nativePackage();
    // A stock tfjs-node binding has no TensorFlow functions (tf-graph.ts).
    return pkg ? describeDevice('tensorflow', { source: pkg.name, graphSteps: false, gpu: pkg.gpu }) : undefined;
  };
  switch (choice) {
    case 'tensorflow':
      return native() ?? describeDevice('tensorflow', { source: 'not set up' });
    case 'auto':
      return native() ?? describeDevice(probe.wasmInstalled() ? 'wasm' : 'cpu');
    default:
      return describeDevice(choice);
  }
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
    for (const [name, gpu] of [['@tensorflow/tfjs-node-gpu', true], ['@tensorflow/tfjs-node', false]] as const) {
      const dir = packageDir(name);
      // tfjs-node's install builds lib/napi-v<N>/tfjs_binding.node; without it the package does not load.
      const lib = dir && path.join(dir, 'lib');
      if (lib && fs.existsSync(lib) && fs.readdirSync(lib).some((d) => fs.existsSync(path.join(lib, d, 'tfjs_binding.node')))) return { name, gpu };
    }
    return undefined;
  },
  wasmInstalled: () => packageDir('@tensorflow/tfjs-backend-wasm') !== undefined,
};
