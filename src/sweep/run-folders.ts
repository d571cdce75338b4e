// A run's folders as the trainer (or a paper experiment's worker) leaves them under the set's runDir, and which runs
// of a set are not done yet. Apart from set-files.ts because the checkpoint listing loads TensorFlow.js.
import { existsSync, readdirSync, statSync } from 'node:fs';
import path from 'node:path';
import { listCheckpoints, runFolderOrder } from '../train/checkpoint.ts';
import type { RunSet, SetRun } from './run-set.ts';

export interface RunFolder {
  dir: string;
  done: boolean;
  /** Step of the newest complete checkpoint, if any. */
  checkpointStep: number | null;
}

/** The run folders of a run, oldest first (`<runDir>/<name>-<YYYYMMDD-HHMMSS>[-n]`, as the trainer names them). */
export function runFolders(sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>): RunFolder[] {
  if (!existsSync(sweep.runDir)) return [];
  return readdirSync(sweep.runDir)
    .map((entry) => ({ entry, order: runFolderOrder(run.name, entry) }))
    .filter((r): r is { entry: string; order: [string, number] } => r.order !== null && statSync(path.join(sweep.runDir, r.entry)).isDirectory())
    .sort((a, b) => (a.order[0] === b.order[0] ? a.order[1] - b.order[1] : a.order[0] < b.order[0] ? -1 : 1))
    .map(({ entry }) => {
      const dir = path.join(sweep.runDir, entry);
      return { dir, done: existsSync(path.join(dir, 'summary.json')), checkpointStep: listCheckpoints(dir).at(-1)?.step ?? null };
    });
}

/** The runs of the set that no run folder marks done: what an executor is given. */
export function pendingRuns<R extends SetRun>(set: RunSet<R>): R[] {
  return set.runs.filter((run) => !runFolders(set, run).some((f) => f.done));
}
