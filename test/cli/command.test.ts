// The shared command-line parser (src/cli/command.ts) in-process, then every command and benchmark spawned as
// a user starts it: --help prints the usage and options (exit 0), an unknown option one line plus the usage
// (exit 2, no stack trace), and --backend takes its value after a space or an equals sign.
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import pLimit from 'p-limit';
import { describe, expect, it } from 'vitest';
import { helpText, parseCommandLine, UsageError, usageErrorText } from '../../src/cli/command.ts';
import type { CommandSpec } from '../../src/cli/command.ts';

const SPEC = {
  name: 'demo-cmd',
  usage: '<input> [options]',
  description: 'Does a thing.',
  options: {
    backend: { type: 'string', value: 'NAME', choices: ['wasm', 'cpu'], help: 'backend' },
    steps: { type: 'string', value: 'N', default: '10', number: { integer: true, min: 1 }, help: 'steps' },
    rate: { type: 'string', value: 'X', number: { min: 0, exclusiveMin: true }, help: 'rate' },
    'dry-run': { type: 'boolean', help: 'plan only' },
    out: { type: 'string', value: 'DIR', help: 'where' },
    child: { type: 'string', hidden: true, help: 'internal' },
  },
  positionals: { min: 1, max: 1, name: '<input>' },
  overrides: true,
} as const satisfies CommandSpec;

const parse = (...argv: string[]) => parseCommandLine(SPEC, argv);
/** The parse of arguments that do not ask for help. */
const parsed = (...argv: string[]) => {
  const result = parse(...argv);
  if (result === 'help') throw new Error('unexpected help');
  return result;
};
const usageError = (...argv: string[]): string => {
  try {
    parse(...argv);
  } catch (err) {
    expect(err).toBeInstanceOf(UsageError);
    return (err as Error).message;
  }
  throw new Error(`no usage error for ${argv.join(' ')}`);
};

describe('parseCommandLine', () => {
  it('takes --opt value and --opt=value alike, applies defaults and converts numbers', () => {
    const spaced = parse('in.txt', '--backend', 'wasm', '--steps', '3', '--dry-run');
    const joined = parse('in.txt', '--backend=wasm', '--steps=3', '--dry-run');
    expect(spaced).toEqual(joined);
    expect(spaced).toEqual({
      values: { backend: 'wasm', steps: 3, rate: undefined, 'dry-run': true, out: undefined, child: undefined },
      positionals: ['in.txt'],
      overrides: [],
    });
    expect(parsed('x').values).toMatchObject({ steps: 10, 'dry-run': false });
    expect(parsed('x', '--rate', '0.5').values.rate).toBe(0.5);
    expect(parsed('x', '--out=--weird').values.out).toBe('--weird'); // an inline value may start with a dash
  });

  it('passes dotted recipe overrides through, in order, and keeps them apart from options', () => {
    const result = parsed('r.yaml', '--train.lr=1e-3', '--backend', 'cpu', '--model.attention.options.prfFeatures=32', '--name=x');
    expect(result).toMatchObject({ positionals: ['r.yaml'], overrides: ['--train.lr=1e-3', '--model.attention.options.prfFeatures=32', '--name=x'] });
    expect(result.values.backend).toBe('cpu');
  });

  it('takes a recipe override’s value after a space too, as every option does', () => {
    expect(parsed('r.yaml', '--train.lr', '1e-3', '--dry-run', '--model.attention.options.prfFeatures', '32')).toMatchObject({
      positionals: ['r.yaml'],
      overrides: ['--train.lr=1e-3', '--model.attention.options.prfFeatures=32'],
      values: { 'dry-run': true },
    });
    // Before the recipe file as well: the value is not taken for the positional.
    expect(parsed('--train.lr', '1e-3', 'r.yaml')).toMatchObject({ positionals: ['r.yaml'], overrides: ['--train.lr=1e-3'] });
    expect(usageError('r.yaml', '--train.lr')).toBe("unknown option '--train.lr' (a recipe override needs a value: --train.lr VALUE or --train.lr=VALUE)");
    expect(usageError('r.yaml', '--train.lr', '--dry-run')).toBe(
      "unknown option '--train.lr' (a recipe override needs a value: --train.lr VALUE or --train.lr=VALUE)",
    );
  });

  it('answers -h and --help wherever they appear', () => {
    expect(parse('-h')).toBe('help');
    expect(parse('x', '--steps', '2', '--help')).toBe('help');
    expect(parse('--help', '--no-such-thing=1')).toBe('help');
  });

  it('names the option or argument at fault', () => {
    expect(usageError('x', '--bogus')).toBe("unknown option '--bogus' (a recipe override needs a value: --bogus VALUE or --bogus=VALUE)");
    expect(() => parseCommandLine({ ...SPEC, overrides: false }, ['x', '--bogus=1'])).toThrow("unknown option '--bogus'");
    expect(usageError('x', '-z')).toBe("unknown option '-z'");
    expect(usageError('x', '--backend', 'tpu')).toBe("option --backend: 'tpu' is not one of wasm, cpu");
    expect(usageError('x', '--backend')).toBe('option --backend needs a value');
    expect(usageError('x', '--out', '--dry-run')).toBe("option --out needs a value (got '--dry-run'; write --out=--dry-run if that is the value)");
    expect(usageError('x', '--dry-run=yes')).toBe("option --dry-run takes no value (got '--dry-run=yes')");
    expect(usageError('x', '--steps', '0')).toBe("--steps must be an integer ≥ 1 (got '0')");
    expect(usageError('x', '--steps', '2.5')).toBe("--steps must be an integer ≥ 1 (got '2.5')");
    expect(usageError('x', '--rate=0')).toBe("--rate must be a number > 0 (got '0')");
    expect(usageError('x', '--rate=abc')).toBe("--rate must be a number > 0 (got 'abc')");
    expect(usageError()).toBe('missing <input>');
    expect(usageError('a', 'b')).toBe("unexpected argument 'b' (at most 1 <input>)");
    expect(usageError('x', '--', '--not-an-option')).toBe("unexpected argument '--not-an-option' (at most 1 <input>)");
  });

  it('generates the help from the spec (hidden options left out) and a one-line usage error', () => {
    const help = helpText(SPEC);
    expect(help.startsWith('Usage:\n  npm run demo-cmd -- <input> [options]\n\nDoes a thing.\n\nOptions:\n')).toBe(true);
    expect(help).toMatch(/ {2}--backend NAME {2,}backend: wasm \| cpu\n/);
    expect(help).toMatch(/ {2}--steps N {2,}steps \(default 10\)\n/);
    expect(help).toMatch(/ {2}-h, --help {2,}show this help\n/);
    expect(help).not.toContain('--child');
    const error = usageErrorText(SPEC, "unknown option '--x'");
    expect(error.split('\n')).toEqual([
      "demo-cmd: unknown option '--x'",
      'Usage:',
      '  npm run demo-cmd -- <input> [options]',
      "Run 'npm run demo-cmd -- --help' for the options.",
      '',
    ]);
  });
});

// Every npm script that runs a command or a benchmark.
const scripts = JSON.parse(readFileSync('package.json', 'utf8')).scripts as Record<string, string>;
const COMMANDS = Object.entries(scripts)
  .filter(([, command]) => /^node --import tsx (src\/cli|bench)\//.test(command))
  .map(([name, command]) => ({ name, file: command.replace('node --import tsx ', '') }));

interface Ran {
  status: number | null;
  stdout: string;
  stderr: string;
}

// Two at a time: each loads TensorFlow.js, and a burst of them starves the timing-sensitive tests that run
// beside this file (the kill test polls for a checkpoint save in progress every millisecond).
const limit = pLimit(2);

/** A command as `npm run` starts it (node --import tsx <file>), two running at once. */
function run(file: string, ...args: string[]): Promise<Ran> {
  return runNode(['--import', 'tsx', file, ...args]);
}

/** A command run so that importing any TensorFlow.js package throws (test/helpers/no-tfjs.mjs). */
function runWithoutTfjs(file: string, ...args: string[]): Promise<Ran> {
  return runNode(['--import', 'tsx', '--import', './test/helpers/no-tfjs.mjs', file, ...args]);
}

function runNode(nodeArgs: string[]): Promise<Ran> {
  return limit(
    () =>
      new Promise<Ran>((resolve) => {
        const child = spawn(process.execPath, nodeArgs, { stdio: ['ignore', 'pipe', 'pipe'] });
        let stdout = '';
        let stderr = '';
        child.stdout.on('data', (d) => (stdout += d));
        child.stderr.on('data', (d) => (stderr += d));
        child.on('close', (status) => resolve({ status, stdout, stderr }));
      }),
  );
}

describe('every command', () => {
  it('is started by its npm script with node --import tsx (tsx’s own CLI would relay Ctrl-C and kill a busy trainer)', () => {
    const typescript = Object.entries(scripts).filter(([, command]) => /\.ts\b/.test(command));
    expect(typescript.filter(([, command]) => !command.startsWith('node --import tsx ')).map(([name]) => name)).toEqual([]);
    expect(COMMANDS.map((c) => c.name)).toEqual(
      expect.arrayContaining(['train', 'finetune', 'demo', 'eval', 'generate', 'compare', 'bench', 'bench:attention', 'bench:data', 'bench:train']),
    );
  });

  it('parses its arguments with the shared parser, and no other way', () => {
    const entryPoints = [
      ...readdirSync('src/cli')
        .filter((f) => f.endsWith('.ts') && !['command.ts', 'backend-option.ts', 'executor-options.ts', 'launch.ts'].includes(f))
        .map((f) => `src/cli/${f}`),
      ...readdirSync('bench')
        // xla-plan.ts is no command: the rows that bench:xla, xla:archive and xla-run.py share.
        .filter((f) => f.endsWith('.ts') && f !== 'xla-plan.ts')
        .map((f) => `bench/${f}`),
    ];
    expect(entryPoints.length).toBeGreaterThanOrEqual(COMMANDS.length - 1); // finetune shares train's file
    for (const file of entryPoints) {
      const source = readFileSync(file, 'utf8');
      expect(source, file).toMatch(/\b(runCommand|parseOrExit|optionsOrExit)\(/);
      expect(source, file).not.toMatch(/import \{[^}]*\bparseArgs\b[^}]*\} from 'node:util'|for \(const arg of argv\)/);
    }
  });
});

// Spawned, as a user starts them: the benchmarks whose --help crashed, train (recipe overrides) and compare;
// eval and bench:train below. Each spawn loads TensorFlow.js (seconds on a loaded machine), so not all of them.
const SPAWNED = ['bench:attention', 'bench:data', 'train', 'compare'];

describe('commands, spawned', () => {
  it('--help prints the usage and options (exit 0); an unknown option one line plus the usage (exit 2), no stack trace', async () => {
    const commands = COMMANDS.filter((c) => SPAWNED.includes(c.name));
    expect(commands).toHaveLength(SPAWNED.length);
    const results = await Promise.all(
      commands.map(async ({ name, file }) => ({ name, help: await run(file, '--help'), bad: await run(file, '--no-such-option') })),
    );
    for (const { name, help, bad } of results) {
      expect(help.status, `${name}: ${help.stderr}`).toBe(0);
      expect(help.stdout, name).toMatch(new RegExp(`^Usage:\\n {2}npm run ${name} -- `));
      expect(help.stdout, name).toContain('\nOptions:\n');
      expect(help.stdout, name).toMatch(/-h, --help +show this help/);
      expect(bad.status, name).toBe(2);
      expect(bad.stdout, name).toBe('');
      const lines = bad.stderr.split('\n');
      expect(lines[0], name).toBe(
        `${name}: unknown option '--no-such-option'${name === 'train' ? ' (a recipe override needs a value: --no-such-option VALUE or --no-such-option=VALUE)' : ''}`,
      );
      expect(lines[1], name).toBe('Usage:');
      expect(bad.stderr, name).not.toMatch(/\n\s+at /);
    }
  });

  it('takes --backend NAME and --backend=NAME alike, with recipe overrides; a bad name is a usage error', async () => {
    const recipe = 'recipes/demo/gpt-softmax.yaml';
    const [spaced, joined, bad, benchTrain, misspelt] = await Promise.all([
      run('src/cli/train.ts', recipe, '--dry-run', '--backend', 'cpu', '--train.lr', '1e-3'),
      run('src/cli/train.ts', recipe, '--dry-run', '--backend=cpu', '--train.lr=1e-3'),
      run('src/cli/eval.ts', 'runs/x', '--backend', 'tpu'),
      // bench:train took only --opt=value before.
      run('bench/train.ts', 'softmax', '--steps', '0'),
      // A recipe key without its section: the recipe loader names the key it probably is.
      run('src/cli/train.ts', recipe, '--dry-run', '--lr', '1e-3'),
    ]);
    expect(spaced.status, spaced.stderr).toBe(0);
    expect(spaced.stdout).toMatch(/backend {5}cpu \(--backend cpu\): .*; not started by --dry-run/);
    expect(joined.stdout).toBe(spaced.stdout);
    expect(bad.status).toBe(2);
    expect(bad.stderr.split('\n')[0]).toBe("eval: option --backend: 'tpu' is not one of auto, tensorflow, wasm, cpu");
    expect(benchTrain.status).toBe(2);
    expect(benchTrain.stderr.split('\n')[0]).toBe("bench:train: --steps must be an integer ≥ 1 (got '0')");
    expect(misspelt.status).toBe(2);
    expect(misspelt.stderr).toBe(`${recipe}: override --lr=1e-3: unknown key lr (did you mean --train.lr?)\n`);
  });

  it("sweep's guard and paper's --guard also answer to `task`, their name in older versions, which --help leaves out", async () => {
    // Slurm jobs queued by an older version run `sweep task …` and `paper … --task …` when they start. A run index past
    // the set's end reaches the guard's own check of it, and loads nothing heavier than the set.
    const runs = mkdtempSync(path.join(tmpdir(), 'guard-alias-'));
    try {
      const paper = (...args: string[]) => run('src/cli/paper.ts', 'slay-tasks', '--quick', '--runs', runs, ...args);
      const [sweepGuard, sweepTask, paperGuard, paperTask, sweepHelp, paperHelp] = await Promise.all([
        run('src/cli/sweep.ts', 'guard', 'sweeps/tiny.yaml', '99'),
        run('src/cli/sweep.ts', 'task', 'sweeps/tiny.yaml', '99'),
        paper('--guard', '99'),
        paper('--task', '99'),
        runWithoutTfjs('src/cli/sweep.ts', '--help'),
        runWithoutTfjs('src/cli/paper.ts', '--help'),
      ]);
      for (const ran of [sweepGuard, sweepTask]) {
        expect(ran.status, ran.stderr).toBe(1);
        expect(ran.stderr).toMatch(/^sweep: sweeps\/tiny\.yaml: no run 99 \(the sweep has runs 0–3: /);
      }
      for (const ran of [paperGuard, paperTask]) {
        expect(ran.status, ran.stderr).toBe(1);
        expect(ran.stderr).toContain('paper: npm run paper -- slay-tasks --quick: no unit 99 (units 0–8)');
      }
      expect(readdirSync(runs)).toEqual([]);
      expect(sweepHelp.stdout).toContain('npm run sweep -- guard <sweep.yaml> <index|name>');
      expect(sweepHelp.stdout).toMatch(/^ {2}guard {3}run one run of the sweep/m);
      expect(sweepHelp.stdout).not.toMatch(/^ {2}task\b|sweep -- task/m);
      expect(paperHelp.stdout).not.toMatch(/--(task|guard)\b/);
    } finally {
      rmSync(runs, { recursive: true, force: true });
    }
  });

  it('--help of every command answers before TensorFlow.js loads (any import of it fails here)', async () => {
    const files = readdirSync('src/cli').filter(
      (f) => f.endsWith('.ts') && !['command.ts', 'backend-option.ts', 'executor-options.ts', 'launch.ts'].includes(f),
    );
    const results = await Promise.all(files.map(async (file) => ({ file, help: await runWithoutTfjs(`src/cli/${file}`, '--help') })));
    for (const { file, help } of results) {
      expect(help.status, `${file}: ${help.stderr}`).toBe(0);
      expect(help.stdout, file).toMatch(/^Usage:\n/);
    }
  });
});

describe('the slayformer bin', () => {
  it("the README's way to run it from another folder works as written: npm link in the checkout, then slayformer …", () => {
    // The README's sentence about the bin: it must say how the command gets onto PATH, and never send the reader to
    // `npx slayformer` without one (npm would ask its registry for a package of that name, and run whatever it found).
    const readme = readFileSync('README.md', 'utf8').replace(/\n/g, ' ');
    const sentence = /Outside the project folder.*?\.(?= |$)/.exec(readme)?.[0] ?? '';
    expect(sentence, 'README: the sentence on running slayformer outside the project folder').toContain('`npm link`');
    expect(sentence).not.toContain('npx slayformer');
    const shown = [...sentence.matchAll(/`(slayformer [^`]*)`/g)].map((m) => m[1]);
    expect(shown).toContain('slayformer --help');

    const project = process.cwd();
    const prefix = mkdtempSync(path.join(tmpdir(), 'slayformer-link-'));
    const elsewhere = mkdtempSync(path.join(tmpdir(), 'slayformer-elsewhere-'));
    try {
      // What `npm link` leaves under npm's global prefix: the checkout linked as lib/node_modules/slayformer and
      // its bin as bin/slayformer (nothing of the checkout changes, so the test links by hand).
      mkdirSync(path.join(prefix, 'lib', 'node_modules'), { recursive: true });
      mkdirSync(path.join(prefix, 'bin'));
      symlinkSync(project, path.join(prefix, 'lib', 'node_modules', 'slayformer'));
      const bin = JSON.parse(readFileSync('package.json', 'utf8')).bin.slayformer as string;
      symlinkSync(path.join('..', 'lib', 'node_modules', 'slayformer', bin), path.join(prefix, 'bin', 'slayformer'));
      const env = { ...process.env, PATH: `${path.join(prefix, 'bin')}${path.delimiter}${process.env.PATH}` };
      const help = spawnSync('sh', ['-c', 'slayformer --help'], { cwd: elsewhere, env, encoding: 'utf8', timeout: 120_000 });
      expect(help.status, help.stderr).toBe(0);
      expect(help.stdout).toMatch(/^Usage: slayformer <command> \[arguments…\]/);
      // The file itself, started by node from another folder.
      const direct = spawnSync(process.execPath, [path.join(project, bin), 'train', '--help'], { cwd: elsewhere, encoding: 'utf8', timeout: 120_000 });
      expect(direct.status, direct.stderr).toBe(0);
      expect(direct.stdout).toMatch(/^Usage:\n {2}slayformer train <recipe\.yaml>/);
    } finally {
      rmSync(prefix, { recursive: true, force: true });
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });

  it('npx slayformer runs the commands from another folder, as npm install <this folder> sets it up', () => {
    const project = process.cwd();
    const elsewhere = mkdtempSync(path.join(tmpdir(), 'slayformer-npx-'));
    try {
      // What `npm install <project>` leaves: the package linked under node_modules and its bin under node_modules/.bin.
      mkdirSync(path.join(elsewhere, 'node_modules', '.bin'), { recursive: true });
      symlinkSync(project, path.join(elsewhere, 'node_modules', 'slayformer'));
      const bin = JSON.parse(readFileSync('package.json', 'utf8')).bin.slayformer as string;
      symlinkSync(path.join('..', 'slayformer', bin), path.join(elsewhere, 'node_modules', '.bin', 'slayformer'));
      const npx = (...args: string[]) => spawnSync('npx', ['slayformer', ...args], { cwd: elsewhere, encoding: 'utf8', timeout: 120_000 });
      const overview = npx('--help');
      expect(overview.status, overview.stderr).toBe(0);
      expect(overview.stdout).toMatch(/^Usage: slayformer <command> \[arguments…\]/);
      expect(overview.stdout).toMatch(/Commands: .*\btrain\b.*\bcompare\b/);
      const train = npx('train', '--help');
      expect(train.status, train.stderr).toBe(0);
      expect(train.stdout).toMatch(/^Usage:\n {2}slayformer train <recipe\.yaml>/);
      const unknown = npx('trian');
      expect(unknown.status).toBe(2);
      expect(unknown.stderr).toMatch(/^slayformer: unknown command 'trian'/m);
    } finally {
      rmSync(elsewhere, { recursive: true, force: true });
    }
  });
});
