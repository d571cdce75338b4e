// npm run export -- <checkpoint> --format hf --out DIR [--tokenizer FILE] [--overwrite] [--backend NAME]
// Writes a trained model as a Hugging Face folder (src/hf/export.ts).
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { initBackend } from '../backend.ts';
import { EXPORT_FORMATS, exportHf } from '../hf/export.ts';

const USAGE = `usage: npm run export -- <checkpoint> --format hf --out DIR [--tokenizer FILE] [--overwrite] [--backend NAME]
  <checkpoint>      a run's final/ folder, a checkpoint folder, a run folder or a Hugging Face folder (hf:<folder>)
  --format hf       a folder transformers loads with from_pretrained (softmax GPT/BERT); other models: their weights
                    and a config recording the attention (see the README, "Export")
  --out DIR         the folder to write (must not exist)
  --tokenizer FILE  tokenizer.json to ship (default: the recipe's data.tokenizer; must be the one the model was trained with)
  --overwrite       replace DIR if it is an earlier export
  --backend NAME    auto | tensorflow | wasm | cpu (default $SLAYFORMER_BACKEND, else auto)`;

interface ExportArgs {
  checkpoint: string;
  out: string;
  tokenizer?: string;
  overwrite: boolean;
  backend?: string;
}

/** The command line as options; null = print the usage (exit status 1 unless --help). */
export function parseExportArgs(argv: string[]): ExportArgs | null {
  const { values, positionals } = parseArgs({
    args: argv,
    options: {
      format: { type: 'string', default: 'hf' },
      out: { type: 'string' },
      tokenizer: { type: 'string' },
      overwrite: { type: 'boolean', default: false },
      backend: { type: 'string' },
      help: { type: 'boolean', default: false },
    },
    allowPositionals: true,
    strict: true,
  });
  if (values.help || positionals.length !== 1 || values.out === undefined) return null;
  if (!(EXPORT_FORMATS as readonly string[]).includes(values.format)) {
    throw new Error(`--format must be one of ${EXPORT_FORMATS.join(', ')} (got ${values.format})`);
  }
  return { checkpoint: positionals[0], out: values.out, tokenizer: values.tokenizer, overwrite: values.overwrite, backend: values.backend };
}

async function main(): Promise<void> {
  const args = parseExportArgs(process.argv.slice(2));
  if (!args) {
    console.log(USAGE);
    if (!process.argv.includes('--help')) process.exitCode = 1;
    return;
  }
  await initBackend(args.backend);
  const result = await exportHf(args.checkpoint, args);
  console.log(`wrote ${result.out}: model_type ${result.modelType}, ${result.tensors} tensors`);
  if (result.nonStandard.length > 0) {
    console.log(`transformers' own class would compute another model (${result.nonStandard.join('; ')}): loading it in PyTorch needs that attention (README, "Export")`);
  }
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) {
  main().catch((err: Error) => {
    console.error(`export: ${err.message}`);
    process.exit(1);
  });
}
