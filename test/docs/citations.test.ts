// A clone is complete: the code's comments cite notes in docs/ (which exist, down to the numbered section), and
// neither the code nor the docs cite the shared folder's notes or papers beside the checkout, which a clone does not
// have (its fixtures and the benchmark's PyTorch peer are used where present and skipped where not).
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const CODE_DIRS = ['src', 'test', 'bench', 'scripts'];
const CODE_FILE = /\.(ts|mjs|js|py|sh|c|cc)$/;

function codeFiles(): string[] {
  return CODE_DIRS.flatMap((dir) =>
    readdirSync(dir, { recursive: true, encoding: 'utf8' })
      .filter((file) => CODE_FILE.test(file) && !file.split(path.sep).includes('node_modules'))
      .map((file) => path.join(dir, file)),
  );
}

/** Every `docs/….md` a file names, with the `§N.M` that follows it, if any. */
function citations(text: string): { doc: string; section: string | null }[] {
  return [...text.matchAll(/\b(docs\/[\w./-]+\.md)(?:,? §(\d+(?:\.\d+)*))?/g)].map((m) => ({ doc: m[1], section: m[2] ?? null }));
}

describe('citations', () => {
  const files = codeFiles();

  it('finds the code', () => {
    expect(files).toContain(path.join('src', 'model', 'attention', 'slay.ts'));
  });

  it('in code name docs/ files that exist, and sections those files have', () => {
    const problems: string[] = [];
    for (const file of files) {
      for (const { doc, section } of citations(readFileSync(file, 'utf8'))) {
        if (!existsSync(doc)) problems.push(`${file}: ${doc} does not exist`);
        else if (section && !new RegExp(`^#+ ${section.replace(/\./g, '\\.')}\\.? `, 'm').test(readFileSync(doc, 'utf8'))) {
          problems.push(`${file}: ${doc} has no section ${section}`);
        }
      }
    }
    expect(problems).toEqual([]);
  });

  it('in code and docs point at no notes or papers of the shared folder beside the checkout', () => {
    const self = path.join('test', 'docs', 'citations.test.ts'); // its pattern below names what it looks for
    const docs = [
      'README.md',
      ...readdirSync('docs', { recursive: true, encoding: 'utf8' })
        .filter((f) => f.endsWith('.md'))
        .map((f) => path.join('docs', f)),
    ];
    const offending = [...files, ...docs].filter(
      (file) => file !== self && /\.\.\/shared\/(notes|papers)|reference notes|notes §/.test(readFileSync(file, 'utf8')),
    );
    expect(offending).toEqual([]);
  });
});
