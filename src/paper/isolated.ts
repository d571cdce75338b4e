// Runs one measurement in a child process of this same script. A failed allocation leaves the
// wasm heap unusable for every later op, so benchmarks that probe memory limits isolate each
// measurement; the child prints its result as one "ROW <json>" line.
import { spawn } from 'node:child_process';
import { TSX_IMPORT } from '../tsx-import.ts';

export interface IsolatedResult<T> {
  /** The child's row, or null when it died or timed out. */
  row: T | null;
  timedOut: boolean;
  /** The child died of what looks like an allocation failure. */
  outOfMemory: boolean;
  /** The last error-like line of its stderr, or its exit status. */
  message: string;
}

/** In the child: hands the row to the parent. */
export function emitRow(row: unknown): void {
  process.stdout.write(`ROW ${JSON.stringify(row)}\n`);
}

/** Starts `script` (a .ts file, through tsx) with `args` and waits for its row. */
export function runIsolated<T>(script: string, args: string[], timeoutMs = Infinity): Promise<IsolatedResult<T>> {
  const child = spawn(process.execPath, ['--import', TSX_IMPORT, script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => {
    const timer = Number.isFinite(timeoutMs) ? setTimeout(() => child.kill('SIGKILL'), timeoutMs) : null;
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      const line = stdout.split('\n').find((l) => l.startsWith('ROW '));
      const message =
        stderr
          .trim()
          .split('\n')
          .filter((l) => /Error|memory|abort/i.test(l))
          .pop() ?? `exit ${code ?? signal}`;
      resolve({
        row: line ? (JSON.parse(line.slice(4)) as T) : null,
        timedOut: !line && signal === 'SIGKILL',
        outOfMemory: !line && /memory|allocat|RangeError|Aborted|OOM/i.test(stderr),
        message: message.slice(0, 200),
      });
    });
  });
}

/**
 * The options every benchmark that measures mechanism × length in child processes takes. Plain data (this layer sits
 * below the command-line parser); each benchmark's spec, `satisfies CommandSpec`, checks them where it spreads them.
 */
export const ISOLATED_OPTIONS = {
  mechanisms: { type: 'string', value: 'a,b', help: 'attention mechanisms (default all registered)' },
  'timeout-s': { type: 'string', value: 'S', number: { integer: true, min: 1 }, help: 'a measurement running longer is stopped and reported as a time-out' },
  child: { type: 'string', hidden: true, help: 'internal: one mechanism:length measurement' },
} as const;

/** How an isolated measurement ended. */
export type MeasurementStatus = 'ok' | 'OOM' | 'timeout' | 'error';

/**
 * Runs `script --child <mechanism>:<length>` (after `args`) and returns its row; a crash or time-out
 * becomes `empty` with the status and the reason.
 */
export async function measureInChild<T extends object>(
  script: string,
  args: string[],
  [mechanism, length]: [string, number],
  timeoutS: number,
  empty: T,
): Promise<T & { status: MeasurementStatus; error?: string }> {
  const result = await runIsolated<T & { status: MeasurementStatus }>(script, [...args, '--child', `${mechanism}:${length}`], timeoutS * 1000);
  if (result.row) return result.row;
  if (result.timedOut) return { ...empty, status: 'timeout', error: `over ${timeoutS} s` };
  return { ...empty, status: result.outOfMemory ? 'OOM' : 'error', error: result.message };
}

/**
 * The start of a benchmark script that measures in child processes: in a child (`--child
 * <mechanism>:<length>`) emits measure's row and exits. Returns whether the caller should go on as
 * the parent.
 */
export async function benchmarkEntry(opts: { child?: string }, measure: (mechanism: string, length: number) => Promise<unknown>): Promise<boolean> {
  if (!opts.child) return true;
  const [mechanism, length] = opts.child.split(':');
  emitRow(await measure(mechanism, Number(length)));
  process.exit(0);
}
