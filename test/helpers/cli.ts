// Command-line entry points started as real child processes, with their output collected. They run
// `node --import tsx <script>` directly, as the npm scripts do, so signals reach the command itself.
// Tests synchronise with a child through what it prints (waitForOutput), never through the clock.
import { spawn } from 'node:child_process';
import type { ChildProcess } from 'node:child_process';

export interface StartedCli {
  process: ChildProcess;
  /** stdout and stderr so far, interleaved. */
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  /** The first match of `pattern` in the output from offset `from` on, as soon as it is printed (see waitForOutput). */
  waitForOutput: (pattern: RegExp, from?: number) => Promise<OutputMatch>;
}

export interface OutputMatch {
  match: RegExpExecArray;
  /** Offset in the output just past the match: where to look for the next line. */
  end: number;
}

const started: ChildProcess[] = [];

/** `ownProcessGroup`: the command leads a process group of its own, as in a terminal, where Ctrl-C signals the whole group. */
export function startCli(script: string, args: string[], env: NodeJS.ProcessEnv = process.env, { ownProcessGroup = false } = {}): StartedCli {
  const child = spawn(process.execPath, ['--import', 'tsx', script, ...args], { stdio: ['ignore', 'pipe', 'pipe'], env, detached: ownProcessGroup });
  started.push(child);
  let text = '';
  let closed = false;
  child.stdout!.on('data', (d) => (text += d));
  child.stderr!.on('data', (d) => (text += d));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) =>
    child.on('close', (code, signal) => {
      closed = true;
      resolve({ code, signal });
    }),
  );
  const output = () => text;
  return { process: child, output, exited, waitForOutput: (pattern, from = 0) => waitForOutput(child, output, pattern, from, () => closed) };
}

/**
 * Resolves on the first match of `pattern` in `output()` from offset `from` on, checked each time the child writes
 * (its data listeners that collect `output` were attached first); rejects, with the output, when the child exits
 * without printing it.
 */
export function waitForOutput(
  child: ChildProcess,
  output: () => string,
  pattern: RegExp,
  from = 0,
  isClosed: () => boolean = () => false,
): Promise<OutputMatch> {
  const find = (): OutputMatch | null => {
    const match = pattern.exec(output().slice(from));
    return match ? { match, end: from + match.index + match[0].length } : null;
  };
  return new Promise((resolve, reject) => {
    const check = () => {
      const found = find();
      if (!found) return;
      stop();
      resolve(found);
    };
    const closed = () => {
      stop();
      const found = find();
      if (found) resolve(found);
      else reject(new Error(`the child exited without printing ${pattern}:\n${output()}`));
    };
    const stop = () => {
      child.stdout?.off('data', check);
      child.stderr?.off('data', check);
      child.off('close', closed);
    };
    child.stdout?.on('data', check);
    child.stderr?.on('data', check);
    child.on('close', closed);
    if (isClosed()) closed();
    else check();
  });
}

/** Kills what startCli started and is still running (after a failed assertion). */
export function killStartedClis(): void {
  for (const child of started) if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
}
