// TensorFlow's C++ code writes its log lines straight to file descriptor 2, around what the project says there. Two
// moments are silenced through the addon the native set-up builds (native/quiet_stderr.c: Node has no dup2): the
// loading of the library (tensorflow.ts: INFO lines no log level filters), and the end of a failed command. Once the
// command has said why it failed, what TensorFlow prints is the failure echoed back: in a run across processes, the
// abort this rank reports to the others and the coordination agent's complaints as the process exits ("Shutdown()
// was called while coordination agent is in error state …"). The error line is written last and nothing follows.
// TF_CPP_MIN_LOG_LEVEL=0 or SLAYFORMER_DEBUG keeps every line; without the addon (an installed tfjs-node) nothing
// is silenced.
import fs from 'node:fs';
import { createRequire } from 'node:module';

interface QuietStderr {
  /** Points descriptor 2 at /dev/null; returns a copy of the previous one (-1 when nothing changed). */
  silence(): number;
  restore(saved: number): void;
}

/** The addon, once the native backend has loaded it. */
let loaded: QuietStderr | null = null;

/** Loads the addon at `file` (the wheel-built package's) for what this module silences; null, or an absent file: none. */
export function useQuietStderr(file: string | null): void {
  loaded = file && process.env.TF_CPP_MIN_LOG_LEVEL !== '0' && fs.existsSync(file) ? (createRequire(import.meta.url)(file) as QuietStderr) : null;
}

/** Runs `action` with descriptor 2 on /dev/null (when the addon is loaded). */
export function withStderrSilenced<T>(action: () => T): T {
  if (!loaded) return action();
  const saved = loaded.silence();
  try {
    return action();
  } finally {
    loaded.restore(saved);
  }
}

/**
 * Writes `text` (a failed command's error) to stderr as the last thing the process says there: descriptor 2 goes to
 * /dev/null first, for the rest of the process, and `text` to the original (see the top of this file).
 */
export function writeLastWords(text: string): void {
  const saved = loaded && !process.env.SLAYFORMER_DEBUG ? loaded.silence() : -1;
  if (saved < 0) {
    process.stderr.write(text);
    return;
  }
  fs.writeSync(saved, text);
}
