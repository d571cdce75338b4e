// npm run wandb:replay -- <run folder> [--project P] [--entity E] [--timeout S]
// Uploads a finished (or interrupted) run folder's metrics.jsonl and config.json to its W&B run. The run id
// comes from the folder's wandb.json, so replaying twice, or after a partial live upload, creates no duplicate.
import { replayToWandb } from '../telemetry/wandb.ts';
import { runCommand } from './command.ts';

const COMMAND = {
  name: 'wandb:replay',
  usage: '<run folder> [options]',
  description: `Uploads a run folder's metrics.jsonl and config.json to its W&B run (the id in its wandb.json): replaying
twice, or after a partial live upload, rewrites the same history lines and creates no duplicate run.
Needs WANDB_API_KEY (or ~/.netrc).`,
  options: {
    project: { type: 'string', value: 'P', help: 'send to this W&B project instead of the one in wandb.json (then stored there)' },
    entity: { type: 'string', value: 'E', help: 'send to this W&B entity instead of the one in wandb.json' },
    timeout: { type: 'string', value: 'SECONDS', default: '120', number: { min: 0, exclusiveMin: true }, help: 'how long to wait for the final upload' },
  },
  positionals: { min: 1, max: 1, name: '<run folder>' },
} as const;

await runCommand(COMMAND, async ({ values, positionals }) => {
  if (!process.env.WANDB_API_KEY) console.error('note: WANDB_API_KEY is not set; the W&B client will look in ~/.netrc');
  const { records, url } = await replayToWandb(positionals[0], { project: values.project, entity: values.entity, timeoutS: values.timeout });
  console.log(`replayed ${records} records to ${url ?? 'W&B'}`);
});
