// A sweep's grid: its cases crossed with every combination of its axes, each combination a run, and the run's name
// made of the values that vary (src/sweep/spec.ts reads the file and makes each run's recipe). Later sources win:
// base recipe < set < case < grid axes.
import path from 'node:path';
import { BOUNDS, listSome } from '../core/bounds.ts';
import { canonicalJson } from '../core/json.ts';

/** The key whose values are seeds: the report groups runs over it and pairs runs by it. */
const SEED_KEY = 'train.seed';
/** A whole attention entry (a name, or { name, options }) that replaces the base recipe's, options included. */
export const ATTENTION_KEY = 'model.attention';

/** Recipe keys (dotted) with their values, written in one place of the sweep file or on the command line. */
export interface Source {
  /** Where the values were written, for messages: "set", "cases[1]", "grid.train.seed[2]". */
  where: string;
  recipeFile: string | null;
  label: string | null;
  values: Map<string, unknown>;
}

export interface Axis {
  key: string;
  values: unknown[];
}

/** The runs the cases and axes make, refused beyond the bounds table's sweepRuns before any is expanded. */
export function runCountProblems(cases: Source[], axes: Axis[]): string[] {
  const runs = Math.max(1, cases.length) * axes.reduce((n, axis) => n * axis.values.length, 1);
  if (runs <= BOUNDS.sweepRuns.max) return [];
  const factors = [...(cases.length > 1 ? [`${cases.length} cases`] : []), ...axes.map((a) => `grid.${a.key} (${a.values.length})`)];
  return [
    `${listSome(factors, ' × ')} make ${runs.toLocaleString('en-US')} runs; a sweep has at most ${BOUNDS.sweepRuns.max.toLocaleString('en-US')} (${BOUNDS.sweepRuns.why}): split it into several sweep files`,
  ];
}

/** Every case × every combination of the axes, first axis slowest; each run is its list of sources. */
export function expand(cases: Source[], axes: Axis[]): Source[][] {
  let combos: Source[][] = cases.map((c) => [c]);
  for (const axis of axes) {
    combos = combos.flatMap((combo) =>
      axis.values.map((value, i) => [...combo, { where: `grid.${axis.key}[${i}]`, recipeFile: null, label: null, values: new Map([[axis.key, value]]) }]),
    );
  }
  return combos;
}

export function mergedValues(sources: Source[]): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const source of sources) for (const [k, v] of source.values) out[k] = v;
  return out;
}

/** Keys (and `recipe` for cases that switch the base file) whose value is not the same in every run. */
export function varyingKeys(combos: Source[][], baseRecipe: string | null): string[] {
  const keys: string[] = [];
  const valuesOf = (key: string) =>
    combos.map((combo) =>
      canonicalJson(key === 'recipe' ? ([...combo].reverse().find((s) => s.recipeFile)?.recipeFile ?? baseRecipe) : mergedValues(combo)[key]),
    );
  for (const key of ['recipe', ...new Set(combos.flatMap((combo) => combo.flatMap((s) => [...s.values.keys()])))]) {
    if (new Set(valuesOf(key)).size > 1) keys.push(key);
  }
  return keys;
}

/**
 * The run's name: its case's label (or the case's varying values), then one part per varying grid axis, joined by
 * '-' (the sweep's name when nothing varies). Numbers and booleans are `<last key segment><value>` (`seed2`, `lr0.001`), strings their value, attention
 * entries their name (plus the options that tell apart entries of the same name), other values their position.
 */
export function runName(combo: Source[], varying: string[], axes: Axis[], sweepName: string): { name: string; group: string; pairing: string } {
  const parts: { part: string; key: string }[] = [];
  for (const source of combo) {
    const axis = axes.find((a) => source.where.startsWith(`grid.${a.key}[`));
    if (axis) {
      if (!varying.includes(axis.key)) continue;
      const index = Number(/\[(\d+)\]$/.exec(source.where)![1]);
      parts.push({ part: valuePart(axis.key, axis.values[index], index, axis.values), key: axis.key });
    } else if (source.label !== null) {
      parts.push({ part: source.label, key: 'label' });
    } else {
      const own = [...source.values].filter(([k]) => varying.includes(k)).map(([k, v]) => valuePart(k, v, 0, [v]));
      if (source.recipeFile !== null && varying.includes('recipe')) own.unshift(sanitize(path.basename(source.recipeFile, path.extname(source.recipeFile))));
      if (own.length > 0) parts.push({ part: own.join('-'), key: 'case' });
    }
  }
  const without = (...keys: string[]) =>
    parts
      .filter((p) => !keys.includes(p.key))
      .map((p) => p.part)
      .join('-') || sweepName;
  return { name: without(), group: without(SEED_KEY), pairing: without(SEED_KEY, ATTENTION_KEY, `${ATTENTION_KEY}.name`) };
}

function valuePart(key: string, value: unknown, index: number, all: unknown[]): string {
  if (key === ATTENTION_KEY) {
    const entry = attentionEntry(value);
    const sameName = all.map(attentionEntry).filter((e) => e.name === entry.name);
    if (sameName.length < 2) return sanitize(entry.name);
    const differing = Object.keys(entry.options).filter((k) => sameName.some((e) => canonicalJson(e.options[k]) !== canonicalJson(entry.options[k])));
    return sanitize([entry.name, ...differing.map((k) => `${k}${String(entry.options[k])}`)].join('-'));
  }
  const last = key.split('.').at(-1)!;
  if (typeof value === 'string') return sanitize(path.basename(value));
  if (typeof value === 'number' || typeof value === 'boolean' || value === null) return sanitize(`${last}${String(value)}`);
  return `${last}${index}`;
}

export function attentionEntry(value: unknown): { name: string; options: Record<string, unknown> } {
  if (typeof value === 'string') return { name: value, options: {} };
  const entry = value as { name: string; options?: Record<string, unknown> | null };
  return { name: entry.name, options: entry.options ?? {} };
}

const sanitize = (text: string) => text.replace(/[^A-Za-z0-9._-]+/g, '_');

export function checkUniqueNames(runs: { name: string; where: string }[], problems: string[]): void {
  const seen = new Map<string, string>();
  for (const run of runs) {
    const other = seen.get(run.name);
    if (other !== undefined) problems.push(`two runs get the name ${run.name} (${other} and ${run.where}); give the cases a label`);
    else seen.set(run.name, run.where);
  }
}
