// The fused CPU kernels' one table (src/backend/native/kernels.ts) against the kernels' files, without a build: every
// op it lists is implemented (SLAYFORMER_KERNEL) in the file it names and nowhere else, every kernel a file implements
// is in it, the C++ the set-up writes from it declares each op as listed, and the build's source hash covers every
// kernel file. The built addon's op list is held to the table in fused-ops.test.ts.
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { FUSED_CPU_KERNELS, kernelTableSource } from '../../src/backend/native/kernels.ts';
import { NATIVE_SOURCES, nativeSourceFiles } from '../../src/backend/native-build.ts';

const KERNELS = path.join(NATIVE_SOURCES, 'kernels');
const kernelFiles = fs.readdirSync(KERNELS).filter((name) => name.endsWith('.cc'));

/** The ops each kernel file implements, in the order written. */
const implemented = new Map(
  kernelFiles.map((name) => [name, [...fs.readFileSync(path.join(KERNELS, name), 'utf8').matchAll(/^SLAYFORMER_KERNEL\((\w+),/gm)].map((m) => m[1])]),
);

describe('the fused CPU kernel table', () => {
  it('names each op once, and each op is implemented in the file the table names and in no other', () => {
    const names = FUSED_CPU_KERNELS.map((k) => k.name);
    expect(new Set(names).size).toBe(names.length);
    for (const kernel of FUSED_CPU_KERNELS) {
      expect(implemented.get(kernel.file), `${kernel.name} in kernels/${kernel.file}`).toContain(kernel.name);
      const elsewhere = [...implemented].filter(([file, ops]) => file !== kernel.file && ops.includes(kernel.name)).map(([file]) => file);
      expect(elsewhere, kernel.name).toEqual([]);
    }
  });

  it('lists every kernel a file implements, and every kernel file implements a listed op', () => {
    const listed = new Set<string>(FUSED_CPU_KERNELS.map((k) => k.name));
    const unlisted = [...implemented].flatMap(([file, ops]) => ops.filter((op) => !listed.has(op)).map((op) => `${file}: ${op}`));
    expect(unlisted).toEqual([]);
    const withoutOps = kernelFiles.filter((file) => file !== 'register.cc' && implemented.get(file)!.length === 0);
    expect(withoutOps).toEqual([]);
  });

  it("is written for the C++ as each op's inputs, outputs and float attributes, in the table's order", () => {
    const rows = kernelTableSource()
      .split('\n')
      .filter((line) => line.startsWith('{'));
    expect(rows).toHaveLength(FUSED_CPU_KERNELS.length);
    // {"name", {"in: float", …}, {"out: float", …}, {"attr: float", …}},
    const parsed = rows.map((row) => {
      const [name, ...lists] = [...row.matchAll(/"[^"]*"|\{[^{}]*\}/g)].map((m) => m[0]);
      return [JSON.parse(name), ...lists.map((list) => [...list.matchAll(/"(\w+): float"/g)].map((m) => m[1]))];
    });
    expect(parsed).toEqual(FUSED_CPU_KERNELS.map((k) => [k.name, k.inputs, k.outputs, k.floatAttrs]));
  });

  it("the build's source hash covers the table, the header and every kernel file", () => {
    const covered = nativeSourceFiles();
    for (const file of ['kernels.ts', 'kernels/kernel.h', ...kernelFiles.map((f) => `kernels/${f}`)]) expect(covered).toContain(file);
  });
});
