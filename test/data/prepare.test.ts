import fs from 'node:fs';
import path from 'node:path';
import zlib from 'node:zlib';
import { createHash } from 'node:crypto';
import { execFileSync, spawnSync } from 'node:child_process';
import os from 'node:os';
import { afterAll, describe, expect, it } from 'vitest';
import { readTextBatches } from '../../src/data/arrow.ts';
import { describeSplit, listShards } from '../../src/data/dataset.ts';
import { prepareDemoCorpus, sotuDataDir } from '../../src/data/prepare/demo-corpus.ts';
import { DOCUMENT_ORDER_FILE, IN_MEMORY_SHUFFLE_BYTES, orderDocuments } from '../../src/data/prepare/document-order.ts';
import type { DocumentOrderRecord } from '../../src/data/prepare/document-order.ts';
import { formatSummary, prepareDataset, writeSplitDataset } from '../../src/data/prepare/prepare.ts';
import { parseShardSize } from '../../src/data/prepare/split-writer.ts';
import { makeTempDir, readAllBatches } from '../fixtures/data.ts';

const dir = makeTempDir('prepare');
afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

async function readSplit(out: string, split: 'train' | 'validation', column = 'text'): Promise<(string | null)[]> {
  const values: (string | null)[] = [];
  for (const shard of await listShards(out, split)) {
    for await (const batch of readTextBatches(shard, column)) values.push(...batch.texts);
  }
  return values;
}

const sorted = (xs: (string | null)[]) => [...xs].map(String).sort();
const utf8Bytes = (xs: string[]) => xs.reduce((s, t) => s + Buffer.byteLength(t), 0);

// C4-like records: {"text", "timestamp", "url"}.
function c4Records(n: number, tag: string) {
  return Array.from({ length: n }, (_, i) => ({
    text: `${tag} document ${i}. ${'Some words here, ünïcode too. '.repeat(1 + (i % 5))}`,
    timestamp: `2019-04-${String(1 + (i % 28)).padStart(2, '0')}T00:00:00Z`,
    url: `https://${tag}.example.com/${i}`,
  }));
}
const jsonlRecords = c4Records(180, 'jsonl');
const gzRecords = c4Records(120, 'gz');
const txtDocs = Array.from({ length: 12 }, (_, i) => `Text file ${i}\nwith two lines and a trailing newline\n`);

const inputs = path.join(dir, 'inputs');
fs.mkdirSync(path.join(inputs, 'txt', 'nested'), { recursive: true });
fs.writeFileSync(
  path.join(inputs, 'part.jsonl'),
  [...jsonlRecords.slice(0, 90), { text: '', url: 'empty' }, ...jsonlRecords.slice(90), { text: '   \n', url: 'blank' }]
    .map((r) => JSON.stringify(r))
    .join('\n') + '\n\n',
);
fs.writeFileSync(path.join(inputs, 'c4-train.00000-of-01024.json.gz'), zlib.gzipSync(gzRecords.map((r) => JSON.stringify(r)).join('\n')));
txtDocs.forEach((t, i) => fs.writeFileSync(path.join(inputs, 'txt', i % 2 ? 'nested' : '', `doc-${String(i).padStart(2, '0')}.txt`), t));
const allDocs = [...jsonlRecords.map((r) => r.text), ...gzRecords.map((r) => r.text), ...txtDocs];

describe('prepareDataset', () => {
  const out = path.join(dir, 'mixed');
  let summary: Awaited<ReturnType<typeof prepareDataset>>;

  it('writes jsonl, json.gz and .txt folders into a split whose union is exactly the input documents', async () => {
    summary = await prepareDataset({
      inputs: [path.join(inputs, 'part.jsonl'), path.join(inputs, 'c4-train.00000-of-01024.json.gz'), path.join(inputs, 'txt')],
      out,
      keepColumns: ['url', 'timestamp'],
      validationFraction: 0.2,
      seed: 7,
    });
    const train = await readSplit(out, 'train');
    const validation = await readSplit(out, 'validation');
    expect(sorted([...train, ...validation])).toEqual(sorted(allDocs));
    expect(validation.length).toBeGreaterThan(0.1 * allDocs.length);
    expect(validation.length).toBeLessThan(0.3 * allDocs.length);
    expect(summary).toMatchObject({ inputFiles: 14, documents: allDocs.length, bytes: utf8Bytes(allDocs), skippedEmpty: 2, shards: 2 });
    expect(summary.splits.train.documents).toBe(train.length);
    expect(summary.splits.validation.bytes).toBe(utf8Bytes(validation as string[]));
    expect(fs.readdirSync(out).sort()).toEqual(['.slayformer-prepared', 'dataset_dict.json', DOCUMENT_ORDER_FILE, 'train', 'validation']);
    expect(fs.readdirSync(path.join(out, 'train')).sort()).toEqual(['data-00000-of-00001.arrow', 'dataset_info.json', 'state.json']);
  });

  it('keeps the asked-for extra columns aligned with their documents (null where absent)', async () => {
    const texts = [...(await readSplit(out, 'train')), ...(await readSplit(out, 'validation'))];
    const urls = [...(await readSplit(out, 'train', 'url')), ...(await readSplit(out, 'validation', 'url'))];
    const byText = new Map(texts.map((t, i) => [t, urls[i]]));
    for (const r of [...jsonlRecords, ...gzRecords]) expect(byText.get(r.text)).toBe(r.url);
    for (const t of txtDocs) expect(byText.get(t)).toBeNull();
    const { batches, metadata } = await readAllBatches((await listShards(out, 'train'))[0]);
    expect(batches[0].schema.fields.map((f) => f.name)).toEqual(['text', 'url', 'timestamp']);
    expect(Object.keys(JSON.parse(metadata.get('huggingface')!).info.features)).toEqual(['text', 'url', 'timestamp']);
  });

  it('prints the counts it wrote', () => {
    const lines = formatSummary(summary);
    expect(lines[0]).toBe(
      `wrote ${allDocs.length} documents, ${utf8Bytes(allDocs)} bytes of text (${(utf8Bytes(allDocs) / 1e6).toFixed(2)} MB), 2 shards to ${out}`,
    );
    expect(lines).toContain(`  train: ${summary.splits.train.documents} documents, ${summary.splits.train.bytes} bytes, 1 shard(s)`);
    expect(lines).toContain('skipped 2 empty documents');
  });

  it('draws the split from the seed: same seed, same split; another seed, another split', async () => {
    const run = async (seed: number, name: string) => {
      const o = path.join(dir, name);
      await prepareDataset({ inputs: [path.join(inputs, 'part.jsonl')], out: o, validationFraction: 0.3, seed });
      return { train: await readSplit(o, 'train'), validation: await readSplit(o, 'validation') };
    };
    const a = await run(1, 'seed1a');
    const b = await run(1, 'seed1b');
    const c = await run(2, 'seed2');
    expect(b).toEqual(a);
    expect(c.validation).not.toEqual(a.validation);
    for (const s of [a, c]) expect(sorted([...s.train, ...s.validation])).toEqual(sorted(jsonlRecords.map((r) => r.text)));
  });

  it('cuts shards by rows or by size, with 1,000-row record batches inside', async () => {
    const many = path.join(dir, 'many.jsonl');
    const docs = Array.from({ length: 2600 }, (_, i) => `row ${i}`);
    fs.writeFileSync(many, docs.map((text) => JSON.stringify({ text })).join('\n'));
    const byRows = path.join(dir, 'by-rows');
    const s = await prepareDataset({ inputs: [many], out: byRows, validationFraction: 0, shardSize: '1200', keepOrder: true });
    const shards = await listShards(byRows, 'train');
    expect(shards.map((f) => path.basename(f))).toEqual(['data-00000-of-00003.arrow', 'data-00001-of-00003.arrow', 'data-00002-of-00003.arrow']);
    const batchSizes = await Promise.all(shards.map(async (f) => (await readAllBatches(f)).batches.map((b) => b.numRows)));
    expect(batchSizes).toEqual([[1000, 200], [1000, 200], [200]]);
    expect(await readSplit(byRows, 'train')).toEqual(docs);
    expect(s.splits.validation.documents).toBe(0);
    expect(await readSplit(byRows, 'validation')).toEqual([]); // one schema-only shard, as save_to_disk writes
    expect((await describeSplit(byRows, 'train', 'text')).rows).toBe(2600);

    const bySize = path.join(dir, 'by-size');
    await prepareDataset({ inputs: [many], out: bySize, validationFraction: 0, shardSize: '10KB', keepOrder: true });
    const sizeShards = await listShards(bySize, 'train');
    expect(sizeShards.length).toBeGreaterThan(1);
    expect(await readSplit(bySize, 'train')).toEqual(docs);
    expect(parseShardSize('500MB')).toEqual({ bytes: 500e6 });
    expect(parseShardSize('1.5GiB')).toEqual({ bytes: 1.5 * 1024 ** 3 });
    expect(parseShardSize('100000')).toEqual({ rows: 100000 });
  });

  it('writes the documents in a seeded random order recorded in document_order.json; --keep-order keeps the file order', async () => {
    const rows = path.join(dir, 'rows.jsonl');
    const docs = Array.from({ length: 2000 }, (_, i) => `row ${i}`);
    fs.writeFileSync(rows, docs.map((text) => JSON.stringify({ text })).join('\n'));
    const written = async (name: string, options: { seed?: number; keepOrder?: boolean }) => {
      const out = path.join(dir, name);
      await prepareDataset({ inputs: [rows], out, validationFraction: 0, ...options });
      const record = JSON.parse(fs.readFileSync(path.join(out, DOCUMENT_ORDER_FILE), 'utf8')) as DocumentOrderRecord;
      return {
        texts: await readSplit(out, 'train'),
        record,
        description: (JSON.parse(fs.readFileSync(path.join(out, 'train', 'dataset_info.json'), 'utf8')) as { description: string }).description,
      };
    };
    const a = await written('order-1a', { seed: 1 });
    const b = await written('order-1b', { seed: 1 });
    const c = await written('order-2', { seed: 2 });
    expect(b.texts).toEqual(a.texts);
    expect(c.texts).not.toEqual(a.texts);
    expect(sorted(a.texts)).toEqual(sorted(docs));
    // Not the file order, nor close to it: the first tenth written comes from all over the input.
    const firstTenth = a.texts.slice(0, 200).map((t) => Number(t!.slice(4)));
    expect(Math.min(...firstTenth)).toBeLessThan(200);
    expect(Math.max(...firstTenth)).toBeGreaterThan(1800);
    // The record: the seed, and the input index of each written document, hashed as uint32 little-endian.
    expect(a.record).toMatchObject({ order: 'seeded-random', seed: 1, documents: 2000 });
    expect(a.record.permutation!.map((i) => docs[i])).toEqual(a.texts);
    const le = Buffer.alloc(4 * 2000);
    a.record.permutation!.forEach((index, k) => le.writeUInt32LE(index, 4 * k));
    expect(a.record.sha256).toBe(createHash('sha256').update(le).digest('hex'));
    expect(c.record.sha256).not.toBe(a.record.sha256);
    expect(a.description).toContain('Documents in a seeded random order (seed 1).');

    const kept = await written('order-kept', { seed: 1, keepOrder: true });
    expect(kept.texts).toEqual(docs);
    expect(kept.record).toMatchObject({ order: 'input', seed: null, documents: 2000, permutation: docs.map((_, i) => i) });
    expect(kept.description).toContain('Documents in input order.');
  });

  it('shuffles inputs too large for memory through bucket files: a seeded permutation, the bucket files removed', async () => {
    const docs = Array.from({ length: 3000 }, (_, i) => ({ text: `doc ${i}`, extra: [String(i)], where: `input:${i}` }));
    async function* source() {
      yield* docs;
    }
    const run = async (seed: number) => {
      const workDir = path.join(dir, `buckets-${seed}`);
      const ordered = orderDocuments(source(), { seed, keepOrder: false, estimatedBytes: 3 * IN_MEMORY_SHUFFLE_BYTES, workDir });
      const out = [];
      for await (const doc of ordered.documents) out.push(doc);
      expect(fs.existsSync(workDir)).toBe(false);
      return { out, record: ordered.record() };
    };
    const a = await run(4);
    expect(await run(4)).toEqual(a);
    expect((await run(5)).record.sha256).not.toBe(a.record.sha256);
    expect(a.record.permutation!.map((i) => docs[i])).toEqual(a.out);
    expect([...a.record.permutation!].sort((x, y) => x - y)).toEqual(docs.map((_, i) => i));
    const firstTenth = a.record.permutation!.slice(0, 300);
    expect(Math.min(...firstTenth)).toBeLessThan(300);
    expect(Math.max(...firstTenth)).toBeGreaterThan(2700);
  });

  it('gives both splits a document even from two documents', async () => {
    const two = path.join(dir, 'two.jsonl');
    fs.writeFileSync(two, '{"text": "first"}\n{"text": "second"}\n');
    for (const seed of [0, 1, 2, 3]) {
      const o = path.join(dir, `two-${seed}`);
      const s = await prepareDataset({ inputs: [two], out: o, validationFraction: 0.05, seed });
      expect([s.splits.train.documents, s.splits.validation.documents]).toEqual([1, 1]);
    }
  });

  it('reads parquet inputs row group by row group (snappy and gzip; fixtures written by pyarrow)', async () => {
    // test/fixtures/parquet/make.py: 250 rows in row groups of 100, text null at row 7; gzip.parquet = rows 0..19.
    const fixtures = path.join(import.meta.dirname, '..', 'fixtures', 'parquet');
    const expected = (n: number) => Array.from({ length: n }, (_, i) => `parquet doc ${i}: ünïcode ok`).filter((_, i) => i !== 7);
    const out = path.join(dir, 'parquet');
    const s = await prepareDataset({
      inputs: [path.join(fixtures, 'c4-like.parquet'), path.join(fixtures, 'gzip.parquet')],
      out,
      keepColumns: ['url', 'timestamp'],
      validationFraction: 0.1,
    });
    expect(s).toMatchObject({ documents: 249 + 19, skippedEmpty: 2 });
    const docs = [...(await readSplit(out, 'train')), ...(await readSplit(out, 'validation'))];
    expect(sorted(docs)).toEqual(sorted([...expected(250), ...expected(20)]));
    const urls = [...(await readSplit(out, 'train', 'url')), ...(await readSplit(out, 'validation', 'url'))];
    const stamps = [...(await readSplit(out, 'train', 'timestamp')), ...(await readSplit(out, 'validation', 'timestamp'))];
    docs.forEach((text, k) => {
      const i = Number(/doc (\d+):/.exec(text!)![1]);
      expect(urls[k]).toBe(`https://p.example.com/${i}`);
      expect(stamps[k]).toBe(`2019-04-${String(1 + (i % 28)).padStart(2, '0')}T00:00:00.000Z`);
    });
  });
});

describe('npm run prepare (CLI)', () => {
  it('prints documents, bytes, shards and skipped empty documents', () => {
    const out = path.join(dir, 'cli-out');
    const result = spawnSync(
      process.execPath,
      ['--import', 'tsx', 'src/cli/prepare.ts', path.join(inputs, 'part.jsonl'), '--out', out, '--seed', '3', '--keep-order'],
      {
        encoding: 'utf8',
      },
    );
    expect(result.status, result.stderr).toBe(0);
    const docs = jsonlRecords.map((r) => r.text);
    expect(result.stdout).toContain(`wrote ${docs.length} documents, ${utf8Bytes(docs)} bytes of text`);
    expect(result.stdout).toContain('2 shards');
    expect(result.stdout).toContain('skipped 2 empty documents');
    expect(result.stdout).toContain(`documents in input order (--keep-order); order sha256 `);
    const again = spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/prepare.ts', path.join(inputs, 'part.jsonl'), '--out', out], { encoding: 'utf8' });
    expect(again.status).toBe(1);
    expect(again.stderr).toContain(`${out}: the output folder already exists (pass --overwrite to replace an earlier prepare output)`);
  });
});

describe('prepare --overwrite', () => {
  const input = () => path.join(inputs, 'part.jsonl');
  const tree = (folder: string): string[] =>
    fs
      .readdirSync(folder, { recursive: true, encoding: 'utf8' })
      .sort()
      .map((f) => `${f}:${fs.statSync(path.join(folder, f)).isFile() ? fs.readFileSync(path.join(folder, f), 'utf8') : '/'}`);

  it('replaces an earlier prepare output, and refuses any other folder, naming it, with every file kept', async () => {
    const out = path.join(dir, 'overwrite-earlier');
    const first = await prepareDataset({ inputs: [input()], out, validationFraction: 0.3, seed: 1 });
    const again = await prepareDataset({ inputs: [input()], out, validationFraction: 0.3, seed: 2, overwrite: true });
    expect(again.documents).toBe(first.documents);
    expect((await readSplit(out, 'validation')).length).toBe(again.splits.validation.documents);
    expect(fs.readdirSync(path.dirname(out)).filter((e) => e.startsWith('overwrite-earlier.'))).toEqual([]); // nothing left aside

    // A folder of someone else's (a thesis), and one holding datasets and tokenizers (--out data): refused, kept whole.
    const thesis = path.join(dir, 'thesis');
    fs.mkdirSync(path.join(thesis, 'sub'), { recursive: true });
    fs.writeFileSync(path.join(thesis, 'thesis.tex'), '\\documentclass{article}');
    fs.writeFileSync(path.join(thesis, 'sub', 'notes.txt'), 'mine');
    const before = tree(thesis);
    await expect(prepareDataset({ inputs: [input()], out: thesis, overwrite: true })).rejects.toThrow(
      `${thesis} was not written by npm run prepare (it has no .slayformer-prepared marker); not replacing it: move it away or choose another --out`,
    );
    expect(tree(thesis)).toEqual(before);

    // An earlier output with a file of someone else's added: refused too.
    fs.writeFileSync(path.join(out, 'train', 'notes.md'), 'mine');
    await expect(prepareDataset({ inputs: [input()], out, overwrite: true })).rejects.toThrow(
      `${out} was not written by npm run prepare (it holds train/notes.md, which prepare does not write); not replacing it`,
    );
    expect(fs.readFileSync(path.join(out, 'train', 'notes.md'), 'utf8')).toBe('mine');
  });
});

describe('prepare never writes through a symbolic link', () => {
  it('planted in its staging folder at document_order.json, dataset_dict.json, a split file or a shard: refused naming it, the target kept, no output', async () => {
    const victim = path.join(dir, 'link-victim.txt');
    for (const name of [
      'document_order.json',
      'dataset_dict.json',
      '.slayformer-prepared',
      'train/state.json',
      'train/dataset_info.json',
      'train/partial-00000.arrow',
    ]) {
      fs.writeFileSync(victim, "not prepare's");
      const out = path.join(dir, `linked-${name.replace(/\W/g, '-')}`);
      const planted = path.join(`${out}.partial-${process.pid}`, name);
      // The link appears while prepare reads its inputs, as another user's could in a shared folder.
      async function* documents() {
        fs.mkdirSync(path.dirname(planted), { recursive: true });
        fs.symlinkSync(victim, planted);
        for (let i = 0; i < 4; i++) yield { text: `document ${i}`, extra: [], where: `input:${i}` };
      }
      const order = () => ({ order: 'input' as const, seed: null, documents: 4, sha256: '0'.repeat(64) });
      const options = { out, textColumn: 'text', extraColumns: [], validationFraction: 0, seed: 1, shardSize: parseShardSize('1000'), overwrite: false };
      await expect(writeSplitDataset(documents(), { ...options, description: '', order }), name).rejects.toThrow(
        `${planted} is a symbolic link where slayformer keeps a file of its own: nothing is written through it (remove the link)`,
      );
      expect(fs.readFileSync(victim, 'utf8'), name).toBe("not prepare's");
      expect(fs.existsSync(out), name).toBe(false);
      expect(fs.existsSync(`${out}.partial-${process.pid}`), name).toBe(false);
    }
  });
});

/** A 64 KiB tmpfs standing for a full disk, or null where this user cannot mount one. */
function smallDisk(): string | null {
  const mountPoint = fs.mkdtempSync(path.join(os.tmpdir(), 'prepare-full-'));
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', 'size=64k', 'tmpfs', mountPoint], { stdio: 'ignore' });
    return mountPoint;
  } catch {
    fs.rmdirSync(mountPoint);
    return null;
  }
}
const fullDisk = smallDisk();
if (!fullDisk) console.warn('skipped: prepare on a full disk needs a 64 KiB tmpfs, which only root (or CAP_SYS_ADMIN) can mount');
afterAll(() => {
  if (!fullDisk) return;
  execFileSync('umount', [fullDisk]);
  fs.rmdirSync(fullDisk);
});

describe.skipIf(!fullDisk)('prepare on a full disk', () => {
  it('fails naming the shard or document_order.json it was writing, and leaves nothing behind', async () => {
    for (const [documents, file] of [
      [2000, /out-2000\.partial-\d+\/train\/partial-00000\.arrow: ENOSPC/],
      [3, /out-3\.partial-\d+\/document_order\.json: ENOSPC/], // the shards fit; the recorded permutation does not
    ] as const) {
      async function* inputs() {
        for (let i = 0; i < documents; i++) yield { text: `document ${i} `.repeat(20), extra: [], where: `input:${i}` };
      }
      const order = () => ({
        order: 'input' as const,
        seed: null,
        documents,
        sha256: '0'.repeat(64),
        permutation: Array.from({ length: 20_000 }, (_, i) => i),
      });
      const options = { textColumn: 'text', extraColumns: [], validationFraction: 0, seed: 1, shardSize: parseShardSize('1000'), overwrite: false };
      const out = path.join(fullDisk!, `out-${documents}`);
      await expect(writeSplitDataset(inputs(), { ...options, out, description: '', order })).rejects.toMatchObject({
        code: 'ENOSPC',
        message: expect.stringMatching(file),
      });
      expect(fs.readdirSync(fullDisk!)).toEqual([]);
    }
  });
});

describe('prepareDemoCorpus', () => {
  it('writes the State of the Union addresses (≥ 200 documents) and their text round-trips', async () => {
    const out = path.join(dir, 'sotu');
    const summary = await prepareDemoCorpus(out);
    const expected = fs
      .readdirSync(sotuDataDir())
      .filter((f) => f.endsWith('.json'))
      .map((f) => (JSON.parse(fs.readFileSync(path.join(sotuDataDir(), f), 'utf8')) as { text: string }).text);
    expect(expected.length).toBeGreaterThanOrEqual(200);
    expect(summary.documents).toBe(expected.length);
    const train = await readSplit(out, 'train');
    const validation = await readSplit(out, 'validation');
    expect(validation.length).toBeGreaterThan(0);
    expect(sorted([...train, ...validation])).toEqual(sorted(expected));
    expect(summary.bytes).toBe(utf8Bytes(expected));
    const years = await readSplit(out, 'train', 'year');
    expect(years.every((y) => /^\d{4}$/.test(y!))).toBe(true);
    // Not in year order (the first validation speeches would all be from the 1790s–1830s); --keep-order keeps it.
    const validationYears = (await readSplit(out, 'validation', 'year')).map(Number);
    expect(Math.max(...validationYears.slice(0, 5))).toBeGreaterThan(1900);
    expect(years.map(Number)).not.toEqual([...years.map(Number)].sort((x, y) => x - y));
    const inYearOrder = path.join(dir, 'sotu-kept');
    await prepareDemoCorpus(inYearOrder, true);
    const keptYears = (await readSplit(inYearOrder, 'train', 'year')).map(Number);
    expect(keptYears).toEqual([...keptYears].sort((x, y) => x - y));
    expect(await describeSplit(out, 'validation', 'text')).toMatchObject({ rows: validation.length, bytes: utf8Bytes(validation as string[]) });
  });
});
