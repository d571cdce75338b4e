// Where `npm run setup:tensorflow` puts the native backend, and what it records there. No tfjs
// import: the test configuration reads this to decide whether the tensorflow suites run.
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
