// Which backend the commands run on, decided once (src/backend/device.ts): `train` follows --backend >
// $SLAYFORMER_BACKEND > the recipe's backend > auto; the run's config.json records the backend that ran; a sweep packs
// its runs by the device each resolves to (one at a time where the native backend's thread pool takes every core).
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BACKEND_ENV, describeDevice, type BackendProbe } from '../../src/backend/device.ts';
import { currentBuild } from '../../src/backend/native-build.ts';
import { listCheckpoints } from '../../src/store/run-folder.ts';
import { resolveDataParallel } from '../../src/backend/device.ts';
import { loadSweep, trainingCores } from '../../src/sweep/spec.ts';
import { makeTinySetup, tinyRecipeText, type TinySetup } from '../train/checkpoint-fixtures.ts';

const DEMO_RECIPE = 'recipes/demo/gpt-softmax.yaml';
const dir = mkdtempSync(join(tmpdir(), 'slay-backend-cli-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The environment without $SLAYFORMER_BACKEND, plus `extra`. */
function envWith(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env, ...extra };
  if (!(BACKEND_ENV in extra)) delete env[BACKEND_ENV];
  return env;
}

function train(args: string[], env: NodeJS.ProcessEnv): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((done, fail) => {
    const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/train.ts', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (d) => (stdout += d));
    child.stderr.on('data', (d) => (stderr += d));
    child.on('error', fail);
    child.on('close', (status) => done({ status, stdout, stderr }));
  });
}

const backendLine = (stdout: string) => stdout.split('\n').find((l) => l.startsWith('backend '));

function recipeSaying(backend: string): string {
  const file = join(dir, `gpt-${backend}.yaml`);
  writeFileSync(file, readFileSync(DEMO_RECIPE, 'utf8').replace(/^backend: auto$/m, `backend: ${backend}`));
  return file;
}

describe('train --dry-run: --backend > $SLAYFORMER_BACKEND > recipe > auto', () => {
  it('says which backend the run would get and who chose it', async () => {
    const wasmRecipe = recipeSaying('wasm');
    const [fromEnv, flagOverEnv, envOverRecipe, fromRecipe, fromAuto, badEnv] = await Promise.all([
      train([DEMO_RECIPE, '--dry-run'], envWith({ [BACKEND_ENV]: 'tensorflow' })),
      train([DEMO_RECIPE, '--dry-run', '--backend', 'cpu'], envWith({ [BACKEND_ENV]: 'tensorflow' })),
      train([wasmRecipe, '--dry-run'], envWith({ [BACKEND_ENV]: 'cpu' })),
      train([wasmRecipe, '--dry-run'], envWith()),
      train([DEMO_RECIPE, '--dry-run'], envWith()),
      train([DEMO_RECIPE, '--dry-run'], envWith({ [BACKEND_ENV]: 'tpu' })),
    ]);
    for (const r of [fromEnv, flagOverEnv, envOverRecipe, fromRecipe, fromAuto]) expect(r.status, r.stderr).toBe(0);
    expect(backendLine(fromEnv.stdout)).toMatch(/^backend {5}tensorflow \(SLAYFORMER_BACKEND=tensorflow\): /);
    expect(backendLine(flagOverEnv.stdout)).toMatch(/^backend {5}cpu \(--backend cpu\): /);
    expect(backendLine(envOverRecipe.stdout)).toMatch(/^backend {5}cpu \(SLAYFORMER_BACKEND=cpu\): /);
    expect(backendLine(fromRecipe.stdout)).toMatch(/^backend {5}wasm \(recipe: wasm\): /);
    // The demo recipes say auto: the native build where it is set up, else wasm.
    expect(backendLine(fromAuto.stdout)).toMatch(
      currentBuild() ? /^backend {5}tensorflow \(recipe: auto\): \.cache\/tensorflow / : /^backend {5}wasm \(recipe: auto\): /,
    );
    expect(badEnv.status).toBe(2);
    expect(badEnv.stderr).toBe("train: SLAYFORMER_BACKEND: unknown backend 'tpu'; allowed: auto, tensorflow, wasm, cpu\n");
  });

  it.skipIf(!currentBuild())(
    'with the native build (skipped without `npm run setup:tensorflow`): SLAYFORMER_BACKEND=tensorflow names the .cache build',
    async () => {
      const r = await train([DEMO_RECIPE, '--dry-run'], envWith({ [BACKEND_ENV]: 'tensorflow' }));
      expect(backendLine(r.stdout)).toMatch(/^backend {5}tensorflow \(SLAYFORMER_BACKEND=tensorflow\): \.cache\/tensorflow \(TensorFlow \d/);
      // The demo recipe's train.dataParallel auto is one replica there: the native thread pool takes every core.
      expect(r.stdout).toMatch(/^replicas {4}1 on tensorflow \(train\.dataParallel auto\)/m);
    },
  );
});

describe('config.json', () => {
  let setup: TinySetup;
  /** The tiny recipe saying `backend`, training into runs-<backend>/. */
  const tinyRecipe = (backend: string) => {
    const file = join(dir, `tiny-${backend}.yaml`);
    writeFileSync(
      file,
      tinyRecipeText(setup, join(dir, `runs-${backend}`), { maxTokens: 192, checkpointInterval: 3 }).replace('backend: cpu', `backend: ${backend}`),
    );
    return file;
  };
  const onlyRunFolder = (recipeFile: string) => {
    const runs = join(dir, `runs-${recipeFile.match(/tiny-(\w+)\.yaml$/)![1]}`);
    const folders = readdirSync(runs);
    expect(folders).toHaveLength(1);
    return join(runs, folders[0]);
  };
  beforeAll(async () => {
    setup = await makeTinySetup(dir);
  });

  it("records the backend the run trained on (--backend cpu over the recipe's wasm), as do its checkpoints and env.json", async () => {
    const recipeFile = tinyRecipe('wasm');
    const r = await train([recipeFile, '--backend', 'cpu'], envWith({ [BACKEND_ENV]: 'wasm' }));
    expect(r.status, r.stderr).toBe(0);
    const folder = onlyRunFolder(recipeFile);
    expect(JSON.parse(readFileSync(join(folder, 'config.json'), 'utf8')).backend).toBe('cpu');
    expect(JSON.parse(readFileSync(join(folder, 'env.json'), 'utf8')).backend).toMatchObject({ name: 'cpu', source: '@tensorflow/tfjs (pure JavaScript)' });
    const checkpoint = listCheckpoints(folder).at(-1)!;
    expect(JSON.parse(readFileSync(join(checkpoint.dir, 'recipe.json'), 'utf8')).backend).toBe('cpu');
  });

  it.skipIf(!currentBuild())(
    'with the native build (skipped without `npm run setup:tensorflow`): a backend: auto recipe trains on it, and config.json says so',
    async () => {
      const recipeFile = tinyRecipe('auto');
      const r = await train([recipeFile], envWith());
      expect(r.status, r.stderr).toBe(0);
      expect(r.stderr).toMatch(/^\[train\] backend auto → tensorflow$/m);
      expect(JSON.parse(readFileSync(join(onlyRunFolder(recipeFile), 'config.json'), 'utf8')).backend).toBe('tensorflow');
    },
  );
});

describe('sweep packing by the resolved device', () => {
  const withNativeBuild: BackendProbe = { nativeBuild: () => ({ tensorflow: '2.21.0', gpu: false }), nativePackage: () => undefined, installed: () => true };
  const wasmOnly: BackendProbe = { ...withNativeBuild, nativeBuild: () => undefined };
  let file: string;
  let saved: string | undefined;
  beforeAll(() => {
    saved = process.env[BACKEND_ENV];
    delete process.env[BACKEND_ENV];
    file = join(dir, 'auto-sweep.yaml');
    // The demo recipe says backend: auto and train.dataParallel: auto.
    writeFileSync(
      file,
      `recipe: ${resolve(DEMO_RECIPE)}\ngrid:\n  model.attention: [softmax, slay]\n  train.seed: [1, 2]\nrunDir: ${join(dir, 'sweep-runs')}\n`,
    );
  });
  afterAll(() => {
    if (saved === undefined) delete process.env[BACKEND_ENV];
    else process.env[BACKEND_ENV] = saved;
  });

  it('a run takes every core on the native device, its replicas on wasm', () => {
    const recipe = loadSweep(file, [], { probe: wasmOnly }).runs[0].recipe;
    expect(trainingCores(recipe, describeDevice('tensorflow', { graphSteps: true }))).toEqual({ cores: 'all', requestedCpus: 1 });
    expect(trainingCores(recipe, describeDevice('wasm')).cores).toBe(resolveDataParallel('auto', describeDevice('wasm'), recipe.train.batchSize));
    expect(trainingCores({ ...recipe, train: { ...recipe.train, dataParallel: 2 } }, describeDevice('cpu'))).toEqual({ cores: 2, requestedCpus: 2 });
  });

  it('a backend: auto sweep on a machine with the native build runs one run at a time', () => {
    const sweep = loadSweep(file, [], { probe: withNativeBuild });
    expect(sweep.runs.map((r) => [r.device.backend, r.cores])).toEqual(Array(4).fill(['tensorflow', 'all']));
    const wasm = loadSweep(file, [], { probe: wasmOnly });
    expect(wasm.runs.every((r) => r.device.backend === 'wasm' && r.cores === resolveDataParallel('auto', r.device, 8))).toBe(true);
  });

  it('--backend beats $SLAYFORMER_BACKEND, which beats the recipes; the guards and their trainers get --backend', () => {
    process.env[BACKEND_ENV] = 'cpu';
    try {
      expect(loadSweep(file, [], { probe: withNativeBuild }).runs[0].device.backend).toBe('cpu');
      const flagged = loadSweep(file, [], { backend: 'tensorflow', probe: wasmOnly });
      expect(flagged.runs[0]).toMatchObject({ device: { backend: 'tensorflow' }, cores: 'all' });
      expect(flagged.guard.slice(-2)).toEqual(['--backend', 'tensorflow']);
    } finally {
      delete process.env[BACKEND_ENV];
    }
  });
});
