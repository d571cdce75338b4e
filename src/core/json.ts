// Reading JSON files the project wrote, where a missing or unreadable file is an answer ("not recorded"), not an
// error: run folders are read for what they say about themselves, and an old or interrupted one may lack a file.
import { readFileSync } from 'node:fs';

/** The JSON object in `file`, or undefined when the file is missing, is not JSON, or holds no object. */
export function readJsonObject(file: string): Record<string, unknown> | undefined {
  try {
    const value: unknown = JSON.parse(readFileSync(file, 'utf8'));
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}
