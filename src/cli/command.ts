// The command-line layer every CLI and benchmark shares: node:util parseArgs (in tokens mode) behind one
// declarative spec per command, so that every command
//   - answers -h/--help with its usage, description and options (the list is generated from the spec),
//   - rejects an unknown option, a missing value or a bad choice with one line plus the usage (exit 2),
//   - takes `--name value` and `--name=value` alike,
//   - and, where it reads a recipe (train, finetune, demo), passes `--section.key=value` and `--section.key value`
//     through as recipe overrides (always in the `=` form) for the recipe loader to check, which also names the
//     recipe key an unknown one was probably meant to be (`--lr` → `--train.lr`).
// Tokens mode (strict: false) rather than strict parsing: strict mode cannot let the open-ended recipe
// overrides through, and its messages are long; here every problem is phrased once, naming the option.
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { writeLastWords } from '../backend/quiet-stderr.ts';

export interface OptionSpec {
  type: 'string' | 'boolean';
  short?: string;
  /** Placeholder of a string option's value in --help (default VALUE). */
  value?: string;
  default?: string | boolean;
  /** The default as --help describes it, when it is not a fixed value (e.g. '$SLAYFORMER_BACKEND, else auto'). */
  defaultText?: string;
  /** The only values a string option accepts. */
  choices?: readonly string[];
  /** A string option that may be given several times: its value is the list, in order ([] when absent). */
  multiple?: boolean;
  /** A numeric option: its value (and string default) must be such a number and is returned as one. */
  number?: NumberBounds;
  help: string;
  /** Accepted but not listed (the --child protocol of the benchmarks that isolate each measurement). */
  hidden?: boolean;
}

export interface CommandSpec<O extends Record<string, OptionSpec> = Record<string, OptionSpec>> {
  /** The npm script: usage reads `npm run <name> -- …` and messages start with `<name>:`. */
  name: string;
  /** What follows `npm run <name> --` in the usage, one entry per form; options are listed separately. */
  usage: string | readonly string[];
  /** Paragraphs printed after the usage by --help. */
  description?: string;
  options: O;
  /** Positional arguments allowed (default: none), and what they are, for messages ('<checkpoint>'). */
  positionals?: { min?: number; max?: number; name?: string };
  /** Accept `--section.key=value` and `--section.key value` recipe overrides (returned in `overrides` as `--key=value`, in order). */
  overrides?: boolean;
  /** Printed after the options by --help. */
  notes?: string;
}

/** A string option's value: a number, one of its choices, or any string. */
type StringValue<S> = S extends { number: object } ? number : S extends { choices: readonly (infer C extends string)[] } ? C : string;

/** The parsed values: booleans are always set; a string option is never undefined when it has a default. */
export type OptionValues<O extends Record<string, OptionSpec>> = {
  -readonly [K in keyof O]: O[K]['type'] extends 'boolean'
    ? boolean
    : O[K] extends { multiple: true }
      ? StringValue<O[K]>[]
      : O[K] extends { default: string }
        ? StringValue<O[K]>
        : StringValue<O[K]> | undefined;
};

export interface ParsedCommand<O extends Record<string, OptionSpec>> {
  values: OptionValues<O>;
  positionals: string[];
  overrides: string[];
}

/** Bad arguments: reported as one line plus the usage, exit status 2. Commands throw it for invalid values too. */
export class UsageError extends Error {}

const HELP: OptionSpec = { type: 'boolean', short: 'h', help: 'show this help' };

function optionsWithHelp(spec: CommandSpec): Record<string, OptionSpec> {
  return { ...spec.options, help: HELP };
}

/** Parses `argv` (the arguments after the script name); 'help' when -h/--help is among them. Throws UsageError. */
export function parseCommandLine<const O extends Record<string, OptionSpec>>(spec: CommandSpec<O>, argv: readonly string[]): ParsedCommand<O> | 'help' {
  const options = optionsWithHelp(spec);
  const config = Object.fromEntries(Object.entries(options).map(([name, o]) => [name, { type: o.type, ...(o.short ? { short: o.short } : {}) }]));
  const { tokens } = parseArgs({ args: [...argv], options: config, strict: false, allowPositionals: true, tokens: true });
  const values: Record<string, string | number | boolean | string[] | undefined> = {};
  for (const [name, o] of Object.entries(options)) values[name] = o.multiple ? [] : (o.default ?? (o.type === 'boolean' ? false : undefined));
  const positionals: string[] = [];
  const overrides: string[] = [];
  for (let i = 0; i < tokens.length; i++) {
    const token = tokens[i];
    if (token.kind === 'positional') positionals.push(token.value);
    if (token.kind !== 'option') continue;
    const option = options[token.name];
    if (!option) {
      const isOverride = spec.overrides && token.rawName.startsWith('--');
      if (isOverride && token.inlineValue) {
        overrides.push(`${token.rawName}=${token.value}`);
        continue;
      }
      // `--train.lr 1e-3`: parseArgs reads an unknown option as a flag and its value as the next positional.
      const next = tokens[i + 1];
      if (isOverride && next?.kind === 'positional') {
        overrides.push(`${token.rawName}=${next.value}`);
        i++;
        continue;
      }
      const hint = isOverride ? ` (a recipe override needs a value: ${token.rawName} VALUE or ${token.rawName}=VALUE)` : '';
      throw new UsageError(`unknown option '${token.rawName}'${hint}`);
    }
    if (option.type === 'boolean') {
      if (token.inlineValue) throw new UsageError(`option ${token.rawName} takes no value (got '${token.rawName}=${token.value}')`);
      values[token.name] = true;
      continue;
    }
    // parseArgs takes the next argument as the value even when it looks like an option: refuse that, as
    // strict mode does, so that a forgotten value does not silently swallow the next option.
    if (token.value === undefined || (!token.inlineValue && token.value.startsWith('-'))) {
      const got = token.value === undefined ? '' : ` (got '${token.value}'; write ${token.rawName}=${token.value} if that is the value)`;
      throw new UsageError(`option ${token.rawName} needs a value${got}`);
    }
    if (option.choices && !option.choices.includes(token.value)) {
      throw new UsageError(`option ${token.rawName}: '${token.value}' is not one of ${option.choices.join(', ')}`);
    }
    values[token.name] = option.multiple ? [...(values[token.name] as string[]), token.value] : token.value;
  }
  if (values.help) return 'help';
  for (const [name, o] of Object.entries(options)) {
    if (o.number && typeof values[name] === 'string') values[name] = numberOption(values[name] as string, name, o.number) as never;
  }
  const { min = 0, max = 0, name = 'argument' } = spec.positionals ?? {};
  if (positionals.length > max) {
    const extra = positionals
      .slice(max)
      .map((p) => `'${p}'`)
      .join(' ');
    throw new UsageError(max === 0 ? `unexpected argument ${extra}` : `unexpected argument ${extra} (at most ${max} ${name})`);
  }
  if (positionals.length < min) throw new UsageError(`missing ${name}${min > 1 ? ` (at least ${min})` : ''}`);
  delete values.help;
  return { values: values as OptionValues<O>, positionals, overrides };
}

/** How the user started the command: `npm run <name> --`, or `slayformer <name>` through the package's bin (bin/slayformer.js). */
function invocation(name: string): string {
  const bin = (globalThis as { SLAYFORMER_BIN?: string }).SLAYFORMER_BIN;
  return bin ? `${bin} ${name}` : `npm run ${name} --`;
}

function usageLines(spec: CommandSpec): string {
  const forms = typeof spec.usage === 'string' ? [spec.usage] : spec.usage;
  return `Usage:\n${forms.map((form) => `  ${invocation(spec.name)} ${form}`).join('\n')}`;
}

/** The --help text: usage, description, the options generated from the spec, notes. */
export function helpText(spec: CommandSpec): string {
  const rows = Object.entries(optionsWithHelp(spec))
    .filter(([, o]) => !o.hidden)
    .map(([name, o]) => {
      const flag = `${o.short ? `-${o.short}, ` : ''}--${name}${o.type === 'string' ? ` ${o.value ?? 'VALUE'}` : ''}`;
      const choices = o.choices ? `: ${o.choices.join(' | ')}` : '';
      const shownDefault = o.defaultText ?? (typeof o.default === 'string' ? o.default : undefined);
      const fallback = shownDefault === undefined ? '' : ` (default ${shownDefault})`;
      return [flag, `${o.help}${choices}${fallback}`];
    });
  const width = Math.min(30, Math.max(...rows.map(([flag]) => flag.length)) + 2);
  const options = rows.map(([flag, help]) => (flag.length + 2 > width ? `  ${flag}\n  ${' '.repeat(width)}${help}` : `  ${flag.padEnd(width)}${help}`));
  return [usageLines(spec), spec.description, `Options:\n${options.join('\n')}`, spec.notes].filter(Boolean).join('\n\n') + '\n';
}

/** One line naming the problem, the usage and where the options are listed. */
export function usageErrorText(spec: CommandSpec, message: string): string {
  return `${spec.name}: ${message}\n${usageLines(spec)}\nRun '${invocation(spec.name)} --help' for the options.\n`;
}

/**
 * For scripts whose body reads the options at top level (the benchmarks): the parsed arguments, or, after
 * printing the help (exit 0) or a usage error (exit 2), the process ends here.
 */
export function parseOrExit<const O extends Record<string, OptionSpec>>(
  spec: CommandSpec<O>,
  argv: readonly string[] = process.argv.slice(2),
): ParsedCommand<O> {
  try {
    const args = parseCommandLine(spec, argv);
    if (args !== 'help') return args;
    process.stdout.write(helpText(spec));
    process.exit(0);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    exitWithUsage(spec, err.message);
  }
}

/**
 * parseOrExit, then `convert` of the values (a list option's items checked, names mapped): a UsageError
 * thrown by `convert` ends the process like one from the parser.
 */
export function optionsOrExit<const O extends Record<string, OptionSpec>, T>(
  spec: CommandSpec<O>,
  convert: (values: OptionValues<O>) => T,
  argv: readonly string[] = process.argv.slice(2),
): T {
  const { values } = parseOrExit(spec, argv);
  try {
    return convert(values);
  } catch (err) {
    if (!(err instanceof UsageError)) throw err;
    exitWithUsage(spec, err.message);
  }
}

/** Prints one line naming the problem plus the usage, and exits 2. */
export function exitWithUsage(spec: CommandSpec, message: string): never {
  process.stderr.write(usageErrorText(spec, message));
  process.exit(2);
}

/**
 * Parses the process's arguments (as parseOrExit) and runs `main`; its result is the exit status (default 0).
 * A UsageError thrown by `main` prints one line plus the usage (exit 2); any other error prints
 * `<name>: <message>` (the stack with SLAYFORMER_DEBUG set) and exits 1 at once, so that nothing left
 * running after a failure keeps the process alive.
 */
export async function runCommand<const O extends Record<string, OptionSpec>>(
  spec: CommandSpec<O>,
  main: (args: ParsedCommand<O>) => Promise<number | void> | number | void,
  argv: readonly string[] = process.argv.slice(2),
): Promise<void> {
  const args = parseOrExit(spec, argv);
  try {
    process.exitCode = (await main(args)) ?? 0;
  } catch (err) {
    if (err instanceof UsageError) {
      process.stderr.write(usageErrorText(spec, err.message));
      process.exitCode = 2;
      return;
    }
    const stack = process.env.SLAYFORMER_DEBUG && err instanceof Error ? `${err.stack}\n` : '';
    // The error is the last line: TensorFlow's lines as the process exits only echo it (backend/quiet-stderr.ts).
    writeLastWords(`${spec.name}: ${err instanceof Error ? err.message : String(err)}\n${stack}`);
    process.exit(1);
  }
}

/** An integer option ≥ `min` with a default, as the benchmarks declare their shape and step counts. */
export const integerOption = (min: number, fallback: number, help: string) =>
  ({ type: 'string', value: 'N', number: { integer: true, min }, default: String(fallback), help }) as const;

/** The reference GPT's shape as options (src/train/throughput.ts, BenchShape; bench:paired, bench:versus and its worker). */
export const BENCH_SHAPE_OPTIONS = {
  seq: integerOption(2, 256, 'sequence length'),
  batch: integerOption(1, 8, 'batch size'),
  vocab: integerOption(2, 4096, 'vocabulary'),
  d: integerOption(2, 128, 'model width'),
  layers: integerOption(1, 4, 'layers'),
  heads: integerOption(1, 4, 'heads'),
} as const;

export interface NumberBounds {
  integer?: boolean;
  min?: number;
  /** min itself is not allowed. */
  exclusiveMin?: boolean;
}

/** A numeric option's value (undefined when the option was not given); anything else is a UsageError naming it. */
function numberOption(value: string | undefined, option: string, { integer = false, min, exclusiveMin = false }: NumberBounds = {}): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  const inRange = min === undefined || (exclusiveMin ? n > min : n >= min);
  if (value.trim() === '' || !Number.isFinite(n) || (integer && !Number.isInteger(n)) || !inRange) {
    const bound = min === undefined ? '' : ` ${exclusiveMin ? '>' : '≥'} ${min}`;
    throw new UsageError(`--${option} must be ${integer ? 'an integer' : 'a number'}${bound} (got '${value}')`);
  }
  return n;
}

/** A comma-separated option's items (undefined when not given); with `allowed`, every item must be one of them. */
export function listOption(value: string | undefined, option: string, allowed?: readonly string[]): string[] | undefined {
  if (value === undefined) return undefined;
  const items = value
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean);
  if (items.length === 0) throw new UsageError(`--${option} needs at least one item (got '${value}')`);
  const unknown = allowed ? items.filter((s) => !allowed.includes(s)) : [];
  if (unknown.length > 0) throw new UsageError(`--${option}: unknown ${unknown.map((s) => `'${s}'`).join(', ')}; allowed: ${allowed!.join(', ')}`);
  return items;
}

/** A comma-separated list of numbers (e.g. --seeds 42,43), each checked as numberOption does. */
export function numberListOption(value: string | undefined, option: string, bounds: NumberBounds = {}): number[] | undefined {
  return listOption(value, option)?.map((item) => numberOption(item, option, bounds)!);
}

/** True when the module at `importMetaUrl` is the script node was started with (not imported by a test). */
export function isMainModule(importMetaUrl: string): boolean {
  return process.argv[1] !== undefined && importMetaUrl === pathToFileURL(path.resolve(process.argv[1])).href;
}
