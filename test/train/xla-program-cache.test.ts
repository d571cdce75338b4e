// The XLA program cache's checksums (src/backend/xla/program-cache.ts, docs/xla.md): an entry is trusted only when its
// .vhlo, .mlir and .json match the <hash>.sha256 written after them; a broken, cut-short or unverifiable entry is
// exported again with one line naming the file, and a compiled folder's broken program is an error naming it. The
// checks run on hand-written entries anywhere; re-exporting and loading in the jax process need the native backend
// and `npm run setup:xla` (skipped with one line otherwise).
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isTensorflowSetUp } from '../../src/backend/native-build.ts';
import { initBackend } from '../../src/backend/start.ts';
import { exportPrograms, programEntryProblem, programHash, writeProgramChecksums, type ProgramSpec } from '../../src/backend/xla/program-cache.ts';
import { XlaRunner } from '../../src/backend/xla/runner.ts';
import { isXlaSetUp, venvPython, XLA_SETUP_COMMAND } from '../../src/backend/xla/setup.ts';
import { Rng } from '../../src/core/rng.ts';
import { createLanguageModel, type LanguageModel } from '../../src/model/lm.ts';
import { randomBatch } from '../../src/train/throughput.ts';
import { CompiledBook, MANIFEST_FILE, modelTensors, recordGradientProgram } from '../../src/train/xla-recording.ts';

const withJax = isXlaSetUp();
const withExporter = withJax && isTensorflowSetUp();
if (!withExporter) console.log(`[xla-program-cache] re-export and load skipped: needs the tensorflow backend and ${XLA_SETUP_COMMAND}`);

const dir = mkdtempSync(join(tmpdir(), 'slay-xla-cache-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
let count = 0;

/** A program that returns its input: what the runner compiles from the text when the portable artifact is unreadable. */
const IDENTITY_MLIR = 'module @identity {\n  func.func public @main(%arg0: tensor<f32>) -> (tensor<f32>) {\n    return %arg0 : tensor<f32>\n  }\n}\n';
const IDENTITY_JSON = JSON.stringify({ inputs: [{ name: 'x', dtype: 'float32', shape: [] }], outputs: ['x'], aliases: [] });

/** A hand-written entry (not a portable artifact: the runner falls back to the text) under a fresh folder. */
function handWritten(files: { vhlo?: string; mlir?: string; json?: string } = {}, name = 'entry'): string {
  const folder = mkdtempSync(join(dir, 'entries-'));
  const base = join(folder, name);
  writeFileSync(`${base}.vhlo`, files.vhlo ?? 'not a portable artifact');
  writeFileSync(`${base}.mlir`, files.mlir ?? IDENTITY_MLIR);
  writeFileSync(`${base}.json`, files.json ?? IDENTITY_JSON);
  return base;
}

function tinyModel(): LanguageModel {
  return createLanguageModel({
    kind: 'gpt',
    vocabSize: 61,
    maxSeqLen: 16,
    dModel: 16,
    numLayers: 1,
    numHeads: 2,
    mlpRatio: 4,
    dropout: 0,
    bias: true,
    attention: { name: 'softmax', options: {} },
    seed: 4,
  });
}

describe('program cache entries are checked against their checksums', () => {
  beforeAll(async () => {
    await initBackend('cpu', { quiet: true });
  });

  it('a written entry verifies; an altered, missing or unlisted file, or no checksums, is named', () => {
    const base = handWritten();
    expect(programEntryProblem(base)).toMatch(new RegExp(`^${base}\\.sha256 is missing`));
    writeProgramChecksums(base);
    expect(programEntryProblem(base)).toBeNull();
    expect(readFileSync(`${base}.sha256`, 'utf8')).toMatch(/^[0-9a-f]{64} {2}entry\.vhlo\n[0-9a-f]{64} {2}entry\.mlir\n[0-9a-f]{64} {2}entry\.json\n$/);
    writeFileSync(`${base}.mlir`, IDENTITY_MLIR.slice(0, 40));
    expect(programEntryProblem(base)).toBe(`${base}.mlir does not match its checksum in ${base}.sha256`);
    writeFileSync(`${base}.mlir`, IDENTITY_MLIR);
    writeFileSync(`${base}.json`, '{"inputs": [');
    expect(programEntryProblem(base)).toBe(`${base}.json does not match its checksum in ${base}.sha256`);
    writeFileSync(`${base}.json`, IDENTITY_JSON);
    rmSync(`${base}.vhlo`);
    expect(programEntryProblem(base)).toBe(`${base}.vhlo is missing`);
    writeFileSync(`${base}.vhlo`, 'not a portable artifact');
    expect(programEntryProblem(base)).toBeNull();
    writeFileSync(`${base}.sha256`, readFileSync(`${base}.sha256`, 'utf8').split('\n').slice(1).join('\n'));
    expect(programEntryProblem(base)).toBe(`${base}.sha256 has no checksum for entry.vhlo`);
    writeFileSync(`${base}.sha256`, 'garbage\n');
    expect(programEntryProblem(base)).toBe(`${base}.sha256 is not a list of "<sha256>  <file>" lines`);
  });

  it('exportPrograms uses a verified entry as it is, and says which file is wrong before exporting a broken one again', () => {
    // A GraphDef no exporter can read: exporting it fails, so only an entry taken from the cache succeeds.
    const spec: ProgramSpec = { graphDef: new Uint8Array([1, 2, 3]), feeds: [], fetches: [], inputs: [], outputs: [] };
    const cache = mkdtempSync(join(dir, 'cache-'));
    const base = join(cache, programHash(spec));
    writeFileSync(`${base}.vhlo`, 'v');
    writeFileSync(`${base}.mlir`, IDENTITY_MLIR);
    writeFileSync(`${base}.json`, IDENTITY_JSON);
    writeProgramChecksums(base);
    const warnings: string[] = [];
    expect(exportPrograms([spec], cache, (m) => warnings.push(m))).toEqual([{ hash: programHash(spec), base }]);
    expect(warnings).toEqual([]);
    writeFileSync(`${base}.json`, '{"outputs": [');
    expect(() => exportPrograms([spec], cache, (m) => warnings.push(m))).toThrow(/exporter's Python is not set up|XLA export .* failed/);
    expect(warnings).toEqual([`xla: program cache entry ${base}.json does not match its checksum in ${base}.sha256: exporting it again`]);
    // The failed export leaves the entry unverified (no checksums), so the next run tries again rather than trusting it.
    expect(existsSync(`${base}.sha256`)).toBe(false);
  });

  it("a compiled folder's program that does not match its checksums is an error naming the file", () => {
    const model = tinyModel();
    try {
      const folder = mkdtempSync(join(dir, 'compiled-'));
      const base = join(folder, 'program');
      writeFileSync(`${base}.vhlo`, 'v');
      writeFileSync(`${base}.mlir`, IDENTITY_MLIR);
      writeFileSync(`${base}.json`, IDENTITY_JSON);
      writeProgramChecksums(base);
      const manifest = {
        format: 1,
        recipe: 'tiny',
        tensors: modelTensors(model).map(([n, t]) => [n, t.shape]),
        programs: [{ kind: 'eval', key: 'eval|2x16', file: 'program', fixed: [] }],
      };
      writeFileSync(join(folder, MANIFEST_FILE), JSON.stringify(manifest));
      expect(new CompiledBook(folder, model).get('eval', 'eval|2x16').outputs).toEqual(['x']);
      writeFileSync(`${base}.mlir`, 'module {');
      expect(() => new CompiledBook(folder, model)).toThrow(`xla: ${base}.mlir does not match its checksum in ${base}.sha256`);
      rmSync(`${base}.sha256`);
      expect(() => new CompiledBook(folder, model)).toThrow(`xla: ${base}.sha256 is missing`);
    } finally {
      model.dispose();
    }
  });
});

describe.skipIf(!withJax)('the jax process names the program file it cannot load', () => {
  let runner: XlaRunner;
  beforeAll(async () => {
    runner = (await XlaRunner.start(venvPython(), { SLAYFORMER_XLA_PLATFORM: 'cpu' })).runner;
  });
  afterAll(async () => {
    await runner?.close();
  });

  it('loads a good entry; a broken .json or (with an unreadable portable artifact) a broken .mlir is named', async () => {
    const good = handWritten();
    expect((await runner.request({ op: 'load', key: `k${count++}`, base: good })).header.via).toMatch(/^text/);
    const badJson = handWritten({ json: '{"inputs": [' });
    await expect(runner.request({ op: 'load', key: `k${count++}`, base: badJson })).rejects.toThrow(`${badJson}.json: JSONDecodeError`);
    const badMlir = handWritten({ mlir: IDENTITY_MLIR.slice(0, 60) });
    await expect(runner.request({ op: 'load', key: `k${count++}`, base: badMlir })).rejects.toThrow(`${badMlir}.mlir (text (`);
  });
});

describe.skipIf(!withExporter)('a broken cache entry is exported again', () => {
  beforeAll(async () => {
    await initBackend('tensorflow', { quiet: true });
  });

  it('a cut-short .mlir, a broken .json and an entry without checksums are each exported again, said once, and then load', async () => {
    const model = tinyModel();
    const cache = mkdtempSync(join(dir, 'cache-'));
    const { runner } = await XlaRunner.start(venvPython(), { SLAYFORMER_XLA_PLATFORM: 'cpu' });
    try {
      const variables = [...model.parameters().values()];
      const spec = recordGradientProgram(model, randomBatch(new Rng(5), 'gpt', 2, 16, 61), variables, null, 32);
      const [entry] = exportPrograms([spec], cache, (m) => {
        throw new Error(`unexpected warning: ${m}`);
      });
      const mlir = readFileSync(`${entry.base}.mlir`, 'utf8');
      const breakages: Array<[string, () => void]> = [
        [`${entry.base}.mlir does not match`, () => writeFileSync(`${entry.base}.mlir`, mlir.slice(0, mlir.length / 2))],
        [`${entry.base}.json does not match`, () => writeFileSync(`${entry.base}.json`, '')],
        [`${entry.base}.sha256 is missing`, () => rmSync(`${entry.base}.sha256`)],
      ];
      for (const [said, breakIt] of breakages) {
        breakIt();
        const warnings: string[] = [];
        const [again] = exportPrograms([spec], cache, (m) => warnings.push(m));
        expect(again.base).toBe(entry.base);
        expect(warnings).toHaveLength(1);
        expect(warnings[0]).toContain(said);
        expect(programEntryProblem(entry.base)).toBeNull();
        expect(readFileSync(`${entry.base}.mlir`, 'utf8')).toBe(mlir);
        const loaded = await runner.request({ op: 'load', key: `k${count++}`, base: entry.base });
        expect(loaded.header.via).toBe('portable artifact');
      }
    } finally {
      await runner.close();
      model.dispose();
    }
  }, 600_000);
});
