// Command-line entry points started as real child processes, with their output collected. They run
// `node --import tsx <script>` directly, as the npm scripts do, so signals reach the command itself.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';

export interface StartedCli {
  process: ChildProcess;
  /** stdout and stderr so far, interleaved. */
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

const started: ChildProcess[] = [];

export function startCli(script: string, args: string[], env: NodeJS.ProcessEnv = process.env): StartedCli {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env });
  started.push(child);
  let text = '';
  child.stdout!.on('data', (d) => (text += d));
  child.stderr!.on('data', (d) => (text += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => child.on('close', (code, signal) => resolve({ code, signal })));
  return { process: child, output: () => text, exited };
}

/** Kills what startCli started and is still running (after a failed assertion). */
export function killStartedClis(): void {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}
