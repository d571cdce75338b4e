// How many cores the local executor gives a run, and what its process's environment adds: a native-backend run
// (cores 'all') takes every core, or, with --threads N, N cores and TensorFlow thread pools of N, so that several run
// side by side; other runs keep their replicas' count.
import { describe, expect, it } from 'vitest';
import { placement } from '../../src/sweep/local.ts';
import type { SetRun } from '../../src/sweep/run-set.ts';

const run = (cores: SetRun['cores']) => ({ index: 0, name: 'r', cores }) as SetRun;

describe('placement', () => {
  it('gives a native-backend run every core, or N of them and N TensorFlow threads with --threads N', () => {
    expect(placement(run('all'), 4)).toEqual({ cores: 4, env: {} });
    expect(placement(run('all'), 4, 1)).toEqual({ cores: 1, env: { TF_NUM_INTRAOP_THREADS: '1', TF_NUM_INTEROP_THREADS: '1' } });
    expect(placement(run('all'), 4, 2)).toEqual({ cores: 2, env: { TF_NUM_INTRAOP_THREADS: '2', TF_NUM_INTEROP_THREADS: '2' } });
    // Never more than the executor fills.
    expect(placement(run('all'), 2, 8)).toEqual({ cores: 2, env: { TF_NUM_INTRAOP_THREADS: '2', TF_NUM_INTEROP_THREADS: '2' } });
  });

  it('leaves runs with a count of their own (wasm replicas) as they are', () => {
    expect(placement(run(2), 4, 1)).toEqual({ cores: 2, env: {} });
    expect(placement(run(3), 2)).toEqual({ cores: 2, env: {} });
  });
});
