// JSON values and files, one of each helper for the whole project: what a plain object is, reading a JSON file (as an
// error naming the file, or as "not recorded" where a missing or broken file is an answer), the canonical text two
// values are compared by, and dotted key paths (`train.lr`) into nested mappings.
import { readFileSync } from 'node:fs';

/** A plain JSON object (a mapping): not null, not a list. */
export function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/**
 * The JSON value in `file`. A file that cannot be read or does not parse throws `fail(problem)`, where problem is
 * "cannot be read (ENOENT)" or "not valid JSON (…)"; the default error is `<file>: <problem>`, and a caller with its
 * own error class (a dataset's, an input's) passes one.
 */
export function readJsonFile(file: string, fail: (problem: string) => Error = (problem) => new Error(`${file}: ${problem}`)): unknown {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (err) {
    throw fail(`cannot be read (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw fail(`not valid JSON (${(err as Error).message})`);
  }
}

/**
 * The JSON object in `file`, or undefined when the file is missing, is not JSON, or holds no object: for files the
 * project wrote and reads for what they say about a run (an old or interrupted run folder may lack one, a lock may be
 * cut short by a crash), where no answer is an answer.
 */
export function readJsonObject(file: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(readFileSync(file, 'utf8'));
    return isRecord(value) ? value : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The JSON text of `value` with every object's keys sorted, so that equal values give equal text whatever order their
 * keys were written in (recipes of two runs, a checkpoint's against the current one, a sweep's axis values). Like
 * JSON.stringify, it leaves out undefined properties (a value read back from a JSON file has none) and writes an
 * undefined list element as null; `undefined` itself gives 'undefined', so a missing value differs from every JSON one.
 * Hand-written: no stable-stringify package is among the dependencies, and it is these few lines.
 */
export function canonicalJson(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? 'null' : canonicalJson(v))).join(',')}]`;
  if (isRecord(value)) {
    const keys = Object.keys(value)
      .filter((k) => value[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(',')}}`;
  }
  return JSON.stringify(value) ?? 'undefined';
}

/** Sets `target`'s value at a dotted path (`train.lr`), making (or replacing with) a mapping at every step before the last. */
export function setPath(target: Record<string, unknown>, dotted: string, value: unknown): void {
  const parts = dotted.split('.');
  let node = target;
  for (const part of parts.slice(0, -1)) {
    if (!isRecord(node[part])) node[part] = {};
    node = node[part] as Record<string, unknown>;
  }
  node[parts.at(-1)!] = value;
}

/**
 * Nested mappings as dotted paths (`{ train: { lr: 1 } }` → `{ 'train.lr': 1 }`); lists, scalars and empty mappings
 * are values, undefined ones are left out. `stopAt(path)` makes a mapping at that path a value too (an attention's
 * options); a key that is already dotted (`{ 'train.lr': 1 }`) reads the same as the nested one.
 */
export function flattenPaths(node: Record<string, unknown>, stopAt: (path: string) => boolean = () => false, prefix = ''): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    const path = prefix + key;
    if (value === undefined) continue;
    if (isRecord(value) && Object.keys(value).length > 0 && !stopAt(path)) Object.assign(out, flattenPaths(value, stopAt, `${path}.`));
    else out[path] = value;
  }
  return out;
}
