// npm run compile -- recipe.yaml --out DIR [--section.key=value …]
// The recipe's step programs for the XLA route written to DIR (src/train/compile-ahead.ts, docs/xla.md "Ahead of
// time"): a host with Node.js and jax but no TensorFlow then trains with
//   SLAYFORMER_XLA_PROGRAMS=DIR npm run train -- recipe.yaml --train.executor=xla --backend cpu
import { startBackend } from './backend-option.ts';
import { runCommand, UsageError } from './command.ts';

const COMMAND = {
  name: 'compile',
  usage: '<recipe.yaml> --out DIR [--section.key=value …]',
  description: `Records the recipe's training step (each micro-batch shape), AdamW's update and validation on the native
tensorflow backend, exports them to StableHLO (npm run setup:xla) and writes them with a manifest to DIR. Needs the
recipe's tokenizer and validation split (the validation sample's shapes are compiled too).`,
  options: {
    out: { type: 'string', value: 'DIR', help: 'the folder to write (created; files of the same names are replaced)' },
  },
  positionals: { min: 1, max: 1, name: '<recipe.yaml>' },
  overrides: true,
} as const;

await runCommand(COMMAND, async ({ values, positionals, overrides }) => {
  if (!values.out) throw new UsageError('--out DIR is required');
  const { loadRecipe } = await import('../store/recipes.ts');
  const recipe = loadRecipe(positionals[0], overrides);
  const device = await startBackend(COMMAND.name, { flag: 'tensorflow' }, {});
  if (!device.graphSteps) throw new Error('the programs are recorded on the tensorflow backend (npm run setup:tensorflow)');
  const { compilePrograms } = await import('../train/compile-ahead.ts');
  await compilePrograms(recipe, values.out, (line) => console.log(line));
});
