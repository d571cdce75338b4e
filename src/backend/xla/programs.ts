// Recorded step programs → StableHLO files, cached by content (docs/xla.md): a program is exported by export.py
// (Python TensorFlow's tf2xla bridge, in the venv of `npm run setup:xla`) once per distinct GraphDef, inputs,
// outputs and guard, under .cache/xla/programs/<sha256>; a second run exports nothing it already has.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { fileURLToPath } from 'node:url';
import { exporterPython, PROGRAM_CACHE, XLA_PINS, XLA_SETUP_COMMAND } from './setup.ts';
import type { ArrayDtype } from './runner.ts';

export const EXPORT_SCRIPT = path.join(path.dirname(fileURLToPath(import.meta.url)), 'export.py');
/** Changes whenever export.py writes something different for the same input (part of every cache key). */
const EXPORT_FORMAT = 1;

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
    }),
  );
  h.update(spec.graphDef);
  return h.digest('hex');
}

/** The programs' files under `cache` (default .cache/xla/programs), exporting those not there yet in one Python run. */
export function exportPrograms(specs: readonly ProgramSpec[], cache = PROGRAM_CACHE): ExportedProgram[] {
  const exported = specs.map((spec) => ({ spec, hash: programHash(spec) })).map(({ spec, hash }) => ({ spec, hash, base: path.join(cache, hash) }));
  const missing = exported.filter((p) => !fs.existsSync(`${p.base}.json`));
  const unique = [...new Map(missing.map((p) => [p.hash, p])).values()];
  if (unique.length) {
    const python = exporterPython();
    if (!python) throw new Error(`train.executor xla: the exporter's Python is not set up (${XLA_SETUP_COMMAND} makes it)`);
    fs.mkdirSync(cache, { recursive: true });
    const programs = unique.map(({ spec, base }) => {
      fs.writeFileSync(`${base}.pb`, spec.graphDef);
      return {
        graphdef: `${base}.pb`,
        feeds: spec.feeds,
        fetches: spec.fetches,
        inputs: spec.inputs,
        outputs: spec.outputs,
        extraInputs: spec.extraInputs ?? [],
        guard: spec.guard ?? null,
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
  }
  return exported.map(({ hash, base }) => ({ hash, base }));
}
