// Runs one measurement in a child process of this same script. A failed allocation leaves the
// wasm heap unusable for every later op, so benchmarks that probe memory limits isolate each
// measurement; the child prints its result as one "ROW <json>" line.
import { spawn } from 'node:child_process';

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
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr += d));
  return new Promise((resolve) => {
    const timer = Number.isFinite(timeoutMs) ? setTimeout(() => child.kill('SIGKILL'), timeoutMs) : null;
    child.on('close', (code, signal) => {
      if (timer) clearTimeout(timer);
      const line = stdout.split('\n').find((l) => l.startsWith('ROW '));
      const message = stderr.trim().split('\n').filter((l) => /Error|memory|abort/i.test(l)).pop() ?? `exit ${code ?? signal}`;
      resolve({
        row: line ? (JSON.parse(line.slice(4)) as T) : null,
        timedOut: !line && signal === 'SIGKILL',
        outOfMemory: !line && /memory|allocat|RangeError|Aborted|OOM/i.test(stderr),
        message: message.slice(0, 200),
      });
    });
  });
}
