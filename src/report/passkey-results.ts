// Passkey retrieval in a run folder: `npm run eval -- <run> --passkey --json <run>/passkey.json` (src/cli/eval.ts,
// src/train/passkey.ts) writes the rows; compare reads them back (docs/training.md, "Passkey retrieval").
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { isRecord, readJsonFile } from '../core/json.ts';
import { BOUNDS } from '../core/bounds.ts';

/** Where compare looks for a run's `eval --passkey --json` result. */
export const RUN_PASSKEY_FILE = 'passkey.json';
/** The rows of a few lengths with a few depths each are a few kilobytes; a file far larger is not eval's. */
const MAX_PASSKEY_BYTES = 1 << 20;
/** More lengths than anyone asks for: a file claiming more is not eval's. */
const MAX_PASSKEY_LENGTHS = 64;

/** One length of a run's passkey result: the share of keys retrieved (null when the length could not run). */
export interface PasskeyScore {
  length: number;
  retrieval: number | null;
  /** Run at a length beyond the sequences the model was trained on. */
  beyondTrainedContext: boolean;
  trials: number;
}

const fraction = (v: unknown) => typeof v === 'number' && v >= 0 && v <= 1;

/** The lengths of `<dir>/passkey.json`: null when absent; a malformed one is a warning and null. */
export function readPasskeyScores(dir: string, warnings: string[]): PasskeyScore[] | null {
  const file = join(dir, RUN_PASSKEY_FILE);
  if (!existsSync(file)) return null;
  try {
    if (statSync(file).size > MAX_PASSKEY_BYTES) throw new Error(`${file}: larger than ${MAX_PASSKEY_BYTES} bytes, not an eval --passkey result`);
    const value = readJsonFile(file);
    const rows = isRecord(value) ? value.rows : undefined;
    if (!Array.isArray(rows) || rows.length === 0 || rows.length > MAX_PASSKEY_LENGTHS)
      throw new Error(`${file}: rows must be a list of 1 to ${MAX_PASSKEY_LENGTHS} lengths (eval --passkey --json writes it)`);
    return rows.map((row, i) => {
      const ok =
        isRecord(row) &&
        Number.isInteger(row.length) &&
        (row.length as number) > 0 &&
        (row.length as number) <= BOUNDS.positions.max &&
        Number.isInteger(row.trials) &&
        (row.trials as number) >= 0 &&
        typeof row.beyondTrainedContext === 'boolean' &&
        (row.retrieval === null || fraction(row.retrieval));
      if (!ok) throw new Error(`${file}: rows[${i}] must hold length, trials, beyondTrainedContext and retrieval (null or 0…1) (got ${JSON.stringify(row)})`);
      return {
        length: row.length as number,
        retrieval: row.retrieval as number | null,
        beyondTrainedContext: row.beyondTrainedContext as boolean,
        trials: row.trials as number,
      };
    });
  } catch (err) {
    warnings.push(`${(err as Error).message}; its passkey retrieval is left out`);
    return null;
  }
}
