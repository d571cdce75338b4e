// Paths a report writes: every file and sub-folder of a report goes through safeJoin, so that no name taken from a
// run's files (a model kind, a dataset, a value in config.json) can lead a write outside the folder the user gave.
import path from 'node:path';

/**
 * `root` joined with `parts`, refused (an error naming the path) unless the result lies inside `root` (or is it).
 * Lexical: `..`, absolute parts and empty names are caught before anything is written; the report folder itself is
 * the user's choice.
 */
export function safeJoin(root: string, ...parts: string[]): string {
  for (const part of parts) {
    if (part === '' || path.isAbsolute(part) || /[\u0000-\u001f\u007f]/.test(part)) {
      throw new Error(`refusing to write ${JSON.stringify(part)} under ${root}: not a relative name without control characters`);
    }
  }
  const joined = path.join(root, ...parts);
  const relative = path.relative(path.resolve(root), path.resolve(joined));
  if (relative === '..' || relative.startsWith(`..${path.sep}`) || path.isAbsolute(relative)) {
    throw new Error(`refusing to write ${joined}: it lies outside ${root}`);
  }
  return joined;
}

/** A value as one safe folder-name segment: letters, digits, `.`, `_` and `-` only, never `.` or `..`. */
export function folderSegment(value: string): string {
  const cleaned = value.replace(/[^\w.-]+/g, '_').replace(/^\.+/, (dots) => '_'.repeat(dots.length));
  return cleaned === '' ? '_' : cleaned;
}
