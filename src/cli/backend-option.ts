// The --backend and --verbose options of the commands that start a TensorFlow.js backend, and startBackend: the one
// way every command starts one. Which one: --backend > $SLAYFORMER_BACKEND > the recipe's (or the command's own
// default) > auto (src/backend/device.ts).
// start.ts (which loads tfjs) is imported only when a backend starts, so that --help answers at once.
import { BACKEND_ENV, BACKENDS, chooseBackend, type Device } from '../backend/device.ts';
import type { OptionSpec } from './command.ts';

/**
 * --backend NAME. `below`: what decides without the option and $SLAYFORMER_BACKEND (a recipe's backend, an
 * experiment's, a benchmark's reference backend); auto when left out.
 */
export function backendOption(below = 'auto') {
  return {
    type: 'string',
    value: 'NAME',
    choices: BACKENDS,
    help: 'TensorFlow.js backend',
    defaultText: `$${BACKEND_ENV}, else ${below}`,
  } as const satisfies OptionSpec;
}

export const VERBOSE_OPTION = { type: 'boolean', help: 'also say why other backends were skipped (with auto)' } satisfies OptionSpec;

export interface StartOptions {
  /** Also say why `auto` skipped the backends before the one it started (long: one reason per package it tried). */
  verbose?: boolean;
  /** Print nothing: a child process of a command that already said it, or a backend started only to count parameters. */
  silent?: boolean;
}

/**
 * Starts the backend (--backend `flag` > $SLAYFORMER_BACKEND > `recipe` > auto) and returns its device, the value the
 * command hands down. Says on stderr, in one line, `[<command>] backend <name>`, or `[<command>] backend auto → <name>`
 * when auto chose (with `verbose`, followed by why it skipped the others).
 */
export async function startBackend(
  command: string,
  sources: { flag?: string; recipe?: string },
  { verbose = false, silent = false }: StartOptions = {},
): Promise<Device> {
  const { choice } = chooseBackend(sources);
  const { startDevice } = await import('../backend/start.ts');
  const { device, skipped } = await startDevice(choice);
  if (!silent) {
    const why = verbose && skipped.length ? ` (skipped ${skipped.join('; ')})` : '';
    process.stderr.write(`[${command}] backend ${choice === 'auto' ? 'auto → ' : ''}${device.backend}${why}\n`);
  }
  return device;
}
