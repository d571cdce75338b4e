// npm run export -- <checkpoint> --out DIR [--format hf] [--tokenizer FILE] [--overwrite] [--backend NAME]
// Writes a trained model as a Hugging Face folder (src/store/hf-export.ts).
// The modules that load TensorFlow.js are imported when the command runs, so that --help answers at once.
/** store/hf-export.ts's formats, written out here (that module loads tfjs); the type check keeps the two lists equal. */
const EXPORT_FORMATS = ['hf'] as const satisfies typeof import('../store/hf-export.ts').EXPORT_FORMATS;
import { backendOption, startBackend, VERBOSE_OPTION } from './backend-option.ts';
import { isMainModule, runCommand, UsageError } from './command.ts';

const COMMAND = {
  name: 'export',
  usage: '<checkpoint> --out DIR [options]',
  description: `Writes a trained model as a Hugging Face folder. <checkpoint> is a run's final/ folder, a checkpoint
folder, a run folder or a Hugging Face folder (hf:<folder>). Format hf: a folder transformers loads with
from_pretrained (softmax GPT/BERT); other models: their weights, a config recording the attention and
their PyTorch implementation, which transformers loads with trust_remote_code=True (README, "Export").`,
  options: {
    format: { type: 'string', value: 'FORMAT', default: 'hf', choices: EXPORT_FORMATS, help: 'what to write' },
    out: { type: 'string', value: 'DIR', help: 'the folder to write (must not exist); required' },
    tokenizer: {
      type: 'string',
      value: 'FILE',
      help: "tokenizer.json to ship (default: the recipe's data.tokenizer; must be the one the model was trained with)",
    },
    overwrite: { type: 'boolean', help: 'replace DIR if it is an earlier export' },
    backend: backendOption(),
    verbose: VERBOSE_OPTION,
  },
  positionals: { min: 1, max: 1, name: '<checkpoint>' },
} as const;

if (isMainModule(import.meta.url)) {
  await runCommand(COMMAND, async ({ values, positionals }) => {
    if (values.out === undefined) throw new UsageError('--out DIR is required');
    await startBackend(COMMAND.name, { flag: values.backend }, { verbose: values.verbose });
    const { exportHf } = await import('../store/hf-export.ts');
    const result = await exportHf(positionals[0], { out: values.out, tokenizer: values.tokenizer, overwrite: values.overwrite });
    for (const folder of result.removedPartials) console.log(`removed ${folder}, left by an export that died`);
    console.log(`wrote ${result.out}: model_type ${result.modelType}, ${result.tensors} tensors`);
    if (result.nonStandard.length > 0) {
      console.log(
        `transformers' own class would compute another model (${result.nonStandard.join('; ')}): the folder carries its PyTorch implementation; ` +
          `load it with ${result.modelType === 'slayformer-gpt2' ? 'AutoModelForCausalLM' : 'AutoModelForMaskedLM'}.from_pretrained(folder, trust_remote_code=True) (README, "Export")`,
      );
    }
  });
}
