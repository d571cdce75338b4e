// The shard formats the data layer reads, found by file name ending. A new format is one file implementing
// ShardFormat (src/data/shard-format.ts) plus one line in SHARD_FORMATS.
import path from 'node:path';
import { arrowShards } from './arrow.ts';
import type { ShardFormat } from './shard-format.ts';

const SHARD_FORMATS: ShardFormat[] = [arrowShards];

/** Adds a format at run time (a plugin, a test); an ending another format claims is an error naming both. */
export function registerShardFormat(format: ShardFormat): void {
  for (const extension of format.extensions) {
    const owner = SHARD_FORMATS.find((f) => f.extensions.includes(extension));
    if (owner) throw new Error(`shard format ${format.name}: the ending ${extension} is already read by ${owner.name}`);
  }
  SHARD_FORMATS.push(format);
}

function claiming(file: string): ShardFormat | undefined {
  const name = path.basename(file);
  return SHARD_FORMATS.find((format) => format.extensions.some((extension) => name.endsWith(extension)));
}

/** True when a registered format reads this file. */
export function isShardFile(file: string): boolean {
  return claiming(file) !== undefined;
}

/** The endings of the registered formats, for messages: ".arrow", or ".arrow/.parquet". */
export function shardFileEndings(): string {
  return SHARD_FORMATS.flatMap((format) => format.extensions).join('/');
}

/** The format that reads `file`; an error naming the file and the endings read when none does. */
export function shardFormatOf(file: string): ShardFormat {
  const format = claiming(file);
  if (!format) throw new Error(`${file}: not a shard file (the shard formats read ${shardFileEndings()} files)`);
  return format;
}
