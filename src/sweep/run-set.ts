// What the sweep executors (sweep-executor.ts), a run's guard (guard.ts) and status (status.ts) need of a set of runs. A
// sweep file's training runs are one such set (spec.ts); a paper experiment's units are another (src/paper/). A run is
// done when a folder `<runDir>/<name>-<YYYYMMDD-HHMMSS>[-n]/` holds summary.json. Its guard,
// `node --import tsx <guard…> <index>`, takes the run's lock, does nothing when the run is done, and otherwise runs it
// (a training run resumes from its newest checkpoint).

export interface SetRun {
  /** Position in the set (an executor's task index, e.g. a job array's). */
  index: number;
  /** Names its run folders and its files under `_sweep/`. */
  name: string;
  /** Cores the run keeps busy: a count (e.g. its data-parallel replicas), or 'all' (a native backend's thread pool). */
  cores: number | 'all';
  /** CPUs a scheduler's task for this run asks for, where an executor allocates them, unless its settings say otherwise. */
  requestedCpus: number;
}

export interface RunSet<R extends SetRun = SetRun> {
  /** Where the set comes from, as messages name it: the sweep file, or the paper experiment. */
  file: string;
  /** Names a scheduler's job and the progress lines. */
  name: string;
  /** Holds the run folders and the set's own files (`_sweep/`). */
  runDir: string;
  runs: R[];
  /** Each executor's settings from the set's file (its `<executor>:` section), by executor name, checked by its table. */
  executorSettings: Readonly<Record<string, Record<string, unknown>>>;
  /** The guard of a run: the script and its arguments after `node --import tsx`; the run's index is appended. */
  guard: string[];
  /**
   * true when a run's worker can be one rank of a run across processes, started once per scheduler task of a unit of
   * several (a training run, or a paper unit that trains on the tensorflow backend: the worker finds its rank in Slurm's
   * variables, docs/distributed.md); absent for sets whose workers run in one process.
   */
  multiTask?: boolean;
  /** Why the runs run in one process, where multiTask is not set (named when several tasks per run are asked for). */
  oneProcessReason?: string;
}
