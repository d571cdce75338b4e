// The homes of docs/layout.md "Recipe and store", checked on the source: which folders each may import from, and the
// run-folder layout's file names spelled in one place (src/store/layout.ts).
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const SRC = path.resolve('src');

function sources(dir = SRC): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name);
    return entry.isDirectory() ? sources(file) : /\.(ts|mjs)$/.test(entry.name) ? [file] : [];
  });
}

/** What `folder`'s files import from other top folders of src/ (static and dynamic imports), as "file → module". */
function importsOutside(folder: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const file of sources(path.join(SRC, folder))) {
    for (const [, spec] of readFileSync(file, 'utf8').matchAll(/(?:from|import\()\s*'(\.[^']+)'/g)) {
      const target = path.relative(SRC, path.resolve(path.dirname(file), spec));
      const top = target.split(path.sep)[0];
      if (top !== folder) out.set(top, [...(out.get(top) ?? []), `${path.relative(SRC, file)} → ${target}`]);
    }
  }
  return out;
}

describe('homes', () => {
  it.each([
    ['recipe', ['hf', 'train', 'store']],
    ['hf', ['recipe', 'train', 'store']],
    ['store', ['train', 'telemetry', 'sweep', 'paper', 'cli']],
  ] as [string, string[]][])('src/%s imports nothing from %j', (folder, forbidden) => {
    const imports = importsOutside(folder);
    for (const top of forbidden) {
      expect(imports.get(top) ?? [], `src/${folder} → src/${top}`).toEqual([]);
    }
  });

  it('src/train reaches src/hf only through src/store', () => {
    expect(importsOutside('train').get('hf') ?? []).toEqual([]);
  });

  it("the run folder's and model folder's file names are spelled only in src/store/layout.ts", () => {
    const names = [
      'model.safetensors',
      'recipe.json',
      'tokenizer.json',
      'config.json',
      'optimizer.safetensors',
      'cursor.json',
      'state.json',
      'summary.json',
      'env.json',
      'metrics.jsonl',
      'log.txt',
      '.slayformer-run',
      'checkpoints',
      'final',
    ];
    // Hugging Face's own layout (a format of its own, beneath store) and the `datasets` library's state.json.
    const elsewhere: Record<string, string[]> = {
      [path.join('hf', 'folder.ts')]: ['config.json', 'model.safetensors', 'tokenizer.json'],
      [path.join('data', 'dataset.ts')]: ['state.json'],
    };
    const found: string[] = [];
    for (const file of sources()) {
      const relative = path.relative(SRC, file);
      if (relative === path.join('store', 'layout.ts')) continue;
      const text = readFileSync(file, 'utf8');
      for (const name of names) if (text.includes(`'${name}'`) && !elsewhere[relative]?.includes(name)) found.push(`${relative}: '${name}'`);
    }
    expect(found).toEqual([]);
  });
});
