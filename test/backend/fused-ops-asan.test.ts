// The fused CPU kernels' suites (fused-ops.test.ts: values and gradients; fused-ops-shapes.test.ts: inputs they must
// refuse) run again in a child vitest on the kernels built with AddressSanitizer (`npm run setup:tensorflow -- --sanitize
// address`), the sanitizer's runtime preloaded into Node: a read or write past a tensor, which the plain build may survive
// with a wrong result, ends the child with the sanitizer's report. Skipped, with one line saying why, where that build or
// gcc's libasan is missing (docs/backends.md, "Fused kernels under AddressSanitizer").
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, expect, it } from 'vitest';
import { currentBuild, FUSED_OPS_ASAN_ADDON, nativePackageDir, PROJECT_ROOT, SANITIZED_KERNELS_ENV, SETUP_COMMAND } from '../../src/backend/native-build.ts';
import { setupTensorflow } from '../../src/backend/tensorflow-setup.ts';

const SUITES = ['test/backend/fused-ops.test.ts', 'test/backend/fused-ops-shapes.test.ts'];

/** gcc's AddressSanitizer runtime, or null: `-print-file-name` echoes the bare name back when it has no such file. */
function asanRuntime(): string | null {
  const result = spawnSync('gcc', ['-print-file-name=libasan.so'], { encoding: 'utf8' });
  const file = result.status === 0 ? result.stdout.trim() : '';
  return path.isAbsolute(file) && fs.existsSync(file) ? fs.realpathSync(file) : null;
}

const build = currentBuild();
const addon = build && !build.gpu ? path.join(nativePackageDir(build), FUSED_OPS_ASAN_ADDON) : null;
const runtime = asanRuntime();
const missing =
  !addon || !fs.existsSync(addon)
    ? `no AddressSanitizer build of the fused kernels (\`${SETUP_COMMAND} -- --sanitize address\` builds it)`
    : !runtime
      ? "gcc's libasan.so not found (Debian/Ubuntu: apt-get install libasan8)"
      : null;
if (missing) console.log(`[slayformer] ${missing}: the fused kernels' suites under AddressSanitizer are skipped`);

interface JsonReport {
  numTotalTests: number;
  numPassedTests: number;
  numFailedTests: number;
  numPendingTests: number;
  numTodoTests: number;
  testResults: Array<{ name: string }>;
}

describe.skipIf(missing !== null)('fused CPU kernels under AddressSanitizer', () => {
  it('their suites pass on the sanitized build, every test run, without a sanitizer report', () => {
    const folder = fs.mkdtempSync(path.join(os.tmpdir(), 'slayformer-asan-'));
    try {
      const report = path.join(folder, 'report.json');
      // The child is a vitest of its own: the parent worker's VITEST_* settings are not its.
      const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.startsWith('VITEST')));
      const child = spawnSync(
        process.execPath,
        [path.join(PROJECT_ROOT, 'node_modules', 'vitest', 'vitest.mjs'), 'run', ...SUITES, '--reporter=json', `--outputFile=${report}`],
        {
          cwd: PROJECT_ROOT,
          encoding: 'utf8',
          maxBuffer: 256 * 1024 ** 2,
          env: {
            ...env,
            LD_PRELOAD: runtime!,
            // Node itself is not instrumented: its allocations at exit are not the kernels' leaks.
            ASAN_OPTIONS: 'detect_leaks=0',
            [SANITIZED_KERNELS_ENV]: '1',
          },
        },
      );
      const output = `${child.stdout}\n${child.stderr}`;
      const tail = output.slice(-4000);
      expect(output, tail).not.toMatch(/ERROR: AddressSanitizer/);
      expect(child.status, tail).toBe(0);
      const results = JSON.parse(fs.readFileSync(report, 'utf8')) as JsonReport;
      expect(results.testResults.map((r) => path.relative(PROJECT_ROOT, r.name)).sort()).toEqual([...SUITES].sort());
      expect({ failed: results.numFailedTests, skipped: results.numPendingTests + results.numTodoTests }).toEqual({ failed: 0, skipped: 0 });
      expect(results.numPassedTests).toBe(results.numTotalTests);
      expect(results.numTotalTests).toBeGreaterThan(0);
    } finally {
      fs.rmSync(folder, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!addon || !fs.existsSync(addon))('the sanitized kernels without the sanitizer runtime', () => {
  it('are not loaded, and the fused kernels status says what is missing; the process goes on', () => {
    const script = [
      "const { initBackend } = await import('./src/backend/start.ts');",
      "const { fusedCpuKernelsStatus } = await import('./src/backend/fused-kernels.ts');",
      "await initBackend('tensorflow', { quiet: true });",
      'console.log(fusedCpuKernelsStatus());',
    ].join(' ');
    const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: PROJECT_ROOT,
      encoding: 'utf8',
      env: { ...process.env, LD_PRELOAD: '', [SANITIZED_KERNELS_ENV]: '1' },
    });
    expect(child.status, child.stderr).toBe(0);
    expect(child.stdout.trim()).toBe(`${SANITIZED_KERNELS_ENV}=1 needs AddressSanitizer's runtime preloaded (LD_PRELOAD=$(gcc -print-file-name=libasan.so))`);
  });
});

describe('setup:tensorflow --sanitize', () => {
  it('the CLI refuses a sanitizer it does not build, and --sanitize with --gpu, with one line', () => {
    const cli = (...args: string[]) =>
      spawnSync(process.execPath, ['--import', 'tsx', 'src/cli/setup-tensorflow.ts', ...args], { cwd: PROJECT_ROOT, encoding: 'utf8' });
    const thread = cli('--sanitize', 'thread');
    expect(thread.status).toBe(2);
    expect(thread.stderr.split('\n')[0]).toBe("setup:tensorflow: option --sanitize: 'thread' is not one of address");
    const gpu = cli('--gpu', '--sanitize', 'address');
    expect(gpu.status).toBe(2);
    expect(gpu.stderr.split('\n')[0]).toBe('setup:tensorflow: --sanitize builds the fused CPU kernels, which GPU builds do not use');
  });

  it.skipIf(!addon || !fs.existsSync(addon))('keeps a matching build and its sanitized kernels without compiling, and says so', () => {
    const before = fs.statSync(addon!).mtimeMs;
    const lines: string[] = [];
    const { reused } = setupTensorflow({ gpu: false, tensorflow: '2.21.*', python: 'python3', force: false, sanitize: 'address', log: (l) => lines.push(l) });
    expect(reused).toBe(true);
    expect(lines[1]).toBe(`    AddressSanitizer build of the fused kernels: ${FUSED_OPS_ASAN_ADDON} (kept)`);
    expect(fs.statSync(addon!).mtimeMs).toBe(before);
  });
});
