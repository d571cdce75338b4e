// A rank for test/train/collective.test.ts: joins the cluster of SLAYFORMER_RANK / SLAYFORMER_CLUSTER with a
// heartbeat timeout of `argv[3]` ms, meets the others in one all-reduce, and then rank 0 holds its JavaScript thread for
// `argv[2]` ms — as a long evaluation on rank 0 does — while the others wait in the next all-reduce. Prints
// each rank's sum and how long that wait took.
import * as tf from '@tensorflow/tfjs';
import { allReduceSum, joinCluster } from '../../src/backend/collective.ts';
import { clusterFromEnv } from '../../src/backend/cluster-env.ts';
import { initBackend } from '../../src/backend/start.ts';

const [holdMs, heartbeatTimeoutMs] = [Number(process.argv[2]), Number(process.argv[3])];
await initBackend('tensorflow', { quiet: true });
const spec = clusterFromEnv();
if (!spec) throw new Error('collective-wait-fixture: SLAYFORMER_RANK and SLAYFORMER_CLUSTER must be set');
const cluster = joinCluster(spec, { heartbeatTimeoutMs, joinTimeoutS: 120 });
const sum = (value: number, key: number) => {
  const reduced = tf.tidy(() => allReduceSum(cluster, tf.tensor1d([value]), key));
  const [result] = reduced.dataSync();
  reduced.dispose();
  return result;
};
sum(1, 5);
// Atomics.wait blocks this thread outright: no JavaScript runs, as in a long synchronous evaluation.
if (cluster.rank === 0) Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, holdMs);
const t0 = performance.now();
const total = sum(cluster.rank + 1, 6);
console.log(`rank ${cluster.rank}: sum ${total} after waiting ${Math.round(performance.now() - t0)} ms`);
