// The sweep executors by name (the contract: sweep-executor.ts). Everything that picks or asks an executor goes through this list:
// `--executor` and its settings' flags (src/cli/executor-options.ts), a set file's `<executor>:` section (spec.ts),
// status (status.ts) and the guard (guard.ts). To add one: a file implementing SweepExecutor, and a
// registerSweepExecutor line below (docs/layout.md).
import type { SweepExecutor, SweepExecutorTask } from './sweep-executor.ts';
import { localExecutor } from './local.ts';
import { slurmExecutor } from './slurm.ts';

const registered: SweepExecutor[] = [];

/** Every registered executor, in registration order (a live view). */
export const SWEEP_EXECUTORS: readonly SweepExecutor[] = registered;

/**
 * Adds an executor. Its name is a word (it names a set file's section and a folder under `_sweep/`); names and flags
 * are where users meet executors, so two executors may not share either. The commands' options are built from the
 * executors registered when they load: the built-in ones below.
 */
export function registerSweepExecutor(executor: SweepExecutor): void {
  if (!/^[a-z][a-z0-9-]*$/.test(executor.name)) throw new Error(`executor name '${executor.name}' must be a lowercase word (letters, digits, '-')`);
  for (const other of registered) {
    if (other.name === executor.name) throw new Error(`an executor named ${executor.name} is registered already`);
    const flags = new Set(Object.values(other.settings).map((s) => s.flag));
    const shared = Object.values(executor.settings).find((s) => flags.has(s.flag));
    if (shared) throw new Error(`executors ${other.name} and ${executor.name} both take ${shared.flag}`);
  }
  registered.push(executor);
}

registerSweepExecutor(localExecutor);
registerSweepExecutor(slurmExecutor);

/** What `run` uses when no executor is named. */
export const DEFAULT_EXECUTOR = localExecutor.name;

export const executorNames = (): string[] => SWEEP_EXECUTORS.map((e) => e.name);

/** The set-file sections the executors take (those with settings). */
export const executorSections = (): string[] => SWEEP_EXECUTORS.filter((e) => Object.keys(e.settings).length > 0).map((e) => e.name);

export function executorNamed(name: string): SweepExecutor {
  const executor = SWEEP_EXECUTORS.find((e) => e.name === name);
  if (!executor) throw new Error(`unknown executor '${name}' (one of ${executorNames().join(', ')})`);
  return executor;
}

/** In a guard: the executor task it runs as, if an executor claims it. */
export function currentTask(): { executor: SweepExecutor; task: SweepExecutorTask } | null {
  for (const executor of SWEEP_EXECUTORS) {
    const name = executor.currentTask?.() ?? null;
    if (name !== null) return { executor, task: { executor: executor.name, name } };
  }
  return null;
}

/**
 * A set file's executor sections (`<executor>: { key: value }`) from its top-level mapping, each key checked by its
 * executor's table; problems name the section and key. Executors without settings have no section.
 */
export function readExecutorSettings(
  root: Record<string, unknown>,
  problems: string[],
  describe: (value: unknown) => string,
): Record<string, Record<string, unknown>> {
  const out: Record<string, Record<string, unknown>> = {};
  for (const executor of SWEEP_EXECUTORS) {
    const value = root[executor.name];
    if (value === undefined || value === null || Object.keys(executor.settings).length === 0) continue;
    if (typeof value !== 'object' || Array.isArray(value)) {
      problems.push(`${executor.name} must be a mapping (got ${describe(value)})`);
      continue;
    }
    const settings: Record<string, unknown> = {};
    for (const [key, v] of Object.entries(value)) {
      const setting = executor.settings[key];
      if (!setting) {
        problems.push(`unknown key ${executor.name}.${key}; allowed: ${Object.keys(executor.settings).join(', ')}`);
        continue;
      }
      const problem = setting.check(v);
      if (problem) problems.push(`${executor.name}.${key} must be ${problem} (got ${describe(v)})`);
      else settings[key] = v;
    }
    out[executor.name] = settings;
  }
  return out;
}
