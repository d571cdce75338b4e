// `--executor`, `--dry-run` and every executor's settings as command-line options (--cores, --partition …), shared by
// `sweep run` and `paper`: one option per setting in the registry (src/sweep/executor-registry.ts), checked by the same table
// as a set file's `<executor>:` section. Light: the executors load without TensorFlow.js, so --help lists them at once.
import type { SweepExecutor, SweepExecutorOutcome } from '../sweep/sweep-executor.ts';
import { DEFAULT_EXECUTOR, SWEEP_EXECUTORS, executorNamed, executorNames } from '../sweep/executor-registry.ts';
import { pendingRuns } from '../sweep/run-folders.ts';
import type { RunSet } from '../sweep/run-set.ts';
import { UsageError, type OptionSpec } from './command.ts';

/** `--executor NAME` and `--dry-run`, then one option per executor setting. */
export const EXECUTOR_OPTIONS = {
  executor: { type: 'string', value: 'NAME', choices: executorNames(), help: `where the runs go (default ${DEFAULT_EXECUTOR})` },
  'dry-run': { type: 'boolean', help: 'print what the executor would submit (e.g. its batch script) instead of submitting it' },
} as const satisfies Record<string, OptionSpec>;

export const EXECUTOR_SETTING_OPTIONS = Object.fromEntries(
  SWEEP_EXECUTORS.flatMap((executor) =>
    Object.values(executor.settings).map((s) => [
      s.flag.slice(2),
      { type: 'string', value: s.value ?? 'VALUE', help: `${executor.name}: ${s.help}`, ...(s.type === 'list' ? { multiple: true } : {}) },
    ]),
  ),
) as Record<string, OptionSpec>;

const given = (raw: unknown) => raw !== undefined && !(Array.isArray(raw) && raw.length === 0);

/**
 * The executor's settings: the set file's `<executor>:` section with the command-line flags on top, checked like the
 * file's. A flag of another executor is a usage error (it would be ignored).
 */
export function executorSettings(
  executor: SweepExecutor,
  fromFile: Record<string, unknown> | undefined,
  values: Record<string, unknown>,
): Record<string, unknown> {
  for (const other of SWEEP_EXECUTORS.filter((e) => e !== executor)) {
    const stray = Object.values(other.settings).find((s) => given(values[s.flag.slice(2)]));
    if (stray) throw new UsageError(`${stray.flag} is a setting of the ${other.name} executor, not of ${executor.name}`);
  }
  const settings: Record<string, unknown> = { ...fromFile };
  for (const [key, setting] of Object.entries(executor.settings)) {
    const raw = values[setting.flag.slice(2)];
    if (!given(raw)) continue;
    const text = raw as string;
    const value =
      setting.type === 'list'
        ? raw
        : setting.type === 'boolean'
          ? text === 'true'
            ? true
            : text === 'false'
              ? false
              : text
          : /^\d+$/.test(text)
            ? Number(text)
            : text;
    const problem = setting.check(value);
    if (problem) throw new UsageError(`${setting.flag} must be ${problem} (got '${raw}')`);
    settings[key] = Array.isArray(value) ? [...((settings[key] as unknown[] | undefined) ?? []), ...value] : value;
  }
  return settings;
}

/**
 * Hands the set's runs that are not done to the executor `--executor` names, with its settings. Returns its outcome, or
 * null when the command has said all there is: a dry run printed, or nothing left to submit (`nothingLeft`).
 * `preflight` sees the executor first (e.g. to refuse missing inputs where the runs would run here).
 */
export async function runOnExecutor(
  set: RunSet,
  values: Record<string, unknown>,
  opts: { nothingLeft: string; preflight?: (executor: SweepExecutor) => void },
): Promise<SweepExecutorOutcome | null> {
  const executor = executorNamed((values.executor as string | undefined) ?? DEFAULT_EXECUTOR);
  const settings = executorSettings(executor, set.executorSettings[executor.name], values);
  if (values['dry-run'] && !executor.preview) throw new UsageError(`--dry-run: the ${executor.name} executor runs here and submits nothing`);
  opts.preflight?.(executor);
  const pending = pendingRuns(set);
  if (executor.submits && pending.length === 0) {
    console.log(opts.nothingLeft);
    return null;
  }
  if (values['dry-run']) {
    process.stdout.write(executor.preview!(set, pending, settings, process.cwd()));
    return null;
  }
  return executor.run(set, pending, settings);
}
