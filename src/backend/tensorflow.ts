// The native TensorFlow backend: @tensorflow/tfjs-node built against the TensorFlow C library of
// the TensorFlow pip wheel by `npm run setup:tensorflow` (tensorflow-setup.ts), kept in
// .cache/tensorflow/ so that `npm ci` (which empties node_modules) does not lose it.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as tf from '@tensorflow/tfjs';

export const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const SETUP_COMMAND = 'npm run setup:tensorflow';

/**
 * The cache must stay inside the project: the built package's `require('@tensorflow/tfjs')` walks up
 * the folders to the project's node_modules, so both share one tfjs (its kernel and gradient
 * registries are process-global; a second copy would silently diverge).
 */
export const TENSORFLOW_CACHE = path.join(PROJECT_ROOT, '.cache', 'tensorflow');
export const NATIVE_PACKAGE_DIR = path.join(TENSORFLOW_CACHE, 'node_modules', '@tensorflow', 'tfjs-node');
export const BUILD_STAMP = path.join(TENSORFLOW_CACHE, 'build.json');

/** What `setup:tensorflow` built, written last, so its presence means a complete build. */
export interface NativeBuild {
  tfjsNode: string;
  tensorflow: string;
  gpu: boolean;
  wheel: string;
  bindingPath: string;
  /** Folders of the pip `nvidia-*` libraries the GPU build links to (empty on CPU builds). */
  cudaLibraryDirs: string[];
  builtAt: string;
  seconds: number;
}

export function readBuildStamp(): NativeBuild | undefined {
  try {
    return JSON.parse(fs.readFileSync(BUILD_STAMP, 'utf8')) as NativeBuild;
  } catch {
    return undefined;
  }
}

/** Whether the wheel-built backend is present (the binding of a complete build exists). */
export function isTensorflowSetUp(): boolean {
  const stamp = readBuildStamp();
  return stamp !== undefined && fs.existsSync(stamp.bindingPath);
}

/**
 * Loads the native package: the wheel-built one from the cache, else an installed
 * @tensorflow/tfjs-node-gpu or @tensorflow/tfjs-node (e.g. a host whose stock install still works).
 * Returns undefined on success, else why nothing loaded.
 */
export function loadTensorflowPackage(): string | undefined {
  // TF's INFO lines on start-up are noise for a training log; a user's own setting wins.
  process.env.TF_CPP_MIN_LOG_LEVEL ??= '2';
  const require = createRequire(import.meta.url);
  const reasons: string[] = [];
  const candidates = [
    ...(isTensorflowSetUp() ? [NATIVE_PACKAGE_DIR] : []),
    '@tensorflow/tfjs-node-gpu',
    '@tensorflow/tfjs-node',
  ];
  for (const candidate of candidates) {
    try {
      require(candidate);
      registerTensorflowFixes();
      return undefined;
    } catch (err) {
      reasons.push(`${path.isAbsolute(candidate) ? path.relative(PROJECT_ROOT, candidate) : candidate}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  if (!isTensorflowSetUp()) reasons.unshift(`not set up (run \`${SETUP_COMMAND}\`)`);
  return reasons.join('; ');
}

/** The binding's view of itself, for logs and env records. */
export function tensorflowInfo(): { tensorflow: string; gpu: boolean } {
  const backend = tf.backend() as unknown as { binding?: { TF_Version?: string }; isUsingGpuDevice?: boolean };
  return { tensorflow: backend.binding?.TF_Version ?? 'unknown', gpu: backend.isUsingGpuDevice === true };
}

let fixesRegistered = false;

/**
 * tfjs-node 4.22 was written for TF 2.9; two ops changed behaviour since (../shared/notes/native-backend.md):
 *   Round     on int32 returns zeros since TF 2.17 (tensorflow/tensorflow#74789): integers are
 *             already round, so int32 input is passed through;
 *   ConcatV2  refuses scalars in TF 2.21, where tfjs concatenates rank-0 tensors as length-1
 *             vectors (cpu/wasm): scalars are reshaped to [1] first.
 */
function registerTensorflowFixes(): void {
  if (fixesRegistered) return;
  fixesRegistered = true;
  override('Round', (args, original) => {
    const x = args.inputs.x as tf.TensorInfo;
    if (x.dtype !== 'int32') return original(args);
    return tf.getKernel('Identity', 'tensorflow')!.kernelFunc({ ...args, attrs: {} });
  });
  override('Concat', (args, original) => {
    const inputs = Object.values(args.inputs) as tf.TensorInfo[];
    if (!inputs.some((t) => t.shape.length === 0)) return original(args);
    const reshape = tf.getKernel('Reshape', 'tensorflow')!.kernelFunc;
    const vectors = inputs.map((x) => (x.shape.length === 0 ? (reshape({ inputs: { x }, attrs: { shape: [1] }, backend: args.backend }) as tf.TensorInfo) : x));
    try {
      // Concat's inputs are the tensor list itself (an array), not a name map.
      return original({ ...args, inputs: vectors as unknown as tf.NamedTensorInfoMap, attrs: { ...args.attrs, axis: 0 } });
    } finally {
      // The reshaped views are this kernel's own temporaries.
      for (const v of vectors) if (!inputs.includes(v)) (args.backend as tf.KernelBackend).disposeData(v.dataId);
    }
  });
}

function override(kernelName: string, kernelFunc: (args: Parameters<tf.KernelFunc>[0], original: tf.KernelFunc) => ReturnType<tf.KernelFunc>): void {
  const original = tf.getKernel(kernelName, 'tensorflow');
  if (!original) throw new Error(`tensorflow backend: no ${kernelName} kernel to fix`);
  tf.unregisterKernel(kernelName, 'tensorflow');
  tf.registerKernel({ kernelName, backendName: 'tensorflow', kernelFunc: (args) => kernelFunc(args, original.kernelFunc) });
}
