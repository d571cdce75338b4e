// A run's folders as the trainer (or a paper experiment's worker) leaves them under the set's runDir, and which runs
// of a set are not done yet. The folder names and their reader (RunFolder) are src/store/run-folder.ts's.
import { listRunFolders, RunFolder } from '../store/run-folder.ts';
import type { RunSet, SetRun } from './run-set.ts';

export interface SetRunFolder {
  dir: string;
  done: boolean;
  /** Step of the newest complete checkpoint, if any. */
  checkpointStep: number | null;
}

/** The run folders of a run, oldest first (`<runDir>/<name>-<YYYYMMDD-HHMMSS>[-n]`, as the trainer names them). */
export function runFolders(sweep: Pick<RunSet, 'runDir'>, run: Pick<SetRun, 'name'>): SetRunFolder[] {
  return listRunFolders(sweep.runDir, run.name).map((dir) => {
    const folder = RunFolder.at(dir);
    return { dir, done: folder.finished(), checkpointStep: folder.checkpoints().at(-1)?.step ?? null };
  });
}

/** The runs of the set that no run folder marks done: what an executor is given. */
export function pendingRuns<R extends SetRun>(set: RunSet<R>): R[] {
  return set.runs.filter((run) => !runFolders(set, run).some((f) => f.done));
}
