// The project's shared folder (papers, notes, the Hugging Face fixtures): `../shared` beside the checkout,
// or SLAYFORMER_SHARED for a checkout elsewhere (a clone in a temporary folder has no such neighbour).
import { existsSync } from 'node:fs';
import path from 'node:path';

export const SHARED_DIR = path.resolve(process.env.SLAYFORMER_SHARED ?? '../shared');
export const HF_FIXTURES = path.join(SHARED_DIR, 'fixtures', 'hf');
export const hasHfFixtures = existsSync(HF_FIXTURES);
/** The suites that read HF_FIXTURES throughout; without the fixtures they are left out, with one line. */
export const HF_FIXTURE_SUITES = ['test/hf/{import,export,bad-folders,finetune,transformers}.test.ts', 'test/store/unfitted-weights.test.ts'];
