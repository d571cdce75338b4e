// npm run wandb:replay -- <run folder> [--project P] [--entity E] [--timeout S]
// Uploads a finished (or interrupted) run folder's metrics.jsonl and config.json to its W&B run. The run id
// comes from the folder's wandb.json, so replaying twice, or after a partial live upload, creates no duplicate.
import { parseArgs } from 'node:util';
import { replayToWandb } from '../train/metrics.ts';

const usage = 'usage: npm run wandb:replay -- <run folder> [--project P] [--entity E] [--timeout SECONDS]';

async function main(): Promise<void> {
  const { values, positionals } = parseArgs({
    allowPositionals: true,
    options: {
      project: { type: 'string' },
      entity: { type: 'string' },
      timeout: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(usage);
    return;
  }
  if (positionals.length !== 1) throw new Error(`expected exactly one run folder (got ${positionals.length})\n${usage}`);
  const timeoutS = values.timeout === undefined ? undefined : Number(values.timeout);
  if (timeoutS !== undefined && !(timeoutS > 0)) throw new Error(`--timeout must be a number of seconds > 0 (got ${values.timeout})`);
  if (!process.env.WANDB_API_KEY) console.error('note: WANDB_API_KEY is not set; the W&B client will look in ~/.netrc');
  const { records, url } = await replayToWandb(positionals[0], { project: values.project, entity: values.entity, timeoutS });
  console.log(`replayed ${records} records to ${url ?? 'W&B'}`);
}

main().catch((err: Error) => {
  console.error(err.message);
  process.exitCode = 1;
});
