// What `npm run prepare --overwrite` may replace: an earlier prepare output, and nothing else. Every output carries
// the marker `.slayformer-prepared` (written by prepare: `datasets` writes the same layout, so the layout alone does
// not say who wrote a folder) and holds nothing but what prepare writes: dataset_dict.json, document_order.json and the split folders
// train/ and validation/ with their state.json, dataset_info.json and data-NNNNN-of-NNNNN.arrow shards. Any other
// folder is refused, naming it: the project never deletes files it did not write (as export, src/store/hf-export.ts).
import fs from 'node:fs';
import path from 'node:path';
import { writeOwnFile } from '../../core/own-file.ts';
import { SPLITS } from '../dataset.ts';
import { DOCUMENT_ORDER_FILE } from './document-order.ts';
import { InputError } from './document-source.ts';
import { makeFolders } from '../../core/folders.ts';

const PREPARED_MARKER = '.slayformer-prepared';
const TOP_LEVEL = new Set<string>([PREPARED_MARKER, 'dataset_dict.json', DOCUMENT_ORDER_FILE, ...SPLITS]);
const SPLIT_FILE = /^(state\.json|dataset_info\.json|data-\d{5,}-of-\d{5,}\.arrow)$/;

/** Marks `folder` (a staging folder about to become the output) as prepare's. */
export function markPreparedOutput(folder: string): void {
  writeOwnFile(path.join(folder, PREPARED_MARKER), 'written by npm run prepare: --overwrite may replace this folder\n');
}

/** Why `out` is not an earlier prepare output (null: it is one). */
function notPrepared(out: string): string | null {
  if (!fs.lstatSync(path.join(out, PREPARED_MARKER), { throwIfNoEntry: false })?.isFile()) return `it has no ${PREPARED_MARKER} marker`;
  const foreign: string[] = [];
  for (const entry of fs.readdirSync(out, { withFileTypes: true })) {
    if (!TOP_LEVEL.has(entry.name)) foreign.push(entry.name);
    else if ((SPLITS as readonly string[]).includes(entry.name)) {
      if (!entry.isDirectory()) foreign.push(entry.name);
      else
        for (const f of fs.readdirSync(path.join(out, entry.name), { withFileTypes: true }))
          if (!f.isFile() || !SPLIT_FILE.test(f.name)) foreign.push(`${entry.name}/${f.name}`);
    } else if (!entry.isFile()) foreign.push(entry.name);
  }
  return foreign.length > 0 ? `it holds ${foreign.slice(0, 5).join(', ')}, which prepare does not write` : null;
}

/** Throws unless `out` is free, or `overwrite` was given and it is an earlier prepare output (see the top of this file). */
export function checkOutput(out: string, overwrite: boolean): void {
  const stat = fs.lstatSync(out, { throwIfNoEntry: false });
  if (!stat) return;
  if (!overwrite) throw new InputError(`${out}: the output folder already exists (pass --overwrite to replace an earlier prepare output)`);
  const why = stat.isDirectory() ? notPrepared(out) : 'it is not a folder';
  if (why) throw new InputError(`${out} was not written by npm run prepare (${why}); not replacing it: move it away or choose another --out`);
}

/** Puts `staging` in place of `out`, replacing an earlier output (checked again: it may have changed since the start). */
export function replaceOutput(staging: string, out: string, overwrite: boolean): void {
  checkOutput(out, overwrite);
  makeFolders(path.dirname(path.resolve(out)));
  if (!fs.existsSync(out)) {
    fs.renameSync(staging, out);
    return;
  }
  const aside = `${out}.old-${process.pid}`;
  fs.renameSync(out, aside);
  fs.renameSync(staging, out);
  fs.rmSync(aside, { recursive: true, force: true });
}
