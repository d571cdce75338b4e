#!/usr/bin/env node
// `slayformer <command> [args…]` (also `npx slayformer …`, from any folder): runs the command the npm script of
// that name runs (`npm run train -- …` = `slayformer train …`), taken from this package's package.json.
// The command runs in this process, with tsx registered here, rather than in a child: a parent that relays
// signals would break Ctrl-C's checkpoint-and-stop (README, "Checkpoints and resume"). Relative paths in the
// arguments resolve against the current folder, as under npm run.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SCRIPT = /^node --import tsx ((?:src\/cli|bench)\/[\w.-]+\.ts)$/;

/** Command name → its .ts file, for every npm script that starts one the way npm run does. */
function commands() {
  const { scripts } = JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8'));
  return new Map(
    Object.entries(scripts).flatMap(([name, command]) => {
      const match = SCRIPT.exec(command);
      return match ? [[name, path.join(ROOT, match[1])]] : [];
    }),
  );
}

function usage() {
  const names = [...commands().keys()];
  return `Usage: slayformer <command> [arguments…]   (the same as npm run <command> -- [arguments…] in the project folder)
Commands: ${names.join(', ')}
Run 'slayformer <command> --help' for a command's options.\n`;
}

const [name, ...rest] = process.argv.slice(2);
if (name === undefined || name === '--help' || name === '-h') {
  process.stdout.write(usage());
  process.exit(name === undefined ? 2 : 0);
}
const file = commands().get(name);
if (!file) {
  process.stderr.write(`slayformer: unknown command '${name}'\n${usage()}`);
  process.exit(2);
}
const { register } = await import('tsx/esm/api');
register();
// The command reads process.argv as if node had started it: [node, <its file>, …its arguments].
process.argv = [process.argv[0], file, ...rest];
// The command's --help and usage errors then read `slayformer <command> …` instead of `npm run <command> -- …`.
globalThis.SLAYFORMER_BIN = 'slayformer';
await import(pathToFileURL(file).href);
