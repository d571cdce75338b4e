// A local single-host Slurm for one test file (scripts/slurm-local.sh): started at import, so that a suite can be
// skipped with the reason in its name where Slurm (or the tensorflow backend it needs) is missing.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface LocalSlurm {
  /** A temporary folder of the test file's own; the cluster's files are in its `cluster/`. */
  dir: string;
  available: boolean;
  /** Why not, when not available. */
  reason: string;
  /** The environment that reaches this cluster (SLURM_CONF). */
  env: NodeJS.ProcessEnv;
  /** Cancels every job, stops the daemons and removes `dir`. */
  stop(): void;
}

/** Starts the daemons in a new temporary folder named by `prefix`; `needs` is why not to try (e.g. a backend missing), or ''. */
export function startLocalSlurm(prefix: string, needs = ''): LocalSlurm {
  const dir = mkdtempSync(join(tmpdir(), `${prefix}-`));
  const cluster = join(dir, 'cluster');
  const started = needs ? null : spawnSync('bash', ['scripts/slurm-local.sh', 'start', cluster], { encoding: 'utf8', timeout: 90_000 });
  const available = started?.status === 0;
  const reason = needs || (available ? '' : (started!.stderr || started!.stdout || String(started!.error)).trim().split('\n').at(-1)!);
  const env = { ...process.env, SLURM_CONF: join(cluster, 'slurm.conf') };
  return {
    dir,
    available,
    reason,
    env,
    stop() {
      if (available) {
        spawnSync('scancel', ['--user', 'root'], { env });
        spawnSync('bash', ['scripts/slurm-local.sh', 'stop', cluster]);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
