// Stopping a run on request: the CLI's SIGINT/SIGTERM/SIGHUP handlers set a StopRequest, the training loop saves a checkpoint
// after the current step and throws TrainingStopped, and the process exits with the status shells report.

/** Set by the CLI's SIGINT/SIGTERM/SIGHUP handlers (and the end of the --processes launcher); the training loop checks it after every step. */
export interface StopRequest {
  signal: NodeJS.Signals | null;
}

/** Thrown by runTraining after a stop request was honoured: the checkpoint of the last finished step is saved. */
export class TrainingStopped extends Error {
  constructor(
    readonly signal: NodeJS.Signals,
    readonly step: number,
    readonly checkpointDir: string,
    readonly runDir: string,
  ) {
    super(`stopped by ${signal} after step ${step}; checkpoint saved in ${checkpointDir}`);
  }
}

/** The exit status of a process stopped by `signal` (128 + its number, as shells report it). */
export function signalExitCode(signal: NodeJS.Signals): number {
  return signal === 'SIGINT' ? 130 : signal === 'SIGTERM' ? 143 : signal === 'SIGHUP' ? 129 : 1;
}
