// The Slurm settings as command-line options (--partition …), shared by `sweep run` and `paper`: one option per
// field of the table the sweep file's slurm: section is checked by (src/sweep/slurm.ts), and the same checks.
import { SLURM_FIELDS } from '../sweep/options.ts';
import type { SlurmOptions } from '../sweep/options.ts';
import { UsageError, type OptionSpec } from './command.ts';

export const SLURM_OPTIONS = Object.fromEntries(
  Object.entries(SLURM_FIELDS).map(([key, f]) => [f.flag.slice(2), { type: 'string', value: 'VALUE', help: `slurm: ${f.help}`, ...(key === 'sbatch' || key === 'setup' ? { multiple: true } : {}) }]),
) as Record<string, OptionSpec>;

/** The set's slurm: settings with the command-line flags on top, checked like the sweep file's. */
export function slurmOptions(fromFile: SlurmOptions, values: Record<string, unknown>): SlurmOptions {
  const options: Record<string, unknown> = { ...fromFile };
  for (const [key, field] of Object.entries(SLURM_FIELDS)) {
    const raw = values[field.flag.slice(2)];
    if (raw === undefined || (Array.isArray(raw) && raw.length === 0)) continue;
    const value = Array.isArray(raw) ? raw : key === 'requeueOnTimeLimit' ? raw === 'true' || (raw === 'false' ? false : raw) : /^\d+$/.test(raw as string) ? Number(raw) : raw;
    const problem = field.check(value);
    if (problem) throw new UsageError(`${field.flag} must be ${problem} (got '${raw}')`);
    options[key] = Array.isArray(value) ? [...((options[key] as string[] | undefined) ?? []), ...value] : value;
  }
  return options as SlurmOptions;
}
