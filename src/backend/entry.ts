// What a backend is to the rest of the code: one entry per backend (src/backend/entries/), read by the
// resolver in device.ts (which backend, before anything loads) and start.ts (load it). No tfjs import at
// the top: the command-line layer and the sweep planner read entries before any backend loads.

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
export interface Device<N extends string = string> {
  backend: N;
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

/** What a probe or a load found about what provides a backend. */
export interface DeviceFacts {
  source?: string;
  graphSteps?: boolean;
  gpu?: boolean;
}

/** What is installed on this machine, as the entries' probes ask it (injected in tests: device.ts's LOCAL_PROBE is this machine). */
export interface BackendProbe {
  /** The complete, current build of `npm run setup:tensorflow` in .cache/tensorflow, if any. */
  nativeBuild(): { tensorflow: string; gpu: boolean } | undefined;
  /** An installed @tensorflow/tfjs-node-gpu or tfjs-node whose binding was built, if any (the -gpu one first). */
  nativePackage(): { name: string; gpu: boolean } | undefined;
  /** Whether the package `name` resolves from the project (a backend's entry asks for its own). */
  installed(name: string): boolean;
}

/** One backend: adding one is a file in src/backend/entries/ and its line in entries/index.ts (docs/backends.md#adding-a-backend). */
export interface BackendEntry<N extends string = string> {
  /** The name of --backend, a recipe's `backend` and tfjs's backend registry. */
  name: N;
  /** The package that provides it: the device's source when nothing more precise is known. */
  package: string;
  /** `auto` tries the entries from the highest priority down and takes the first that loads. */
  priority: number;
  /** The device it would give on this machine, without loading anything; undefined where it is not installed. */
  probe(machine: BackendProbe): Device<N> | undefined;
  /** Loads it, makes it tfjs's backend and describes it as it runs; throws, saying why, where it cannot load. */
  load(): Promise<Device<N>>;
  /** Its device, given what a probe or a load found about what provides it. */
  describe(facts?: DeviceFacts): Device<N>;
}

/** Makes `name` (registered with tfjs by its package) the backend tfjs runs on; throws when tfjs refuses it. */
export async function selectTfBackend(name: string): Promise<void> {
  const tf = await import('@tensorflow/tfjs');
  if (!(await tf.setBackend(name))) throw new Error(`tf.setBackend('${name}') failed`);
  await tf.ready();
}
