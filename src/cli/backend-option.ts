// The --backend and --verbose options of the commands that start a TensorFlow.js backend, and the one line
// that says which backend runs.
// backend.ts (which loads tfjs) is imported only when a backend starts, so that --help answers at once.
import { BACKENDS, type BackendChoice } from '../backend/choice.ts';
import type { OptionSpec } from './command.ts';

const BACKEND_OPTION = { type: 'string', value: 'NAME', choices: BACKENDS, help: 'TensorFlow.js backend' } as const satisfies OptionSpec;

/** --backend NAME; without a default, $SLAYFORMER_BACKEND and then auto decide. */
export function backendOption(): typeof BACKEND_OPTION & { defaultText: string };
export function backendOption(fallback: BackendChoice): typeof BACKEND_OPTION & { default: BackendChoice };
export function backendOption(fallback?: BackendChoice): OptionSpec {
  return fallback ? { ...BACKEND_OPTION, default: fallback } : { ...BACKEND_OPTION, defaultText: '$SLAYFORMER_BACKEND, else auto' };
}

export const VERBOSE_OPTION = { type: 'boolean', help: 'also say why other backends were skipped (with auto)' } satisfies OptionSpec;

/**
 * Starts the backend and prints `[<command>] backend <name>` on stderr: one short line. The reasons `auto`
 * skipped other backends (long: one per package it tried) only with `verbose`.
 */
export async function startBackend(command: string, requested: string | undefined, verbose: boolean): Promise<string> {
  const { initBackend } = await import('../backend.ts');
  const name = await initBackend(requested, { quiet: !verbose });
  process.stderr.write(`[${command}] backend ${name}\n`);
  return name;
}
