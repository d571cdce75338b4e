/** One input document: its text and the extra columns kept, with where it came from (for errors). */
export interface SourceDocument {
  /** null when the input holds a null text (counted as an empty document). */
  text: string | null;
  /** Values of the kept extra columns, in the order asked for. */
  extra: (string | null)[];
  /** "file:line", "file (row group 2, row 17)", "file" — for messages. */
  where: string;
}

export class InputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'InputError';
  }
}

/** Kept extra column values are stored as strings: strings as-is, other JSON values as their JSON text. */
export function extraValue(value: unknown): string | null {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string') return value;
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Date) return value.toISOString();
  return JSON.stringify(value);
}

export function describeType(value: unknown): string {
  if (value === null) return 'null';
  if (Array.isArray(value)) return 'an array';
  if (value instanceof Uint8Array) return 'binary bytes';
  return `a ${typeof value}`;
}
