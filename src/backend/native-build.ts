// Where `npm run setup:tensorflow` puts the native backend, and what it records there. No tfjs
// import: the test configuration reads this to decide whether the tensorflow suites run.
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';

export const PROJECT_ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
export const SETUP_COMMAND = 'npm run setup:tensorflow';

/**
 * The cache must stay inside the project: the built package's `require('@tensorflow/tfjs')` walks up
 * the folders to the project's node_modules, so both share one tfjs (its kernel and gradient
 * registries are process-global; a second copy would silently diverge).
 */
export const TENSORFLOW_CACHE = path.join(PROJECT_ROOT, '.cache', 'tensorflow');
export const BUILD_STAMP = path.join(TENSORFLOW_CACHE, 'build.json');
/** Our dup/dup2 addon (native/quiet_stderr.c), relative to the package folder. */
export const QUIET_STDERR_ADDON = path.join('lib', 'quiet_stderr.node');
/** The fused CPU kernels (native/kernels/), built beside the binding when the compiler can; absent = composed ops. */
export const FUSED_OPS_ADDON = path.join('lib', 'fused_ops.node');
/**
 * The same kernels built with AddressSanitizer (`setup:tensorflow -- --sanitize address`), beside the plain build; loaded
 * instead of it only where $SLAYFORMER_SANITIZED_KERNELS is 1, in a process started with the sanitizer's runtime
 * preloaded (test/backend/fused-ops-asan.test.ts).
 */
export const FUSED_OPS_ASAN_ADDON = path.join('lib', 'fused_ops.asan.node');
export const SANITIZED_KERNELS_ENV = 'SLAYFORMER_SANITIZED_KERNELS';
/**
 * What the set-up compiles into the build: the binding's additions, the stderr addon, and the fused kernels (kernels/,
 * with their table, kernels.ts).
 */
export const NATIVE_SOURCES = path.join(PROJECT_ROOT, 'src', 'backend', 'native');

let sourcesDigest: string | undefined;
/**
 * The sha256 of the native sources (every file under NATIVE_SOURCES, its path there and its bytes): a build made from
 * other sources is stale — its kernels are not the code's — so it is not loaded, and the set-up rebuilds it.
 */
export function nativeSourcesDigest(): string {
  if (sourcesDigest === undefined) {
    const hash = createHash('sha256');
    for (const name of nativeSourceFiles()) hash.update(`${name}\0`).update(fs.readFileSync(path.join(NATIVE_SOURCES, name)));
    sourcesDigest = hash.digest('hex');
  }
  return sourcesDigest;
}

/** The files under NATIVE_SOURCES, as paths relative to it with '/' between folders, sorted. */
export function nativeSourceFiles(): string[] {
  const files = fs.readdirSync(NATIVE_SOURCES, { recursive: true, withFileTypes: true }).filter((entry) => entry.isFile());
  return files.map((entry) => path.relative(NATIVE_SOURCES, path.join(entry.parentPath, entry.name)).split(path.sep).join('/')).sort();
}

/**
 * What `setup:tensorflow` built, written last (atomically), so its presence means a complete build.
 * Paths are relative, so that the project folder can move: `tree` to the cache folder, `binding` to
 * the package folder.
 */
export interface NativeBuild {
  tfjsNode: string;
  tensorflow: string;
  gpu: boolean;
  wheel: string;
  /** The folder under .cache/tensorflow that holds this build's node_modules. */
  tree: string;
  binding: string;
  /** nativeSourcesDigest() of the sources it was built from. */
  sources: string;
  /** Folders of the pip `nvidia-*` libraries the GPU build links to (empty on CPU builds). */
  cudaLibraryDirs: string[];
  builtAt: string;
  seconds: number;
}

export function readBuildStamp(): NativeBuild | undefined {
  try {
    const stamp = JSON.parse(fs.readFileSync(BUILD_STAMP, 'utf8')) as NativeBuild;
    return typeof stamp.tree === 'string' && typeof stamp.binding === 'string' ? stamp : undefined;
  } catch {
    return undefined;
  }
}

/** The tfjs-node package folder of a build. */
export function nativePackageDir(build: NativeBuild): string {
  return path.join(TENSORFLOW_CACHE, build.tree, 'node_modules', '@tensorflow', 'tfjs-node');
}

/** The complete, current build, if there is one: its binding exists and carries this project's additions. */
export function currentBuild(): NativeBuild | undefined {
  const stamp = readBuildStamp();
  const complete = stamp && stamp.sources === nativeSourcesDigest() && fs.existsSync(path.join(nativePackageDir(stamp), stamp.binding));
  return complete ? stamp : undefined;
}

/** Whether the wheel-built backend is present and current. */
export function isTensorflowSetUp(): boolean {
  return currentBuild() !== undefined;
}
