// The document-source contract: what `npm run prepare` needs from an input format, so that it reads any registered
// format (src/data/prepare/source-registry.ts; JSON Lines, Parquet and .txt files in src/data/prepare/sources/). Shaped
// like the shard formats (src/data/shard-format.ts): a source claims file name endings and reads a file's documents in
// file order, never the whole file at once where the format allows.

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

/**
 * An input file format. Errors are InputErrors naming the file (and the line, row group or byte when known); a
 * malformed record, a missing or mistyped text field and a cut-short file are errors, never fewer documents.
 */
export interface DocumentSource {
  /** Shown in messages, e.g. "JSON Lines". */
  readonly name: string;
  /** File name endings the source claims, compared without regard to case, e.g. [".parquet"]; no two sources claim overlapping endings. */
  readonly extensions: readonly string[];
  /** What it reads, in the list of supported inputs of an error, e.g. ".txt (one document per file)". */
  readonly description: string;
  /** Its line under "Inputs" in `npm run prepare -- --help`. */
  readonly help: string;
  /** The documents of `file` in file order: the `textColumn` field and the `keepColumns` values (null when absent). */
  read(file: string, textColumn: string, keepColumns: readonly string[]): AsyncGenerator<SourceDocument>;
  /**
   * The text bytes of a file of `fileBytes` bytes, roughly (default: `fileBytes`): whether prepare shuffles the
   * documents in memory or through bucket files rests on it (docs/data.md, "Document order").
   */
  estimatedTextBytes?(file: string, fileBytes: number): number;
}
