// Writes the DatasetDict.save_to_disk layout `datasets.load_from_disk` opens: a split folder of Arrow shards with its
// state.json and dataset_info.json, and the dataset_dict.json above the splits; and the shard size that cuts them.
import fs from 'node:fs';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { writeOwnFile } from '../../core/own-file.ts';
import { DATASET_DICT_JSON, DATASET_INFO_JSON, STATE_JSON } from '../dataset.ts';
import type { Split } from '../dataset.ts';
import { ArrowShardWriter, pythonJson, stringFeatures } from './arrow-writer.ts';
import { makeFolders } from '../../core/folders.ts';

/** Shard size limit: rows per shard, or UTF-8 bytes of string data per shard. */
export type ShardSize = { rows: number } | { bytes: number };

/** Parses "100000" (rows), "500MB", "1.5GB", "64KiB" (bytes of string data). */
export function parseShardSize(value: string): ShardSize {
  const match = /^\s*(\d+(?:\.\d+)?)\s*(|rows|b|kb|mb|gb|kib|mib|gib)\s*$/i.exec(value);
  if (!match) throw new Error(`--shard-size: expected a row count (e.g. 100000) or a size (e.g. 500MB, 1GB), got "${value}"`);
  const amount = Number(match[1]);
  const unit = match[2].toLowerCase();
  if (unit === '' || unit === 'rows') {
    if (!Number.isInteger(amount) || amount < 1) throw new Error(`--shard-size: a row count must be a positive integer, got "${value}"`);
    return { rows: amount };
  }
  const scale: Record<string, number> = { b: 1, kb: 1e3, mb: 1e6, gb: 1e9, kib: 1024, mib: 1024 ** 2, gib: 1024 ** 3 };
  const bytes = Math.round(amount * scale[unit]);
  if (bytes < 1) throw new Error(`--shard-size: must be positive, got "${value}"`);
  return { bytes };
}

/** What `datasets` calls MAX_SHARD_SIZE. */
export const DEFAULT_SHARD_SIZE: ShardSize = { bytes: 500e6 };

export interface SplitSummary {
  rows: number;
  textBytes: number;
  shards: string[];
}

/**
 * Writes one split folder as `Dataset.save_to_disk` does: data-0000i-of-0000N.arrow shards,
 * state.json and dataset_info.json. Shards are written under temporary names and renamed once
 * the shard count N is known.
 */
export class SplitWriter {
  private current: ArrowShardWriter | null = null;
  private readonly partials: string[] = [];
  rows = 0;
  textBytes = 0;
  private arrowBytes = 0;
  private readonly hash = createHash('sha256');

  constructor(
    readonly folder: string,
    readonly split: Split,
    readonly columns: readonly string[],
    readonly textColumn: string,
    readonly shardSize: ShardSize,
    readonly description: string,
  ) {
    makeFolders(folder);
  }

  private shardFull(shard: ArrowShardWriter): boolean {
    return 'rows' in this.shardSize ? shard.rows >= this.shardSize.rows : shard.arrowBytes >= this.shardSize.bytes;
  }

  async append(values: readonly (string | null)[]): Promise<void> {
    if (!this.current) {
      const file = path.join(this.folder, `partial-${String(this.partials.length).padStart(5, '0')}.arrow`);
      this.current = new ArrowShardWriter(file, this.columns, this.textColumn);
    }
    await this.current.append(values);
    this.rows++;
    for (const v of values) this.hash.update(v ?? '\u0000null').update('\u0000');
    if (this.shardFull(this.current)) await this.closeShard();
  }

  private async closeShard(): Promise<void> {
    if (!this.current) return;
    const shard = this.current;
    this.current = null;
    await shard.close();
    this.textBytes += shard.textBytes;
    this.arrowBytes += shard.arrowBytes;
    this.partials.push(shard.file);
  }

  async finish(): Promise<SplitSummary> {
    await this.closeShard();
    if (this.partials.length === 0) {
      // An empty split still gets one shard holding just the schema, as save_to_disk writes.
      this.current = new ArrowShardWriter(path.join(this.folder, 'partial-00000.arrow'), this.columns, this.textColumn);
      await this.closeShard();
    }
    const total = this.partials.length;
    const names = this.partials.map((_, i) => `data-${String(i).padStart(5, '0')}-of-${String(total).padStart(5, '0')}.arrow`);
    this.partials.forEach((partial, i) => fs.renameSync(partial, path.join(this.folder, names[i])));
    const state = {
      _data_files: names.map((filename) => ({ filename })),
      _fingerprint: this.hash.digest('hex').slice(0, 16),
      _format_columns: null,
      _format_kwargs: {},
      _format_type: null,
      _output_all_columns: false,
      _split: this.split,
    };
    // save_to_disk: json.dump(state, indent=2, sort_keys=True); the keys above are already sorted.
    writeOwnFile(path.join(this.folder, STATE_JSON), JSON.stringify(state, null, 2));
    // save_to_disk sorts only the top-level keys of dataset_info.json (nested feature order matters).
    const info = {
      citation: '',
      dataset_size: this.arrowBytes,
      description: this.description,
      features: stringFeatures(this.columns),
      homepage: '',
      license: '',
      size_in_bytes: this.arrowBytes,
      splits: { [this.split]: { name: this.split, num_bytes: this.arrowBytes, num_examples: this.rows } },
    };
    writeOwnFile(path.join(this.folder, DATASET_INFO_JSON), JSON.stringify(info, null, 2));
    return { rows: this.rows, textBytes: this.textBytes, shards: names.map((n) => path.join(this.folder, n)) };
  }

  /** Closes an open shard after an error; the caller removes the folder. */
  async abort(): Promise<void> {
    if (this.current) await this.current.close().catch(() => undefined);
    this.current = null;
  }
}

/** dataset_dict.json as DatasetDict.save_to_disk writes it: json.dumps({"splits": [...]}). */
export function writeDatasetDictJson(folder: string, splits: readonly string[]): void {
  writeOwnFile(path.join(folder, DATASET_DICT_JSON), pythonJson({ splits }));
}
