// The house plan (docs/layout.md): every import in src/ runs downward or stays in its own layer, in the order
//   cli → paper → sweep → report → train → telemetry → store → recipe → hf → data → model → backend → core
// (npm run check:imports, in CI, finds circles; this finds an arrow back up, which a circle needs but an arrow alone
// does not). Static and dynamic imports both count.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve(import.meta.dirname, '..', '..', 'src');
const LAYERS = ['cli', 'paper', 'sweep', 'report', 'train', 'telemetry', 'store', 'recipe', 'hf', 'data', 'model', 'backend', 'core'];
/** Files at the top of src/ belong to a layer too. */
const ROOT_FILES: Record<string, string> = { 'tsx-import.ts': 'core' };

function layerOf(file: string): string {
  const [first] = path.relative(SRC, file).split(path.sep);
  const layer = ROOT_FILES[first] ?? first;
  if (!LAYERS.includes(layer)) throw new Error(`${file}: src/${first} is in no layer of docs/layout.md`);
  return layer;
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
    e.isDirectory() ? sources(path.join(dir, e.name)) : /\.(ts|mjs)$/.test(e.name) ? [path.join(dir, e.name)] : [],
  );
}

describe('layers', () => {
  it('every import in src/ points to its own layer or one below', () => {
    const upward: string[] = [];
    for (const file of sources(SRC)) {
      const text = readFileSync(file, 'utf8');
      for (const match of text.matchAll(/(?:from\s+|import\(\s*)'(\.{1,2}\/[^']+)'/g)) {
        const target = path.resolve(path.dirname(file), match[1]);
        const [from, to] = [layerOf(file), layerOf(target)];
        if (LAYERS.indexOf(to) < LAYERS.indexOf(from)) upward.push(`${path.relative(SRC, file)} (${from}) → ${match[1]} (${to})`);
      }
    }
    expect(upward).toEqual([]);
  });

  it('a sweep file loads and packs its runs onto cores without src/train (spec.ts, grid.ts import none of it)', () => {
    const training: string[] = [];
    for (const name of ['spec.ts', 'grid.ts']) {
      const file = path.join(SRC, 'sweep', name);
      for (const match of readFileSync(file, 'utf8').matchAll(/(?:from\s+|import\(\s*)'(\.{1,2}\/[^']+)'/g)) {
        if (layerOf(path.resolve(path.dirname(file), match[1])) === 'train') training.push(`sweep/${name} → ${match[1]}`);
      }
    }
    expect(training).toEqual([]);
  });

  it('inside src/data, imports run downward: prepare/, then the eval sample and tokenizer training, the stream, the reader and epoch estimate, the rest', () => {
    const DATA = path.join(SRC, 'data');
    // Higher may import lower or equal; files not named here are the bottom.
    const rankOf = (file: string): number => {
      const name = path.relative(DATA, file).split(path.sep).join('/');
      if (name.startsWith('prepare/')) return 4;
      return { 'eval-sample.ts': 3, 'train-tokenizer.ts': 3, 'stream.ts': 2, 'reader.ts': 1, 'epoch.ts': 1 }[name] ?? 0;
    };
    const upward: string[] = [];
    for (const file of sources(DATA)) {
      for (const match of readFileSync(file, 'utf8').matchAll(/(?:from\s+|import\(\s*)'(\.{1,2}\/[^']+)'/g)) {
        const target = path.resolve(path.dirname(file), match[1]);
        if (!target.startsWith(DATA + path.sep)) continue;
        if (rankOf(target) > rankOf(file)) upward.push(`${path.relative(SRC, file)} → ${match[1]}`);
      }
    }
    expect(upward).toEqual([]);
  });
});
