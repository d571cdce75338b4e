// The --backend and --verbose options of the commands that start a TensorFlow.js backend, and the one line
// that says which backend runs. Which one: --backend > $SLAYFORMER_BACKEND > the recipe's (or the command's own
// default) > auto (src/backend/device.ts).
// backend.ts (which loads tfjs) is imported only when a backend starts, so that --help answers at once.
import { BACKEND_ENV, BACKENDS, chooseBackend, type Device } from '../backend/device.ts';
import type { OptionSpec } from './command.ts';

/**
 * --backend NAME. `below`: what decides without the option and $SLAYFORMER_BACKEND (a recipe's backend, an
 * experiment's, a benchmark's reference backend); auto when left out.
 */
export function backendOption(below = 'auto') {
  return { type: 'string', value: 'NAME', choices: BACKENDS, help: 'TensorFlow.js backend', defaultText: `$${BACKEND_ENV}, else ${below}` } as const satisfies OptionSpec;
}

export const VERBOSE_OPTION = { type: 'boolean', help: 'also say why other backends were skipped (with auto)' } satisfies OptionSpec;

/**
 * Starts the backend (--backend `flag` > $SLAYFORMER_BACKEND > `recipe` > auto) and prints `[<command>] backend <name>`
 * on stderr: one short line. The reasons `auto` skipped other backends (long: one per package it tried) only with `verbose`.
 */
export async function startBackend(command: string, sources: { flag?: string; recipe?: string }, verbose: boolean): Promise<Device> {
  const { choice } = chooseBackend(sources);
  const { initBackend } = await import('../backend.ts');
  const device = await initBackend(choice, { quiet: !verbose });
  process.stderr.write(`[${command}] backend ${device.backend}\n`);
  return device;
}
