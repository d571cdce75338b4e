// The backend names a command or recipe may ask for. No tfjs import: the command-line layer builds its
// --backend option from these, and --help must answer before any backend loads.
export const BACKENDS = ['auto', 'tensorflow', 'wasm', 'cpu'] as const;
export type BackendChoice = (typeof BACKENDS)[number];

export function parseBackend(value: string, source: string): BackendChoice {
  if ((BACKENDS as readonly string[]).includes(value)) return value as BackendChoice;
  throw new Error(`${source}: unknown backend '${value}'; allowed: ${BACKENDS.join(', ')}`);
}
