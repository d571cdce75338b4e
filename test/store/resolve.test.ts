// One rule decides which folder holds a model for --resume, initFrom and eval/generate/export (src/store/resolve.ts):
// the three roles agree on run folders, incomplete checkpoints and Hugging Face folders, and differ only where what
// they need differs (--resume needs a training state; auto means the recipe's own runs for --resume, a named recipe's
// finished runs for initFrom). Only empty marker files are written: nothing is loaded.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { CHECKPOINTS_DIR, FINAL_DIR, MODEL_FILE, RECIPE_FILE, STATE_FILE, checkpointName } from '../../src/store/layout.ts';
import { resolveModelSource, type ModelRole } from '../../src/store/resolve.ts';
import { listRunFolders } from '../../src/store/run-folder.ts';
import { makeRunDir } from '../../src/telemetry/run-logger.ts';
import { COMPLETE_MARKER } from '../../src/core/atomic-folder.ts';

const root = mkdtempSync(join(tmpdir(), 'slay-resolve-'));
afterAll(() => rmSync(root, { recursive: true, force: true }));

function touch(...parts: string[]): string {
  const file = join(root, ...parts);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, '');
  return file;
}

/** A checkpoint folder of `run` as the trainer writes it (complete unless told otherwise). */
function checkpoint(run: string, step: number, complete = true): string {
  const folder = join(root, run, CHECKPOINTS_DIR, checkpointName(step));
  for (const file of [MODEL_FILE, RECIPE_FILE, STATE_FILE, ...(complete ? [COMPLETE_MARKER] : [])]) touch(run, CHECKPOINTS_DIR, checkpointName(step), file);
  return folder;
}

const resolve = (role: ModelRole, spec: string) => resolveModelSource(role, spec, { runDir: root, recipeName: 'tiny' });
const MODEL_ROLES: ModelRole[] = ['initFrom', 'load'];

describe('which folder holds a model', () => {
  it('a finished run folder: final/ for a model, its newest complete checkpoint for --resume', () => {
    checkpoint('done', 1);
    const newest = checkpoint('done', 2);
    touch('done', FINAL_DIR, MODEL_FILE);
    for (const role of MODEL_ROLES)
      expect(resolve(role, join(root, 'done'))).toEqual({ format: 'slayformer', dir: join(root, 'done', FINAL_DIR), reason: null });
    expect(resolve('resume', join(root, 'done')).dir).toBe(newest);
  });

  it('a run folder without final/ (still running, or killed): every role takes its newest complete checkpoint', () => {
    const newest = checkpoint('running', 4);
    checkpoint('running', 6, false); // being written
    for (const role of [...MODEL_ROLES, 'resume'] as const) expect(resolve(role, join(root, 'running')).dir).toBe(newest);
  });

  it('an incomplete checkpoint is refused by every role, inside its run or copied out of it', () => {
    const inside = checkpoint('killed', 3, false);
    const outside = join(root, 'copied-checkpoint');
    for (const file of [MODEL_FILE, RECIPE_FILE, STATE_FILE]) touch('copied-checkpoint', file);
    for (const role of [...MODEL_ROLES, 'resume'] as const) {
      for (const folder of [inside, outside]) expect(() => resolve(role, folder)).toThrow(/is incomplete \(no COMPLETE marker: its writer was interrupted\)/);
    }
  });

  it('--resume wants a training state: a final/ folder or a Hugging Face folder is refused, naming what it may be', () => {
    touch('finished', FINAL_DIR, MODEL_FILE);
    expect(() => resolve('resume', join(root, 'finished', FINAL_DIR))).toThrow(
      /^--resume .*final: .*final is a model folder without training state \(no state\.json\); give 'auto', a run folder or a checkpoint folder$/,
    );
    writeFileSync(touch('hf-gpt2', 'config.json'), JSON.stringify({ model_type: 'gpt2' }));
    expect(() => resolve('resume', join(root, 'hf-gpt2'))).toThrow(/is a Hugging Face folder, which holds no training state/);
    for (const role of MODEL_ROLES) expect(resolve(role, join(root, 'hf-gpt2'))).toEqual({ format: 'hf', dir: join(root, 'hf-gpt2'), reason: null });
    expect(resolve('load', `hf:${join(root, 'not-there')}`)).toEqual({ format: 'hf', dir: join(root, 'not-there'), reason: null });
  });

  it("a folder holding this project's recipe.json is never taken for a Hugging Face folder", () => {
    writeFileSync(touch('ours', 'config.json'), JSON.stringify({ model_type: 'gpt2' }));
    touch('ours', MODEL_FILE);
    touch('ours', RECIPE_FILE);
    expect(resolve('load', join(root, 'ours'))).toEqual({ format: 'slayformer', dir: join(root, 'ours'), reason: null });
  });

  it('errors name the argument as each command knows it', () => {
    const nowhere = join(root, 'nowhere');
    expect(() => resolve('resume', nowhere)).toThrow(`--resume ${nowhere}: no such folder (give 'auto', a run folder or a checkpoint folder)`);
    expect(() => resolve('initFrom', nowhere)).toThrow(
      `initFrom ${nowhere}: no such folder (give a run's final/ folder, a checkpoint folder, a run folder, auto:<recipe name> or hf:<folder>)`,
    );
    expect(() => resolve('load', nowhere)).toThrow(
      `checkpoint ${nowhere}: no such folder (give a run's final/ folder, a checkpoint folder, a run folder or hf:<folder>)`,
    );
    mkdirSync(join(root, 'empty'));
    expect(() => resolve('load', join(root, 'empty'))).toThrow(/empty holds no model\.safetensors, final\/ or complete checkpoint/);
    expect(() => resolve('resume', join(root, 'empty'))).toThrow(/empty holds no complete checkpoint; give 'auto'/);
  });
});

describe("initFrom auto:<name> trusts what a run recorded, not its folder's name", () => {
  /** A finished run folder `entry` under `parent`: its config.json names `recorded`, its env.json holds `argv`. */
  function finishedRun(parent: string, entry: string, recorded: string, argv: string[]): string {
    const folder = join(parent, entry);
    touch(folder, FINAL_DIR, MODEL_FILE);
    writeFileSync(join(root, folder, 'config.json'), JSON.stringify({ name: recorded, train: { maxTokens: null } }));
    writeFileSync(join(root, folder, 'env.json'), JSON.stringify({ argv: ['src/cli/train.ts', ...argv], cwd: root }));
    writeFileSync(join(root, folder, 'summary.json'), JSON.stringify({ tokens: 1024, val_loss: 5 }));
    return join(root, folder);
  }
  const auto = (parent: string) => resolveModelSource('initFrom', 'auto:gpt-softmax', { runDir: join(root, parent) });

  it('a run of the recipe whose command line overrode model keys is passed over, naming the overrides', () => {
    finishedRun('auto-a', 'gpt-softmax-20260101-000000', 'gpt-softmax', ['recipes/demo/gpt-softmax.yaml']);
    // A run folder of a version that named runs after the recipe alone, trained as a Performer.
    finishedRun('auto-a', 'gpt-softmax-20260102-000000', 'gpt-softmax', [
      'recipes/demo/gpt-softmax.yaml',
      '--model.attention.name',
      'performer',
      '--train.lr=1e-3',
    ]);
    const choice = auto('auto-a');
    expect(choice.dir).toBe(join(root, 'auto-a', 'gpt-softmax-20260101-000000', FINAL_DIR));
    expect(choice.reason).toContain(
      'passed over the newer gpt-softmax-20260102-000000 (1,024 tokens, final val loss 5.0000): trained with --model.attention.name=performer, which changes the model',
    );
  });

  it('when every run changed the model or records another name, it is an error naming each mismatch', () => {
    finishedRun('auto-b', 'gpt-softmax-20260101-000000', 'gpt-softmax', [
      'recipes/demo/gpt-softmax.yaml',
      '--model.attention.options.prfFeatures=32',
      '--model.dModel=64',
    ]);
    finishedRun('auto-b', 'gpt-softmax-20260102-000000', 'gpt-other', ['recipes/demo/gpt-other.yaml']); // copied or renamed by hand
    expect(() => auto('auto-b')).toThrow(
      "initFrom auto:gpt-softmax: none of the 2 finished runs of 'gpt-softmax' is the recipe as written: " +
        "gpt-softmax-20260102-000000: its config.json names the recipe 'gpt-other'; " +
        'gpt-softmax-20260101-000000: trained with --model.attention.options.prfFeatures=32 --model.dModel=64, which changes the model; ' +
        'train it without model overrides (npm run train -- recipes/demo/gpt-softmax.yaml) or name a run folder in initFrom',
    );
  });

  it('a run named after its model overrides is what auto:<that name> takes', () => {
    const argv = ['recipes/demo/gpt-softmax.yaml', '--model.attention.name', 'performer'];
    finishedRun('auto-c', 'gpt-softmax+attention=performer-20260101-000000', 'gpt-softmax+attention=performer', argv);
    const named = resolveModelSource('initFrom', 'auto:gpt-softmax+attention=performer', { runDir: join(root, 'auto-c') });
    expect(named.dir).toBe(join(root, 'auto-c', 'gpt-softmax+attention=performer-20260101-000000', FINAL_DIR));
    // The same overrides under a name that hides them (--name gpt-softmax) are refused.
    finishedRun('auto-d', 'gpt-softmax-20260101-000000', 'gpt-softmax', [...argv, '--name', 'gpt-softmax']);
    expect(() => auto('auto-d')).toThrow(/gpt-softmax-20260101-000000: trained with --model\.attention\.name=performer, which changes the model/);
  });

  it("a run folder named with its model overrides is not one of the recipe's runs, and --resume auto with the same overrides finds it", () => {
    const parent = join(root, 'named');
    const dir = makeRunDir(parent, 'gpt-softmax+attention=performer');
    expect(dir).toMatch(/[/]gpt-softmax\+attention=performer-\d{8}-\d{6}$/);
    expect(listRunFolders(parent, 'gpt-softmax')).toEqual([]);
    expect(listRunFolders(parent, 'gpt-softmax+attention=performer')).toEqual([dir]);
  });
});
