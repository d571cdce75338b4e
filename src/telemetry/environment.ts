// The environment record of a run folder (env.json): where the run came from and ran — the git commit, the versions of
// Node, tfjs and the backend, the machine, the command line — and the data paths it read, both absolute and relative
// to the run folder, so that a moved run folder still finds data that moved with it.
import { execFileSync } from 'node:child_process';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import type { Cluster } from '../backend/collective.ts';
import type { Device } from '../backend/device.ts';
import type { DataSection } from '../recipe/schema.ts';
import { RunFolder } from '../store/run-folder.ts';
import { AUTO_PREFIX } from '../store/resolve.ts';

const REPO_ROOT = path.resolve(import.meta.dirname, '..', '..');

/**
 * The commit of the slayformer checkout `root` (this process's by default), and whether its tracked files differ from
 * it. Untracked files do not count: a run folder, a scratch script or a data file beside the code leaves the code
 * what the commit says.
 */
export function gitSource(root = REPO_ROOT): { commit: string | null; dirty: boolean | null; reason?: string } {
  const git = (...args: string[]) => execFileSync('git', ['-C', root, ...args], { encoding: 'utf8', timeout: 10_000, stdio: ['ignore', 'pipe', 'pipe'] });
  try {
    const commit = git('rev-parse', 'HEAD').trim();
    return { commit, dirty: git('status', '--porcelain', '--untracked-files=no').trim() !== '' };
  } catch (err) {
    return { commit: null, dirty: null, reason: `not a git checkout, or git is missing (${(err as Error).message.split('\n')[0]})` };
  }
}

/**
 * Versions of the TensorFlow.js packages and of the running backend; TensorFlow's own on the tensorflow backend.
 * tfjs is imported here, not at the top: importing the telemetry modules loads no tfjs (a command's --help answers
 * before any backend loads).
 */
async function backendVersions(started?: Device): Promise<Record<string, unknown>> {
  const [tf, { runningDevice }, { tensorflowInfo }] = await Promise.all([
    import('@tensorflow/tfjs'),
    import('../backend/current.ts'),
    import('../backend/tensorflow.ts'),
  ]);
  const device = started ?? runningDevice();
  const versions: Record<string, string | null> = { ...tf.version };
  try {
    versions['tfjs-backend-wasm'] = requireFromHere('@tensorflow/tfjs-backend-wasm/package.json').version;
  } catch {
    versions['tfjs-backend-wasm'] = null;
  }
  return {
    name: device?.backend ?? null,
    source: device?.source ?? null,
    cpuBound: device?.cpuBound ?? null,
    graphSteps: device?.graphSteps ?? null,
    tensorflow: device?.native ? tensorflowInfo().tensorflow : null,
    versions,
  };
}
const requireFromHere = createRequire(import.meta.url);

/** An external path as recorded in env.json: absolute, and relative to the run folder. */
function recordedPath(runDir: string, file: string | null) {
  return file === null ? null : { absolute: file, fromRun: path.relative(runDir, file) };
}

/**
 * Where and how a process runs: Node, the machine, the command line, the git source and the backend's versions.
 * `device`: the one its command started (else the running backend's, or none).
 */
export async function processEnvironment(device?: Device): Promise<Record<string, unknown>> {
  const cpus = os.cpus();
  return {
    node: process.version,
    platform: `${process.platform}-${process.arch}`,
    hostname: os.hostname(),
    cpus: cpus.length,
    cpuModel: cpus[0]?.model ?? null,
    memoryGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
    argv: process.argv.slice(1),
    cwd: process.cwd(),
    startedAt: new Date().toISOString(),
    git: gitSource(),
    backend: await backendVersions(device),
  };
}

/** A run across processes (docs/distributed.md): its ranks and where they ran, rank order; nothing for one process. */
export function clusterRecord(cluster: Cluster | null): { cluster?: Pick<Cluster, 'worldSize' | 'addresses' | 'communication'> } {
  return cluster ? { cluster: { worldSize: cluster.worldSize, addresses: cluster.addresses, communication: cluster.communication } } : {};
}

/** The recipe's inputs whose paths env.json records: its data files and the model it starts from. */
interface RecordedInputs {
  data: Pick<DataSection, 'dataset' | 'tokenizer'>;
  initFrom: string | null;
}

async function environment(runDir: string, recipe: RecordedInputs, device?: Device): Promise<Record<string, unknown>> {
  const cluster = (await import('../backend/collective.ts')).currentCluster();
  return {
    ...(await processEnvironment(device)),
    ...clusterRecord(cluster),
    paths: {
      run: runDir,
      dataset: recordedPath(runDir, recipe.data.dataset),
      tokenizer: recordedPath(runDir, recipe.data.tokenizer),
      initFrom: recordedPath(runDir, recipe.initFrom === null || recipe.initFrom.startsWith(AUTO_PREFIX) ? null : path.resolve(recipe.initFrom)),
    },
  };
}

/**
 * env.json of a new run, on `device` (else the running backend's); a resume (resumedAtStep defined) keeps the first
 * session's and appends its own.
 */
export async function environmentRecord(
  runDir: string,
  recipe: RecordedInputs,
  { resumedAtStep, device }: { resumedAtStep?: number | null; device?: Device } = {},
): Promise<Record<string, unknown>> {
  const current = await environment(runDir, recipe, device);
  // Missing or damaged: this session's environment stands alone.
  const previous = resumedAtStep !== undefined ? (RunFolder.at(runDir).env({ unreadable: () => {} }) ?? null) : null;
  const resumes = Array.isArray(previous?.resumes) ? previous.resumes : [];
  return previous ? { ...previous, resumes: [...resumes, { ...current, resumedAtStep }] } : current;
}
