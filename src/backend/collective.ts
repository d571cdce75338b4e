// One run across processes: this process joins a cluster of ranks on TensorFlow's own multi-worker
// runtime (what tf.distribute.MultiWorkerMirroredStrategy is built on; docs/distributed.md). The
// binding (native/tfjs_functions.cc) starts this rank's gRPC server and the coordination service's
// heartbeats on tfjs-node's eager context; collectives are then ordinary ops: run eagerly, or
// recorded into a TensorFlow function with the rest of the step (tf-graph.ts).
import * as tf from '@tensorflow/tfjs';
import { graphsAvailable } from './tf-graph.ts';

/** The ranks of one run: this process's rank and every rank's `host:port`, rank order. */
export interface ClusterSpec {
  rank: number;
  addresses: readonly string[];
}

/**
 * How long a rank may go without a heartbeat before the coordination service declares it dead and
 * every blocked collective fails (docs/distributed.md, "Faults"): a killed rank ends the run in
 * seconds, while a long rank-0 evaluation, which still sends heartbeats, trips nothing.
 */
export const HEARTBEAT_TIMEOUT_MS = 4000;

/**
 * How long the join waits for every rank to register with the coordination service (train.joinTimeout),
 * so that a rank that never starts ends the others with an error naming it instead of a wait without end.
 * Five minutes, as jax.distributed.initialize waits: ranks of a Slurm step may start that far apart on a
 * busy shared file system.
 */
export const DEFAULT_JOIN_TIMEOUT_S = 300;

/**
 * At exit every rank waits up to this long for the others to leave the coordination service too, so
 * that rank 0, which hosts it, is not gone while another rank still says goodbye (an error line on that rank).
 */
const SHUTDOWN_BARRIER_MS = 10_000;

const JOB = 'worker';
export const taskName = (rank: number) => `/job:${JOB}/replica:0/task:${rank}`;

/** How long to wait: for every rank to join, and for a silent rank's heartbeats before it counts as dead. */
export interface ClusterTimeouts {
  joinTimeoutS?: number;
  heartbeatTimeoutMs?: number;
}

/**
 * The cluster as the text-format ServerDef TFE_EnableCollectiveOps takes (rank 0 leads groups and the coordination
 * service). `cluster_register_with_barrier` makes registration itself wait for every rank, up to the join timeout;
 * without it TensorFlow's next wait for all tasks has no deadline of ours.
 */
export function serverDefText(
  spec: ClusterSpec,
  { joinTimeoutS = DEFAULT_JOIN_TIMEOUT_S, heartbeatTimeoutMs = HEARTBEAT_TIMEOUT_MS }: ClusterTimeouts = {},
): string {
  checkClusterSpec(spec);
  if (!(joinTimeoutS > 0) || !Number.isFinite(joinTimeoutS)) throw new Error(`cluster: the join timeout ${joinTimeoutS} s is not a positive number of seconds`);
  const tasks = spec.addresses.map((address, i) => `tasks { key: ${i} value: ${JSON.stringify(address)} }`).join(' ');
  const leader = JSON.stringify(taskName(0));
  return [
    `cluster { job { name: "${JOB}" ${tasks} } }`,
    `job_name: "${JOB}" task_index: ${spec.rank} protocol: "grpc"`,
    `default_session_config { experimental { collective_group_leader: ${leader}`,
    `coordination_config { service_type: "standalone" service_leader: ${leader} heartbeat_timeout_in_ms: ${heartbeatTimeoutMs} shutdown_barrier_timeout_in_ms: ${SHUTDOWN_BARRIER_MS}`,
    `cluster_register_timeout_in_ms: ${Math.round(joinTimeoutS * 1000)} cluster_register_with_barrier: true`,
    `coordinated_job_list { name: "${JOB}" num_tasks: ${spec.addresses.length} } } } }`,
  ].join(' ');
}

export function checkClusterSpec(spec: ClusterSpec): void {
  const n = spec.addresses.length;
  if (n < 1) throw new Error('cluster: no rank address');
  if (!Number.isInteger(spec.rank) || spec.rank < 0 || spec.rank >= n) throw new Error(`cluster: rank ${spec.rank} is not one of the ${n} ranks 0–${n - 1}`);
  for (const [i, address] of spec.addresses.entries()) {
    if (!/^[^\s:"]+:\d{1,5}$/.test(address) || Number(address.split(':').pop()) > 65535)
      throw new Error(`cluster: rank ${i}'s address '${address}' is not host:port`);
  }
  const seen = new Map<string, number>();
  for (const [i, address] of spec.addresses.entries()) {
    if (seen.has(address)) throw new Error(`cluster: ranks ${seen.get(address)} and ${i} both have the address ${address}`);
    seen.set(address, i);
  }
}

/** The parts of tfjs-node's backend this module uses (the collective entry points come from native/tfjs_functions.cc). */
interface CollectiveBinding {
  enableCollectives?(serverDefText: string, taskPrefix: string): string;
  checkPeerHealth(task: string, timeoutMs: number): string | null;
  setClusterValue(key: string, value: string): void;
  clusterValue(key: string, timeoutMs: number): string;
  reportErrorToCluster(message: string): void;
  TF_ATTR_STRING: number;
  TF_ATTR_INT: number;
  TF_ATTR_FLOAT: number;
  TF_ATTR_TYPE: number;
  TF_FLOAT: number;
}
interface NativeBackend {
  binding: CollectiveBinding;
  isUsingGpuDevice?: boolean;
  executeMultipleOutputs(name: string, attrs: Array<{ name: string; type: number; value: unknown }>, inputs: tf.TensorInfo[], outputs: number): tf.Tensor[];
}
const nativeBackend = () => tf.backend() as unknown as NativeBackend;

/** A joined cluster: the all-reduce of this run and the checks around it. */
export interface Cluster extends ClusterSpec {
  readonly worldSize: number;
  /** The device ops run on now, e.g. /job:worker/replica:0/task:1/device:CPU:0. */
  readonly device: string;
  /** 'ring' (CPU, gRPC) or 'nccl' (GPU). */
  readonly communication: 'ring' | 'nccl';
}

let joined: Cluster | null = null;

/** The cluster this process joined, if any. */
export function currentCluster(): Cluster | null {
  return joined;
}

/**
 * Joins the cluster: starts this rank's gRPC server and renames the local devices (ops must then name
 * /job:worker/replica:0/task:R/...). Call right after the tensorflow backend starts and before any
 * tensor is made: a tensor made before lives on a device that no longer exists. Once per process (a
 * started server cannot stop inside it). Returns once every rank has joined; a rank that has not joined
 * within `joinTimeoutS` is an error naming it (see joinFailure).
 */
export function joinCluster(spec: ClusterSpec, timeouts: ClusterTimeouts = {}): Cluster {
  if (joined) throw new Error(`cluster: this process already joined as rank ${joined.rank} of ${joined.worldSize}`);
  // A spec that names no server of this rank is refused as it is, before any join can be blamed on a port.
  const serverDef = serverDefText(spec, timeouts);
  if (tf.getBackend() !== 'tensorflow' || !graphsAvailable())
    throw new Error('cluster: collective ops need the tensorflow backend built by `npm run setup:tensorflow`');
  const backend = nativeBackend();
  if (typeof backend.binding.enableCollectives !== 'function')
    throw new Error('cluster: this tensorflow binding has no collective ops (run `npm run setup:tensorflow` again)');
  let device: string;
  try {
    device = backend.binding.enableCollectives(serverDef, taskName(spec.rank));
  } catch (err) {
    throw joinFailure(spec, (err as Error).message, timeouts.joinTimeoutS ?? DEFAULT_JOIN_TIMEOUT_S);
  }
  joined = { ...spec, worldSize: spec.addresses.length, device, communication: backend.isUsingGpuDevice ? 'nccl' : 'ring' };
  return joined;
}

/**
 * A failed join as an error naming its cause: ranks that did not join in time, or this rank's port. Rank 0, the
 * coordination service's host, hears from the service which ranks never registered ("Some timed out task names:
 * /job:worker/replica:0/task:1"); another rank whose registration with rank 0 timed out ("Deadline Exceeded" on
 * RegisterTask) names rank 0.
 */
export function joinFailure(spec: ClusterSpec, message: string, joinTimeoutS: number): Error {
  const n = spec.addresses.length;
  const within = `did not join within ${joinTimeoutS} s (train.joinTimeout): is it running, and can it reach the others?`;
  const listed = /timed out task names:([\s\S]*?)(?:\n\s*\n|$)/i.exec(message);
  if (listed) {
    const ranks = [...listed[1].matchAll(/\/task:(\d+)/g)].map((m) => Number(m[1]));
    if (ranks.length) {
      const names = ranks.map((r) => `${r} (${spec.addresses[r] ?? '?'})`).join(', ');
      return new Error(`rank ${spec.rank}: rank${ranks.length > 1 ? 's' : ''} ${names} of ${n} ${within}`);
    }
  }
  if (spec.rank !== 0 && /deadline exceeded/i.test(message) && /RegisterTask/.test(message))
    return new Error(`rank ${spec.rank}: rank 0 (${spec.addresses[0]}), which leads the cluster, ${within}`);
  const port = spec.addresses[spec.rank];
  const taken = /address already in use|could not start grpc server|bind/i.test(message) ? ` (is ${port} already taken?)` : '';
  return new Error(`rank ${spec.rank}: could not start its server on ${port}${taken}: ${message.split('\n')[0]}`);
}

/** One group for the run's all-reduces; its first collective resolves the group (~1 s, docs/distributed.md). */
const GROUP_KEY = 1;
/**
 * Instance keys: every collective of the group that runs concurrently needs its own; this run issues
 * one at a time, in the same order on every rank, so one key per purpose is reused every step (also
 * inside the recorded step function, where it is a constant).
 */
export const INSTANCE_KEYS = { gradients: 1, broadcast: 2, barrier: 3, parameters: 4, moments: 5, rankOrder: 6 } as const;

/**
 * Σ over ranks of `x` (a float32 tensor of the same shape on every rank), as one CollectiveReduceV2
 * op: recorded into the step's TensorFlow function when called while recording. Every rank must
 * issue the same collectives in the same order with the same keys and shapes.
 */
export function allReduceSum(cluster: Cluster, x: tf.Tensor, instanceKey: number = INSTANCE_KEYS.gradients): tf.Tensor {
  const backend = nativeBackend();
  const b = backend.binding;
  const attrs = [
    { name: 'T', type: b.TF_ATTR_TYPE, value: b.TF_FLOAT },
    { name: 'merge_op', type: b.TF_ATTR_STRING, value: 'Add' },
    { name: 'final_op', type: b.TF_ATTR_STRING, value: 'Id' },
    { name: 'communication_hint', type: b.TF_ATTR_STRING, value: cluster.communication },
    // No deadline: a dead rank is found by the coordination service's heartbeats instead, so that a long
    // rank-0 evaluation never trips a timeout on the others.
    { name: 'timeout_seconds', type: b.TF_ATTR_FLOAT, value: 0 },
    { name: 'Nordering_token', type: b.TF_ATTR_INT, value: 0 },
  ];
  return tf.tidy(() => {
    const keys = [tf.scalar(cluster.worldSize, 'int32'), tf.scalar(GROUP_KEY, 'int32'), tf.scalar(instanceKey, 'int32')];
    return backend.executeMultipleOutputs('CollectiveReduceV2', attrs, [x, ...keys], 1)[0];
  });
}

/**
 * Every rank's `x` (a float32 tensor of the same shape on every rank) concatenated along the first
 * dimension in rank order, as one CollectiveGatherV2 op (it has a CPU kernel in TF 2.21; the
 * reduce-scatter has none). TensorFlow orders a group's members by device name, task number compared as a
 * number (CompareFullNames); checkGatherOrder confirms it once at start.
 */
export function allGather(cluster: Cluster, x: tf.Tensor, instanceKey: number): tf.Tensor {
  const backend = nativeBackend();
  const b = backend.binding;
  const attrs = [
    { name: 'T', type: b.TF_ATTR_TYPE, value: b.TF_FLOAT },
    { name: 'communication_hint', type: b.TF_ATTR_STRING, value: cluster.communication },
    { name: 'timeout_seconds', type: b.TF_ATTR_FLOAT, value: 0 },
    { name: 'Nordering_token', type: b.TF_ATTR_INT, value: 0 },
  ];
  return tf.tidy(() => {
    const keys = [tf.scalar(cluster.worldSize, 'int32'), tf.scalar(GROUP_KEY, 'int32'), tf.scalar(instanceKey, 'int32')];
    return backend.executeMultipleOutputs('CollectiveGatherV2', attrs, [x, ...keys], 1)[0];
  });
}

/** Fails unless allGather puts rank r's piece r-th: every rank gathers its own rank number. */
export function checkGatherOrder(cluster: Cluster): void {
  const order = tf.tidy(() => [...allGather(cluster, tf.tensor1d([cluster.rank]), INSTANCE_KEYS.rankOrder).dataSync()]);
  if (order.some((r, i) => r !== i))
    throw new Error(`rank ${cluster.rank}: the all-gather returned the ranks in the order ${order.join(', ')}, not 0–${cluster.worldSize - 1}`);
}

/** Returns once every rank called it (an all-reduce of one float); fails like any collective when a rank is dead. */
export function barrier(cluster: Cluster): void {
  try {
    const met = tf.tidy(() => allReduceSum(cluster, tf.zeros([1]), INSTANCE_KEYS.barrier));
    try {
      met.dataSync();
    } finally {
      met.dispose();
    }
  } catch (err) {
    throw collectiveFailure(cluster, err);
  }
}

/**
 * Checks that every rank runs the same thing: each rank publishes `value` under `what`, and compares it
 * with rank 0's. A mismatch is an error naming the rank and both values (e.g. a recipe's hash). The
 * others wait up to `timeoutMs` for rank 0's value (rank 0 reads its data plan first). Returns once every
 * rank has compared (a barrier): rank 0 writes nothing before the others agreed, and a rank that differs
 * reports it to the cluster (reportFailureToCluster), which ends rank 0's wait with its message.
 */
export function checkSameOnEveryRank(cluster: Cluster, what: string, value: string, timeoutMs = 600_000): void {
  const b = nativeBackend().binding;
  b.setClusterValue(`slayformer/${what}/${cluster.rank}`, value);
  if (cluster.rank !== 0) {
    const leader = b.clusterValue(`slayformer/${what}/0`, timeoutMs);
    if (leader !== value)
      throw new Error(`rank ${cluster.rank}: its ${what} (${value}) differs from rank 0's (${leader}): every rank must run the same recipe on the same data`);
  }
  barrier(cluster);
}

/**
 * Rank 0's `value` on every rank: rank 0 publishes it under `what` in the coordination service (its own
 * value is returned as it is), the others wait up to `timeoutMs` for it, e.g. the folder rank 0 made.
 */
export function valueFromRankZero(cluster: Cluster, what: string, value: string | null, timeoutMs = 600_000): string {
  const b = nativeBackend().binding;
  const key = `slayformer/${what}/from-rank-0`;
  if (cluster.rank !== 0) return b.clusterValue(key, timeoutMs);
  if (value === null) throw new Error(`rank 0: no ${what} to send to the other ranks`);
  b.setClusterValue(key, value);
  return value;
}

/**
 * A failed collective as an error that names the ranks that do not answer (a killed rank, usually),
 * or `err` as it is when every rank answers (or the failure was not a collective's).
 */
export function collectiveFailure(cluster: Cluster, err: unknown): Error {
  const message = err instanceof Error ? err.message : String(err);
  if (!/collective|UNAVAILABLE|heartbeat|socket closed|unhealthy/i.test(message)) return err instanceof Error ? err : new Error(message);
  const reported = new RegExp(`${REPORT_TAG}(.*)`).exec(message);
  if (reported) return new Error(`rank ${cluster.rank}: the all-reduce failed: ${reported[1].trim()}`);
  const dead = unresponsiveRanks(cluster);
  const who = dead.length ? dead.map((d) => `rank ${d.rank} (${cluster.addresses[d.rank]}) does not answer`).join('; ') : 'every rank still answers';
  const first = message.split('\n').find((l) => /unhealthy|aborted|closed|UNAVAILABLE/i.test(l)) ?? message.split('\n')[0];
  return new Error(`rank ${cluster.rank}: the all-reduce failed: ${who} (TensorFlow: ${first.trim()})`);
}

/** Marks the errors this project reports to the cluster, so that the other ranks can quote them. */
const REPORT_TAG = 'slayformer: ';

/**
 * Tells every other rank that this one ends on `error`: their collectives fail at once with its message
 * (collectiveFailure quotes it) instead of after the heartbeat timeout. Best effort: the cluster may be gone.
 */
export function reportFailureToCluster(cluster: Cluster, error: unknown): void {
  const first = (error instanceof Error ? error.message : String(error)).split('\n')[0];
  try {
    nativeBackend().binding.reportErrorToCluster(`${REPORT_TAG}rank ${cluster.rank} ended: ${first}`);
  } catch {
    // the coordination service is unreachable: the others find out from the heartbeats
  }
}

/**
 * Which ranks do not answer now (a dead peer), to name them when a collective failed: each is asked
 * with the collective runtime's health check, `timeoutMs` each.
 */
export function unresponsiveRanks(cluster: Cluster, timeoutMs = 1000): Array<{ rank: number; why: string }> {
  const b = nativeBackend().binding;
  const dead: Array<{ rank: number; why: string }> = [];
  for (let rank = 0; rank < cluster.worldSize; rank++) {
    if (rank === cluster.rank) continue;
    const why = b.checkPeerHealth(taskName(rank), timeoutMs);
    if (why !== null) dead.push({ rank, why: why.split('\n')[0] });
  }
  return dead;
}
