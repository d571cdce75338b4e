// `node --import tsx --import ./test/helpers/no-tfjs.mjs <command> --help`: any import of a TensorFlow.js package
// fails, naming the module that asked for it. The help test runs every command this way, so that --help keeps
// answering before a backend loads.
import { register } from 'node:module';

const hook = `export async function resolve(specifier, context, next) {
  if (specifier.startsWith('@tensorflow/')) throw new Error('--help imported ' + specifier + ' (from ' + context.parentURL + ')');
  return next(specifier, context);
}`;
register(`data:text/javascript,${encodeURIComponent(hook)}`);
