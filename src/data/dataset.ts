// Dataset layouts on disk: resolving a path to the shards of one split (HF save_to_disk folders, single split
// folders, plain folders and globs of shard files such as the *.arrow HF cache of allenai/c4; any registered shard
// format, src/data/shard-registry.ts) and cheap metadata for dry runs. `npm run prepare` writes the layout
// (src/data/prepare/split-writer.ts).
import fs from 'node:fs';
import path from 'node:path';
import { readJsonFile } from '../core/json.ts';
import { isShardFile, shardFileEndings, shardFormatOf } from './shard-registry.ts';

export type Split = 'train' | 'validation';
export const SPLITS: readonly Split[] = ['train', 'validation'];

export const DATASET_DICT_JSON = 'dataset_dict.json';
export const STATE_JSON = 'state.json';
export const DATASET_INFO_JSON = 'dataset_info.json';

export class DatasetPathError extends Error {
  constructor(
    readonly datasetPath: string,
    message: string,
  ) {
    super(`${datasetPath}: ${message}`);
    this.name = 'DatasetPathError';
  }
}

const readJson = (file: string): unknown => readJsonFile(file, (problem) => new DatasetPathError(file, problem));

function isDirectory(p: string): boolean {
  try {
    return fs.statSync(p).isDirectory();
  } catch {
    return false;
  }
}

function isFile(p: string): boolean {
  try {
    return fs.statSync(p).isFile();
  } catch {
    return false;
  }
}

/**
 * How to make a held-out validation split, quoted when a save_to_disk folder without one is refused (docs/data.md,
 * "Validation split"): `load` is the Python expression of the dataset to split.
 */
function validationSplitFix(load: string): string {
  return (
    `make a held-out validation split: in Python, d = ${load}.train_test_split(test_size=0.05, seed=0); ` +
    `datasets.DatasetDict(train=d["train"], validation=d["test"]).save_to_disk("<new folder>"); ` +
    `or write the dataset from its source files with npm run prepare -- <files> --out <new folder> (a seeded 5% of the documents go to validation)`
  );
}

/**
 * Shard files named in a split folder's state.json (save_to_disk order = shard order). A folder that is not one
 * split of a DatasetDict and says no split ("_split": null, as Dataset.save_to_disk writes it) is the train split
 * only, as a folder of shard files whose names carry no split is: validating on it would be validating on the
 * training documents.
 */
function shardsOfSplitFolder(folder: string, split: Split, inDatasetDict: boolean): string[] {
  const stateFile = path.join(folder, STATE_JSON);
  const state = readJson(stateFile) as { _data_files?: unknown; _split?: unknown };
  const declared = state._split ?? null;
  // The user named one split folder of a DatasetDict (data/x/train): the fix is to name the DatasetDict.
  const dictAbove = path.dirname(folder);
  const inDictFolder = !inDatasetDict && isFile(path.join(dictAbove, DATASET_DICT_JSON));
  const fix = () =>
    inDictFolder
      ? `name the DatasetDict folder ${dictAbove} as the dataset (its dataset_dict.json lists the splits)`
      : validationSplitFix(`datasets.load_from_disk(${JSON.stringify(folder)})`);
  if (declared !== null && declared !== split) {
    const hint = split === 'validation' && !inDatasetDict ? `; ${fix()}` : '';
    throw new DatasetPathError(folder, `is the "${String(declared)}" split (state.json _split), but the "${split}" split was asked for${hint}`);
  }
  if (declared === null && !inDatasetDict && split === 'validation') {
    const what = inDictFolder
      ? `is one split folder of the DatasetDict ${dictAbove} and its state.json names no split ("_split": null)`
      : 'is one dataset without splits (state.json "_split": null, as Dataset.save_to_disk writes it)';
    throw new DatasetPathError(
      folder,
      `${what}, read as the train split: it has no validation split, and validating on its own documents would measure how well they were memorised; ${fix()}`,
    );
  }
  if (!Array.isArray(state._data_files) || state._data_files.length === 0) {
    throw new DatasetPathError(stateFile, 'expected "_data_files": [{"filename": "data-00000-of-0000N.arrow"}, …] with at least one entry');
  }
  return state._data_files.map((entry, i) => {
    const name = (entry as { filename?: unknown })?.filename;
    if (typeof name !== 'string' || name !== path.basename(name)) {
      throw new DatasetPathError(stateFile, `_data_files[${i}].filename must be a plain file name, got ${JSON.stringify(name)}`);
    }
    if (!isShardFile(name)) throw new DatasetPathError(stateFile, `_data_files[${i}].filename ${name} is not a ${shardFileEndings()} file`);
    const file = path.join(folder, name);
    if (!isFile(file)) throw new DatasetPathError(folder, `shard ${name} listed in state.json is missing`);
    return file;
  });
}

const SPLIT_IN_NAME = /-(train|validation|test)(?=[-.])/;

/** Keeps the files whose names carry the split ("c4-train-00000-of-01024.arrow"); errors say what was found. */
function filterBySplitName(where: string, files: string[], split: Split): string[] {
  if (files.length === 0) throw new DatasetPathError(where, `no ${shardFileEndings()} files found`);
  const marked = files.filter((f) => SPLIT_IN_NAME.test(path.basename(f)));
  if (marked.length === 0) {
    if (split === 'train') return files;
    throw new DatasetPathError(
      where,
      `the ${shardFileEndings()} file names carry no "-train-"/"-validation-" part, so they are all treated as the train split; ` +
        `there are no validation shards (pass a save_to_disk dataset with a validation split — npm run prepare -- <files> --out <folder> writes one, ` +
        `as does train_test_split in Python — or name the files like c4-validation-00000-of-00008.arrow)`,
    );
  }
  const chosen = marked.filter((f) => SPLIT_IN_NAME.exec(path.basename(f))![1] === split);
  if (chosen.length === 0) {
    const found = [...new Set(marked.map((f) => SPLIT_IN_NAME.exec(path.basename(f))![1]))].join(', ');
    throw new DatasetPathError(where, `no "-${split}-" ${shardFileEndings()} files (splits found in the file names: ${found})`);
  }
  return chosen;
}

function byName(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

/** Expands a glob whose wildcards (* ? [..]) are in the file name only, e.g. "cache/c4-train-*.arrow". */
export function expandFileGlob(pattern: string): string[] {
  const dir = path.dirname(pattern);
  const base = path.basename(pattern);
  if (/[*?[]/.test(dir)) {
    throw new DatasetPathError(pattern, 'wildcards are supported in the file name only, not in folder names');
  }
  // Node 20 has no fs.glob; file-name-only patterns need no more than this translation.
  const regex = new RegExp(
    '^' +
      base
        .replace(/[.+^${}()|\\]/g, '\\$&')
        .replace(/\*/g, '[^/]*')
        .replace(/\?/g, '[^/]') +
      '$',
  );
  if (!isDirectory(dir)) throw new DatasetPathError(pattern, `folder ${dir} does not exist`);
  return fs
    .readdirSync(dir)
    .filter((name) => regex.test(name) && isFile(path.join(dir, name)))
    .sort(byName)
    .map((name) => path.join(dir, name));
}

/**
 * Resolves a dataset path to the sorted list of shard files of one split: a save_to_disk
 * DatasetDict folder, a single split folder (state.json), a folder of shard files (*.arrow, or
 * another registered format's), a glob of them, or one shard file. File names with
 * "-train-"/"-validation-" select the split.
 */
export async function listShards(datasetPath: string, split: Split): Promise<string[]> {
  if (!SPLITS.includes(split)) throw new DatasetPathError(datasetPath, `unknown split "${split}"; expected one of ${SPLITS.join(', ')}`);
  if (/[*?[]/.test(path.basename(datasetPath)) && !fs.existsSync(datasetPath)) {
    const files = expandFileGlob(datasetPath).filter(isShardFile);
    if (files.length === 0) throw new DatasetPathError(datasetPath, `the glob matches no ${shardFileEndings()} files`);
    return filterBySplitName(datasetPath, files, split);
  }
  const endings = shardFileEndings();
  if (!fs.existsSync(datasetPath))
    throw new DatasetPathError(datasetPath, `does not exist (expected a dataset folder, a ${endings} file or a glob of ${endings} files)`);
  if (isFile(datasetPath)) {
    if (!isShardFile(datasetPath)) throw new DatasetPathError(datasetPath, `expected a ${endings} file, a dataset folder or a glob of ${endings} files`);
    return filterBySplitName(path.dirname(datasetPath), [datasetPath], split);
  }
  if (isFile(path.join(datasetPath, DATASET_DICT_JSON))) {
    const dict = readJson(path.join(datasetPath, DATASET_DICT_JSON)) as { splits?: unknown };
    if (!Array.isArray(dict.splits)) {
      throw new DatasetPathError(path.join(datasetPath, DATASET_DICT_JSON), 'expected {"splits": ["train", "validation", …]}');
    }
    if (!dict.splits.includes(split)) {
      const missing = `has no "${split}" split (dataset_dict.json lists: ${dict.splits.join(', ') || 'none'})`;
      const load = `datasets.load_from_disk(${JSON.stringify(datasetPath)})`;
      const fix = dict.splits.includes('test')
        ? `to validate on its "test" split, save it as "validation": d = ${load}; datasets.DatasetDict(train=d["train"], validation=d["test"]).save_to_disk("<new folder>")`
        : validationSplitFix(`${load}["train"]`);
      throw new DatasetPathError(datasetPath, split === 'validation' && dict.splits.includes('train') ? `${missing}; ${fix}` : missing);
    }
    const folder = path.join(datasetPath, split);
    if (!isFile(path.join(folder, STATE_JSON))) throw new DatasetPathError(folder, 'split folder has no state.json');
    return shardsOfSplitFolder(folder, split, true);
  }
  if (isFile(path.join(datasetPath, STATE_JSON))) return shardsOfSplitFolder(datasetPath, split, false);
  const files = fs
    .readdirSync(datasetPath)
    .filter((name) => isShardFile(name) && isFile(path.join(datasetPath, name)))
    .sort(byName)
    .map((name) => path.join(datasetPath, name));
  if (files.length === 0) {
    throw new DatasetPathError(datasetPath, `has no dataset_dict.json, no state.json and no ${endings} files`);
  }
  return filterBySplitName(datasetPath, files, split);
}

/**
 * Rows and UTF-8 text bytes of a split, from its shards' scans (Arrow: the IPC message headers, a
 * few small reads per 1,000-row batch, no text is read). bytes is null when a shard's layout does
 * not allow it (Arrow: compressed buffers, dictionary-encoded text).
 */
export async function describeSplit(
  datasetPath: string,
  split: Split,
  column: string,
): Promise<{ shards: string[]; rows: number | null; bytes: number | null }> {
  const shards = await listShards(datasetPath, split);
  let rows = 0;
  let bytes: number | null = 0;
  for (const shard of shards) {
    const scan = await shardFormatOf(shard).scan(shard, column);
    rows += scan.rows;
    bytes = bytes === null || scan.textBytes === null ? null : bytes + scan.textBytes;
  }
  return { shards, rows, bytes };
}
