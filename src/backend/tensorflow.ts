// The native TensorFlow backend: @tensorflow/tfjs-node built against the TensorFlow C library of
// the TensorFlow pip wheel by `npm run setup:tensorflow` (tensorflow-setup.ts), kept in
// .cache/tensorflow/ so that `npm ci` (which empties node_modules) does not lose it.
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as path from 'node:path';
import * as tf from '@tensorflow/tfjs';
import { FUSED_CPU_KERNELS, LINEAR_WITH_BIAS, noteFusedCpuKernels, STATELESS_UNIFORM } from './fused-kernels.ts';
import { useQuietStderr, withStderrSilenced } from './quiet-stderr.ts';
import { registerOptimizationBarrier } from './tf-graph.ts';
import {
  currentBuild,
  FUSED_OPS_ADDON,
  FUSED_OPS_ASAN_ADDON,
  nativePackageDir,
  PROJECT_ROOT,
  QUIET_STDERR_ADDON,
  readBuildStamp,
  SANITIZED_KERNELS_ENV,
  SETUP_COMMAND,
} from './native-build.ts';

let loadedFrom: string | undefined;

/**
 * Loads the native package: the wheel-built one from the cache, else an installed
 * @tensorflow/tfjs-node-gpu or @tensorflow/tfjs-node (e.g. a host whose stock install still works).
 * Returns undefined on success, else why nothing loaded.
 */
export function loadTensorflowPackage(): string | undefined {
  // TF's INFO lines on start-up are noise for a training log; a user's own setting wins.
  process.env.TF_CPP_MIN_LOG_LEVEL ??= '2';
  // On a GPU, TensorFlow's allocator takes what it needs as it goes instead of nearly all the
  // device's memory at start, so GPUs can be shared and check:gpu can report what a run used.
  process.env.TF_FORCE_GPU_ALLOW_GROWTH ??= 'true';
  const require = createRequire(import.meta.url);
  const reasons: string[] = [];
  const build = currentBuild();
  const wheelBuilt = build ? nativePackageDir(build) : null;
  const candidates = [...(wheelBuilt ? [wheelBuilt] : []), '@tensorflow/tfjs-node-gpu', '@tensorflow/tfjs-node'];
  for (const candidate of candidates) {
    try {
      // The start-up's INFO lines, printed before any log level applies, are dropped (quiet-stderr.ts).
      useQuietStderr(candidate === wheelBuilt ? path.join(wheelBuilt, QUIET_STDERR_ADDON) : null);
      withStderrSilenced(() => require(candidate));
      registerTensorflowKernels();
      if (candidate === wheelBuilt && !build!.gpu) registerFusedCpuKernels(wheelBuilt);
      loadedFrom = candidate === wheelBuilt ? '.cache/tensorflow' : candidate;
      return undefined;
    } catch (err) {
      reasons.push(`${path.isAbsolute(candidate) ? path.relative(PROJECT_ROOT, candidate) : candidate}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  if (!build)
    reasons.unshift(
      readBuildStamp() ? `the native build predates this version of the project (run \`${SETUP_COMMAND}\` again)` : `not set up (run \`${SETUP_COMMAND}\`)`,
    );
  return reasons.join('; ');
}

/** The binding's view of itself, and the package it came from ('.cache/tensorflow' or an installed one), for logs and env records. */
export function tensorflowInfo(): { tensorflow: string; gpu: boolean; package: string } {
  const backend = tf.backend() as unknown as { binding?: { TF_Version?: string }; isUsingGpuDevice?: boolean };
  return { tensorflow: backend.binding?.TF_Version ?? 'unknown', gpu: backend.isUsingGpuDevice === true, package: loadedFrom ?? 'unknown' };
}

let kernelsRegistered = false;

/** The part of tfjs-node's backend object that runs a raw TensorFlow op. */
interface NativeBackendView {
  binding: { TF_ATTR_TYPE: number; TF_ATTR_FLOAT: number; TF_FLOAT: number; TF_INT32: number };
  executeMultipleOutputs(name: string, attrs: Array<{ name: string; type: number; value: number }>, inputs: tf.TensorInfo[], outputs: number): tf.TensorInfo[];
}

/**
 * Fixes and fused kernels for tfjs-node 4.22 on TF 2.21. tfjs-node was written for TF 2.9; two ops
 * changed behaviour since (docs/backends.md, the native backend):
 *   Round     on int32 returns zeros since TF 2.17 (tensorflow/tensorflow#74789): integers are
 *             already round, so int32 input is passed through;
 *   ConcatV2  refuses scalars in TF 2.21, where tfjs concatenates rank-0 tensors as length-1
 *             vectors (cpu/wasm): scalars are reshaped to [1] first.
 * Dropout masks come from TF's StatelessRandomUniform, seeded by a tensor, and dense layers' x·W + b
 * from MatMul and BiasAdd, which Grappler fuses (fused-kernels.ts). (TF's
 * SparseSoftmaxCrossEntropyWithLogits was registered here too, until the composed cross-entropy of
 * model/lm.ts measured twice as fast in a training step.)
 */
function registerTensorflowKernels(): void {
  if (kernelsRegistered) return;
  kernelsRegistered = true;
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
  // Inputs in the kernel's order; attrs map names to 'float32' / 'int32' type attributes.
  registerOptimizationBarrier();
  registerTensorflowOp(STATELESS_UNIFORM, 'StatelessRandomUniform', ['shape', 'seed'], { dtype: 'float32', T: 'int32', Tseed: 'int32' }, 1);
  tf.registerKernel({
    kernelName: LINEAR_WITH_BIAS,
    backendName: 'tensorflow',
    kernelFunc: ({ inputs, backend }) => {
      const native = backend as unknown as NativeBackendView;
      const { x, w, b } = inputs as Record<'x' | 'w' | 'b', tf.TensorInfo>;
      const float = [{ name: 'T', type: native.binding.TF_ATTR_TYPE, value: native.binding.TF_FLOAT }];
      const [product] = native.executeMultipleOutputs('MatMul', float, [x, w], 1);
      try {
        return native.executeMultipleOutputs('BiasAdd', float, [product, b], 1)[0];
      } finally {
        (backend as tf.KernelBackend).disposeData(product.dataId);
      }
    },
  });
}

/**
 * The fused CPU kernels (native/kernels/, built by the set-up on CPU builds): loading the addon
 * registers its ops in this process's TensorFlow; each then becomes the tfjs kernel of the same name.
 * Where the addon is absent or refused, the model keeps its composed ops (fused-kernels.ts says why).
 * With $SLAYFORMER_SANITIZED_KERNELS=1 the AddressSanitizer build is loaded instead (native-build.ts).
 */
function registerFusedCpuKernels(packageDir: string): void {
  const sanitized = process.env[SANITIZED_KERNELS_ENV] === '1';
  const addonPath = path.join(packageDir, sanitized ? FUSED_OPS_ASAN_ADDON : FUSED_OPS_ADDON);
  const setup = sanitized ? `${SETUP_COMMAND} -- --sanitize address` : SETUP_COMMAND;
  // Loading the sanitized build into a process without the sanitizer's runtime would end it (ASan's own check).
  const unsanitized = sanitized && !fs.readFileSync('/proc/self/maps', 'utf8').includes('libasan');
  noteFusedCpuKernels(
    unsanitized
      ? `${SANITIZED_KERNELS_ENV}=1 needs AddressSanitizer's runtime preloaded (LD_PRELOAD=$(gcc -print-file-name=libasan.so))`
      : fusedCpuKernelsProblem(addonPath, setup),
  );
}

/** Loads the addon and registers its kernels; why it could not (null = done). */
function fusedCpuKernelsProblem(addonPath: string, setup: string): string | null {
  if (!fs.existsSync(addonPath)) return `not built (\`${setup}\` builds them where it can compile them)`;
  try {
    const addon = createRequire(import.meta.url)(addonPath) as { ops: string[]; error: string | null };
    if (addon.error) return `TensorFlow refused them: ${addon.error}`;
    const missing = FUSED_CPU_KERNELS.find(({ name }) => !addon.ops.includes(name));
    if (missing) return `the built addon lacks ${missing.name} (\`${SETUP_COMMAND} -- --force\` rebuilds it)`;
    for (const { name, inputs, outputs, floatAttrs } of FUSED_CPU_KERNELS) {
      if (!tf.getKernel(name, 'tensorflow')) registerTensorflowOp(name, name, inputs, {}, outputs.length, floatAttrs);
    }
    return null;
  } catch (err) {
    return `not loadable: ${(err as Error).message.split('\n')[0]}`;
  }
}

/**
 * Registers `kernelName` on the tensorflow backend as the TensorFlow op `op`: `typeAttrs` map type
 * attributes to dtypes, `floatAttrs` name float attributes taken from the tfjs kernel's own attrs.
 */
function registerTensorflowOp(
  kernelName: string,
  op: string,
  inputNames: readonly string[],
  typeAttrs: Record<string, 'float32' | 'int32'>,
  outputs: number,
  floatAttrs: readonly string[] = [],
): void {
  tf.registerKernel({
    kernelName,
    backendName: 'tensorflow',
    kernelFunc: ({ inputs, backend, attrs }) => {
      const native = backend as unknown as NativeBackendView;
      const { TF_ATTR_TYPE, TF_ATTR_FLOAT, TF_FLOAT, TF_INT32 } = native.binding;
      const opAttrs = [
        ...Object.entries(typeAttrs).map(([name, dtype]) => ({ name, type: TF_ATTR_TYPE, value: dtype === 'float32' ? TF_FLOAT : TF_INT32 })),
        ...floatAttrs.map((name) => ({ name, type: TF_ATTR_FLOAT, value: (attrs as Record<string, number>)[name] })),
      ];
      const results = native.executeMultipleOutputs(
        op,
        opAttrs,
        inputNames.map((n) => (inputs as Record<string, tf.TensorInfo>)[n]),
        outputs,
      );
      return outputs === 1 ? results[0] : results;
    },
  });
}

function override(kernelName: string, kernelFunc: (args: Parameters<tf.KernelFunc>[0], original: tf.KernelFunc) => ReturnType<tf.KernelFunc>): void {
  const original = tf.getKernel(kernelName, 'tensorflow');
  if (!original) throw new Error(`tensorflow backend: no ${kernelName} kernel to fix`);
  tf.unregisterKernel(kernelName, 'tensorflow');
  tf.registerKernel({ kernelName, backendName: 'tensorflow', kernelFunc: (args) => kernelFunc(args, original.kernelFunc) });
}
