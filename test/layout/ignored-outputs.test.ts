// What the README's commands write stays out of git: a run records whether its checkout had uncommitted changes
// (env.json "dirty"), and a Quickstart followed to the letter must not make every later run "dirty".
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';

/** The folders the README's commands write into: each `--out PATH`, `→ PATH` and `runs/…` it names, placeholders filled. */
function outputsNamedInReadme(): string[] {
  const readme = readFileSync('README.md', 'utf8');
  const paths = [...readme.matchAll(/(?:--out |→ `?)((?:data|exports|reports|runs|checkpoints)\/[^\s`,)]*)/g)].map((m) => m[1]);
  return [...new Set(paths.map((p) => p.replace(/<[^>]*>/g, 'x')))];
}

describe('outputs git ignores', () => {
  it("every folder the README's commands write is ignored (exports/ of the Quickstart's export included)", () => {
    const outputs = outputsNamedInReadme();
    expect(outputs).toContain('exports/demo-darkformer');
    expect(outputs).toContain('data/tokenizers/x.json');
    for (const extra of ['runs/gpt-softmax-x/final/model.safetensors', 'reports/compare-x/index.html', '.venv-hf/bin/python', 'checkpoints/x'])
      outputs.push(extra);
    const check = spawnSync('git', ['check-ignore', '--no-index', '--verbose', '--non-matching', ...outputs], { encoding: 'utf8' });
    const notIgnored = check.stdout
      .split('\n')
      .filter((line) => line.startsWith('::'))
      .map((line) => line.slice(2).trim());
    expect(notIgnored, check.stderr).toEqual([]);
  });
});
