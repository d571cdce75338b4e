// Recorded step programs → StableHLO files, cached by content (docs/xla.md): a program is exported by export.py
// (Python TensorFlow's tf2xla bridge, in the venv of `npm run setup:xla`) once per distinct GraphDef, inputs,
// outputs, guard and precision, under .cache/xla/programs/<sha256>; a second run exports nothing it already has. Each entry's
// files are followed by <sha256>.sha256, their checksums: an entry that does not match them (a broken or cut-short
// file, an entry from before the checksums) is exported again, and said so, instead of failing every later run.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { writeOwnFile } from '../../core/own-file.ts';
import { exporterPython, PROGRAM_CACHE, XLA_PINS, XLA_SETUP_COMMAND } from './setup.ts';
import type { ArrayDtype } from './runner.ts';

export const EXPORT_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'export.py');
/** Changes whenever export.py writes something different for the same input (part of every cache key). */
const EXPORT_FORMAT = 1;

/**
 * How a program's matrix products run (`train.precision`, docs/xla.md "Mixed precision"): `fp32`, or `bf16`
 * (bfloat16 operands, float32 accumulation and result; export.py through precision.py).
 */
export type XlaPrecision = 'fp32' | 'bf16';

/** A program to export: a GraphDef and names for its feeds and fetches (programs are called by name). */
export interface ProgramSpec {
  graphDef: Uint8Array;
  /** The GraphDef's feed tensors (feed_i:0) with dtype and shape, in the order of `inputs`. */
  feeds: Array<{ name: string; dtype: ArrayDtype; shape: number[] }>;
  fetches: string[];
  /** A name per feed: batch:…, param:…, buffer:…, opt:…, step:…, grad:…, loss. */
  inputs: string[];
  /** A name per fetch; an output named like an input is new state (aliased, updated in place). */
  outputs: string[];
  /** Inputs the program takes besides the feeds (the apply program's summed loss). */
  extraInputs?: Array<{ name: string; dtype: ArrayDtype; shape: number[] }>;
  /** Keep new state only where these scalars are finite (the non-finite rule); adds the output "applied". */
  guard?: { finite: string[] };
  /** Default fp32. */
  precision?: XlaPrecision;
  /** Recorded with rematerialised blocks (train.remat): not the same GraphDef, and named in the key all the same. */
  remat?: boolean;
}

/** The files export.py writes for a program, `base` + each. */
export const PROGRAM_FILES = ['.vhlo', '.mlir', '.json'] as const;
/** `base` + this holds the checksums of the program's files, written after them. */
export const PROGRAM_CHECKSUMS = '.sha256';
const CHECKSUM_LINE = /^([0-9a-f]{64}) {2}(\S+)$/;

const sha256File = (file: string) => createHash('sha256').update(fs.readFileSync(file)).digest('hex');

/** Writes `base`.sha256 (`<sha256>  <file>` lines, as `sha256sum -c` reads them) for the entry's files, atomically. */
export function writeProgramChecksums(base: string): void {
  const text = PROGRAM_FILES.map((ext) => `${sha256File(base + ext)}  ${path.basename(base + ext)}\n`).join('');
  const temporary = `${base}${PROGRAM_CHECKSUMS}.tmp-${process.pid}`;
  writeOwnFile(temporary, text);
  fs.renameSync(temporary, base + PROGRAM_CHECKSUMS);
}

/** What is wrong with the cache entry at `base`, naming the file, or null when every file matches its checksum. */
export function programEntryProblem(base: string): string | null {
  const sums = base + PROGRAM_CHECKSUMS;
  if (!fs.existsSync(sums)) return `${sums} is missing (an entry cut short, or from before checksums)`;
  const listed = new Map<string, string>();
  for (const line of fs
    .readFileSync(sums, 'utf8')
    .split('\n')
    .filter((l) => l)) {
    const match = CHECKSUM_LINE.exec(line);
    if (!match) return `${sums} is not a list of "<sha256>  <file>" lines`;
    listed.set(match[2], match[1]);
  }
  for (const ext of PROGRAM_FILES) {
    const file = base + ext;
    const expected = listed.get(path.basename(file));
    if (expected === undefined) return `${sums} has no checksum for ${path.basename(file)}`;
    if (!fs.existsSync(file)) return `${file} is missing`;
    if (sha256File(file) !== expected) return `${file} does not match its checksum in ${sums}`;
  }
  return null;
}

/** An exported program: `base` + .vhlo / .mlir / .json. */
export interface ExportedProgram {
  hash: string;
  base: string;
}

export function programHash(spec: ProgramSpec): string {
  const h = createHash('sha256');
  h.update(
    JSON.stringify({
      format: EXPORT_FORMAT,
      pins: XLA_PINS,
      feeds: spec.feeds,
      fetches: spec.fetches,
      inputs: spec.inputs,
      outputs: spec.outputs,
      extra: spec.extraInputs ?? [],
      guard: spec.guard ?? null,
      precision: spec.precision ?? 'fp32',
      // Only when set: the keys of programs from before train.remat stay as they were.
      ...(spec.remat ? { remat: true } : {}),
    }),
  );
  h.update(spec.graphDef);
  return h.digest('hex');
}

/**
 * The programs' files under `cache` (default .cache/xla/programs), exporting in one Python run those not there yet
 * and those whose files do not match their checksums (each said through `warn`, naming the file).
 */
export function exportPrograms(
  specs: readonly ProgramSpec[],
  cache = PROGRAM_CACHE,
  warn: (message: string) => void = (m) => process.stderr.write(`warning: ${m}\n`),
): ExportedProgram[] {
  const exported = specs.map((spec) => ({ spec, hash: programHash(spec) })).map(({ spec, hash }) => ({ spec, hash, base: path.join(cache, hash) }));
  const unique = [...new Map(exported.map((p) => [p.hash, p])).values()].filter((p) => {
    const problem = programEntryProblem(p.base);
    if (problem === null) return false;
    if ([...PROGRAM_FILES, PROGRAM_CHECKSUMS].some((ext) => fs.existsSync(p.base + ext))) {
      warn(`xla: program cache entry ${problem}: exporting it again`);
      // Without its checksums the entry counts as unverified until the new export has written them.
      fs.rmSync(p.base + PROGRAM_CHECKSUMS, { force: true });
    }
    return true;
  });
  if (unique.length) {
    const python = exporterPython();
    if (!python) throw new Error(`train.executor xla: the exporter's Python is not set up (${XLA_SETUP_COMMAND} makes it)`);
    fs.mkdirSync(cache, { recursive: true });
    const programs = unique.map(({ spec, base }) => {
      // This process's own copy: ranks of one run export the same programs at once, and each removes its copy after.
      const graphdef = `${base}.${process.pid}.pb`;
      fs.writeFileSync(graphdef, spec.graphDef);
      return {
        graphdef,
        feeds: spec.feeds,
        fetches: spec.fetches,
        inputs: spec.inputs,
        outputs: spec.outputs,
        extraInputs: spec.extraInputs ?? [],
        guard: spec.guard ?? null,
        precision: spec.precision ?? 'fp32',
        out: base,
      };
    });
    const job = path.join(cache, `job-${process.pid}-${Date.now()}.json`);
    fs.writeFileSync(job, JSON.stringify({ programs }));
    try {
      const run = spawnSync(python, [EXPORT_SCRIPT, job], { encoding: 'utf8', env: { ...process.env, TF_CPP_MIN_LOG_LEVEL: '2' }, maxBuffer: 64 << 20 });
      if (run.status !== 0) {
        const tail = (run.stderr || run.error?.message || '')
          .trim()
          .split('\n')
          .filter((l) => l.trim())
          .slice(-4)
          .join(' | ');
        throw new Error(`XLA export (${EXPORT_SCRIPT}) failed: ${tail}`);
      }
    } finally {
      fs.rmSync(job, { force: true });
      for (const p of programs) fs.rmSync(p.graphdef, { force: true });
    }
    for (const { base } of unique) writeProgramChecksums(base);
  }
  return exported.map(({ hash, base }) => ({ hash, base }));
}
