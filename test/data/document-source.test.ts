// The document-source extension point: a toy tab-separated format, written here and registered with one call, is
// resolved, read and written by prepareDataset like the built-in inputs, next to a .txt file; an ending another source
// claims, or one overlapping it, is refused.
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { readTextBatches } from '../../src/data/arrow.ts';
import { listShards } from '../../src/data/dataset.ts';
import { InputError } from '../../src/data/prepare/document-source.ts';
import type { DocumentSource, SourceDocument } from '../../src/data/prepare/document-source.ts';
import { prepareDataset } from '../../src/data/prepare/prepare.ts';
import { estimatedTextBytes, registerDocumentSource, resolveInputs, supportedInputs } from '../../src/data/prepare/source-registry.ts';
import { makeTempDir } from '../fixtures/data.ts';

/** A header line of column names, then one document per line. A toy: it reads the whole file (a real source would not). */
const tsvSource: DocumentSource = {
  name: 'toy TSV',
  extensions: ['.tsv'],
  description: '.tsv (toy: a header line, then a document per line)',
  help: '*.tsv  (toy)',
  async *read(file, textColumn, keepColumns): AsyncGenerator<SourceDocument> {
    const [header, ...lines] = fs
      .readFileSync(file, 'utf8')
      .split('\n')
      .filter((line) => line !== '');
    const names = header.split('\t');
    if (!names.includes(textColumn)) throw new InputError(`${file}: no "${textColumn}" column`);
    for (const [i, line] of lines.entries()) {
      const cells = line.split('\t');
      const value = (column: string) => (names.includes(column) ? cells[names.indexOf(column)] : null);
      yield { text: value(textColumn), extra: keepColumns.map(value), where: `${file}:${i + 2}` };
    }
  },
  estimatedTextBytes: () => 12_345,
};

const dir = makeTempDir('document-source');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

const inputs = path.join(dir, 'inputs');
fs.mkdirSync(inputs);
const rows = Array.from({ length: 30 }, (_, i) => ({ text: `tab separated document ${i}`, url: `https://tsv.example.com/${i}` }));
fs.writeFileSync(path.join(inputs, 'a.tsv'), ['url\ttext', ...rows.map((r) => `${r.url}\t${r.text}`)].join('\n'));
fs.writeFileSync(path.join(inputs, 'b.txt'), 'a plain text document\n');

async function readSplit(out: string, column: string): Promise<(string | null)[]> {
  const values: (string | null)[] = [];
  for (const shard of await listShards(out, 'train')) {
    for await (const batch of readTextBatches(shard, column)) values.push(...batch.texts);
  }
  return values;
}

describe('document sources', () => {
  it('refuses an input no registered source reads, naming the inputs it reads', () => {
    expect(() => resolveInputs([inputs])).toThrow(new InputError(`unsupported input file(s): ${path.join(inputs, 'a.tsv')}; expected ${supportedInputs()}`));
    expect(supportedInputs()).not.toContain('.tsv');
  });

  it('refuses an ending another source claims, or one that overlaps it, naming both sources', () => {
    const claiming = (...extensions: string[]) => ({ ...tsvSource, name: 'greedy', extensions });
    expect(() => registerDocumentSource(claiming('.TXT'))).toThrow('document source greedy: the ending .txt is already read by text files');
    expect(() => registerDocumentSource(claiming('.gz'))).toThrow('document source greedy: the ending .gz overlaps .jsonl.gz, read by JSON Lines');
    expect(() => registerDocumentSource(claiming('.csv', 'backup.parquet'))).toThrow('the ending backup.parquet overlaps .parquet, read by Parquet');
    expect(supportedInputs()).not.toContain('greedy');
  });

  it('prepares a dataset from a registered toy source beside a built-in one, with its kept column and its size estimate', async () => {
    registerDocumentSource(tsvSource);
    expect(supportedInputs().endsWith(', .tsv (toy: a header line, then a document per line)')).toBe(true);
    const files = resolveInputs([inputs]);
    expect(files).toEqual([path.join(inputs, 'a.tsv'), path.join(inputs, 'b.txt')]);
    expect(estimatedTextBytes(files)).toBe(12_345 + fs.statSync(path.join(inputs, 'b.txt')).size);

    const out = path.join(dir, 'out');
    const summary = await prepareDataset({ inputs: [inputs], out, keepColumns: ['url'], validationFraction: 0, keepOrder: true });
    expect(summary).toMatchObject({ inputFiles: 2, documents: rows.length + 1, skippedEmpty: 0 });
    expect(await readSplit(out, 'text')).toEqual([...rows.map((r) => r.text), 'a plain text document\n']);
    expect(await readSplit(out, 'url')).toEqual([...rows.map((r) => r.url), null]);
  });

  it('passes the source’s own errors through, naming the file', async () => {
    const bad = path.join(dir, 'bad.tsv');
    fs.writeFileSync(bad, 'url\tbody\nx\ty\n');
    await expect(prepareDataset({ inputs: [bad], out: path.join(dir, 'bad-out') })).rejects.toThrow(`${bad}: no "text" column`);
    expect(fs.existsSync(path.join(dir, 'bad-out'))).toBe(false);
  });
});
