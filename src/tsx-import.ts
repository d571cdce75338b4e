// What child processes pass to `node --import` to run TypeScript: tsx's loader as an absolute file URL. A bare
// `--import tsx` is resolved from the working directory, so it fails when a command runs outside the project
// folder (the `slayformer` bin from anywhere, a Slurm job's folder).
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

export const TSX_IMPORT = pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href;
